"""The registry of games by name."""

from __future__ import annotations

from games.bargaining import BargainingEnv
from games.base import BeliefValues, GameSpec, TextGameEnv
from games.connect_four import ConnectFourEnv
from games.kuhn_poker import KuhnPokerEnv
from games.leduc_poker import LeducPokerEnv
from games.liars_dice import LiarsDiceEnv
from games.tic_tac_toe import TicTacToeEnv

_GAMES: dict[str, type[TextGameEnv]] = {
    cls.game_name: cls
    for cls in (
        KuhnPokerEnv, LeducPokerEnv, TicTacToeEnv, LiarsDiceEnv, BargainingEnv, ConnectFourEnv
    )
}


def names() -> list[str]:
    """Names of all registered games, sorted."""
    return sorted(_GAMES)


def make(name: str, **options: int | float | str | bool) -> TextGameEnv:
    """A new, reset env for game `name`; `options` are the game's parameters (e.g. players=3)."""
    if name not in _GAMES:
        raise ValueError(f"unknown game {name!r}; allowed games: {names()}")
    return _GAMES[name](**options)


def spec(name: str, **options: int | float | str | bool) -> GameSpec:
    """The GameSpec of game `name` with `options`."""
    return make(name, **options).spec


def belief_values(name: str) -> BeliefValues | None:
    """How a belief about another player's private information in game `name` is read from text (None: the game
    has no belief score)."""
    if name not in _GAMES:
        raise ValueError(f"unknown game {name!r}; allowed games: {names()}")
    return _GAMES[name].belief_values
