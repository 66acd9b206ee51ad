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
from strat.weight_sync import prune_versions


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

    def export_weights_dir(self, path: str, prune_older: bool = False) -> str:
        """Write the current (merged) weights as safetensors into `path`, atomically; returns the absolute path.

        `prune_older` first removes the other `step_<n>` directories next to `path` (older syncs, which every
        engine has already loaded), so that the sync directory holds one copy of the model."""
        if prune_older:
            prune_versions(Path(path).absolute())
        return self.learner.export_weights_dir(path)

    def take_snapshot_dir(self, path: str, prune_older: bool = False) -> str:
        """Freeze the current weights as the snapshot opponent's and write them into `path` (as export_weights_dir)."""
        if prune_older:
            prune_versions(Path(path).absolute())
        return self.learner.take_snapshot_dir(path)

    def greedy(self, prompts: list[list[int]], max_new_tokens: int) -> list[list[int]]:
        """The training model's own greedy completions (transformers generate): what a synced engine must match."""
        return self.learner.greedy(prompts, max_new_tokens)

    def save(self, run_dir: str, step: int, loop_state: dict[str, Any], keep: int) -> str:
        return str(self.learner.save(Path(run_dir), step, loop_state, keep).path)

    def load(self, path: str, step: int) -> dict[str, Any]:
        return self.learner.load(Checkpoint(Path(path), step))
