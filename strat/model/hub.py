"""Hugging Face Hub names as model paths: `org/name` or `org/name@revision` (a branch, tag or commit).

A name is resolved to one commit through `huggingface_hub`: the local cache first, then the Hub when the
network is allowed (`HF_HUB_OFFLINE` unset). A loaded config carries the name pinned to that commit
(`org/name@<hash>`), so `config.yaml`, a resume and a submitted job all load the same revision. Its files
sit in `$HF_HOME/hub/models--org--name/snapshots/<hash>/`: the same path on every node whose `HF_HOME`
is the same (shared storage, or the revision downloaded on each node)."""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from pathlib import Path

_NAME = re.compile(r"^(?P<repo>[A-Za-z0-9][\w.-]*/[\w.-]+)(?:@(?P<revision>[\w./-]+))?$")
_COMMIT = re.compile(r"^[0-9a-f]{40}$")
# What Strat loads from a model repository: config and generation config, tokenizer, chat template, safetensors.
FILES = ["*.json", "*.safetensors", "*.txt", "*.model", "*.jinja", "*.tiktoken"]


@dataclass(frozen=True)
class HubName:
    """A model repository on the Hub and the revision asked for (None: the default branch)."""

    repo_id: str
    revision: str | None = None

    def __str__(self) -> str:
        return self.repo_id if self.revision is None else f"{self.repo_id}@{self.revision}"

    @property
    def pinned(self) -> bool:
        """Whether the revision is a commit hash (immutable)."""
        return self.revision is not None and bool(_COMMIT.match(self.revision))


def parse(path: str) -> HubName | None:
    """The Hub name in a model path, or None for `tiny:<game>` and local paths (an existing path always wins)."""
    if path.startswith(("tiny:", "/", ".", "~")) or Path(path).exists():
        return None
    match = _NAME.match(path)
    return HubName(match["repo"], match["revision"]) if match else None


def offline() -> bool:
    """Whether Hub look-ups are off (`HF_HUB_OFFLINE`), read now rather than when huggingface_hub was imported."""
    return os.environ.get("HF_HUB_OFFLINE", "").strip().lower() in ("1", "true", "yes", "on")


def cache_dir() -> Path:
    """The Hub cache: `$HF_HUB_CACHE`, else `$HF_HOME/hub`, else `~/.cache/huggingface/hub`."""
    if os.environ.get("HF_HUB_CACHE"):
        return Path(os.environ["HF_HUB_CACHE"]).expanduser()
    home = os.environ.get("HF_HOME") or Path.home() / ".cache" / "huggingface"
    return Path(home).expanduser() / "hub"


def _advice(name: HubName, reason: str) -> str:
    return (f"{reason}; download it first (`hf download {name.repo_id}"
            f"{f' --revision {name.revision}' if name.revision else ''}`, or huggingface-cli download), point HF_HOME "
            f"at shared storage that holds it (now {cache_dir()}), or log in (`hf auth login`) for a gated model")


def cached(name: HubName) -> Path | None:
    """The cached snapshot of `name`, or None when the cache lacks it (or holds it incomplete)."""
    from huggingface_hub import snapshot_download
    from huggingface_hub.errors import IncompleteSnapshotError, LocalEntryNotFoundError

    try:
        return Path(snapshot_download(name.repo_id, revision=name.revision, cache_dir=cache_dir(),
                                      local_files_only=True, allow_patterns=FILES))
    except (LocalEntryNotFoundError, IncompleteSnapshotError):
        return None


def commit(name: HubName) -> str:
    """The commit `name` stands for: from the cache, else (network allowed) from the Hub's metadata, nothing
    downloaded. Raises ValueError with a one-line message that says what to do."""
    local = cached(name)
    if local is not None:
        if not any(local.glob("*.safetensors")):
            raise ValueError(f"Hub model {name} in the cache ({local}) holds no *.safetensors weights; Strat loads "
                             "weights only from safetensors")
        return local.name
    if offline():
        raise ValueError(_advice(name, "no local directory, and as a Hugging Face Hub name it is not in the cache "
                                       "while HF_HUB_OFFLINE is set"))
    from huggingface_hub import HfApi

    try:
        info = HfApi().model_info(name.repo_id, revision=name.revision)
    except Exception as err:  # noqa: BLE001  (not found, gated, revision unknown, no network: all one advice)
        raise ValueError(_advice(name, f"not in the Hugging Face cache and the Hub refused it "
                                       f"({type(err).__name__})")) from None
    if not any(sibling.rfilename.endswith(".safetensors") for sibling in info.siblings or []):
        raise ValueError(f"Hub model {name} holds no *.safetensors weights; Strat loads weights only from safetensors")
    return str(info.sha)


def pin(path: str) -> str:
    """`path` with a Hub name pinned to its commit (`org/name@<hash>`); other paths unchanged."""
    name = parse(path)
    if name is None:
        return path
    return str(HubName(name.repo_id, commit(name)))


def snapshot(name: HubName) -> Path:
    """The local directory of `name`'s files: from the cache, else downloaded (network allowed)."""
    local = cached(name)
    if local is not None:
        return local
    if offline():
        raise ValueError(_advice(name, "not in the Hugging Face cache while HF_HUB_OFFLINE is set"))
    from huggingface_hub import snapshot_download

    try:
        return Path(snapshot_download(name.repo_id, revision=name.revision, cache_dir=cache_dir(),
                                      allow_patterns=FILES))
    except Exception as err:  # noqa: BLE001  (as in `commit`)
        raise ValueError(_advice(name, f"the download failed ({type(err).__name__})")) from None


def local_dir(path: str, key: str = "model.path") -> Path:
    """The local directory of a model path: a Hub name resolved (a ConfigError naming `key` if it fails), else the
    path itself."""
    from strat.errors import ConfigError

    name = parse(path)
    if name is None:
        return Path(path).expanduser()
    try:
        return snapshot(name)
    except ValueError as err:
        raise ConfigError(f"{key}={path!r}: {err}") from None
