"""Advantage estimators by name: the three built in, one registered from outside `strat/` and selected from the
config, and unknown names refused with the registered ones listed."""

from __future__ import annotations

import math
from collections.abc import Iterator
from pathlib import Path

import pytest
import torch

from strat.algorithm import estimators
from strat.algorithm.advantage import compute_advantages, normalise
from strat.algorithm.estimators import advantage_estimator, advantage_names, register_advantage
from strat.config_loading import load_config
from strat.errors import ConfigError
from strat.train.settings import advantage_config

from .test_advantage import _by_key, _two_groups

ROOT = Path(__file__).resolve().parents[2]


def process_when_tied(outcome: torch.Tensor, process: torch.Tensor, lam: float) -> torch.Tensor:
    """The outcome term, and where the outcome gives no signal the process term instead (a variant a user adds)."""
    return torch.where(outcome == 0, process, outcome)


@pytest.fixture
def registered() -> Iterator[None]:
    """`process_when_tied` registered as a user's module would register it, for this test only."""
    register_advantage("test_process_when_tied")(process_when_tied)
    yield
    estimators.ESTIMATORS.unregister("test_process_when_tied")


def test_the_built_in_estimators_by_hand() -> None:
    outcome, process = torch.tensor([1.0, -1.0, 0.0]), torch.tensor([0.5, 0.0, -2.0])
    assert advantage_estimator("outcome")(outcome, process, 0.3).tolist() == [1.0, -1.0, 0.0]
    assert advantage_estimator("process")(outcome, process, 0.3).tolist() == [0.5, 0.0, -2.0]
    assert advantage_estimator("hybrid")(outcome, process, 0.5).tolist() == [1.25, -1.0, -1.0]


def test_an_estimator_registered_outside_strat_is_selected_from_the_config(registered: None) -> None:
    config = load_config(ROOT / "configs" / "kuhn_poker_tiny.yaml", ["algorithm.advantage_mode=test_process_when_tied"])
    samples, _ = compute_advantages(_two_groups(), advantage_config(config))
    # g1 has outcome spread (+1, -1): the outcome term; g2 is tied (0, 0): its process scores are equal too, so 0.
    assert _by_key(samples) == pytest.approx({("a", 0): 1.0, ("a", 2): 1.0, ("b", 0): -1.0, ("c", 0): 0.0, ("d", 0): 0.0})
    assert not math.isnan(sum(_by_key(samples).values()))


def test_unknown_estimators_are_refused_with_the_registered_names(registered: None) -> None:
    assert {"hybrid", "outcome", "process", "test_process_when_tied"} <= set(advantage_names())
    with pytest.raises(ConfigError, match=r"algorithm.advantage_mode='gae'.*allowed: hybrid, outcome, process"):
        load_config(ROOT / "configs" / "kuhn_poker_tiny.yaml", ["algorithm.advantage_mode=gae"])
    with pytest.raises(ValueError, match="registered already"):
        register_advantage("hybrid")(lambda outcome, process, lam: outcome)


def test_the_shuffled_control_permutes_the_process_term_over_the_scored_turns() -> None:
    outcome = torch.tensor([1.0, -1.0, 1.0, -1.0, 0.0, 0.0], dtype=torch.float64)
    process = torch.tensor([0.5, 0.0, -1.5, 2.0, 0.25, -1.0], dtype=torch.float64)
    shuffled = advantage_estimator("shuffled")
    moved = (shuffled(outcome, process, 0.5) - outcome) / 0.5
    assert moved[1] == 0.0                                        # a turn with no process term gets none
    assert sorted(moved.tolist()) == sorted(process.tolist())     # the same values, reassigned
    assert torch.equal(shuffled(outcome, process, 0.5), shuffled(outcome, process, 0.5))   # reproducible
    assert shuffled(outcome, torch.zeros(6, dtype=torch.float64), 0.5).tolist() == outcome.tolist()


def test_the_shuffled_control_keeps_the_size_and_loses_the_assignment() -> None:
    """Over many groups (process terms normalised per group, as `advantage_terms` gives them) the reassigned term
    keeps its spread and no longer follows the turn's own score."""
    generator = torch.Generator().manual_seed(0)
    own, moved = [], []
    for _ in range(500):
        outcome = torch.randn(8, generator=generator, dtype=torch.float64)
        process = normalise(torch.randn(8, generator=generator, dtype=torch.float64), 1e-6)
        own.append(process)
        moved.append((advantage_estimator("shuffled")(outcome, process, 0.5) - outcome) / 0.5)
    own_all, moved_all = torch.cat(own), torch.cat(moved)
    assert moved_all.std().item() == pytest.approx(own_all.std().item())
    corr = torch.corrcoef(torch.stack([own_all, moved_all]))[0, 1].item()
    assert abs(corr) < 0.1       # expected 0 for terms of mean 0; 1 without the permutation
