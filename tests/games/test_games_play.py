"""Terminal play with scripted input, and the benchmark script end to end."""

from __future__ import annotations

import itertools
import subprocess
import sys
from pathlib import Path

import pytest

import games
from games.play import play

ROOT = Path(__file__).resolve().parents[2]


def scripted(answers: list[str]):
    """An input_fn that answers from `answers` and records the prompts."""
    prompts: list[str] = []

    def input_fn(prompt: str) -> str:
        prompts.append(prompt)
        return answers.pop(0)

    return input_fn, prompts


def test_play_kuhn_reprompts_and_reports_the_result():
    input_fn, prompts = scripted(["hmm, not sure", "fold", "I will BET."])
    printed: list[str] = []
    returns = play("kuhn_poker", "heuristic", seed=3, input_fn=input_fn, output_fn=printed.append)
    text = "\n".join(printed)
    assert len(prompts) == 3
    assert text.count("That is not a legal action. Choose one of: pass, bet") == 2
    assert games.make("kuhn_poker").rules() in text
    assert "You hold the Jack. You act first." in text
    assert "Legal actions: pass, bet" in text
    assert "player_1 held: King" in text
    assert returns == {"player_0": -2.0, "player_1": 2.0}
    assert "Your return: -2" in text


def test_play_tic_tac_toe_against_minimax_as_second_player():
    cells = itertools.cycle(["a1", "b1", "c1", "a2", "b2", "c2", "a3", "b3", "c3"])
    printed: list[str] = []
    returns = play(
        "tic_tac_toe", "minimax", seed=0, human_seat=1,
        input_fn=lambda _: next(cells), output_fn=printed.append,
    )
    assert returns["player_0"] >= 0  # perfect play never loses
    assert "Your opponent played" in "\n".join(printed)


def test_play_three_player_kuhn_and_bad_seat():
    input_fn, _ = scripted(["pass", "pass", "pass"])
    returns = play(
        "kuhn_poker", "random", seed=1, human_seat=2,
        input_fn=input_fn, output_fn=lambda _: None, players=3,
    )
    assert set(returns) == {"player_0", "player_1", "player_2"}
    assert sum(returns.values()) == 0
    with pytest.raises(ValueError, match="human_seat 2"):
        play("kuhn_poker", human_seat=2)


def test_bench_script_runs():
    result = subprocess.run(
        [sys.executable, str(ROOT / "bench" / "bench_games.py"), "--seconds", "0.05"],
        capture_output=True, text=True, timeout=120, check=True, cwd=ROOT,
    )
    for name in games.names():
        assert name in result.stdout
