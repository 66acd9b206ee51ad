"""The text interface: parsing, names, observations without leaks, history, corpus."""

from __future__ import annotations

import random
from collections.abc import Iterator

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import games
from games.base import TextGameEnv
from games.cards import rank_names
from games.parsing import normalize


def phrasings(name: str) -> list[str]:
    """Ways a model might write action `name`."""
    return [
        name,
        name.upper(),
        f"  {name.title()}  ",
        f"I will {name}.",
        f"After thinking it over, my move is: {name}! That is final.",
        f"<action>{name}</action>",
        f"**{name}**\n",
    ]


def decision_points(name: str, options: dict, n_games: int, seed: int = 0) -> Iterator[TextGameEnv]:
    """The env at every decision of `n_games` random games."""
    env = games.make(name, **options)
    rng = random.Random(seed)
    for game in range(n_games):
        env.reset(seed=game)
        for _ in env.turns():
            yield env
            env.step(rng.choice(env.legal_actions()))


def test_action_names_are_unique_after_normalization(config):
    name, options = config
    env = games.make(name, **options)
    names = env.all_action_names()
    assert len({normalize(n) for n in names}) == len(names)
    # One name per action id, unless the game names a move by its situation (Kuhn's `move_names: situational`).
    assert len(names) >= env.action_space("player_0").n
    assert all(n == n.lower() and n.strip() == n for n in names)


def test_parse_round_trip(config):
    name, options = config
    for env in decision_points(name, options, n_games=30):
        agent = env.agent_selection
        legal = env.legal_actions()
        assert env.legal_action_names() == [env.action_name(a) for a in legal]
        for action in legal:
            action_name = env.action_name(action, agent)
            assert env.action_from_name(action_name, agent) == action
            for text in phrasings(action_name):
                assert env.parse_action(text, agent) == action, text
                assert env.parse_action(text) == action, text


def test_parse_rejects_illegal_unknown_and_ambiguous(config):
    name, options = config
    for env in decision_points(name, options, n_games=10):
        agent = env.agent_selection
        legal = env.legal_actions()
        illegal = [a for a in range(env.action_space(agent).n) if a not in legal]
        for action in illegal:
            assert env.parse_action(env.action_name(action), agent) is None
        assert env.parse_action("xyzzy", agent) is None
        assert env.parse_action("", agent) is None
        if len(legal) >= 2:
            both = f"{env.action_name(legal[0])} or {env.action_name(legal[1])}"
            assert env.parse_action(both, agent) is None
        other = next(a for a in env.possible_agents if a != agent)
        assert env.legal_actions(other) == []
        assert env.parse_action(env.action_name(legal[0]), other) is None


@settings(max_examples=300, deadline=None)
@given(text=st.text(max_size=200), game=st.sampled_from(games.names()), moves=st.integers(0, 5))
def test_parse_never_raises(text, game, moves):
    env = games.make(game)
    env.reset(seed=moves)
    for _ in range(moves):
        if env.terminations[env.agent_selection]:
            break
        env.step(env.legal_actions()[0])
    for agent in env.possible_agents:
        action = env.parse_action(text, agent)
        assert action is None or action in env.legal_actions(agent)


def test_kuhn_observation_is_friendly():
    env = games.make("kuhn_poker")
    # Deal: player 0 the King, player 1 the Jack; player 0 passes, player 1 bets ('2pb').
    state = env.pyspiel_state.get_game().new_initial_state()
    for action in (2, 0, 0, 1):
        state.apply_action(action)
    env.load_state(state)
    assert env.info_state_string("player_0") == "2pb"
    assert "You hold the King. Your opponent bet." in env.observation_text("player_0")
    assert env.history_text("player_0") == "You checked.\nYour opponent bet."
    assert env.history_text("player_1") == "Your opponent checked.\nYou bet."
    assert env.private_info("player_0") == "King"
    assert env.private_info("player_1") == "Jack"


def test_history_is_empty_at_start(config):
    name, options = config
    env = games.make(name, **options)
    env.reset(seed=0)
    assert all(env.history_text(agent) == "" for agent in env.possible_agents)


def test_observations_do_not_leak_private_cards():
    for name, options in [("kuhn_poker", {}), ("kuhn_poker", {"players": 3}), ("leduc_poker", {})]:
        for env in decision_points(name, options, n_games=100):
            public = env.public_card() if name == "leduc_poker" else None
            for agent in env.possible_agents:
                seen = env.observation_text(agent) + env.history_text(agent)
                mine = env.private_info(agent)
                for other in env.possible_agents:
                    if other == agent:
                        continue
                    card = env.private_info(other)
                    if card != mine and (public is None or card != rank_names(3)[public]):
                        assert card not in seen, (agent, other, seen)


def test_liars_dice_and_bargaining_private_info():
    env = games.make("liars_dice")
    env.reset(seed=0)
    dice = env.private_info("player_0").split()
    assert len(dice) == 1 and 1 <= int(dice[0]) <= 6
    assert f"Your die shows {dice[0]}." in env.observation_text("player_0")
    env = games.make("bargaining")
    env.reset(seed=0)
    values = env.values("player_1")
    assert env.private_info("player_1") == f"book {values[0]} hat {values[1]} ball {values[2]}"
    assert sum(q * v for q, v in zip(env.pool(), values)) == 10


def test_perfect_information_games_have_no_private_info():
    for name in ("tic_tac_toe", "connect_four"):
        env = games.make(name)
        assert env.private_info("player_0") == env.private_info("player_1") == ""


def test_text_corpus_is_deterministic_and_complete(config):
    name, options = config
    corpus = games.text_corpus(name, n_games=20, seed=1, **options)
    assert corpus == games.text_corpus(name, n_games=20, seed=1, **options)
    env = games.make(name, **options)
    assert corpus[0] == env.rules()
    assert set(env.all_action_names()) <= set(corpus)
    assert "" not in corpus and len(corpus) == len(set(corpus))


@pytest.mark.parametrize("name", games.names())
def test_rules_mention_every_kind_of_action(name):
    env = games.make(name)
    rules = env.rules().lower()
    assert len(rules) > 200
    for action_name in env.all_action_names()[:1] + env.all_action_names()[-1:]:
        first_word = action_name.split()[0]
        assert first_word in rules
