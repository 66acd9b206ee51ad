"""Moves per information state: where the game is small enough to list its information states, the exploitability's
samples (or the exact table) give the policy's probability of each legal move at every state, by name; eval.json
carries them and eval.md tables them for a game of at most 30 states (Kuhn poker's 12), so a reader sees what the
policy conditions on (whether it calls a bet as often as it bets into a check)."""

from __future__ import annotations

import json

import pytest

from games.opponents import make_opponent
from strat.eval.exploitability import ExploitabilityEstimate, estimate_exploitability, exact_estimate
from strat.eval.policies import PolicyInfo
from strat.eval.report import EvalReport, render_markdown, to_json


def _three_bets_in_ten(located, count):
    """At every state the first three of `count` moves bet (action 1), the rest pass."""
    return [[1] * 3 + [0] * (count - 3) for _ in located]


def test_sampled_shares_by_name() -> None:
    estimate = estimate_exploitability("kuhn_poker", _three_bets_in_ten, 10, bootstrap=20)
    moves = dict(estimate.infoset_moves)
    assert len(moves) == 12
    assert all(row == (("pass", pytest.approx(0.7)), ("bet", pytest.approx(0.3))) for row in moves.values())


def test_the_exact_table_of_a_player_that_reads_the_betting() -> None:
    """The calling station by hand: facing a bet ('0b', player 0's '1pb') it calls half the time; into an unbet pot
    it bets the Jack 1/10, the Queen 1/4, the King 1/2."""
    moves = dict(exact_estimate("kuhn_poker", make_opponent("station", "kuhn_poker").action_probs).infoset_moves)
    assert moves["0b"] == (("pass", 0.5), ("bet", 0.5)) and moves["1pb"] == (("pass", 0.5), ("bet", 0.5))
    assert moves["0p"] == (("pass", pytest.approx(0.9)), ("bet", pytest.approx(0.1)))
    assert moves["1"] == (("pass", 0.75), ("bet", 0.25)) and moves["2p"] == (("pass", 0.5), ("bet", 0.5))


def test_report_tables_them_and_json_carries_them() -> None:
    estimate = exact_estimate("kuhn_poker", make_opponent("station", "kuhn_poker").action_probs)
    report = EvalReport("kuhn_poker", {}, 0, (PolicyInfo(name="p", kind="scripted"),), exploitability=estimate)
    text = render_markdown(report)
    assert "## Moves per information state" in text and "(the exact table)" in text
    assert "| `0b` | pass 0.50, bet 0.50 |" in text and "| `1` | pass 0.75, bet 0.25 |" in text
    data = to_json(report)
    rows = {key: dict(moves) for key, moves in data["exploitability"]["infoset_moves"]}
    assert rows["2"] == {"pass": 0.5, "bet": 0.5} and len(rows) == 12


def test_a_game_with_many_states_points_to_the_json() -> None:
    rows = tuple((f"s{i}", (("call", 1.0),)) for i in range(31))
    estimate = ExploitabilityEstimate(0.1, 0.0, 0.2, 8, 31, 0.1, (), rows)
    report = EvalReport("leduc_poker", {}, 0, (PolicyInfo(name="p", kind="llm", depth=1),), exploitability=estimate)
    text = render_markdown(report)
    assert "## Moves per information state" not in text
    assert "The policy's moves at each of the 31 information states are in eval.json" in text


def test_training_writes_each_evaluations_moves(tmp_path) -> None:
    """The training evaluation appends one line per evaluation to the run's infoset_moves.jsonl (a scripted policy
    by its exact table has none to write: its moves are known)."""
    from strat.train.trainer import INFOSET_MOVES, Trainer

    trainer = Trainer.__new__(Trainer)  # only what the writer reads
    trainer.run_dir, trainer.step = tmp_path, 0
    trainer._write_infoset_moves(estimate_exploitability("kuhn_poker", _three_bets_in_ten, 10, bootstrap=20))
    trainer.step = 5
    trainer._write_infoset_moves(estimate_exploitability("kuhn_poker", _three_bets_in_ten, 10, bootstrap=20))
    lines = [json.loads(line) for line in (tmp_path / INFOSET_MOVES).read_text().splitlines()]
    assert [line["step"] for line in lines] == [0, 5] and lines[1]["samples_per_infoset"] == 10
    assert lines[1]["moves"]["0pb"] == {"pass": pytest.approx(0.7), "bet": pytest.approx(0.3)}
    assert len(lines[0]["moves"]) == 12
