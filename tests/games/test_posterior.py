"""The posterior over an opponent's private information: hand-computed cases, the oracle property, and a cross-check
against OpenSpiel's counterfactual reach probabilities."""

from __future__ import annotations

import random
from collections.abc import Mapping
from fractions import Fraction

import numpy as np
import pytest
from open_spiel.python import policy as openspiel_policy
from open_spiel.python.algorithms.best_response import BestResponsePolicy
from states import at  # this folder is on sys.path (no __init__.py)

import games
import games.posterior
from games.base import TextGameEnv
from games.kuhn_poker import BET, PASS
from games.leduc_poker import CALL, RAISE, sensible_model
from games.opponents import uniform_policy
from games.posterior import MAX_DEALS, Posterior, posterior, supports_posterior, table_policy


def assert_probabilities(found: Posterior, expected: Mapping[str, Fraction | float]) -> None:
    assert list(found.probabilities) == list(expected)
    for value, probability in expected.items():
        assert found.probability(value) == pytest.approx(float(probability))
    assert sum(found.probabilities.values()) == pytest.approx(1.0)


def kuhn_bettor(env: TextGameEnv, agent: str) -> dict[int, float]:
    """Always bets the King (card 2), a third of the time otherwise."""
    bet = 1.0 if env.card(agent) == 2 else 1 / 3
    return {BET: bet, PASS: 1 - bet}


# --- Kuhn poker --------------------------------------------------------------------------------------------------


def test_kuhn_after_a_bet() -> None:
    # Player 0 holds the King, player 1 (the observer) the Jack; player 0 bets.
    env = at("kuhn_poker", [2, 0, BET])
    found = posterior(env, "player_1", "player_0", kuhn_bettor)
    # Queen: 1/2 * 1/3, King: 1/2 * 1, normalised.
    assert_probabilities(found, {"queen": Fraction(1, 4), "king": Fraction(3, 4)})
    assert found.explained
    assert found.most_likely() == "king"
    assert found.expected_score(["king"]) == pytest.approx(0.75)
    assert found.expected_score(["queen"]) == pytest.approx(0.25)
    assert found.expected_score(["jack"]) == 0.0
    assert found.expected_score(["queen", "king"]) == pytest.approx(0.5)  # a hedge earns half of each
    assert found.expected_score([]) == 0.0


def test_kuhn_the_posterior_does_not_depend_on_the_real_card() -> None:
    # The same public history and observer card with player 0 holding the Queen instead.
    real_king = posterior(at("kuhn_poker", [2, 0, BET]), "player_1", "player_0", kuhn_bettor)
    real_queen = posterior(at("kuhn_poker", [1, 0, BET]), "player_1", "player_0", kuhn_bettor)
    assert real_queen == real_king


def test_kuhn_after_a_check() -> None:
    def policy(env: TextGameEnv, agent: str) -> dict[int, float]:
        bet = {0: 1 / 3, 1: 1 / 2, 2: 3 / 4}[env.card(agent)]
        return {BET: bet, PASS: 1 - bet}

    # Player 0 holds the Jack and checks; player 1 (the observer) holds the Queen.
    found = posterior(at("kuhn_poker", [0, 1, PASS]), "player_1", "player_0", policy)
    # Jack: 1/2 * 2/3, King: 1/2 * 1/4 -> 8/11, 3/11.
    assert_probabilities(found, {"jack": Fraction(8, 11), "king": Fraction(3, 11)})
    assert found.most_likely() == "jack"


def test_kuhn_the_second_player_seen_by_the_first() -> None:
    # Player 0 (the observer, Jack) checks and player 1 bets: the observer's own move does not count.
    env = at("kuhn_poker", [0, 1, PASS, BET])
    found = posterior(env, "player_0", "player_1", kuhn_bettor)
    assert_probabilities(found, {"queen": Fraction(1, 4), "king": Fraction(3, 4)})


def test_a_history_the_policy_never_plays_falls_back_to_the_prior() -> None:
    def never_bets(env: TextGameEnv, agent: str) -> dict[int, float]:
        return {PASS: 1.0, BET: 0.0}

    found = posterior(at("kuhn_poker", [2, 0, BET]), "player_1", "player_0", never_bets)
    assert not found.explained
    assert_probabilities(found, {"queen": 0.5, "king": 0.5})


