"""Game states for tests, reached by replaying a pyspiel history."""

from __future__ import annotations

import games
from games.base import TextGameEnv


def at(name: str, history: list[int], **options: int) -> TextGameEnv:
    """An env of `name` at the pyspiel history `history` (chance outcomes and moves as action ids)."""
    env = games.make(name, **options)
    state = env.pyspiel_state.get_game().new_initial_state()
    for action in history:
        state.apply_action(action)
    env.load_state(state)
    return env
