"""Scripted opponents behind one interface: random, heuristic, the weak players (contrarian, timid, bully,
station, truthful, striker), equilibrium (CFR), minimax."""

from __future__ import annotations

import random
from collections.abc import Callable
from typing import Protocol

from games import equilibrium, heuristics, minimax
from games.base import TextGameEnv
from games.registry import names as game_names

Policy = Callable[[TextGameEnv, str], dict[int, float]]


class Opponent(Protocol):
    """Chooses actions for one agent of a game."""

    name: str

    def act(self, env: TextGameEnv, agent: str) -> int:
        """An action for `agent`, which must be the agent to act in `env`."""
        ...

    def action_probs(self, env: TextGameEnv, agent: str) -> dict[int, float]:
        """The probability of each legal action of `agent` (for exact evaluation)."""
        ...


class PolicyOpponent:
    """An opponent that samples its action from a policy with its own seeded RNG."""

    def __init__(self, name: str, policy: Policy, seed: int = 0) -> None:
        self.name = name
        self._policy = policy
        self._rng = random.Random(seed)

    def action_probs(self, env: TextGameEnv, agent: str) -> dict[int, float]:
        return self._policy(env, agent)

    def act(self, env: TextGameEnv, agent: str) -> int:
        probs = self._policy(env, agent)
        return self._rng.choices(list(probs), weights=list(probs.values()))[0]


class RandomOpponent(PolicyOpponent):
    """Uniform over legal actions."""

    def __init__(self, seed: int = 0) -> None:
        super().__init__("random", uniform_policy, seed)

    def act(self, env: TextGameEnv, agent: str) -> int:
        return self._rng.choice(env.legal_actions(agent))


def uniform_policy(env: TextGameEnv, agent: str) -> dict[int, float]:
    """Equal probability on every legal action."""
    legal = env.legal_actions(agent)
    return dict.fromkeys(legal, 1.0 / len(legal))


def _availability() -> dict[str, frozenset[str]]:
    every = frozenset(game_names())
    return {
        "random": every,
        "heuristic": frozenset(heuristics.POLICIES),
        "contrarian": frozenset(heuristics.CONTRARIAN),
        "timid": frozenset(heuristics.TIMID),
        "bully": frozenset(heuristics.BULLY),
        "station": frozenset(heuristics.STATION),
        "reader": frozenset(heuristics.READER),
        "truthful": frozenset(heuristics.TRUTHFUL),
        "striker": frozenset(heuristics.STRIKER),
        "equilibrium": frozenset(equilibrium.GAMES),
        "minimax": frozenset(minimax.GAMES),
    }


def opponent_names(game: str, **options: int | float | str | bool) -> list[str]:
    """Names of the opponents available for `game` with its `options` (e.g. players=3: no Leduc equilibrium)."""
    if game not in game_names():
        raise ValueError(f"unknown game {game!r}; allowed games: {game_names()}")
    two_players = options.get("players", 2) == 2
    return [name for name, games in _availability().items()
            if game in games and (name != "equilibrium" or equilibrium.available(game, **options))
            and (name != "reader" or two_players)]


REFERENCE_PLAYERS = ("random", "heuristic", "equilibrium", "minimax")
"""The players an evaluation measures against by default: uniform random and the references a game has (its
heuristic player, its equilibrium, minimax). The weak players (contrarian, timid, bully, station, reader, truthful,
striker) exist to be imitated by a warm start or trained against; they are played when named."""


def reference_opponents(game: str, **options: int | float | str | bool) -> list[str]:
    """Those of `REFERENCE_PLAYERS` available for `game` with its `options`, in that order."""
    allowed = opponent_names(game, **options)
    return [name for name in REFERENCE_PLAYERS if name in allowed]


def make_opponent(
    name: str, game: str, seed: int = 0, **options: int | float | str | bool
) -> Opponent:
    """Opponent `name` for `game` (with the game's `options`, e.g. players=3), seeded by `seed`."""
    availability = _availability()
    if name not in availability:
        raise ValueError(f"unknown opponent {name!r}; allowed opponents: {sorted(availability)}")
    allowed = opponent_names(game, **options)
    if name not in allowed:
        described = f"{game!r} with {options}" if options else repr(game)
        raise ValueError(f"opponent {name!r} is not available for game {described}; opponents for it: {allowed}")
    if name == "random":
        return RandomOpponent(seed)
    scripted = {"heuristic": heuristics.POLICIES, "contrarian": heuristics.CONTRARIAN, "timid": heuristics.TIMID,
                "bully": heuristics.BULLY, "station": heuristics.STATION, "reader": heuristics.READER,
                "truthful": heuristics.TRUTHFUL, "striker": heuristics.STRIKER}
    if name in scripted:
        return PolicyOpponent(name, scripted[name][game], seed)
    if name == "equilibrium":
        return PolicyOpponent(name, equilibrium.policy(game, **options), seed)
    return PolicyOpponent(name, minimax.policy(game), seed)
