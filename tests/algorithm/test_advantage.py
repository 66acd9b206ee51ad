"""Advantages: hand-computed hybrid values, modes, per-role statistics, degenerate groups, EMA baselines."""

from __future__ import annotations

import math
from pathlib import Path

import pytest
import torch

from strat.algorithm.advantage import AdvantageConfig, RoleBaseline, compute_advantages, group_advantages, normalise
from strat.config_loading import load_config
from strat.errors import ConfigError
from strat.train.settings import advantage_config

from .helpers import episode, scored, turn

ROOT = Path(__file__).resolve().parents[2]


def _two_groups() -> list:
    # Group g1: returns 1 and -1; ego turn scores 1.0, 0.5 (episode a) and 0.0 (episode b).
    a = episode(
        "a", "g1", [turn("player_0", 0), turn("player_1", 1), turn("player_0", 2)], {"player_0": 1.0, "player_1": -1.0}
    )
    b = episode("b", "g1", [turn("player_0", 0), turn("player_1", 1)], {"player_0": -1.0, "player_1": 1.0})
    # Group g2: equal returns and equal scores: no signal at all.
    c = episode("c", "g2", [turn("player_0", 0)], {"player_0": 0.0, "player_1": 0.0})
    d = episode("d", "g2", [turn("player_0", 0)], {"player_0": 0.0, "player_1": 0.0})
    return [scored(a, {0: 1.0, 2: 0.5}), scored(b, {0: 0.0}), scored(c, {0: 0.2}), scored(d, {0: 0.2})]


def _by_key(samples) -> dict[tuple[str, int], float]:
    return {(s.episode_id, s.turn_index): s.advantage for s in samples}


def test_hybrid_two_groups_by_hand() -> None:
    samples, stats = compute_advantages(_two_groups(), AdvantageConfig(mode="hybrid", lam=0.5, eps=0.0))
    # g1 outcome: mean 0, population std 1 -> +1, -1.
    # g1 process over all three ego turns [1, 0.5, 0]: mean 0.5, std sqrt(1/6) -> +sqrt(1.5), 0, -sqrt(1.5).
    z = math.sqrt(1.5)
    expected = {("a", 0): 1 + 0.5 * z, ("a", 2): 1.0, ("b", 0): -1 - 0.5 * z, ("c", 0): 0.0, ("d", 0): 0.0}
    assert _by_key(samples) == pytest.approx(expected)
    assert stats.groups == 2
    assert stats.zero_spread_groups == 1
    assert stats.zero_process_spread_groups == 1
    assert stats.zero_signal_groups == 1
    assert stats.turns == 5 and stats.comparable_turns == 5


def test_outcome_mode_equals_lambda_zero_and_process_mode_drops_outcome() -> None:
    episodes = _two_groups()
    outcome, _ = compute_advantages(episodes, AdvantageConfig(mode="outcome", lam=0.7))
    hybrid0, _ = compute_advantages(episodes, AdvantageConfig(mode="hybrid", lam=0.0))
    assert _by_key(outcome) == _by_key(hybrid0)
    process, _ = compute_advantages(episodes, AdvantageConfig(mode="process", eps=0.0))
    z = math.sqrt(1.5)
    assert _by_key(process) == pytest.approx({("a", 0): z, ("a", 2): 0.0, ("b", 0): -z, ("c", 0): 0.0, ("d", 0): 0.0})


def test_samples_carry_tokens_of_ego_turns_only() -> None:
    samples, _ = compute_advantages(_two_groups(), AdvantageConfig())
    assert {s.agent for s in samples} == {"player_0"}
    assert all(s.response_token_ids == (3, 4, 5) and s.behaviour_logprobs == (-0.1, -0.2, -0.3) for s in samples)


