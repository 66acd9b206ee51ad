"""Shared pieces of the reliability tests: a small training config on the tiny model."""

from collections.abc import Iterator
from pathlib import Path

import pytest

from strat.config import ExperimentConfig
from strat.config_loading import load_config

ROOT = Path(__file__).resolve().parents[2]
DEFAULT = ROOT / "configs" / "kuhn_poker_tiny.yaml"
SMALL = [
    "algorithm.groups_per_step=4", "algorithm.group_size=3", "reasoning.max_new_tokens=24",
    "engine.backend=hf", "schedule.max_staleness=0", "schedule.eval_every=0", "logging.samples_every=0",
    "logging.tensorboard=false", "warm_start.enabled=false", "algorithm.lr=0.01",
]


def small_config(output_dir: Path, model_dir: Path, *extra: str) -> ExperimentConfig:
    return load_config(DEFAULT, [f"model.path={model_dir}", f"run.output_dir={output_dir}", *SMALL, *extra])


def small_overrides(output_dir: Path, model_dir: Path, *extra: str) -> list[str]:
    return [f"model.path={model_dir}", f"run.output_dir={output_dir}", *SMALL, *extra]


@pytest.fixture(scope="module")
def local_ray() -> Iterator[None]:
    import ray

    ray.init(num_cpus=4, include_dashboard=False, log_to_driver=False, configure_logging=False)
    yield
    ray.shutdown()
