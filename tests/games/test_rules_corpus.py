"""The rules corpus: hand-checked examples, hand-computed posteriors, determinism, equal shares of kinds, and that every
target is re-derived from its state as the allowed kind of answer, never a move a player chose."""

from __future__ import annotations

import re
from collections import Counter
from functools import cache

import pytest
from states import at  # this folder is on sys.path (no __init__.py)

import games
from games.kuhn_poker import BET, PASS
from games.opponents import make_opponent, opponent_names, uniform_policy
from games.posterior import Policy, posterior
from games.rules_corpus import (
    KINDS,
    DrawnExample,
    StatedPolicy,
    drawn_examples,
    kinds_for,
    legal_moves_example,
    next_state_example,
    posterior_example,
    rules_corpus,
    stated_policies,
)
from games.tic_tac_toe import cell_name


def stated(name: str, player: str) -> StatedPolicy:
    return next(policy for policy in stated_policies(name) if policy.name == player)


@cache
def drawn(name: str, options: tuple[tuple[str, int], ...], n_examples: int = 40) -> tuple[DrawnExample, ...]:
    """A corpus with its states, generated once per game for the tests that read it."""
    return tuple(drawn_examples(name, n_examples, seed=5, **dict(options)))


# --- hand-checked examples ---------------------------------------------------------------------------------------


def test_tic_tac_toe_legal_moves_and_next_state() -> None:
    env = games.make("tic_tac_toe")
    for action in (4, 0, 8):  # X b2, O a1, X c3; O to play
        env.step(action)
    legal = legal_moves_example(env, "player_1")
    assert legal.kind == "legal_moves"
    assert legal.question == "Which moves are legal now?"
    assert legal.answer == "b1, c1, a2, c2, a3, b3"
    assert (legal.observation, legal.history) == (env.observation_text("player_1"), env.history_text("player_1"))

    after = next_state_example(env, "player_1", 2)
    assert after is not None and after.question == "What will you see after you play c1?"
    assert after.answer == (
        "You are player 1 and play O. The board (. is empty):\n"
        "  a b c\n"
        "1 O . O\n"
        "2 . X .\n"
        "3 . . X\n"
        "\n"
        "Your opponent played b2.\n"
        "You played a1.\n"
        "Your opponent played c3.\n"
        "You played c1."
    )
    assert env.legal_action_names("player_1") == [cell_name(a) for a in (1, 2, 3, 5, 6, 7)]  # env not stepped


def test_a_move_that_ends_the_game_is_kept_and_a_chance_outcome_is_not() -> None:
    kuhn = at("kuhn_poker", [0, 2, BET])  # player 1 holds the King and faces a bet
    called = next_state_example(kuhn, "player_1", BET)
    assert called is not None and called.answer.startswith("You are player 1. You hold the King. The pot has 4 chips.")
    assert "The hand is over." in called.answer
    leduc = at("leduc_poker", [0, 4, 1])  # Leduc: a Jack and a King dealt, player 0 checked
    assert next_state_example(leduc, "player_1", 1) is None  # checking back deals the public card


# Kuhn poker for two: player 1 (the observer) holds a card and player 0 has bet. Player 0's card is each of the two
# others with chance 1/2, so the posterior is proportional to the stated policy's probability of the bet with it.
@pytest.mark.parametrize(("player", "card", "answer"), [
    # Uniform: a bet is 1/2 with any card, so the posterior is the prior.
    ("uniform", 0, "Queen: 0.50, King: 0.50"),
    # Timid: bets 1 time in 10 with the Jack, half the time with the King: 0.1 / 0.6 = 1/6, 0.5 / 0.6 = 5/6.
    ("timid", 1, "Jack: 0.17, King: 0.83"),
    # Contrarian: leans to bet the Jack (3/4) and to check the Queen (a bet 1/4): 0.75 and 0.25.
    ("contrarian", 2, "Jack: 0.75, Queen: 0.25"),
    # Heuristic: bets only the Queen or the King; with the King in the observer's hand the bettor holds the Queen.
    ("heuristic", 2, "Jack: 0.00, Queen: 1.00"),
])
def test_kuhn_posterior_by_hand(player: str, card: int, answer: str) -> None:
    other = 0 if card else 1  # any card but the observer's: the deal of player 0 does not change the answer
    env = at("kuhn_poker", [other, card, BET])
    example = posterior_example(env, "player_1", "player_0", stated("kuhn_poker", player))
    assert example is not None and example.kind == "posterior"
    assert example.answer == answer
    assert "player 0's private information" in example.question
    assert example.observation == env.observation_text("player_1")


def test_kuhn_posterior_question_states_the_policy() -> None:
    env = at("kuhn_poker", [0, 1, PASS])
    uniform = posterior_example(env, "player_1", "player_0", stated("kuhn_poker", "uniform"))
    timid = posterior_example(env, "player_1", "player_0", stated("kuhn_poker", "timid"))
    assert uniform is not None and timid is not None
    assert uniform.question == ("Suppose every other player chooses uniformly at random among its legal moves. "
                                "How likely is each possible value of player 0's private information?")
    assert "timid player: A timid player who" in timid.question and "one time in ten with the lowest" in timid.question
    # Timid checks the Jack 9 times in 10 and the King half the time: 0.9 / 1.4 and 0.5 / 1.4.
    assert timid.answer == "Jack: 0.64, King: 0.36"


def test_stated_policies_are_uniform_and_the_documented_scripted_players() -> None:
    assert [p.name for p in stated_policies("kuhn_poker")] == ["uniform", "heuristic", "contrarian", "timid"]
    assert [p.name for p in stated_policies("liars_dice")] == ["uniform", "heuristic", "contrarian", "timid", "truthful"]
    assert [p.name for p in stated_policies("leduc_poker")] == ["uniform", "heuristic", "contrarian", "timid"]