def test_singleton_and_zero_variance_groups_give_zeros_not_nan() -> None:
    lone = episode("x", "g", [turn("player_0", 0)], {"player_0": 0.3, "player_1": -0.3})
    samples, stats = compute_advantages([scored(lone, {0: 0.9})], AdvantageConfig(mode="hybrid", lam=1.0))
    assert [s.advantage for s in samples] == [0.0]
    assert stats.singleton_groups == 1 and stats.zero_signal_groups == 1
    # 0.1 three times: the float mean is not exactly 0.1, yet the advantages must be exactly 0.
    assert torch.equal(
        normalise(torch.tensor([0.1, 0.1, 0.1], dtype=torch.float64), 1e-6), torch.zeros(3, dtype=torch.float64)
    )
    assert torch.equal(normalise(torch.tensor([]), 1e-6), torch.tensor([]))


def test_turns_with_nothing_to_compare_get_process_zero_and_stay_out_of_statistics() -> None:
    adv = group_advantages(
        returns=torch.tensor([0.0]),
        turn_episode=torch.tensor([0, 0, 0]),
        scores=torch.tensor([1.0, 0.0, 0.0]),
        comparable=torch.tensor([True, True, False]),
        mode="process",
        lam=1.0,
        eps=0.0,
    )
    assert adv.tolist() == [1.0, -1.0, 0.0]


def test_unscored_turns_count_as_not_comparable() -> None:
    a = episode("a", "g", [turn("player_0", 0)], {"player_0": 1.0, "player_1": -1.0})
    b = episode("b", "g", [turn("player_0", 0)], {"player_0": -1.0, "player_1": 1.0})
    samples, stats = compute_advantages([scored(a, {}), scored(b, {})], AdvantageConfig(mode="hybrid", eps=0.0))
    assert _by_key(samples) == {("a", 0): 1.0, ("b", 0): -1.0}
    assert stats.comparable_turns == 0
    assert stats.process_outcome_corr is None  # nothing to correlate


def test_the_process_and_outcome_terms_correlation_over_comparable_turns() -> None:
    """Returns 1, 0, -1 and scores 0.9, 0.5, 0.4 (a fourth turn unscored, left out): deviations (1, 0, -1) and
    (0.3, -0.1, -0.2), so r = 0.5 / (sqrt(2) * sqrt(0.14)) = 0.944911 by hand; normalising either term changes
    nothing. A second group with the scores reversed against its returns adds -1-correlated pairs."""
    group = [
        scored(episode(f"e{i}", "g", [turn("player_0", 0)], {"player_0": r, "player_1": -r}), {0: s})
        for i, (r, s) in enumerate([(1.0, 0.9), (0.0, 0.5), (-1.0, 0.4)])
    ]
    unscored = scored(episode("e3", "g", [turn("player_0", 0)], {"player_0": 0.0, "player_1": 0.0}), {})
    _, stats = compute_advantages([*group, unscored], AdvantageConfig(mode="hybrid", eps=0.0))
    # The unscored turn's episode counts in the outcome normalisation (returns 1, 0, -1, 0), not in the pairs.
    assert stats.process_outcome_corr == pytest.approx(0.5 / (2**0.5 * 0.14**0.5), abs=1e-9)
    against = [
        scored(episode(f"f{i}", "h", [turn("player_0", 0)], {"player_0": r, "player_1": -r}), {0: s})
        for i, (r, s) in enumerate([(1.0, 0.1), (-1.0, 0.9)])
    ]
    _, both = compute_advantages([*group, *against], AdvantageConfig(mode="hybrid", eps=0.0))
    # Pairs (outcome, process): (1.2247, 1.3887), (0, -0.4629), (-1.2247, -0.9258), (1, -1), (-1, 1).
    x = [1.5**0.5, 0.0, -(1.5**0.5), 1.0, -1.0]
    spread = (0.14 / 3) ** 0.5  # the population std of 0.9, 0.5, 0.4
    y = [0.3 / spread, -0.1 / spread, -0.2 / spread, -1.0, 1.0]
    mx, my = sum(x) / 5, sum(y) / 5
    cov = sum((a - mx) * (b - my) for a, b in zip(x, y, strict=True))
    r = cov / (sum((a - mx) ** 2 for a in x) * sum((b - my) ** 2 for b in y)) ** 0.5
    assert both.process_outcome_corr == pytest.approx(r, abs=1e-9)


