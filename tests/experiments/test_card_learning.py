"""experiments/can_the_learner_learn_the_card/card_learning.py, the oracle-advantage probe of the learner: returns
and advantages by hand."""

from __future__ import annotations

import dataclasses
import random
from pathlib import Path

import pytest

import games
from games.kuhn_poker import BET, PASS
from strat.config_loading import load_config
from strat.engines import Generation, SamplingParams, build_engine
from strat.train.learner import PolicyLearner
from strat.train.settings import learner_settings, warm_start_settings
from strat.train.warmstart import ensure_warm, templated_response

from .conftest import experiment_module

CONFIG = Path(__file__).resolve().parents[2] / "configs" / "kuhn_poker_tiny.yaml"

DEPTH, PENALTY = 2, -3.0


@pytest.fixture(scope="module")
def probe():
    yield from experiment_module("card_learning")


def _first_decision(card_0: int, card_1: int):
    """Player 0's opening decision holding `card_0` (0 Jack, 2 King)."""
    env = games.make("kuhn_poker")
    for seed in range(200):
        env.reset(seed=seed)
        if env.card("player_0") == card_0 and env.card("player_1") == card_1:
            return env
    raise AssertionError("no such deal in 200 seeds")


def _generation(env, action: int | None, index: int) -> Generation:
    text = "no tags at all" if action is None else templated_response(env, "player_0", action, DEPTH, random.Random(0))
    return Generation((1, 2), (10 + index, 11), (-0.5, -0.1), text, "stop")


def test_oracle_returns_and_group_advantages_by_hand(probe) -> None:
    king, jack = _first_decision(2, 0), _first_decision(0, 2)
    # King: bet, bet, pass, invalid -> returns 1, 1, -1, -3 (mean -0.5, std sqrt(2.75)); Jack: pass x4 -> all equal.
    generations = [_generation(king, a, i) for i, a in enumerate((BET, BET, PASS, None))]
    generations += [_generation(jack, PASS, 4 + i) for i in range(4)]
    samples, stats = probe.oracle_samples([king, jack], generations, 4, DEPTH, "card", PENALTY, random.Random(0))

    std = 2.75**0.5 + 1e-6  # the population std plus the loop's eps
    expected = [1.5 / std, 1.5 / std, -0.5 / std, -2.5 / std, 0.0, 0.0, 0.0, 0.0]
    assert [s.advantage for s in samples] == pytest.approx(expected)
    assert [s.response_token_ids for s in samples] == [g.token_ids for g in generations]
    assert stats.valid == 7 and stats.hits == 6
    assert stats.bets == [0, 0, 2] and stats.counted == [4, 0, 3]
    # The group is the information set: the King's and the Jack's samples never share one.
    assert {s.group_id for s in samples[:4]} != {s.group_id for s in samples[4:]}


def test_targets(probe) -> None:
    assert [probe.target_bets(card, "card") for card in range(3)] == [False, False, True]
    assert all(probe.target_bets(card, "bet") for card in range(3))
    assert not any(probe.target_bets(card, "pass") for card in range(3))
    assert probe.log_odds(4, 8) == 0.0
    assert probe.log_odds(0, 8) < 0 < probe.log_odds(8, 8)


def test_movement_and_its_sampling_interval_by_hand(probe) -> None:
    """Jack 6/8 -> 2/8 bets, Queen 2/8 -> 2/8, King 2/8 -> 6/8: log-odds ln(6.5/2.5) = 0.9555 and its negative,
    each with variance 1/6.5 + 1/2.5 = 0.5538."""
    moved = probe.movement([(6, 8), (2, 8), (2, 8)], [(2, 8), (2, 8), (6, 8)])
    assert moved.per_card == pytest.approx((-1.9110, 0.0, 1.9110), abs=1e-4)
    assert moved.shared == pytest.approx(0.0, abs=1e-12)
    assert moved.specific == pytest.approx(1.9110 + 1.9110 / 2, abs=1e-4)
    assert moved.per_card_ci == pytest.approx((2.0629,) * 3, abs=1e-3)  # 1.96 * sqrt(2 * 0.5538)
    assert moved.shared_ci == pytest.approx(1.1910, abs=1e-3)  # 1.96 * sqrt(6 * 0.5538) / 3
    assert moved.specific_ci == pytest.approx(2.5264, abs=1e-3)  # 1.96 * sqrt(2 * 0.5538 + 4 * 0.5538 / 4)
    # Ten times the samples at the same rates: an interval about sqrt(10) times narrower.
    assert probe.movement([(60, 80)] * 3, [(20, 80)] * 3).specific_ci < moved.specific_ci / 2.5


