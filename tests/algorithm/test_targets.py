"""Score targets estimated on the weights that played (`strat.algorithm.targets`) and the comparison that uses them:
the opponent's policy for a prediction, the posterior for a belief, leave-one-out, the sampling budget, fallbacks."""

from __future__ import annotations

import dataclasses
import json
from collections import Counter

import pytest

import games
from games.heuristics import POLICIES
from games.posterior import posterior
from strat.algorithm.comparison import ComparisonWeights, policy_prediction, posterior_belief, score_episodes
from strat.algorithm.records import BeliefTarget, Episode, ParsedResponse, Sections, Turn, TurnTargets
from strat.algorithm.targets import SCRIPTED, TargetSettings, replay
from strat.config import OpponentConfig
from strat.play.rollout import GroupPlan, RolloutRunner, RolloutSettings
from strat.train.rollout_record import Rollout, rollout_from_json, rollout_to_json
from strat.train.step_metrics import episode_metrics
from tests.eval.helpers import FakeLLM

KING_OR_A_THIRD = {"King": 1.0, "Queen": 1 / 3, "Jack": 1 / 3}
"""The probability of betting (or calling) with each card; the rest passes."""


def _bettor(env, agent: str) -> dict[int, float]:
    """Bets (or calls) the King always and any other card a third of the time."""
    bet = KING_OR_A_THIRD[env.private_info(agent)]
    legal = env.legal_actions(agent)
    names = {env.action_name(a, agent): a for a in legal}
    return {names["pass"]: 1 - bet, names["bet"]: bet}


def _rollout(opponent: OpponentConfig, settings: TargetSettings, groups: int = 12, group_size: int = 4,
             samples: list | None = None) -> tuple[list[Episode], FakeLLM]:
    fake = FakeLLM("kuhn_poker", _bettor, depth=1)
    rollout_settings = RolloutSettings(game="kuhn_poker", depth=1, group_size=group_size, opponents=(opponent,),
                                       targets=settings)
    runner = RolloutRunner(rollout_settings, fake.encode, fake.generate)
    if samples is not None:
        original = runner.sample_actions

        def counted(located, n, seed, generate=None):
            samples.append(len(located) * n)
            return original(located, n, seed, generate)

        runner.sample_actions = counted  # type: ignore[method-assign]
    plans = [GroupPlan(f"g{i}", seed=i, opponent=opponent, ego_seat=i % 2) for i in range(groups)]
    return runner.run(plans, sampling_seed=7), fake


def _ego_turns(episodes: list[Episode]):
    for episode in episodes:
        for turn in episode.turns:
            if turn.agent in episode.ego_agents and turn.response is not None:
                yield episode, turn


def _following(episode: Episode, turn: Turn) -> Turn | None:
    return next((t for t in episode.turns if t.turn_index > turn.turn_index and t.agent != turn.agent), None)


def test_against_a_scripted_player_the_targets_are_its_exact_policy_and_posterior() -> None:
    settings = TargetSettings(prediction="policy", belief="posterior", samples=0)
    episodes, _ = _rollout(OpponentConfig(kind="scripted", name="heuristic"), settings)
    heuristic = POLICIES["kuhn_poker"]
    checked_moves = checked_beliefs = 0
    for episode, turn in _ego_turns(episodes):
        targets = episode.targets_of(turn.turn_index)
        assert targets is not None
        following = _following(episode, turn)
        states = replay(episode, {})
        if following is None:
            assert targets.next_move == (("none", 1.0),)
        else:
            env = states[following.turn_index]
            exact = {env.action_name(a, following.agent): p for a, p in heuristic(env, following.agent).items()}
            assert dict(targets.next_move) == pytest.approx(exact)
            checked_moves += 1
        if turn.turn_index > 0:
            opponent = next(agent for agent in episode.agents if agent != turn.agent)
            exact = posterior(states[turn.turn_index], turn.agent, opponent, heuristic).probabilities
            assert len(targets.beliefs) == 1 and targets.beliefs[0].agent == opponent
            assert dict(targets.beliefs[0].values) == pytest.approx(dict(exact))
            checked_beliefs += 1
        else:
            assert targets.beliefs == ()  # nothing to infer before the opponent has acted
    assert checked_moves > 10 and checked_beliefs > 5
    assert all(episode.seats[a] == f"{SCRIPTED}heuristic" for episode in episodes for a in episode.agents
               if a not in episode.ego_agents)


def test_self_play_estimates_leave_the_scored_episode_out() -> None:
    settings = TargetSettings(prediction="policy", samples=0)
    episodes, _ = _rollout(OpponentConfig(kind="self"), settings, groups=16)
    checked = 0
    for episode, turn in _ego_turns(episodes):
        following = _following(episode, turn)
        targets = episode.targets_of(turn.turn_index)
        if following is None:
            continue
        others = Counter(t.action_name for e in episodes if e.episode_id != episode.episode_id for t in e.turns
                         if t.agent == following.agent and t.info_state == following.info_state)
        total = sum(others.values())
        if total == 0:
            assert targets.next_move is None  # no estimate and no samples: the prediction falls back
            continue
        assert dict(targets.next_move) == pytest.approx({name: count / total for name, count in others.items()})
        checked += 1
    assert checked > 20


def test_fresh_samples_fill_rare_states_within_the_budget() -> None:
    drawn: list[int] = []
    settings = TargetSettings(prediction="policy", belief="posterior", min_visits=50, samples=40)
    episodes, _ = _rollout(OpponentConfig(kind="self"), settings, groups=4, group_size=2, samples=drawn)
    assert drawn and sum(drawn) <= 40
    no_budget: list[int] = []
    _rollout(OpponentConfig(kind="self"), dataclasses.replace(settings, samples=0), groups=4, group_size=2,
             samples=no_budget)
    assert no_budget == []
    # With enough budget every state a score needs is covered.
    covered, _ = _rollout(OpponentConfig(kind="self"), dataclasses.replace(settings, min_visits=4, samples=4000),
                          groups=4, group_size=2)
    assert all(t.next_move is not None for e in covered for t in e.targets)


