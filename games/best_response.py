"""The exact best response to a policy table: the exploiter a policy would face if an opponent knew its strategy.

A policy is given as a table {OpenSpiel information-state string: {action: probability}}, as the training loop
estimates it from the trained policy's own moves; states the table does not hold are played uniformly at random.
Each player's best response against the table (every other player following it) is computed on the game tree by
OpenSpiel's `BestResponsePolicy`, so it is exact for the games whose whole tree Strat walks
(`GameSpec.exploitable`: two-player Kuhn and Leduc poker).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

import pyspiel
from open_spiel.python import policy as spiel_policy
from open_spiel.python.algorithms.best_response import BestResponsePolicy

from games.base import TextGameEnv
from games.openspiel_env import OptionValue, load_game
from games.registry import spec

PolicyTable = Mapping[str, Mapping[int, float]]
"""{information-state string: {action: probability}}; missing states are uniform over the legal actions."""


def available(game: str, **options: OptionValue) -> bool:
    """Whether the best response of `game` with `options` can be computed exactly (its tree is walked whole)."""
    return spec(game, **options).exploitable


class _TablePolicy(spiel_policy.Policy):
    """An OpenSpiel policy read from a table, uniform where the table has no entry."""

    def __init__(self, game: pyspiel.Game, table: PolicyTable) -> None:
        super().__init__(game, list(range(game.num_players())))
        self._table = table

    def action_probabilities(self, state: pyspiel.State, player_id: int | None = None) -> dict[int, float]:
        player = state.current_player() if player_id is None else player_id
        legal = state.legal_actions(player)
        probs = self._table.get(state.information_state_string(player))
        total = sum(p for action, p in (probs or {}).items() if action in legal)
        if not probs or total <= 0:
            return dict.fromkeys(legal, 1.0 / len(legal))
        return {action: probs.get(action, 0.0) / total for action in legal}


def best_response(game: str, table: PolicyTable,
                  **options: OptionValue) -> Callable[[TextGameEnv, str], dict[int, float]]:
    """The action probabilities of the pure best response to `table` at any decision of `game`: the acting player
    best-responds to every other player following `table` (ties go to the lowest action id). Raises ValueError for a
    game whose tree Strat does not walk (`available`)."""
    if not available(game, **options):
        described = f"{game!r} with {dict(options)}" if options else repr(game)
        raise ValueError(f"no exact best response for {described}: its game tree is not walked whole "
                         "(two-player Kuhn and Leduc poker are)")
    spiel_game = load_game(game, dict(options))
    against = _TablePolicy(spiel_game, table)
    responses: dict[int, BestResponsePolicy] = {}

    def action_probs(env: TextGameEnv, agent: str) -> dict[int, float]:
        player = env.pyspiel_state.current_player()
        if player not in responses:
            responses[player] = BestResponsePolicy(spiel_game, player, against)
        return {responses[player].best_response_action(env.info_state_string(agent)): 1.0}

    return action_probs
