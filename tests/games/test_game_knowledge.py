"""What Strat asks a game instead of knowing it by name: whether its exploitability is computable (for its player
count), how a belief about others' private information is read, and the warm start's templated guesses and
readings."""

from __future__ import annotations

import random

import pytest

import games
from strat.eval.evaluation import evaluate_policy
from strat.eval.exploitability import estimate_exploitability, exact_exploitability, exploitable, scripted_sampler
from strat.eval.policies import ScriptedPolicy

PRIVATE_INFORMATION = ("kuhn_poker", "leduc_poker", "liars_dice", "bargaining")


@pytest.mark.parametrize(("game", "options", "expected"), [
    ("kuhn_poker", {}, True),
    ("kuhn_poker", {"players": 3}, False),
    ("leduc_poker", {}, True),
    ("tic_tac_toe", {}, False),
    ("liars_dice", {}, False),
    ("bargaining", {}, False),
])
def test_exploitability_is_a_fact_of_the_game_as_configured(game: str, options: dict, expected: bool) -> None:
    assert games.spec(game, **options).exploitable is expected
    assert exploitable(game, options) is expected


def test_three_player_kuhn_gets_no_exploitability_figure() -> None:
    options = {"players": 3}
    policy = ScriptedPolicy("random", "kuhn_poker", options)
    report, _ = evaluate_policy(policy, ["random"], num_games=6, seed=0, samples_per_infoset=4, bootstrap=10)
    assert report.exploitability is None
    assert report.matches[0].games == 6
    with pytest.raises(ValueError, match="two-player"):
        exact_exploitability("kuhn_poker", policy.action_probs, options)
    with pytest.raises(ValueError, match="two-player"):
        estimate_exploitability("kuhn_poker", scripted_sampler(policy.action_probs), 4, options=options)


def test_two_player_kuhn_still_gets_one() -> None:
    report, _ = evaluate_policy(ScriptedPolicy("random", "kuhn_poker"), ["random"], num_games=2, seed=0, bootstrap=10)
    assert report.exploitability is not None
    assert report.exploitability.value == pytest.approx(0.4583333, abs=1e-6)  # uniform play, as OpenSpiel has it


def test_beliefs_are_read_by_the_game() -> None:
    assert games.belief_values("kuhn_poker")("I think they hold the Kings, not a jack") == ("king", "jack")
    assert games.belief_values("leduc_poker")("a Queen") == ("queen",)
    assert games.belief_values("liars_dice")("two sixes and a 3") == ("2", "6", "3")
    assert games.belief_values("bargaining")("books 2, a hat 0") == ("book=2", "hat=0")
    assert games.belief_values("tic_tac_toe") is None
    with pytest.raises(ValueError, match="unknown game"):
        games.belief_values("chess")


@pytest.mark.parametrize("game", games.names())
def test_every_private_information_game_has_warm_start_guesses_and_readings(game: str) -> None:
    env = games.make(game)
    env.reset(seed=3)
    rng = random.Random(0)
    for agent in env.turns():
        seat = 1 - env.possible_agents.index(agent)
        guess = env.guess_private_info(agent, seat, rng)
        if game in PRIVATE_INFORMATION:
            why, value = guess
            assert why.endswith(".") and value
        else:
            assert guess is None
        action = env.legal_actions(agent)[0]
        assert env.move_reading(agent, action)
        env.step(action)
    assert env.finished()