def test_the_rollout_estimates_nothing_unless_asked() -> None:
    episodes, _ = _rollout(OpponentConfig(kind="self"), TargetSettings(), groups=2)
    assert all(episode.targets == () for episode in episodes)
    assert all(turn.info_state for episode in episodes for turn in episode.turns)


def test_the_prediction_scores_the_probability_of_the_named_move() -> None:
    policy = (("bet", 0.25), ("pass", 0.75))
    assert policy_prediction("Bet.", policy) == 0.25
    assert policy_prediction("pass", policy) == 0.75
    assert policy_prediction("fold", policy) == 0.0
    assert policy_prediction(None, policy) == 0.0


def test_the_belief_scores_its_posterior_probability_and_its_gap_to_the_best() -> None:
    # The observer holds the Jack and the opponent bet: King 3/4, Queen 1/4 (the bettor above).
    target = [BeliefTarget("player_0", (("king", 0.75), ("queen", 0.25)))]
    extract = games.belief_values("kuhn_poker")
    assert posterior_belief("They bet.\nbelief: King", target, extract) == pytest.approx((0.75, 0.0))
    assert posterior_belief("belief: Queen", target, extract) == pytest.approx((0.25, 0.5))
    assert posterior_belief("belief: Queen or King", target, extract) == pytest.approx((0.5, 0.25))
    assert posterior_belief("no belief line", target, extract) == pytest.approx((0.0, 0.75))


def _scored_episode(targets: TurnTargets | None) -> Episode:
    """Player 1 holds the Jack, player 0 bet; player 1 believes King, predicts "none" wrongly... as hand-made."""
    response = ParsedResponse(1, Sections(past="They bet.\nbelief: Queen", plan="fold", predict="pass",
                                          action="pass"), True)
    return Episode(
        episode_id="e0", group_id="g0", seed=0, game="kuhn_poker", agents=("player_0", "player_1"),
        ego_agents=("player_1",),
        turns=(Turn("e0", "player_0", 0, 1, "bet", choices=2),
               Turn("e0", "player_1", 1, 0, "pass", choices=2, response=response)),
        returns={"player_0": 1.0, "player_1": -1.0},
        private_info={"player_0": "King", "player_1": "Jack"},
        targets=() if targets is None else (targets,),
    )


def test_the_comparison_scores_on_targets_and_reports_both_scores() -> None:
    # The ego's pass ends the game: "none" follows, so the sampled and the policy prediction agree (0: it said pass).
    targets = TurnTargets(1, (("none", 1.0),), (BeliefTarget("player_0", (("king", 0.75), ("queen", 0.25))),))
    weights = ComparisonWeights(predict=1.0, belief=1.0, agreement=0.0)
    [old] = score_episodes([_scored_episode(targets)], weights)
    [new] = score_episodes([_scored_episode(targets)], weights, prediction_target="policy", belief_target="posterior")
    assert old.scores[0].belief == 0.0 and old.scores[0].on_target == 0  # Queen against the real King
    assert new.scores[0].belief == pytest.approx(0.25) and new.scores[0].on_target == 2
    assert new.scores[0].score == pytest.approx((0.0 + 0.25) / 2)
    for score in (old.scores[0], new.scores[0]):  # both scores on the same turn, whichever is used
        assert score.sampled_score == pytest.approx(0.0)
        assert score.target_score == pytest.approx(0.125)
        assert score.belief_gap == pytest.approx(0.5)
    # Without targets the turn is scored on the truth, and nothing is claimed on targets.
    [bare] = score_episodes([_scored_episode(None)], weights, prediction_target="policy", belief_target="posterior")
    assert bare.scores[0].on_target == 0 and bare.scores[0].sampled_score is None and bare.scores[0].belief == 0.0
    record = episode_metrics([new], TargetSettings(prediction="policy", belief="posterior"))
    assert record["cot/target_coverage"] == 1.0 and record["cot/belief_gap"] == pytest.approx(0.5)


def test_targets_and_seats_survive_a_checkpointed_rollout() -> None:
    settings = TargetSettings(prediction="policy", belief="posterior", samples=0)
    episodes, _ = _rollout(OpponentConfig(kind="scripted", name="heuristic"), settings, groups=2)
    rollout = Rollout(3, episodes, 1.0, ())
    back = rollout_from_json(json.loads(json.dumps(rollout_to_json(rollout))))
    assert back.episodes == episodes


@pytest.mark.parametrize("seeded", [True, False])
def test_rollouts_sample_with_per_request_seeds_unless_told_not_to(seeded: bool) -> None:
    """`run.deterministic_rollouts: false` sends the games' generations without a seed."""
    from strat.config_loading import load_config
    from strat.play.settings import rollout_settings

    config = load_config(None, [f"run.deterministic_rollouts={str(seeded).lower()}"])
    assert rollout_settings(config).seeded is seeded
    fake = FakeLLM("kuhn_poker", _bettor, depth=1)
    seeds: list[int | None] = []

    def generate(prompts, params):
        seeds.append(params.seed)
        return fake.generate(prompts, dataclasses.replace(params, seed=params.seed or 0))

    settings = RolloutSettings(game="kuhn_poker", depth=1, group_size=2, seeded=seeded)
    RolloutRunner(settings, fake.encode, generate).run([GroupPlan("g", 0, OpponentConfig(kind="self"), 0)], 3)
    assert seeds and all((seed is not None) == seeded for seed in seeds)
