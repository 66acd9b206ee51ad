"""experiments/what_do_the_policies_read/best_response.py: the best response's value is OpenSpiel's exploitability,
and a single state's gain by hand."""

from __future__ import annotations

import pytest

from .conftest import experiment_module


@pytest.fixture(scope="module")
def br():
    yield from experiment_module("best_response")


def test_the_best_responses_value_is_the_exploitability(br) -> None:
    """Two-player zero-sum: the seat-averaged gain of the best response is the exploitability OpenSpiel gives the
    calling station (0.4417) and always betting (1/3); a policy gains nothing against itself."""
    from strat.eval.policies import ReasoningOverrides

    station = br.as_array(br.bet_table("station", 0, ReasoningOverrides()))
    assert br.gain(br.best_response(station), station) == pytest.approx(0.4417, abs=1e-3)
    always = br.as_array(dict.fromkeys(_keys(br), 1.0))
    assert br.gain(br.best_response(always), always) == pytest.approx(1 / 3)
    assert br.gain(station, station) == pytest.approx(0.0)


def test_one_states_gain_by_hand(br) -> None:
    """Against always betting, player 1's Jack facing a bet ('0b') folds instead of calling: it loses 1 instead of 2
    whenever it holds the Jack (1/3), so seat 1 gains 1/3 and the seat average 1/6."""
    always = br.as_array(dict.fromkeys(_keys(br), 1.0))
    assert br.gains_alone(always)["0b"] == pytest.approx(1 / 6)


def _keys(br) -> list[str]:
    """Kuhn's 12 information states."""
    return list(br._form().index)
