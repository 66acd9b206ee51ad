"""The AEC adapter: PettingZoo's API test, rewards against pyspiel, seeding, clone, registry."""

from __future__ import annotations

import functools
import random

import pytest
from pettingzoo.test import api_test, seed_test

import games
from games.base import TextGameEnv

RANDOM_GAMES = 1000


def play_randomly(
    env: TextGameEnv, rng: random.Random
) -> tuple[dict[str, float], dict[str, float]]:
    """Play one game; return (sum of env.rewards, sum of rewards reported by last())."""
    summed = dict.fromkeys(env.possible_agents, 0.0)
    from_last = dict.fromkeys(env.possible_agents, 0.0)
    for steps, agent in enumerate(env.agent_iter()):
        assert steps < 1000, "game did not end"
        _, reward, terminated, truncated, _ = env.last(observe=False)
        from_last[agent] += reward
        env.step(None if terminated or truncated else rng.choice(env.legal_actions()))
        for name, value in env.rewards.items():
            summed[name] += value
    return summed, from_last


# PettingZoo warns about every dict observation (it whitelists its own envs by name).
@pytest.mark.filterwarnings("ignore:Observation is not a NumPy array")
@pytest.mark.filterwarnings("ignore:Observation space for each agent probably should be")
def test_pettingzoo_api(config):
    name, options = config
    api_test(games.make(name, **options), num_cycles=300)


def test_pettingzoo_seed(config):
    name, options = config
    seed_test(functools.partial(games.make, name, **options), num_cycles=100)


def test_random_games_end_with_pyspiel_returns(config):
    name, options = config
    env = games.make(name, **options)
    low, high = env.spec.return_range
    rng = random.Random(0)
    for game in range(RANDOM_GAMES):
        env.reset(seed=game)
        summed, from_last = play_randomly(env, rng)
        state = env.pyspiel_state
        assert state.is_terminal()
        expected = dict(zip(env.possible_agents, state.returns()))
        assert summed == expected
        assert from_last == expected
        assert env.returns() == expected
        assert all(low <= value <= high for value in expected.values())
        assert env.agents == []


def test_same_seed_same_deal(config):
    name, options = config
    first, second = games.make(name, **options), games.make(name, **options)
    for seed in range(20):
        first.reset(seed=seed)
        second.reset(seed=seed)
        assert first.pyspiel_state.history() == second.pyspiel_state.history()
    deals = set()
    for seed in range(20):
        first.reset(seed=seed)
        deals.add(tuple(first.pyspiel_state.history()))
    assert len(deals) > 1 or first.spec.perfect_information


def test_clone_is_independent(config):
    name, options = config
    env = games.make(name, **options)
    env.reset(seed=1)
    env.step(env.legal_actions()[0])
    copy = env.clone()
    before = env.pyspiel_state.history()
    rng = random.Random(0)
    play_randomly(copy, rng)
    assert env.pyspiel_state.history() == before
    assert env.agents == env.possible_agents
    assert copy.agents == []


def test_load_state_restores_a_position(config):
    name, options = config
    env = games.make(name, **options)
    env.reset(seed=3)
    env.step(env.legal_actions()[-1])
    other = games.make(name, **options)
    other.load_state(env.pyspiel_state)
    assert other.pyspiel_state.history() == env.pyspiel_state.history()
    assert other.agent_selection == env.agent_selection
    assert other.legal_actions() == env.legal_actions()
    for agent in env.possible_agents:
        assert other.observation_text(agent) == env.observation_text(agent)


def test_illegal_action_is_refused():
    env = games.make("tic_tac_toe")
    env.step(4)
    with pytest.raises(ValueError, match="not legal"):
        env.step(4)


def test_a_decision_with_an_illegal_move_is_found_where_there_is_one():
    """`some_move_illegal`: the empty tic-tac-toe board leaves all nine cells legal, one move takes one; Connect Four
    is false until a column fills (six pieces in it). `moves_can_be_illegal`: false only for Kuhn poker, where pass
    and bet are legal at every decision."""
    env = games.make("tic_tac_toe")
    assert not env.some_move_illegal()
    env.step(4)
    assert env.some_move_illegal()
    four = games.make("connect_four")
    for _ in range(5):
        four.step(3)
        assert not four.some_move_illegal()
    four.step(3)
    assert four.some_move_illegal() and 3 not in four.legal_actions()
    assert [name for name in games.names() if not games.moves_can_be_illegal(name)] == ["kuhn_poker"]
    assert not games.moves_can_be_illegal("kuhn_poker", players=3)


def test_registry_names_and_errors():
    assert games.names() == sorted(
        ["bargaining", "connect_four", "kuhn_poker", "leduc_poker", "liars_dice", "tic_tac_toe"]
    )
    with pytest.raises(ValueError, match="'chess'.*kuhn_poker"):
        games.make("chess")
    with pytest.raises(ValueError, match="unknown option.*'ante'.*players"):
        games.make("kuhn_poker", ante=2)
    with pytest.raises(ValueError, match="bidding_rule='reset-quantity' is not supported"):
        games.make("liars_dice", bidding_rule="reset-quantity")
    with pytest.raises(ValueError, match="invalid options"):
        games.make("kuhn_poker", players=1)
    assert games.make("liars_dice", numdice=2).spec.num_players == 2


def test_specs():
    kuhn = games.spec("kuhn_poker")
    assert kuhn == games.GameSpec(
        "kuhn_poker", 2, (-2.0, 2.0), zero_sum=True, perfect_information=False, exploitable=True
    )
    assert games.spec("kuhn_poker", players=3).num_players == 3
    assert games.spec("kuhn_poker", players=3).return_range == (-2.0, 4.0)
    assert games.spec("leduc_poker").return_range == (-13.0, 13.0)
    bargaining = games.spec("bargaining")
    assert not bargaining.zero_sum and bargaining.return_range == (0.0, 10.0)
    assert games.spec("tic_tac_toe").perfect_information
    assert games.spec("connect_four").perfect_information


def test_observation_is_pyspiels_tensor_and_mask(config):
    name, options = config
    env = games.make(name, **options)
    rng = random.Random(0)
    for game in range(5):
        env.reset(seed=game)
        for agent in env.agent_iter():
            state = env.pyspiel_state
            for other in env.possible_agents:
                seat = int(other.split("_")[1])
                observation = env.observe(other)
                if state.get_game().get_type().provides_information_state_tensor:
                    expected = state.information_state_tensor(seat)
                else:
                    expected = state.observation_tensor(seat)
                assert observation["observation"].tolist() == pytest.approx(expected)
                assert observation["action_mask"].nonzero()[0].tolist() == env.legal_actions(other)
            env.step(None if env.terminations[agent] else rng.choice(env.legal_actions()))
