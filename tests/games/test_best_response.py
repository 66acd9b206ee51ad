"""The exact best response to a policy table (`games.best_response`): moves worked out by hand against a player who
always bets, and, on random tables of Kuhn and Leduc poker, best-response values that add up to OpenSpiel's NashConv
(an independent reference)."""

from __future__ import annotations

import random

import pyspiel
import pytest
from open_spiel.python import policy as spiel_policy
from open_spiel.python.algorithms.exploitability import nash_conv

from games.best_response import available, best_response
from games.openspiel_env import load_game
from strat.eval.exploitability import decision_states, env_at

PASS, BET = 0, 1


def _decisions(name: str) -> dict[str, pyspiel.State]:
    """One state per information state of `name` (the evaluator's walk of the tree)."""
    return {key: state for key, _, state in decision_states(name, ())}


def _at(name: str, state: pyspiel.State):
    return env_at(name, {}, state)


def test_against_a_player_who_always_bets_by_hand() -> None:
    always_bet = {key: {BET: 1.0} for key in _decisions("kuhn_poker")}
    respond = best_response("kuhn_poker", always_bet)
    moves = {key: max(respond(*_at("kuhn_poker", state)).items(), key=lambda kv: kv[1])[0]
             for key, state in _decisions("kuhn_poker").items()}
    # Second to act, facing the bet: the Jack loses a call to either card (fold, -1); the Queen's call wins 2 against
    # the Jack and loses 2 to the King (0 > -1: call); the King's call wins 2.
    assert (moves["0b"], moves["1b"], moves["2b"]) == (PASS, BET, BET)
    # First to act: the bet always comes, so checking then answering it is worth what betting into the call is, or
    # more: the Jack checks and folds (-1, where betting loses 2); the Queen and the King are even and check (ties
    # go to the lowest action); after check-bet the Jack folds, the Queen and the King call.
    assert (moves["0"], moves["1"], moves["2"]) == (PASS, PASS, PASS)
    assert (moves["0pb"], moves["1pb"], moves["2pb"]) == (PASS, BET, BET)


def _values(game: pyspiel.Game, policies: list) -> list[float]:
    """Each player's expected return when player p plays `policies[p]` (env-free: state -> {action: prob})."""

    def walk(state: pyspiel.State) -> list[float]:
        if state.is_terminal():
            return state.returns()
        outcomes = state.chance_outcomes() if state.is_chance_node() else \
            policies[state.current_player()](state).items()
        total = [0.0] * game.num_players()
        for action, p in outcomes:
            if p:
                for player, value in enumerate(walk(state.child(action))):
                    total[player] += p * value
        return total

    return walk(game.new_initial_state())


@pytest.mark.parametrize("name", ["kuhn_poker", "leduc_poker"])
def test_best_response_values_add_up_to_openspiels_nash_conv(name: str) -> None:
    game = load_game(name, {})
    rng = random.Random(3)
    table = {}
    for key, state in _decisions(name).items():
        weights = [rng.random() for _ in state.legal_actions()]
        table[key] = {action: w / sum(weights) for action, w in zip(state.legal_actions(), weights)}
    respond = best_response(name, table)
    tabled = lambda state: table[state.information_state_string(state.current_player())]  # noqa: E731
    cache: dict[str, dict[int, float]] = {}

    def responding(state: pyspiel.State) -> dict[int, float]:
        key = state.information_state_string(state.current_player())
        if key not in cache:
            cache[key] = respond(*_at(name, state))
        return cache[key]

    on_policy = _values(game, [tabled, tabled])
    gains = [_values(game, [responding if p == player else tabled for p in range(2)])[player] - on_policy[player]
             for player in range(2)]
    reference = spiel_policy.TabularPolicy(game)
    for key, row in reference.state_lookup.items():
        reference.action_probability_array[row] = 0.0
        for action, p in table[key].items():
            reference.action_probability_array[row][action] = p
    assert sum(gains) == pytest.approx(nash_conv(game, reference), abs=1e-9)
    assert all(gain >= -1e-12 for gain in gains)


def test_states_missing_from_the_table_are_played_uniformly() -> None:
    empty = best_response("kuhn_poker", {})
    keys = _decisions("kuhn_poker")
    uniform = best_response("kuhn_poker", {key: {PASS: 0.5, BET: 0.5} for key in keys})
    for state in keys.values():
        assert empty(*_at("kuhn_poker", state)) == uniform(*_at("kuhn_poker", state))


@pytest.mark.parametrize(("name", "options"), [("tic_tac_toe", {}), ("kuhn_poker", {"players": 3})])
def test_games_whose_tree_is_not_walked_are_refused(name: str, options: dict) -> None:
    assert not available(name, **options)
    with pytest.raises(ValueError, match="no exact best response"):
        best_response(name, {}, **options)
