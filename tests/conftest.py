"""Shared fixtures: a tiny model built once per test session, in a temporary cache."""

import os
from pathlib import Path

import pytest

# No Hugging Face Hub here: look-ups would only time out. Set before huggingface_hub is imported (it reads them once).
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

import strat  # noqa: F401  (sets thread defaults before torch is imported)


@pytest.fixture(scope="session", autouse=True)
def _isolated_cache(tmp_path_factory: pytest.TempPathFactory) -> None:
    """Keep tiny models and solver caches of the tests out of the user's cache, unless
    STRAT_TEST_CACHE_DIR names a shared one."""
    shared = os.environ.get("STRAT_TEST_CACHE_DIR")
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
    from strat.model.warmstart import WarmStartSettings, ensure_warm

    return ensure_warm(tiny_model_dir, "kuhn_poker", WarmStartSettings(depth=2, epochs=2, episodes=400))
