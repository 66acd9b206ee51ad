"""A response that restates the player's own private information wrongly earns the format penalty:
the tiny model's move follows its restated card, so learning must not be able to move the card instead of the move."""

import random

import pytest

import games
from strat.algorithm.comparison import ComparisonWeights, score_episodes
from strat.algorithm.reasoning import OWN_INFO_LEAD, misstates_private_info
from strat.config import OpponentConfig
from strat.engines.base import Generation, SamplingParams
from strat.play import rollout
from strat.play.rollout import GroupPlan, RolloutRunner, RolloutSettings
from strat.train.step_metrics import episode_metrics
from strat.train.warmstart import templated_response

CARDS = ("Jack", "Queen", "King")


@pytest.mark.parametrize(
    ("text", "private", "wrong"),
    [
        ("<past>My private information: King. No moves yet.</past>", "King", False),
        ("<past>My private information: Queen. x</past><their_view>My private information: King. y", "King", True),
        ("<past>My private information: King. x</past><their_view>My private information: Jack. y", "King", True),
        ("<past>my private information:  king. x</past>", "King", False),  # case and spacing do not matter
        ("<past>I hold a good card.</past><action>bet</action>", "King", False),  # never restated
        ("My private information: book 1 hat 2 ball 3. I want the ball.", "book 1 hat 2 ball 3", False),
        ("My private information: book 1 hat 2 ball 4. I want the ball.", "book 1 hat 2 ball 3", True),
        ("My private information: King.", "", False),  # perfect-information games have none to misstate
    ],
)
def test_misstatement_is_any_restatement_that_differs(text: str, private: str, wrong: bool) -> None:
    assert misstates_private_info(text, private) is wrong


class RestatingPolicy:
    """Templated responses with a random legal move; with `lie`, the restated card is one the player does not hold."""

    def __init__(self, lie: bool) -> None:
        self.lie = lie
        self.rng = random.Random(0)
        self.located: list = []

    def __call__(self, prompts: list[list[int]], params: SamplingParams) -> list[Generation]:
        out = []
        for prompt in prompts:
            env, agent = self.located.pop(0)
            text = templated_response(env, agent, self.rng.choice(env.legal_actions(agent)), 2, self.rng)
            held = env.private_info(agent)
            if self.lie:
                other = next(card for card in CARDS if card != held)
                text = text.replace(f"{OWN_INFO_LEAD} {held}.", f"{OWN_INFO_LEAD} {other}.")
            out.append(Generation(tuple(prompt), (5, 6), (-1.0, -1.0), text, "stop"))
        return out


def _play(lie: bool, penalize: bool, monkeypatch: pytest.MonkeyPatch):
    policy = RestatingPolicy(lie)
    settings = RolloutSettings(game="kuhn_poker", depth=2, group_size=2, max_tokens=16, format_penalty=-3.0,
                               penalize_misstated=penalize, opponents=(OpponentConfig(kind="self"),))
    runner = RolloutRunner(settings, lambda messages: [1, 2, 3], policy)
    original = rollout.llm_turns

    def llm_turns(player, batch, seed, observe=False):
        policy.located.extend((game.env, game.env.agent_selection) for game in batch)
        return original(player, batch, seed, observe)

    monkeypatch.setattr(rollout, "llm_turns", llm_turns)
    plans = [GroupPlan(group_id=f"g{i}", seed=i, opponent=OpponentConfig(kind="self"), ego_seat=0) for i in range(6)]
    episodes = runner.run(plans, sampling_seed=0)
    scored = score_episodes(episodes, ComparisonWeights())
    return episodes, episode_metrics(scored)


def test_a_wrong_restatement_earns_the_penalty_and_is_counted(monkeypatch: pytest.MonkeyPatch) -> None:
    episodes, metrics = _play(lie=True, penalize=True, monkeypatch=monkeypatch)
    turns = [turn for episode in episodes for turn in episode.turns]
    assert turns and all(turn.misstated and turn.penalty == -3.0 for turn in turns)
    assert all(turn.valid for turn in turns)  # the move itself was legal and was played
    assert all(episode.outcome(agent) == -3.0 for episode in episodes for agent in episode.agents)
    assert metrics["format/misstated_rate"] == 1.0


def test_a_true_restatement_keeps_the_game_return(monkeypatch: pytest.MonkeyPatch) -> None:
    episodes, metrics = _play(lie=False, penalize=True, monkeypatch=monkeypatch)
    assert not any(turn.misstated or turn.penalty is not None for episode in episodes for turn in episode.turns)
    assert all(episode.outcome(agent) == episode.returns[agent] for episode in episodes for agent in episode.agents)
    assert metrics["format/misstated_rate"] == 0.0


def test_the_penalty_can_be_turned_off_and_the_misstatement_is_still_counted(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    episodes, metrics = _play(lie=True, penalize=False, monkeypatch=monkeypatch)
    assert all(turn.misstated and turn.penalty is None for episode in episodes for turn in episode.turns)
    assert metrics["format/misstated_rate"] == 1.0


def test_private_information_games_restate_it_in_the_templates() -> None:
    # The check only bites where responses restate the card; the warm start's templates do in every card game.
    for name in ("kuhn_poker", "leduc_poker"):
        env = games.make(name)
        env.reset(seed=3)
        agent = env.agent_selection
        text = templated_response(env, agent, env.legal_actions(agent)[0], 2, random.Random(0))
        assert f"{OWN_INFO_LEAD} {env.private_info(agent)}." in text
        assert not misstates_private_info(text, env.private_info(agent))
