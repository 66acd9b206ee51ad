"""Advantage estimators, registered by name (`algorithm.advantage_mode`): how a statistics group's normalised
outcome and process terms combine into each turn's advantage. Adding one is one registered function.

An estimator takes, per ego turn of one group, the outcome term (the episode's return, group-normalised or less
its baseline) and the process term (the turn's CoT score normalised over the group's comparable turns; 0 where
nothing was comparable), and `lam`; it returns the turns' advantages. The terms are torch tensors; nothing here
imports torch, so that the config can list the registered names cheaply."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import torch

AdvantageEstimator = Callable[["torch.Tensor", "torch.Tensor", float], "torch.Tensor"]
"""(outcome [N], process [N], lam) -> advantages [N]."""

_ESTIMATORS: dict[str, AdvantageEstimator] = {}


def register_advantage(name: str) -> Callable[[AdvantageEstimator], AdvantageEstimator]:
    """Register the decorated function as the advantage estimator `name`."""

    def register(estimator: AdvantageEstimator) -> AdvantageEstimator:
        if name in _ESTIMATORS:
            raise ValueError(f"advantage estimator {name!r} is registered already")
        _ESTIMATORS[name] = estimator
        return estimator

    return register


def advantage_names() -> list[str]:
    """The registered estimators' names, sorted."""
    return sorted(_ESTIMATORS)


def advantage_estimator(name: str) -> AdvantageEstimator:
    """The estimator registered as `name`."""
    if name not in _ESTIMATORS:
        raise ValueError(f"unknown advantage estimator {name!r} (registered: {', '.join(advantage_names())})")
    return _ESTIMATORS[name]


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