def test_three_player_kuhn_marginalises_the_other_opponent() -> None:
    # Cards Jack < Queen < King < Ace (0-3). Player 0 (the observer) holds the Jack and checks, player 1 checks,
    # player 2 bets. Before any bet a player bets with probability 0, 1/3, 2/3, 1 by card.
    def policy(env: TextGameEnv, agent: str) -> dict[int, float]:
        bet = [0, 1 / 3, 2 / 3, 1][env.card(agent)]
        return {BET: bet, PASS: 1 - bet}

    env = at("kuhn_poker", [0, 1, 3, PASS, PASS, BET], players=3)
    # Weights of (player 1, player 2) cards, each deal 1/6: check by 1 times bet by 2.
    # (Q, K) 2/3*2/3 = 4/9, (Q, A) 2/3*1 = 6/9, (K, Q) 1/3*1/3 = 1/9, (K, A) 1/3*1 = 3/9, (A, _) 0; total 14/9.
    first = posterior(env, "player_0", "player_1", policy)
    assert first.probabilities == pytest.approx({"queen": 10 / 14, "king": 4 / 14, "ace": 0.0})
    second = posterior(env, "player_0", "player_2", policy)
    assert second.probabilities == pytest.approx({"king": 4 / 14, "ace": 9 / 14, "queen": 1 / 14})
    assert (first.most_likely(), second.most_likely()) == ("queen", "ace")
    # One policy per agent works the same.
    assert posterior(env, "player_0", "player_1", {"player_1": policy, "player_2": policy}) == first
    with pytest.raises(ValueError, match="no policy"):
        posterior(env, "player_0", "player_1", {"player_1": policy})


# --- Leduc poker -------------------------------------------------------------------------------------------------


def test_leduc_before_the_public_card() -> None:
    # Cards 0-5 are Jack, Jack, Queen, Queen, King, King. Player 0 holds a King (4), player 1 (the observer) a Jack
    # (0); player 0 raises first, with probability 1/4, 1/2, 1 for a Jack, Queen, King.
    def policy(env: TextGameEnv, agent: str) -> dict[int, float]:
        raise_ = [1 / 4, 1 / 2, 1.0][env.card(agent)]
        return {RAISE: raise_, CALL: 1 - raise_}

    found = posterior(at("leduc_poker", [4, 0, RAISE]), "player_1", "player_0", policy)
    # The observer's Jack leaves one Jack, two Queens, two Kings: 1/5 * 1/4, 2/5 * 1/2, 2/5 * 1 = 1/20, 4/20, 8/20.
    assert_probabilities(found, {"jack": Fraction(1, 13), "queen": Fraction(4, 13), "king": Fraction(8, 13)})


def test_leduc_warm_start_belief_is_the_likeliest_card_under_its_stated_model() -> None:
    # The model: half the heuristic rule (no bet yet: a Jack checks, a Queen or King raises), half uniform over
    # {call, raise}. So P(check | Jack) = 1/2 + 1/4 = 3/4 and P(check | Queen or King) = 1/4.
    start = at("leduc_poker", [4, 1])
    assert sensible_model(start, "player_0") == pytest.approx({CALL: 1 / 4, RAISE: 3 / 4})
    # Player 1 holds a Jack (card 1), so one Jack, two Queens, two Kings are left; player 0 checks:
    # 1/5 * 3/4 = 3/20 for a Jack against 2/5 * 1/4 = 2/20 for a Queen and for a King.
    why, guess = at("leduc_poker", [4, 1, CALL]).guess_private_info("player_1", 0, random.Random(0))
    assert guess == "Jack" and "checking" in why
    # Player 1 holds a King (card 4): two Jacks, two Queens, one King left; player 0 raises:
    # 2/5 * 1/4 for a Jack, 2/5 * 3/4 for a Queen, 1/5 * 3/4 for a King.
    why, guess = at("leduc_poker", [0, 4, RAISE]).guess_private_info("player_1", 0, random.Random(0))
    assert guess == "Queen" and "raise" in why
    # Before the opponent moves, player 0 with a King (card 4): a Jack and a Queen are equally likely (2/5 each);
    # ties are broken by the rng, never towards the less likely King.
    guesses = {start.guess_private_info("player_0", 1, random.Random(seed))[1] for seed in range(20)}
    assert guesses == {"Jack", "Queen"}


