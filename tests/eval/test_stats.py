"""Intervals, outcome counting and Elo."""

from __future__ import annotations

import numpy as np
import pytest

from strat.algorithm.records import Episode
from strat.eval.stats import (
    duplicate_outcomes,
    elo_ratings,
    elo_with_intervals,
    match_result,
    mean_interval,
    outcome_counts,
    wilson_interval,
)


def _episode(seed: int, ego: str, returns: tuple[float, float]) -> Episode:
    return Episode(
        episode_id=f"e{seed}{ego}",
        group_id="a vs b",
        seed=seed,
        game="kuhn_poker",
        agents=("player_0", "player_1"),
        ego_agents=(ego,),
        turns=(),
        returns={"player_0": returns[0], "player_1": returns[1]},
    )


def test_wilson_interval_is_honest_at_the_edges() -> None:
    low, high = wilson_interval(0, 20)
    assert low == 0.0 and 0.1 < high < 0.2
    low, high = wilson_interval(10, 20)
    assert low < 0.5 < high and high - low == pytest.approx(2 * 1.96 * np.sqrt(0.25 / 20), rel=0.1)


def test_mean_interval() -> None:
    mean, half = mean_interval([1.0, -1.0] * 50)
    assert mean == 0.0 and half == pytest.approx(1.96 * 1.005 / 10, rel=0.01)
    assert mean_interval([2.0])[1] == float("inf")


def test_match_result_counts_both_seats_and_averages_deals() -> None:
    episodes = [
        _episode(1, "player_0", (2.0, -2.0)),
        _episode(1, "player_1", (1.0, -1.0)),  # the same deal with the policy in seat 1: it lost 1
        _episode(2, "player_0", (-1.0, 1.0)),
        _episode(2, "player_1", (-1.0, 1.0)),
    ]
    result = match_result("b", episodes)
    assert result.games == 4
    assert result.mean_return.value == pytest.approx(0.25)
    assert result.mean_return.n == 4
    assert [e.value for e in result.seat_returns] == [0.5, 0.0]
    assert outcome_counts(episodes) == (2, 0, 2)
    assert (result.win.value, result.draw.value, result.loss.value) == (0.5, 0.0, 0.5)
    # Deal 1: ego totals 2 + (-1) = 1 against the opponent's -1: a won duplicate match; deal 2: 0 vs 0.
    assert duplicate_outcomes(episodes) == (1, 1, 0)


def test_elo_recovers_a_known_gap_and_stays_finite_when_unbeaten() -> None:
    scores = np.array([[0.0, 750.0], [250.0, 0.0]])
    games = np.array([[0, 1000], [1000, 0]])
    ratings = elo_ratings(scores, games, prior_draws=0.0)
    assert ratings[0] - ratings[1] == pytest.approx(400 * np.log10(3), abs=0.5)
    assert ratings.mean() == pytest.approx(1500)
    outcomes = np.zeros((2, 2, 3))
    outcomes[0, 1], outcomes[1, 0] = (20, 0, 0), (0, 0, 20)
    rating, low, high = elo_with_intervals(outcomes, bootstrap=50)
    assert np.isfinite(rating).all() and rating[0] > rating[1]
    assert (low <= rating + 1e-6).all() and (rating <= high + 1e-6).all() and high[1] > low[1]
