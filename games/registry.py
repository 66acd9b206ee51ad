"""The registry of games by name: the shipped games, games that installed packages name under the `strat.games`
entry-point group, and games registered in this process."""

from __future__ import annotations

import random
from importlib.metadata import entry_points

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


ENTRY_POINTS = "strat.games"
"""The entry-point group of installed games: `<game_name> = "<module>:<TextGameEnv class>"` in a package's metadata
(pyproject's `[project.entry-points."strat.games"]`). Every process that looks a game up finds them: the CLI, and
each Ray actor of a run, wherever the package is installed."""

_installed_loaded = False


def register(env_class: type[TextGameEnv]) -> type[TextGameEnv]:
    """Add a game to the registry under its `game_name` (usable as a class decorator); a game defined outside this
    package becomes playable and trainable by name, `strat/` unchanged. This reaches only the calling process: a
    game that Ray actors play is installed under the `strat.games` entry points instead (`ENTRY_POINTS`)."""
    name = getattr(env_class, "game_name", None)
    if not (isinstance(env_class, type) and issubclass(env_class, TextGameEnv)) or not isinstance(name, str):
        raise TypeError(f"{env_class!r} is not a TextGameEnv class with a game_name")
    if name in _GAMES and _GAMES[name] is not env_class:
        raise ValueError(f"a game named {name!r} is registered already ({_GAMES[name].__name__})")
    _GAMES[name] = env_class
    return env_class


def _games() -> dict[str, type[TextGameEnv]]:
    """Every game, the installed ones loaded on the first look-up (their modules import this package)."""
    global _installed_loaded
    if not _installed_loaded:
        _installed_loaded = True
        for point in entry_points(group=ENTRY_POINTS):
            try:
                env_class = point.load()
            except Exception as err:
                raise ImportError(f"{ENTRY_POINTS} entry point {point.name} = {point.value!r}: {err}") from err
            if getattr(env_class, "game_name", None) != point.name:
                raise ValueError(f"{ENTRY_POINTS} entry point {point.name!r} names {env_class!r}, whose game_name is "
                                 f"{getattr(env_class, 'game_name', None)!r}")
            register(env_class)
    return _GAMES


def names() -> list[str]:
    """Names of all registered games, sorted."""
    return sorted(_games())


def make(name: str, **options: int | float | str | bool) -> TextGameEnv:
    """A new, reset env for game `name`; `options` are the game's parameters (e.g. players=3)."""
    if name not in _games():
        raise ValueError(f"unknown game {name!r}; allowed games: {names()}")
    return _GAMES[name](**options)


def text_options(name: str) -> tuple[str, ...]:
    """The options of game `name` that change only its text (`TextGameEnv.text_options`)."""
    if name not in _games():
        raise ValueError(f"unknown game {name!r}; allowed games: {names()}")
    return tuple(_GAMES[name].text_options)


def spec(name: str, **options: int | float | str | bool) -> GameSpec:
    """The GameSpec of game `name` with `options`."""
    return make(name, **options).spec


def moves_can_be_illegal(name: str, tries: int = 20, **options: int | float | str | bool) -> bool:
    """Whether some decision of game `name` leaves one of its moves illegal (`TextGameEnv.some_move_illegal`), found
    in `tries` seeded uniformly random games: false for Kuhn poker, where both moves are always legal."""
    env = make(name, **options)
    rng = random.Random(0)
    for game in range(tries):
        env.reset(seed=game)
        while not env.pyspiel_state.is_terminal():
            if env.some_move_illegal():
                return True
            env.step(rng.choice(env.legal_actions(env.agent_selection)))
    return False


def belief_values(name: str) -> BeliefValues | None:
    """How a belief about another player's private information in game `name` is read from text (None: the game
    has no belief score)."""
    if name not in _games():
        raise ValueError(f"unknown game {name!r}; allowed games: {names()}")
    return _GAMES[name].belief_values
