"""Held-out evaluation opponents and the scripted opponents a game's options allow, as `strat check` sees them."""

from __future__ import annotations

import pytest

from strat.config import held_out_opponents
from strat.config_loading import load_config
from strat.errors import ConfigError

BASE = ["engine.backend=hf", "warm_start.enabled=false"]


def _config(*overrides: str):
    return load_config(None, [*BASE, *overrides])


@pytest.mark.parametrize(("overrides", "expected"), [
    ((), ["heuristic", "equilibrium"]),
    (("game.options={players: 3}",), ["heuristic", "equilibrium"]),
    (("game.name=leduc_poker", "algorithm.format_penalty=-14"), ["heuristic", "equilibrium"]),
    (("game.name=leduc_poker", "game.options={players: 3}", "algorithm.format_penalty=-14"), ["heuristic"]),  # no three-player Leduc equilibrium
    (("game.name=tic_tac_toe",), ["heuristic", "minimax"]),
    (("game.name=liars_dice",), ["heuristic"]),
    (("game.opponents=[{kind: scripted, name: heuristic}]",), ["equilibrium"]),  # trained against: not held out
    (("warm_start.enabled=true", "warm_start.player=heuristic"), ["equilibrium"]),  # imitated: not held out
    (("eval.held_out=[]",), []),
])
def test_the_default_held_out_set(overrides: tuple[str, ...], expected: list[str]) -> None:
    assert held_out_opponents(_config(*overrides)) == expected


@pytest.mark.parametrize(("overrides", "message"), [
    (("eval.held_out=[minimax]",), "eval.held_out: 'minimax' not available for kuhn_poker"),
    (("game.opponents=[{kind: scripted, name: heuristic}]", "eval.held_out=[heuristic]"), "not held out"),
    (("warm_start.enabled=true", "warm_start.player=timid", "eval.held_out=[timid]"), "not held out"),
    (("game.name=leduc_poker", "game.options={players: 3}", "game.opponents=[{kind: scripted, name: equilibrium}]"),
     "game.opponents.0.name='equilibrium': not available for leduc_poker with {'players': 3}"),
])
def test_check_refuses_what_cannot_run_or_is_not_held_out(overrides: tuple[str, ...], message: str) -> None:
    with pytest.raises(ConfigError, match=message.replace("[", r"\[").replace("{", r"\{")):
        _config(*overrides)
