"""Approximate Nash equilibria of the poker games by CFR+, computed once and cached on disk."""

from __future__ import annotations

import json
import os
import tempfile
from collections.abc import Callable
from functools import lru_cache
from pathlib import Path

import pyspiel

from games.base import TextGameEnv
from games.openspiel_env import OptionValue, load_game

ITERATIONS = {"kuhn_poker": 1000, "leduc_poker": 300}
"""CFR+ iterations per game: Kuhn reaches exploitability ~1e-4, Leduc ~2e-3."""
GAMES = frozenset(ITERATIONS)
MAX_PLAYERS = {"kuhn_poker": 4, "leduc_poker": 2}
"""Most players CFR+ is run for: four-player Kuhn takes ~7 s here, three-player Leduc far too long. With more than two
players the CFR+ average is a strong fixed policy, not a guaranteed Nash equilibrium."""


def available(game: str, **options: OptionValue) -> bool:
    """Whether an equilibrium player exists for `game` with `options` (its player count)."""
    if game not in GAMES:
        return False
    return load_game(game, options).num_players() <= MAX_PLAYERS[game]

PolicyTable = dict[str, dict[int, float]]


def cache_dir() -> Path:
    """Where computed policies live: $STRAT_CACHE_DIR, else ~/.cache/strat."""
    return Path(os.environ.get("STRAT_CACHE_DIR") or Path.home() / ".cache" / "strat")


def policy(game: str, **options: OptionValue) -> Callable[[TextGameEnv, str], dict[int, float]]:
    """The equilibrium policy of `game`: (env, agent) -> action probabilities."""
    table = policy_table(game, **options)
    solved = str(load_game(game, options))

    def action_probs(env: TextGameEnv, agent: str) -> dict[int, float]:
        played = str(env.pyspiel_state.get_game())
        if played != solved:
            raise ValueError(
                f"the equilibrium of {solved} cannot play {played}; "
                "make the opponent with the same options as the env"
            )
        return table[env.info_state_string(agent)]

    return action_probs


def policy_table(game: str, **options: OptionValue) -> PolicyTable:
    """CFR+ average policy of `game`: information-state string -> {action: probability}."""
    if game not in GAMES:
        raise ValueError(f"no equilibrium for game {game!r}; available for: {sorted(GAMES)}")
    if not available(game, **options):
        raise ValueError(f"no equilibrium for {game} with more than {MAX_PLAYERS[game]} players (CFR+ too large here)")
    return _policy_table(game, tuple(sorted(options.items())))


@lru_cache(maxsize=None)
def _policy_table(game: str, options: tuple[tuple[str, OptionValue], ...]) -> PolicyTable:
    iterations = ITERATIONS[game]
    suffix = "".join(f"_{key}={value}" for key, value in options)
    path = cache_dir() / f"cfr_plus_{game}{suffix}_{iterations}.json"
    if path.exists():
        stored = json.loads(path.read_text())
        return {key: {int(a): p for a, p in probs.items()} for key, probs in stored.items()}
    table = _solve(load_game(game, dict(options)), iterations)
    _write_atomically(path, json.dumps(table))
    return table


def _solve(game: pyspiel.Game, iterations: int) -> PolicyTable:
    solver = pyspiel.CFRPlusSolver(game)
    for _ in range(iterations):
        solver.evaluate_and_update_policy()
    table = solver.tabular_average_policy().policy_table()
    return {key: {action: prob for action, prob in probs} for key, probs in table.items()}


def _write_atomically(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.NamedTemporaryFile("w", dir=path.parent, delete=False, suffix=".tmp") as file:
        file.write(text)
    os.replace(file.name, path)