def _self_play_group() -> list:
    returns = [{"player_0": 2.0, "player_1": 0.0}, {"player_0": 0.0, "player_1": 0.0}]
    return [
        scored(
            episode(f"e{i}", "g", [turn("player_0", 0), turn("player_1", 1)], r, ego=("player_0", "player_1")),
            {},
        )
        for i, r in enumerate(returns)
    ]


def test_per_role_normalisation_keeps_seats_apart() -> None:
    per_role, stats = compute_advantages(_self_play_group(), AdvantageConfig(mode="outcome", eps=0.0))
    assert {(s.episode_id, s.agent): s.advantage for s in per_role} == {
        ("e0", "player_0"): 1.0,
        ("e1", "player_0"): -1.0,
        ("e0", "player_1"): 0.0,
        ("e1", "player_1"): 0.0,
    }
    assert stats.groups == 2 and stats.zero_spread_groups == 1
    pooled, stats = compute_advantages(_self_play_group(), AdvantageConfig(mode="outcome", eps=0.0, per_role=False))
    # Pooled [2, 0, 0, 0]: mean 0.5, population std sqrt(0.75).
    s = math.sqrt(0.75)
    assert {(x.episode_id, x.agent): x.advantage for x in pooled} == pytest.approx(
        {
            ("e0", "player_0"): 1.5 / s,
            ("e1", "player_0"): -0.5 / s,
            ("e0", "player_1"): -0.5 / s,
            ("e1", "player_1"): -0.5 / s,
        }
    )
    assert stats.groups == 1


def test_drop_zero_signal_groups() -> None:
    samples, stats = compute_advantages(_two_groups(), AdvantageConfig(mode="outcome", drop_zero_signal=True))
    assert {s.group_id for s in samples} == {"g1"}
    assert stats.dropped_groups == 1


def test_format_penalty_replaces_the_return() -> None:
    a = episode("a", "g", [turn("player_0", 0, penalty=-3.0)], {"player_0": 1.0, "player_1": -1.0})
    b = episode("b", "g", [turn("player_0", 0)], {"player_0": -1.0, "player_1": 1.0})
    samples, _ = compute_advantages([scored(a, {}), scored(b, {})], AdvantageConfig(mode="outcome", eps=0.0))
    # Outcomes -3 and -1: mean -2, std 1.
    assert _by_key(samples) == {("a", 0): -1.0, ("b", 0): 1.0}


def _penalised_group() -> list:
    """Two games of player_0: a won one (+1) whose second turn was invalid (-2), and a lost one (-1)."""
    a = episode(
        "a", "g", [turn("player_0", 0), turn("player_1", 1), turn("player_0", 2, penalty=-2.0)],
        {"player_0": 1.0, "player_1": -1.0},
    )
    b = episode("b", "g", [turn("player_0", 0)], {"player_0": -1.0, "player_1": 1.0})
    return [scored(a, {}), scored(b, {})]


def test_a_turn_scoped_penalty_lands_on_the_turn_that_earned_it() -> None:
    # Scope game: outcomes -2 (a) and -1 (b), mean -1.5, std 0.5: both of a's turns -1, b's +1.
    game, _ = compute_advantages(_penalised_group(), AdvantageConfig(mode="outcome", eps=0.0))
    assert _by_key(game) == {("a", 0): -1.0, ("a", 2): -1.0, ("b", 0): 1.0}
    # Scope turn: returns +1 (a's valid turn), -2 (a's invalid turn), -1 (b), over the group's turns: mean -2/3,
    # population std sqrt(((5/3)^2 + (4/3)^2 + (1/3)^2) / 3) = sqrt(42) / 3 / sqrt(3).
    turn_scoped, stats = compute_advantages(
        _penalised_group(), AdvantageConfig(mode="outcome", eps=0.0, penalty_scope="turn")
    )
    std = math.sqrt(42 / 27)
    assert _by_key(turn_scoped) == pytest.approx(
        {("a", 0): (5 / 3) / std, ("a", 2): (-4 / 3) / std, ("b", 0): (-1 / 3) / std}
    )
    assert stats.zero_spread_groups == 0 and stats.turns == 3


