"""How the learner's weights reach the agents' engines: the choice of path (pure) and the Ray calls.

Two paths, chosen by `engine.weight_sync`:
- `object_store`: the learner's state dict (merged, Hugging Face names) goes through Ray's object
  store and each engine loads it in place. Only in-process engines can take tensors this way.
- `directory`: the learner writes safetensors (+ config.json) into `<sync_dir>/step_<version>`
  atomically and every engine reloads from that path (vLLM `reload_weights(weights_path=...)`).
  Works for multi-process engines (CUDA vLLM, `engine.multiprocess=true`). The directory must be
  readable at the same path on every agent's node; only the latest version is kept.

Nothing here imports Ray at module level: the helpers take actor handles and return ObjectRefs, so the
driver can wrap the waits in its own fault handling; `sync_agents` / `sync_snapshot` do the whole
round trip for simple callers.
"""

from __future__ import annotations

import shutil
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

if TYPE_CHECKING:
    from strat.config import ExperimentConfig

SyncMode = Literal["object_store", "directory"]
PREFIX = "step_"
"""Version directories under the sync root are `step_<version>`."""


def engine_is_multiprocess(config: ExperimentConfig) -> bool:
    """Whether the agents' engines run multi-process: vllm with multiprocess=true, tensor
    parallelism, or on GPUs (CUDA vLLM always runs its engine core in other processes)."""
    engine = config.engine
    if engine.backend != "vllm":
        return False
    return engine.multiprocess or engine.tensor_parallel_size > 1 or config.resources.gpus_per_agent > 0


def resolve_weight_sync(config: ExperimentConfig) -> SyncMode:
    """`engine.weight_sync` with `auto` resolved: directory for multi-process engines, else object_store."""
    mode = config.engine.weight_sync
    if mode != "auto":
        return mode
    return "directory" if engine_is_multiprocess(config) else "object_store"


def sync_root(config: ExperimentConfig, run_dir: str | Path) -> Path:
    """The directory the learner writes synced weights under: `engine.sync_dir` or `<run_dir>/sync`, absolute
    (actors may run with another working directory)."""
    root = Path(config.engine.sync_dir).expanduser() if config.engine.sync_dir else Path(run_dir) / "sync"
    return root.absolute()


def sync_path(config: ExperimentConfig, run_dir: str | Path, version: int) -> Path:
    """Where the weights of `version` are written for a directory sync."""
    return sync_root(config, run_dir) / f"{PREFIX}{int(version)}"


def prune_versions(keep: Path) -> list[Path]:
    """Delete the other `step_<n>` directories (and interrupted `.tmp` writes) next to `keep`; returns them.

    Safe once every engine has loaded an older version: engines hold weights in memory, not the files."""
    removed = []
    parent = keep.parent
    if not parent.is_dir():
        return removed
    for path in parent.iterdir():
        ours = path.name.startswith(PREFIX) or path.name.startswith(f".{PREFIX}")  # versions, interrupted writes
        if path == keep or not ours or not path.is_dir():
            continue
        shutil.rmtree(path, ignore_errors=True)
        removed.append(path)
    return removed


def publish_weights(learner: Any, mode: SyncMode, path: str | Path | None) -> Any:
    """Start making the learner's current weights available; returns an ObjectRef.

    `object_store`: the ref of the state dict itself (pass it on to the agents unresolved, so that the
    tensors go learner -> agents without the driver). `directory`: the ref of the path the learner wrote
    (`path`, older versions next to it removed first); resolve it before the agents load."""
    _check_mode(mode, path)
    if mode == "object_store":
        return learner.state_dict.remote()
    return learner.export_weights_dir.remote(str(path), True)


def publish_snapshot(learner: Any, mode: SyncMode, path: str | Path | None) -> Any:
    """As `publish_weights`, and the learner also keeps these weights as the snapshot opponent's (for
    checkpoints). For `directory`, `path` should be under its own root (see `snapshot_path`), so that
    pruning the policy's versions never removes it."""
    _check_mode(mode, path)
    if mode == "object_store":
        return learner.take_snapshot.remote()
    return learner.take_snapshot_dir.remote(str(path), True)


def load_calls(agents: Sequence[Any], weights: Any, version: int) -> list[Any]:
    """The agents' load calls (ObjectRefs): a directory path (str) is reloaded from disk, anything else is
    a state dict (or its ObjectRef) loaded in place."""
    if isinstance(weights, (str, Path)):
        return [agent.load_weights_dir.remote(str(weights), version) for agent in agents]
    return [agent.load_state_dict.remote(weights, version) for agent in agents]


def sync_agents(learner: Any, agents: Sequence[Any], mode: SyncMode, path: str | Path | None, version: int) -> None:
    """Push the learner's current weights to every agent and wait until all have them.

    `learner` is a `strat.actors.learner.Learner` handle (or a LearnerGroup), `agents` are `AgentActor` handles. For
    `directory`, `path` is the version's directory (`sync_path(...)`)."""
    import ray

    if not agents:
        return
    ref = publish_weights(learner, mode, path)
    weights = ref if mode == "object_store" else ray.get(ref)
    ray.get(load_calls(agents, weights, version))


def sync_snapshot(learner: Any, snapshot: Any, mode: SyncMode, path: str | Path | None, version: int) -> None:
    """Freeze the learner's current weights as the snapshot opponent's and load them into the snapshot agent."""
    import ray

    ref = publish_snapshot(learner, mode, path)
    weights = ref if mode == "object_store" else ray.get(ref)
    ray.get(load_calls([snapshot], weights, version))


def _check_mode(mode: str, path: str | Path | None) -> None:
    if mode not in ("object_store", "directory"):
        raise ValueError(f"unknown weight sync mode {mode!r} (allowed: object_store, directory)")
    if mode == "directory" and path is None:
        raise ValueError("a directory sync needs the path to write the weights to")


def snapshot_path(config: ExperimentConfig, run_dir: str | Path, version: int) -> Path:
    """Where the snapshot opponent's weights of `version` are written for a directory sync."""
    return sync_root(config, run_dir) / "snapshot" / f"{PREFIX}{int(version)}"