def test_pooled_counts_by_hand(probe) -> None:
    steps = [[(1, 8), (2, 8), (5, 8)], [(0, 7), (3, 8), (6, 8)], [(2, 8), (1, 8), (7, 8)]]
    assert probe.pooled(steps) == [(3, 23), (6, 24), (18, 24)]
    assert probe.pooled(steps[-1:]) == steps[-1]


@pytest.mark.long
def test_oracle_advantages_teach_the_opening_to_depend_on_the_card(probe, tiny_model_dir: Path) -> None:
    """From the default config's seeded warm start, ten updates of the default learner (its loss, lr and
    minibatches) with oracle advantages at player 0's opening (the King bets, the Jack and the Queen check; an
    invalid response gets the format penalty) make the King bet more and the Jack less at that same history: 32
    responses per card are sampled before the first update and after each, and the bet log-odds of the last three
    samplings pooled (96 per card) are compared with the first's. The King-against-the-others move is positive
    outside its 95% sampling interval. "Bet more with everything" (or "check with everything") moves the cards
    together and fails it, as does a learner that moves nothing.

    Pinned to depth 2 and no KL penalty: the probe is of the policy-gradient update, takes no snapshot (the default's
    anchor would be the warm start for every update), and from the config's depth-1 warm start six updates moved
    every card towards checking (2026-12-02), a probe this short being sensitive to where the warm start leaves each
    card.

    Measured (2026-12-02, seed 0; its King counts 16, 18, 17, 18, 22, 22, 14, 18, 17, 19, 27 of ~32): the King's
    log-odds +0.84, the Jack's -1.79, card-specific +2.45 against a half-width of 1.28. Seeds 1 and 2 (last count
    alone): +2.15 ± 1.54 and +3.58 ± 1.74. The test used to compare six updates' last count alone: that one count
    (14/32 at seed 0) fell below the first by chance, although the counts around it rose, and failed in CI."""
    config = load_config(CONFIG, ["engine.backend=hf", "reasoning.depth=2", "algorithm.kl_type=none",
                                  "algorithm.kl_coef=0", "algorithm.kl_reference=initial"])
    # The default config's own warm start (~4 min on 2 cores; never cut short here, or it would not be cached).
    warm_model_dir = ensure_warm(
        tiny_model_dir, "kuhn_poker", dataclasses.replace(warm_start_settings(config), max_seconds=3600)
    )
    envs = probe.probe_envs(openings=True)
    assert sorted(env.card(env.agent_selection) for env in envs) == [0, 1, 2]
    params = SamplingParams(max_tokens=config.reasoning.max_new_tokens, temperature=1.0, top_p=1.0)
    with build_engine("hf", warm_model_dir) as engine:
        counts = probe.run_probe(
            engine,
            PolicyLearner(warm_model_dir, learner_settings(config)),
            envs,
            params,
            config.reasoning.depth,
            steps=10,
            samples=32,
            target="card",
            penalty=config.algorithm.format_penalty,
            seed=0,
        )
    moved = probe.movement(counts[0], probe.pooled(counts[-3:]))
    jack, _, king = moved.per_card
    assert king > 0 > jack, counts
    assert moved.specific > moved.specific_ci, (moved, counts)
    assert sum(valid for _, valid in counts[-1]) >= 0.9 * 3 * 32, "the format held while the card was learnt"
