"""Perfect play for small two-player zero-sum perfect-information games (tic-tac-toe)."""

from __future__ import annotations

from collections.abc import Callable

import pyspiel

from games.base import TextGameEnv

GAMES = frozenset({"tic_tac_toe"})

_values: dict[tuple[str, str], float] = {}


def value(state: pyspiel.State) -> float:
    """Player 0's return under perfect play by both from `state` (memoised by board position)."""
    key = (state.get_game().get_type().short_name, str(state))
    if key not in _values:
        if state.is_terminal():
            _values[key] = state.returns()[0]
        else:
            children = [_child_value(state, action) for action in state.legal_actions()]
            _values[key] = max(children) if state.current_player() == 0 else min(children)
    return _values[key]


def optimal_actions(state: pyspiel.State) -> list[int]:
    """The legal actions of the player to move whose value equals the state's value."""
    target = value(state)
    return [action for action in state.legal_actions() if _child_value(state, action) == target]


def policy(game: str) -> Callable[[TextGameEnv, str], dict[int, float]]:
    """Uniform over the optimal actions: (env, agent) -> action probabilities."""
    if game not in GAMES:
        raise ValueError(f"no minimax player for game {game!r}; available for: {sorted(GAMES)}")

    def action_probs(env: TextGameEnv, agent: str) -> dict[int, float]:
        best = optimal_actions(env.pyspiel_state)
        return dict.fromkeys(best, 1.0 / len(best))

    return action_probs


def _child_value(state: pyspiel.State, action: int) -> float:
    return value(state.child(action))