# --- the corpus --------------------------------------------------------------------------------------------------


def test_kinds_for_each_game() -> None:
    assert kinds_for("kuhn_poker") == KINDS
    assert kinds_for("kuhn_poker", players=3) == KINDS
    assert kinds_for("leduc_poker") == KINDS
    assert kinds_for("liars_dice") == KINDS
    assert kinds_for("bargaining") == ("legal_moves", "next_state", "own_info")
    assert kinds_for("tic_tac_toe") == ("legal_moves", "next_state")
    assert kinds_for("connect_four") == ("legal_moves", "next_state")


@pytest.mark.parametrize(("name", "kind"), [("tic_tac_toe", "posterior"), ("connect_four", "own_info"),
                                            ("bargaining", "posterior"), ("kuhn_poker", "strategy")])
def test_an_unsupported_kind_is_refused(name: str, kind: str) -> None:
    with pytest.raises(ValueError, match=f"{name}.*{kind}"):
        rules_corpus(name, 4, kinds=[kind])  # type: ignore[list-item]


def test_the_same_seed_gives_the_same_corpus() -> None:
    for name in ("kuhn_poker", "tic_tac_toe", "leduc_poker"):
        assert rules_corpus(name, 16, seed=3) == rules_corpus(name, 16, seed=3)
        assert rules_corpus(name, 16, seed=3) != rules_corpus(name, 16, seed=4)


def test_kinds_come_in_equal_shares_in_turn() -> None:
    corpus = rules_corpus("kuhn_poker", 12, seed=1)
    assert Counter(example.kind for example in corpus) == dict.fromkeys(KINDS, 3)
    asked = rules_corpus("liars_dice", 7, seed=1, kinds=["posterior", "legal_moves"])
    assert [example.kind for example in asked] == ["posterior", "legal_moves"] * 3 + ["posterior"]
    assert Counter(example.kind for example in rules_corpus("tic_tac_toe", 9)) == {"legal_moves": 5, "next_state": 4}


def test_every_game_makes_a_corpus(config: tuple[str, dict]) -> None:
    name, options = config
    corpus = [d.example for d in drawn(name, tuple(options.items()))]
    assert len(corpus) == 40
    shares = Counter(example.kind for example in corpus)
    assert set(shares) == set(kinds_for(name, **options)) and max(shares.values()) - min(shares.values()) <= 1
    assert all(example.question and example.answer and example.observation for example in corpus)


def test_examples_show_the_state_as_the_game_does(config: tuple[str, dict]) -> None:
    name, options = config
    for d in drawn(name, tuple(options.items())):
        assert d.example.observation == d.env.observation_text(d.agent)
        assert d.example.history == d.env.history_text(d.agent)
        assert d.example.observation not in d.example.question
        if d.example.kind == "own_info":
            assert d.example.answer == d.env.private_info(d.agent) != ""
        if d.example.kind in ("legal_moves", "next_state", "posterior"):
            assert d.agent == d.env.agent_selection  # the agent to act


def test_own_info_comes_from_any_seat() -> None:
    seats = {d.agent for d in drawn("kuhn_poker", (("players", 3),)) if d.example.kind == "own_info"}
    assert seats == {"player_0", "player_1", "player_2"}


# --- every target is a rule, never a choice ----------------------------------------------------------------------

_MOVE = re.compile(r"What will you see after you play (.+)\?")
_TARGET = re.compile(r"How likely is each possible value of player (\d+)'s private information\?$")
_PLAYER = re.compile(r"plays as the (\w+) player: ")


def rederived(d: DrawnExample, name: str, options: dict) -> str:
    """The answer to the example's question derived from its state here, apart from the module's code."""
    env, agent, question = d.env, d.agent, d.example.question
    if d.example.kind == "legal_moves":
        return ", ".join(env.action_name(action) for action in env.legal_actions(agent))
    if d.example.kind == "own_info":
        return env.private_info(agent)
    if d.example.kind == "next_state":
        move = _MOVE.fullmatch(question)
        assert move is not None, question
        after = env.clone()
        after.step(env.action_from_name(move.group(1), agent))
        return f"{after.observation_text(agent)}\n\n{after.history_text(agent)}"
    target, player = _TARGET.search(question), _PLAYER.search(question)
    assert target is not None, question
    policy: Policy = uniform_policy if player is None else make_opponent(player.group(1), name, **options).action_probs
    found = posterior(env, agent, f"player_{target.group(1)}", policy)
    assert found.explained
    return ", ".join(f"{value.capitalize() if value.isalpha() else value}: {p:.2f}"
                     for value, p in found.probabilities.items())


def test_targets_are_never_move_choices(config: tuple[str, dict]) -> None:
    name, options = config
    names = set(games.make(name, **options).all_action_names())
    for d in drawn(name, tuple(options.items())):
        assert d.example.answer == rederived(d, name, options), d.example
        if d.example.answer in names:  # a single move name is a target only as the one legal move
            assert d.example.kind == "legal_moves" and d.env.legal_action_names(d.agent) == [d.example.answer]


def test_the_scripted_players_play_in_the_corpus() -> None:
    assert {"heuristic", "contrarian", "timid"} <= set(opponent_names("kuhn_poker"))
    questions = [d.example.question for d in drawn("kuhn_poker", ()) if d.example.kind == "posterior"]
    assert any("uniformly" in q for q in questions) and any("player:" in q for q in questions)