def test_turn_scope_keeps_signal_when_every_game_holds_an_invalid_turn() -> None:
    """Both games penalised: with scope `game` the group is flat (-2, -2); with `turn` the invalid turns (-2)
    stand against the valid ones (+1, -1): mean -1, std sqrt(3/2) over the four turns."""
    games = [
        scored(episode(name, "g", [turn("player_0", 0), turn("player_0", 2, penalty=-2.0)],
                       {"player_0": value, "player_1": -value}), {})
        for name, value in (("a", 1.0), ("b", -1.0))
    ]
    flat, stats = compute_advantages(games, AdvantageConfig(mode="outcome", eps=0.0))
    assert all(s.advantage == 0.0 for s in flat) and stats.zero_spread_groups == 1
    samples, stats = compute_advantages(games, AdvantageConfig(mode="outcome", eps=0.0, penalty_scope="turn"))
    std = math.sqrt(1.5)
    assert _by_key(samples) == pytest.approx(
        {("a", 0): 2 / std, ("a", 2): -1 / std, ("b", 0): 0.0, ("b", 2): -1 / std}
    )
    assert stats.zero_spread_groups == 0


def test_the_penalty_scope_is_read_from_the_config() -> None:
    config = load_config(ROOT / "configs" / "kuhn_poker_tiny.yaml", ["algorithm.penalty_scope=turn"])
    assert advantage_config(config).penalty_scope == "turn"
    assert advantage_config(load_config(ROOT / "configs" / "kuhn_poker_tiny.yaml")).penalty_scope == "game"
    with pytest.raises(ConfigError, match="penalty_scope"):
        load_config(ROOT / "configs" / "kuhn_poker_tiny.yaml", ["algorithm.penalty_scope=episode"])


def test_turn_scope_against_an_ema_baseline() -> None:
    """The running baseline starts at the mean of the turns' returns (-2/3) and each turn is measured against it."""
    baseline = RoleBaseline(decay=0.5)
    samples, _ = compute_advantages(
        _penalised_group(), AdvantageConfig(mode="outcome", baseline="ema", penalty_scope="turn"), baseline
    )
    assert _by_key(samples) == pytest.approx({("a", 0): 5 / 3, ("a", 2): -4 / 3, ("b", 0): -1 / 3})
    assert baseline.value("kuhn_poker", "player_0") == pytest.approx(-2 / 3)


def test_ema_baseline_by_hand_and_state_round_trip() -> None:
    baseline = RoleBaseline(decay=0.5)
    config = AdvantageConfig(mode="outcome", baseline="ema")
    first = [
        scored(episode("a", "g", [turn("player_0", 0)], {"player_0": 1.0, "player_1": 0.0}), {}),
        scored(episode("b", "g", [turn("player_0", 0)], {"player_0": 0.0, "player_1": 0.0}), {}),
    ]
    samples, _ = compute_advantages(first, config, baseline)
    # The first batch initialises the baseline at its mean 0.5.
    assert _by_key(samples) == {("a", 0): 0.5, ("b", 0): -0.5}
    assert baseline.value("kuhn_poker", "player_0") == 0.5
    second = [
        scored(episode("c", "h", [turn("player_0", 0)], {"player_0": 1.0, "player_1": 0.0}), {}),
        scored(episode("d", "h", [turn("player_0", 0)], {"player_0": 1.0, "player_1": 0.0}), {}),
    ]
    samples, stats = compute_advantages(second, config, baseline)
    # Equal returns still give signal against the baseline; then b = 0.5 * 0.5 + 0.5 * 1.
    assert _by_key(samples) == {("c", 0): 0.5, ("d", 0): 0.5}
    assert stats.zero_spread_groups == 1 and stats.zero_signal_groups == 0
    assert baseline.value("kuhn_poker", "player_0") == 0.75
    restored = RoleBaseline(decay=0.5)
    restored.load_state_dict(baseline.state_dict())
    assert restored.state_dict() == {"kuhn_poker/player_0": 0.75}
    with pytest.raises(ValueError, match="RoleBaseline"):
        compute_advantages(second, config)
