"""bench/card_learning.py, the oracle-advantage probe of the learner: returns and advantages by hand."""

from __future__ import annotations

import random

import pytest

import games
from games.kuhn_poker import BET, PASS
from strat.engines import Generation
from strat.model.warmstart import templated_response

from .conftest import bench_module

DEPTH, PENALTY = 2, -3.0


@pytest.fixture(scope="module")
def probe():
    yield from bench_module("card_learning")


def _first_decision(card_0: int, card_1: int):
    """Player 0's opening decision holding `card_0` (0 Jack, 2 King)."""
    env = games.make("kuhn_poker")
    for seed in range(200):
        env.reset(seed=seed)
        if env.card("player_0") == card_0 and env.card("player_1") == card_1:
            return env
    raise AssertionError("no such deal in 200 seeds")


def _generation(env, action: int | None, index: int) -> Generation:
    text = "no tags at all" if action is None else templated_response(env, "player_0", action, DEPTH, random.Random(0))
    return Generation((1, 2), (10 + index, 11), (-0.5, -0.1), text, "stop")


def test_oracle_returns_and_group_advantages_by_hand(probe) -> None:
    king, jack = _first_decision(2, 0), _first_decision(0, 2)
    # King: bet, bet, pass, invalid -> returns 1, 1, -1, -3 (mean -0.5, std sqrt(2.75)); Jack: pass x4 -> all equal.
    generations = [_generation(king, a, i) for i, a in enumerate((BET, BET, PASS, None))]
    generations += [_generation(jack, PASS, 4 + i) for i in range(4)]
    samples, stats = probe.oracle_samples([king, jack], generations, 4, DEPTH, "card", PENALTY, random.Random(0))

    std = 2.75**0.5 + 1e-6  # the population std plus the loop's eps
    expected = [1.5 / std, 1.5 / std, -0.5 / std, -2.5 / std, 0.0, 0.0, 0.0, 0.0]
    assert [s.advantage for s in samples] == pytest.approx(expected)
    assert [s.response_token_ids for s in samples] == [g.token_ids for g in generations]
    assert stats.valid == 7 and stats.hits == 6
    assert stats.bets == [0, 0, 2] and stats.counted == [4, 0, 3]
    # The group is the information set: the King's and the Jack's samples never share one.
    assert {s.group_id for s in samples[:4]} != {s.group_id for s in samples[4:]}


def test_targets(probe) -> None:
    assert [probe.target_bets(card, "card") for card in range(3)] == [False, False, True]
    assert all(probe.target_bets(card, "bet") for card in range(3))
    assert not any(probe.target_bets(card, "pass") for card in range(3))
    assert probe.log_odds(4, 8) == 0.0
    assert probe.log_odds(0, 8) < 0 < probe.log_odds(8, 8)


def test_movement_and_its_sampling_interval_by_hand(probe) -> None:
    """Jack 6/8 -> 2/8 bets, Queen 2/8 -> 2/8, King 2/8 -> 6/8: log-odds ln(6.5/2.5) = 0.9555 and its negative,
    each with variance 1/6.5 + 1/2.5 = 0.5538."""
    moved = probe.movement([(6, 8), (2, 8), (2, 8)], [(2, 8), (2, 8), (6, 8)])
    assert moved.per_card == pytest.approx((-1.9110, 0.0, 1.9110), abs=1e-4)
    assert moved.shared == pytest.approx(0.0, abs=1e-12)
    assert moved.specific == pytest.approx(1.9110 + 1.9110 / 2, abs=1e-4)
    assert moved.per_card_ci == pytest.approx((2.0629,) * 3, abs=1e-3)  # 1.96 * sqrt(2 * 0.5538)
    assert moved.shared_ci == pytest.approx(1.1910, abs=1e-3)  # 1.96 * sqrt(6 * 0.5538) / 3
    assert moved.specific_ci == pytest.approx(2.5264, abs=1e-3)  # 1.96 * sqrt(2 * 0.5538 + 4 * 0.5538 / 4)
    # Ten times the samples at the same rates: an interval about sqrt(10) times narrower.
    assert probe.movement([(60, 80)] * 3, [(20, 80)] * 3).specific_ci < moved.specific_ci / 2.5
