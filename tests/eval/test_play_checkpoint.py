"""`strat play --opponent RUN_DIR`: a person against a trained policy, with its reasoning shown."""

from pathlib import Path

import pytest
from typer.testing import CliRunner

from strat.cli import app


def test_play_against_a_run_directory(tiny_run_dir: Path) -> None:
    # Seat 1 acts after the policy; feeding "pass" then "bet" answers every possible turn.
    result = CliRunner().invoke(
        app, ["play", "--game", "kuhn_poker", "--opponent", str(tiny_run_dir), "--seat", "1", "--seed", "2",
              "--show-reasoning"], input="pass\nbet\npass\n",
    )
    assert result.exit_code == 0, result.output
    assert "Your return:" in result.output
    # The random-weight tiny model writes no legal action, so the fallback is announced.
    assert "[player_0 wrote no legal action" in result.output


def test_play_refuses_an_unknown_opponent(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from strat.cli import main

    assert main(["play", "--game", "kuhn_poker", "--opponent", str(tmp_path / "missing")]) == 2
    assert "neither a scripted opponent" in capsys.readouterr().err