def test_leduc_after_the_public_card() -> None:
    # Player 0 holds a King (5), player 1 (the observer) a Jack (0); both check, the public card is a Queen (2), and
    # player 0 raises. Player 0 checks in round one; in round two it raises a pair always, a King a quarter of the time,
    # a Jack never.
    def policy(env: TextGameEnv, agent: str) -> dict[int, float]:
        card, public = env.card(agent), env.public_card()
        if public is None:
            return {CALL: 1.0}
        raise_ = 1.0 if card == public else [0.0, 0.0, 1 / 4][card]
        return {RAISE: raise_, CALL: 1 - raise_}

    env = at("leduc_poker", [5, 0, CALL, CALL, 2, RAISE])
    assert env.public_card() == 1
    found = posterior(env, "player_1", "player_0", policy)
    # Unseen: one Jack, one Queen, two Kings: 1/4 * 0, 1/4 * 1, 1/2 * 1/4 -> 0, 2/3, 1/3.
    assert_probabilities(found, {"jack": 0.0, "queen": Fraction(2, 3), "king": Fraction(1, 3)})
    assert found.most_likely() == "queen"


# --- Liar's dice -------------------------------------------------------------------------------------------------


def bid(count: int, face: int, sides: int = 6) -> int:
    return (count - 1) * sides + face - 1


def test_liars_dice_one_bid() -> None:
    # Player 0 opens by bidding one of its own face half of the time, otherwise "1 five".
    def policy(env: TextGameEnv, agent: str) -> dict[int, float]:
        face = env.dice(agent)[0]
        probs = {bid(1, face): 0.5}
        probs[bid(1, 5)] = probs.get(bid(1, 5), 0.0) + 0.5
        return probs

    # Player 0 rolled a 3, player 1 (the observer) a 2; player 0 bids "1 five". Faces: 5 has likelihood 1, others
    # 1/2; the observer's die does not constrain player 0's.
    env = at("liars_dice", [2, 1, bid(1, 5)])
    assert env.action_name(bid(1, 5)) == "bid 1 five"
    found = posterior(env, "player_1", "player_0", policy)
    expected = {face: Fraction(1, 7) for face in "1234"} | {"5": Fraction(2, 7), "6": Fraction(1, 7)}
    assert_probabilities(found, expected)
    assert found.most_likely() == "5"
    # The observer holding a five changes nothing.
    assert posterior(at("liars_dice", [2, 4, bid(1, 5)]), "player_1", "player_0", policy) == found


def test_liars_dice_several_dice_name_the_multiset() -> None:
    env = at("liars_dice", [0, 1, 2, 3, bid(1, 4)], numdice=2)
    found = posterior(env, "player_1", "player_0", uniform_policy)
    assert found.probability("1 2") == pytest.approx(2 / 36)
    assert found.probability("3 3") == pytest.approx(1 / 36)
    assert len(found.probabilities) == 21
    assert games.belief_values("liars_dice")(env.private_info("player_0")) == ("1", "2")
    # A claim of one die: half of each die pair containing it.
    assert found.expected_score(["6"]) == pytest.approx(sum(
        p * (0.5 if "6" in value.split() else 0.0) for value, p in found.probabilities.items()
    ))


# --- scope and errors --------------------------------------------------------------------------------------------


def test_supported_games() -> None:
    supported = {name for name in games.names() if supports_posterior(games.make(name))}
    assert supported == {"kuhn_poker", "leduc_poker", "liars_dice"}
    with pytest.raises(ValueError, match="no exact posterior"):
        posterior(games.make("tic_tac_toe"), "player_0", "player_1", uniform_policy)


