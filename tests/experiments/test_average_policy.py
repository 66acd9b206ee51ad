"""experiments/does_averaging_the_weights_help/average_policy.py: the reach-weighted average of policies, by hand,
and its exploitability is the project's exact one."""

from __future__ import annotations

import pytest

from .conftest import experiment_module

KEYS = ["0", "0b", "0p", "0pb", "1", "1b", "1p", "1pb", "2", "2b", "2p", "2pb"]


@pytest.fixture(scope="module")
def avg():
    yield from experiment_module("average_policy")


def test_reach_weights_by_hand(avg) -> None:
    """Player 0 reaches '0pb' only by passing at '0': a checkpoint that always bets the Jack first never gets there,
    so the other's call rate is the average's; a first decision is the plain mean."""
    first = dict.fromkeys(KEYS, 0.5) | {"0": 1.0, "0pb": 1.0}
    second = dict.fromkeys(KEYS, 0.5) | {"0": 0.0, "0pb": 0.2}
    averaged = avg.average_policy([first, second])
    assert averaged["0pb"] == pytest.approx(0.2) and averaged["0"] == pytest.approx(0.5)
    third = dict.fromkeys(KEYS, 0.5) | {"0": 0.5, "0pb": 0.8}  # reach 1/2 against the second's 1
    assert avg.average_policy([second, third])["0pb"] == pytest.approx((1 * 0.2 + 0.5 * 0.8) / 1.5)
    assert avg.average_policy([first])["1b"] == 0.5


def test_exploitability_of_always_betting(avg) -> None:
    assert avg.exploitability(dict.fromkeys(KEYS, 1.0)) == pytest.approx(1 / 3)
