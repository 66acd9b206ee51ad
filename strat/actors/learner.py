"""Learner actor: the policy update, weight export and checkpoints."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import ray
import torch

import strat  # noqa: F401
from strat.checkpoint import Checkpoint
from strat.learner import LearnerSettings, PolicyLearner
from strat.records import TrainSample


@ray.remote
class Learner:
    """Wraps PolicyLearner for Ray."""

    def __init__(self, model_path: str, settings: LearnerSettings) -> None:
        self.learner = PolicyLearner(model_path, settings)

    def ready(self) -> bool:
        return True

    def update(self, samples: list[TrainSample]) -> dict[str, float]:
        return self.learner.update(samples)

    def state_dict(self) -> dict[str, torch.Tensor]:
        return self.learner.state_dict()

    def take_snapshot(self) -> dict[str, torch.Tensor]:
        return self.learner.take_snapshot()

    def save(self, run_dir: str, step: int, loop_state: dict[str, Any], keep: int) -> str:
        return str(self.learner.save(Path(run_dir), step, loop_state, keep).path)

    def load(self, path: str, step: int) -> dict[str, Any]:
        return self.learner.load(Checkpoint(Path(path), step))
