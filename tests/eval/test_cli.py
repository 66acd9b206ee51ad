"""`eval_command` registered on a typer app, as strat/cli.py registers it: options parse as documented."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import typer
from typer.testing import CliRunner

from strat.cli.eval import eval_command
from strat.errors import ConfigError


@pytest.fixture(scope="module")
def app() -> typer.Typer:
    app = typer.Typer(pretty_exceptions_enable=False)
    app.command("eval")(eval_command)
    app.command("noop")(lambda: None)  # two commands, so that "eval" is a subcommand as in strat
    return app


def test_options_parse(app: typer.Typer, tmp_path: Path) -> None:
    args = ["eval", "--policy", "random", "--game", "kuhn_poker", "--opponents", "heuristic", "--opponents",
            "equilibrium", "--games", "4", "--out", str(tmp_path), "--transcripts", "0"]
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 0, result.output
    data = json.loads((tmp_path / "eval.json").read_text())
    assert [m["opponent"] for m in data["matches"]] == ["heuristic", "equilibrium"]
    assert "0.4583" in result.output and f"written to {tmp_path}" in result.output
    assert data["files"] == []


def test_head_to_head_option(app: typer.Typer, tmp_path: Path) -> None:
    args = ["eval", "--head-to-head", "equilibrium,random", "--game", "kuhn_poker", "--games", "4", "--out", str(tmp_path)]
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 0, result.output
    assert json.loads((tmp_path / "eval.json").read_text())["head_to_head"]["policies"] == ["equilibrium", "random"]


def test_user_error_reaches_the_cli_as_config_error(app: typer.Typer, tmp_path: Path) -> None:
    result = CliRunner().invoke(app, ["eval", "--policy", "nobody", "--game", "kuhn_poker", "--out", str(tmp_path)])
    assert isinstance(result.exception, ConfigError)
