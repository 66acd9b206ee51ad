"""Shared fixtures: a tiny model built once per test session, in a temporary cache."""

import os
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

# No Hugging Face Hub here: look-ups would only time out. Set before huggingface_hub is imported (it reads them once).
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

from strat.process_env import apply_defaults

# One OpenMP thread and quiet logs, as the `strat` command has them: before anything imports torch (`import strat`
# sets nothing). Actors of a Ray node a test starts inherit them.
apply_defaults()


@pytest.fixture(scope="session", autouse=True)
def _isolated_cache(tmp_path_factory: pytest.TempPathFactory) -> None:
    """Keep tiny models and solver caches of the tests out of the user's cache, unless
    STRAT_TEST_CACHE_DIR names a shared one. The workers of a parallel run (pytest-xdist, `make test`) share one
    cache beside their own temp dirs: a model or warm start one worker builds, the others wait for and reuse."""
    shared = os.environ.get("STRAT_TEST_CACHE_DIR")
    if not shared and os.environ.get("PYTEST_XDIST_WORKER"):
        shared = str(tmp_path_factory.getbasetemp().parent / "strat-cache")
    os.environ["STRAT_CACHE_DIR"] = shared or str(tmp_path_factory.mktemp("strat-cache"))


@pytest.fixture(scope="session")
def tiny_model_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The tiny Kuhn poker model with seed 0."""
    from strat.model import tiny as tiny_model

    return tiny_model.build("kuhn_poker", tmp_path_factory.mktemp("models") / "tiny_a", seed=0)


@pytest.fixture(scope="session")
def other_model_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The same architecture and tokenizer with other random weights (seed 1)."""
    from strat.model import tiny as tiny_model

    return tiny_model.build("kuhn_poker", tmp_path_factory.mktemp("models") / "tiny_b", seed=1)


@pytest.fixture(scope="session")
def warm_model_dir(tiny_model_dir: Path) -> Path:
    """The tiny Kuhn poker model warm-started on 400 games of random play for 2 epochs (follows the format, plays
    randomly); the same settings as tests/train/test_warmstart.py's and the loop tests' (tests/train/
    test_ray_training.py), so one build serves them all."""
    from strat.train.warmstart import WarmStartSettings, ensure_warm

    settings = WarmStartSettings(depth=2, epochs=2, episodes=400, max_seconds=3600)  # ~1 min idle; a busy machine
    return ensure_warm(tiny_model_dir, "kuhn_poker", settings)  # must not cut it short (it would not be cached)


@dataclass(frozen=True)
class SecretMarkers:
    """Marker values of the secrets a user may have in the environment, and where they were found."""

    values: dict[str, str]

    def leaks(self, texts: Iterable[tuple[str, bytes]]) -> list[str]:
        """`where: KEY` for every marker found in the (where, content) pairs."""
        return [f"{where}: {key}" for where, content in texts for key, value in self.values.items()
                if value.encode() in content]

    @staticmethod
    def files_under(root: Path) -> Iterator[tuple[str, bytes]]:
        """(path, bytes) of every regular file under `root` (sockets and links skipped)."""
        for path in sorted(root.rglob("*")):
            if path.is_file() and not path.is_symlink():
                try:
                    yield str(path), path.read_bytes()
                except OSError:
                    continue


@pytest.fixture
def secret_markers(monkeypatch: pytest.MonkeyPatch) -> SecretMarkers:
    """HF_TOKEN, RAY_AUTH_TOKEN and WANDB_API_KEY set to marker values for the test."""
    markers = SecretMarkers({
        "HF_TOKEN": "hf_MARKERhfTOKEN5f3a9c",
        "RAY_AUTH_TOKEN": "MARKERrayAUTHtoken7b21e4d09c",
        "WANDB_API_KEY": "MARKERwandbAPIkey0c8e2f1a",
    })
    for key, value in markers.values.items():
        monkeypatch.setenv(key, value)
    return markers


def _module_weight(item: pytest.Item) -> int:
    """0 for a test marked faults or long, 1 for slow, 2 otherwise."""
    if item.get_closest_marker("faults") or item.get_closest_marker("long"):
        return 0
    return 1 if item.get_closest_marker("slow") else 2


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """In a parallel run (pytest-xdist with `--dist loadfile`, as `make test` runs), whole modules go to the workers
    in collection order: the modules with the longest tests (any test marked faults or long, then slow) go first, so
    that the run does not end with one worker in a long module while the other idles. A run in one process keeps
    pytest's order."""
    if not os.environ.get("PYTEST_XDIST_WORKER"):
        return
    weight: dict[str, int] = {}
    for item in items:
        module = item.nodeid.split("::", 1)[0]
        weight[module] = min(weight.get(module, 2), _module_weight(item))
    items.sort(key=lambda item: weight[item.nodeid.split("::", 1)[0]])  # stable: a module's tests keep their order
