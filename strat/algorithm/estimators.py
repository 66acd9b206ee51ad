"""Advantage estimators, registered by name (`algorithm.advantage_mode`): how a statistics group's normalised
outcome and process terms combine into each turn's advantage. Adding one is one registered function.

An estimator takes, per ego turn of one group, the outcome term (the episode's return, group-normalised or less
its baseline) and the process term (the turn's CoT score normalised over the group's comparable turns; 0 where
nothing was comparable), and `lam`; it returns the turns' advantages. The terms are torch tensors; nothing here
imports torch, so that the config can list the registered names cheaply."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

from strat.algorithm.registry import Registry

if TYPE_CHECKING:
    import torch

AdvantageEstimator = Callable[["torch.Tensor", "torch.Tensor", float], "torch.Tensor"]
"""(outcome [N], process [N], lam) -> advantages [N]."""

ESTIMATORS: Registry[AdvantageEstimator] = Registry("advantage estimator")
"""The registered estimators."""


def register_advantage(name: str) -> Callable[[AdvantageEstimator], AdvantageEstimator]:
    """Register the decorated function as the advantage estimator `name`."""
    return ESTIMATORS.register(name)


def advantage_names() -> list[str]:
    """The registered estimators' names, sorted."""
    return ESTIMATORS.names()


def advantage_estimator(name: str) -> AdvantageEstimator:
    """The estimator registered as `name`."""
    return ESTIMATORS.get(name)


@register_advantage("outcome")
def outcome(outcome: torch.Tensor, process: torch.Tensor, lam: float) -> torch.Tensor:
    """Outcome-only group-relative advantages (GRPO); the process term is left out."""
    return outcome


@register_advantage("process")
def process(outcome: torch.Tensor, process: torch.Tensor, lam: float) -> torch.Tensor:
    """The process term alone, unscaled by lam."""
    return process


@register_advantage("hybrid")
def hybrid(outcome: torch.Tensor, process: torch.Tensor, lam: float) -> torch.Tensor:
    """Strat-Reasoner's hybrid advantage: outcome + lam * process."""
    return outcome + lam * process


@register_advantage("shuffled")
def shuffled(outcome: torch.Tensor, process: torch.Tensor, lam: float) -> torch.Tensor:
    """A control for the hybrid: outcome + lam * the process term permuted over the group's scored turns (those with
    a nonzero term). The term keeps its values, its size and which turns get one, and loses which response earned
    which: if this control trains as well as `hybrid`, what the process term says about each response is not what
    helps. The permutation is drawn from the terms themselves, so a run stays reproducible."""
    import hashlib

    import torch

    scored = torch.nonzero(process != 0).flatten()
    digest = hashlib.sha256(outcome.detach().cpu().numpy().tobytes() + process.detach().cpu().numpy().tobytes())
    generator = torch.Generator().manual_seed(int(digest.hexdigest()[:15], 16))
    moved = process.clone()
    moved[scored] = process[scored[torch.randperm(scored.numel(), generator=generator)]]
    return outcome + lam * moved