def test_bad_agents_and_too_many_deals(monkeypatch: pytest.MonkeyPatch) -> None:
    env = at("kuhn_poker", [2, 0, BET])
    with pytest.raises(ValueError, match="two different agents"):
        posterior(env, "player_1", "player_1", kuhn_bettor)
    assert 6 ** 6 <= MAX_DEALS < 6 ** 8  # Liar's dice with three dice each, not four
    monkeypatch.setattr(games.posterior, "MAX_DEALS", 6 ** 4 - 1)
    with pytest.raises(ValueError, match="deals to enumerate"):
        posterior(at("liars_dice", [0, 1, 2, 3, bid(1, 4)], numdice=2), "player_1", "player_0", uniform_policy)


# --- the oracle property and the cross-check ---------------------------------------------------------------------


@pytest.mark.parametrize(("name", "options"), [
    ("kuhn_poker", {}), ("kuhn_poker", {"players": 3}), ("leduc_poker", {}), ("liars_dice", {}),
])
def test_the_most_likely_value_scores_best(name: str, options: dict) -> None:
    rng = random.Random(0)
    checked = 0
    for seed in range(12):
        env = games.make(name, **options)
        env.reset(seed=seed)
        while not env.finished():
            observer = env.agent_selection
            for target in env.possible_agents:
                if target == observer:
                    continue
                found = posterior(env, observer, target, uniform_policy)
                best = found.expected_score([found.most_likely()])
                assert best == pytest.approx(max(found.probabilities.values()))
                assert all(found.expected_score([value]) <= best + 1e-12 for value in found.probabilities)
                assert found.expected_score(list(found.probabilities)[:2]) <= best + 1e-12
                checked += 1
            env.step(rng.choice(env.legal_actions()))
    assert checked > 12


def random_tabular_policy(game: object, seed: int) -> openspiel_policy.TabularPolicy:
    table = openspiel_policy.TabularPolicy(game)
    weights = np.random.default_rng(seed).random(table.action_probability_array.shape) * table.legal_actions_mask
    table.action_probability_array[:] = weights / weights.sum(axis=1, keepdims=True)
    return table


@pytest.mark.parametrize(("name", "options", "stride"), [
    ("kuhn_poker", {}, 1), ("kuhn_poker", {"players": 3}, 1), ("leduc_poker", {}, 10),
])
def test_agrees_with_openspiel_counterfactual_reach(name: str, options: dict, stride: int) -> None:
    """At the observer's decision nodes, OpenSpiel's counterfactual reach probabilities (chance times the others'
    policies) grouped by the target's card and normalised are the posterior."""
    env = games.make(name, **options)
    game = env.pyspiel_state.get_game()
    table = random_tabular_policy(game, seed=len(name) + game.num_players())
    agents = env.possible_agents

    def policy(scratch: TextGameEnv, agent: str) -> dict[int, float]:
        return table.action_probabilities(scratch.pyspiel_state, agents.index(agent))

    read_card = games.belief_values(name)
    for observer in range(game.num_players()):
        infosets = BestResponsePolicy(game, observer, table).infosets
        for key in sorted(infosets)[::stride]:
            nodes = infosets[key]
            env.load_state(nodes[0][0])
            for target in range(game.num_players()):
                if target == observer:
                    continue
                reach: dict[str, float] = {}
                for state, probability in nodes:
                    scratch = at(name, state.history(), **options)
                    card = read_card(scratch.private_info(agents[target]))[0]
                    reach[card] = reach.get(card, 0.0) + probability
                total = sum(reach.values())
                expected = {card: weight / total for card, weight in reach.items()}
                found = posterior(env, agents[observer], agents[target], policy)
                assert found.probabilities == pytest.approx(expected, abs=1e-9), key


def test_table_policy_reads_the_information_state() -> None:
    env = at("kuhn_poker", [2, 0, BET])
    table = {"0": {PASS: 2 / 3, BET: 1 / 3}, "1": {PASS: 2 / 3, BET: 1 / 3}, "2": {BET: 1.0}}
    found = posterior(env, "player_1", "player_0", table_policy(table))
    assert found.probabilities == pytest.approx({"queen": 0.25, "king": 0.75})
