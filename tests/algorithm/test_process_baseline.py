"""The state baseline of the process term (`algorithm.process_baseline: state`): a turn's process score is compared
with the step's turns of the same seat in the same position (its information state and the other agents' private
information), not with its group's turns in whatever position, so reaching a position where the opponent is easy to
read pays nothing by itself."""

from __future__ import annotations

import dataclasses
import math
from pathlib import Path

import pytest

from strat.algorithm.advantage import AdvantageConfig, compute_advantages, state_process_terms
from strat.algorithm.records import ScoredEpisode, TurnScore
from strat.config_loading import load_config
from strat.errors import ConfigError
from strat.train.settings import advantage_config

from .helpers import episode, turn

ROOT = Path(__file__).resolve().parents[2]
SPANS = (("plan", 0, 1), ("predict", 1, 2), ("action", 2, 3))
"""Three response tokens: <plan>, <predict>, <action>."""


def _one(name: str, group: str, state: str, ret: float, predict: float, their_card: str = "") -> ScoredEpisode:
    """An episode with one ego turn (player_0) at information state `state`, scored on its prediction alone;
    `their_card`, player_1's private information, where it is recorded."""
    ego_turn = dataclasses.replace(turn("player_0", 0, episode_id=name), info_state=state, section_spans=SPANS)
    private = {"player_0": "K", "player_1": their_card} if their_card else None
    ep = episode(name, group, [ego_turn], {"player_0": ret, "player_1": -ret}, private_info=private)
    return ScoredEpisode(ep, (TurnScore("player_0", 0, predict, None, None, predict, True),))


def _step() -> list[ScoredEpisode]:
    """Two groups of two episodes. In each group one turn is at state `easy` (the opponent's move is near certain:
    prediction scores 0.9 and 0.7) and one at `hard` (a mixed opponent: 0.4 and 0.2). Returns +1 / -1 in each group,
    the `easy` turn winning in g1 and losing in g2."""
    return [_one("a", "g1", "easy", 1.0, 0.9), _one("b", "g1", "hard", -1.0, 0.4),
            _one("c", "g2", "easy", -1.0, 0.7), _one("d", "g2", "hard", 1.0, 0.2)]


def _by_episode(config: AdvantageConfig) -> dict[str, float]:
    samples, _ = compute_advantages(_step(), config)
    return {s.episode_id: s.advantage for s in samples}


def test_process_terms_by_hand_under_each_baseline() -> None:
    # Outcome: each group's returns (+1, -1) normalise to +1, -1.
    # group: g1's scores (0.9, 0.4) -> +1, -1; g2's (0.7, 0.2) -> +1, -1: the easy state always wins the process term.
    group = _by_episode(AdvantageConfig(lam=0.5, eps=0.0))
    assert group == pytest.approx({"a": 1.5, "b": -1.5, "c": -0.5, "d": 0.5})
    # state: easy's (0.9, 0.7) -> +1, -1; hard's (0.4, 0.2) -> +1, -1: the better reasoner in each position wins.
    state = _by_episode(AdvantageConfig(lam=0.5, eps=0.0, process_baseline="state"))
    assert state == pytest.approx({"a": 1.5, "b": -0.5, "c": -1.5, "d": 0.5})


def test_reaching_an_easy_state_pays_nothing_by_itself() -> None:
    # Every turn at a state reasons as well as the others there (easy 0.9, hard 0.2): no process term at all, so the
    # hybrid equals outcome-only, where the group baseline pays the easy turns lam on top.
    step = [_one("a", "g1", "easy", 1.0, 0.9), _one("b", "g1", "hard", -1.0, 0.2),
            _one("c", "g2", "easy", -1.0, 0.9), _one("d", "g2", "hard", 1.0, 0.2)]
    outcome, _ = compute_advantages(step, AdvantageConfig(mode="outcome"))
    state, _ = compute_advantages(step, AdvantageConfig(process_baseline="state"))
    group, _ = compute_advantages(step, AdvantageConfig())
    assert [s.advantage for s in state] == pytest.approx([s.advantage for s in outcome])
    assert [g.advantage - o.advantage for g, o in zip(group, outcome, strict=True)] == pytest.approx(
        [0.5, -0.5, 0.5, -0.5], abs=1e-5)


def test_a_turn_alone_at_its_state_gets_no_process_term_and_an_unknown_state_falls_back_to_its_group() -> None:
    step = [_one("a", "g1", "lonely", 1.0, 0.9), _one("b", "g1", "", -1.0, 0.4), _one("c", "g1", "", 1.0, 0.2)]
    terms = state_process_terms(step, per_role=True, eps=0.0)
    # a is alone at its state: 0. b and c have no recorded state: normalised within their group, (0.4, 0.2) -> +-1.
    assert terms["score"] == pytest.approx({("a", "player_0", 0): 0.0, ("b", "player_0", 0): 1.0,
                                            ("c", "player_0", 0): -1.0})
    assert terms["predict"] == terms["score"] and terms["belief"] == {} and terms["agreement"] == {}


def test_the_same_information_state_against_other_private_information_is_another_position() -> None:
    # player_0 holds the King and sees the same history in all four; what player_1 holds decides what its policy
    # will do, so the turns are compared within (Q: 0.9 and 0.5) and (J: 0.3 and 0.1), not across the deal.
    step = [_one("a", "g1", "K", 1.0, 0.9, "Q"), _one("b", "g2", "K", -1.0, 0.5, "Q"),
            _one("c", "g3", "K", 1.0, 0.3, "J"), _one("d", "g4", "K", -1.0, 0.1, "J")]
    terms = state_process_terms(step, per_role=True, eps=0.0)["score"]
    assert terms == pytest.approx({("a", "player_0", 0): 1.0, ("b", "player_0", 0): -1.0,
                                   ("c", "player_0", 0): 1.0, ("d", "player_0", 0): -1.0})


def test_segment_credit_uses_the_state_terms_on_the_predict_tokens_only() -> None:
    samples, _ = compute_advantages(_step(), AdvantageConfig(lam=0.5, eps=0.0, credit="segment",
                                                             process_baseline="state"))
    tokens = {s.episode_id: s.token_advantages for s in samples}
    # <plan> and <action>: the outcome term alone; <predict>: outcome + lam * the state-normalised prediction.
    assert tokens == {"a": pytest.approx((1.0, 1.5, 1.0)), "b": pytest.approx((-1.0, -0.5, -1.0)),
                      "c": pytest.approx((-1.0, -1.5, -1.0)), "d": pytest.approx((1.0, 0.5, 1.0))}


def test_the_config_key_reaches_the_advantages_and_a_bad_value_is_refused() -> None:
    config = load_config(ROOT / "configs" / "kuhn_poker_tiny.yaml", ["algorithm.process_baseline=state"])
    assert advantage_config(config).process_baseline == "state"
    assert advantage_config(load_config(ROOT / "configs" / "kuhn_poker_tiny.yaml")).process_baseline == "group"
    with pytest.raises(ConfigError, match="process_baseline"):
        load_config(ROOT / "configs" / "kuhn_poker_tiny.yaml", ["algorithm.process_baseline=turn"])
    assert math.isfinite(_by_episode(AdvantageConfig(process_baseline="state"))["a"])
