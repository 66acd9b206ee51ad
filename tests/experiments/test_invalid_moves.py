"""experiments/can_the_model_read_its_game/invalid_moves.py: each response's cause on a tic-tac-toe position with
two cells taken, and the report's shares by hand."""

from __future__ import annotations

import pytest

import games
from strat.algorithm.reasoning import build_messages

from .conftest import experiment_module

FIRST = "<past>Nothing.</past><their_view>None.</their_view><plan>Centre.</plan><predict>1</predict><action>"


@pytest.fixture(scope="module")
def probe():
    yield from experiment_module("invalid_moves")


def _position():
    """Tic-tac-toe with digit names after cells 5 and 1 are taken (player_0 to move)."""
    env = games.make("tic_tac_toe", move_names="digits")
    env.reset(seed=0)
    for name in ("5", "1"):
        env.step(env.parse_action(name, env.agent_selection))
    return env


def test_each_cause_by_hand(probe) -> None:
    env = _position()
    assert sorted(env.action_name(a) for a in env.legal_actions(env.agent_selection)) == list("2346789")
    assert probe.cause(env, FIRST + "9</action>", 2) == probe.LEGAL
    assert probe.cause(env, "stray " + FIRST + "9</action>", 2) == probe.LEGAL_MALFORMED
    assert probe.cause(env, FIRST + "5</action>", 2) == probe.ILLEGAL  # taken
    assert probe.cause(env, FIRST + "I choose</action>", 2) == probe.NOT_A_MOVE
    assert probe.cause(env, "<past>Nothing.</past><plan>Centre.</plan>", 2) == probe.NO_ACTION


def test_report_shares_by_hand(probe) -> None:
    env = _position()
    texts = [FIRST + "9</action>", FIRST + "2</action>", FIRST + "5</action>", "no tags"]
    text = probe.report([env] * 4, texts, 2)
    assert "4 decisions:" in text
    assert f"  {probe.LEGAL}: 2 (50.0%)" in text and f"  {probe.ILLEGAL}: 1 (25.0%)" in text
    assert f"  {probe.NO_ACTION}: 1 (25.0%)" in text
    # 2 legal of 3 that name a move; 7 of 9 cells are free here.
    assert "legal among the 3 responses that name a move: 0.667 (a uniform choice among all moves: 0.778)" in text


def test_decisions_are_seeded_positions_with_a_move_to_make(probe) -> None:
    first = probe.decisions("tic_tac_toe", 20, 0, {"move_names": "digits"})
    again = probe.decisions("tic_tac_toe", 20, 0, {"move_names": "digits"})
    prompts = [str(build_messages(e, e.agent_selection, 2)) for e in first]
    assert prompts == [str(build_messages(e, e.agent_selection, 2)) for e in again]
    assert len(set(prompts)) > 10, "positions of several depths, not one"
    assert all(e.legal_actions(e.agent_selection) for e in first)
