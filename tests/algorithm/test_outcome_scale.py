"""`algorithm.outcome_scale`: the outcome term divided by its group's std (GRPO) or not (`none`, Dr. GRPO). With groups
of one deal the std weighs each deal by how predictable its returns are, which can set the expected update of a move
against what the move earns: values by hand."""

from __future__ import annotations

import math
from pathlib import Path

import pytest
import torch

from strat.algorithm.advantage import AdvantageConfig, compute_advantages
from strat.algorithm.baselines import history_outcome_terms, normalise
from strat.algorithm.records import ScoredEpisode
from strat.config_loading import load_config
from strat.errors import ConfigError
from strat.export.card import _method_rows
from strat.train.settings import advantage_config

from .helpers import episode, turn

KUHN = Path(__file__).resolve().parents[2] / "configs" / "kuhn_poker_tiny.yaml"


def _facing_a_bet(group: str, opponent: str) -> list[ScoredEpisode]:
    """One deal, four games of player_1 holding the Queen, facing player_0's bet: it folds three times (-1) and
    calls once, losing 2 to the King or winning 2 from a bluffing Jack."""
    call = -2.0 if opponent == "King" else 2.0
    games = []
    for index, (move, ret) in enumerate([("fold", -1.0)] * 3 + [("call", call)]):
        name = f"{group}-{index}"
        turns = [turn("player_1", 1, move, episode_id=name)]
        games.append(ScoredEpisode(episode(name, group, turns, {"player_0": -ret, "player_1": ret},
                                           ego=("player_1",)), ()))
    return games


def _call_advantages(scale: str) -> list[float]:
    """The calls' advantages over two deals against a betting King and one against a bluffing Jack."""
    games = _facing_a_bet("k1", "King") + _facing_a_bet("k2", "King") + _facing_a_bet("j", "Jack")
    samples, _ = compute_advantages(games, AdvantageConfig(mode="outcome", eps=0.0, outcome_scale=scale))
    return [s.advantage for s in samples if s.episode_id.endswith("-3")]


def test_the_std_can_turn_a_paying_move_s_update_against_it() -> None:
    # Calling earns (-2 - 2 + 2) / 3 = -2/3 a game against these three deals, folding -1: the call pays.
    # King deals: returns (-1, -1, -1, -2), mean -1.25, population std sqrt(0.1875) = 0.4330: the call's term -0.75
    # unscaled, -sqrt(3) = -1.732 scaled. The Jack deal: (-1, -1, -1, +2), mean -0.25, std sqrt(1.6875) = 1.299:
    # +2.25 unscaled, +sqrt(3) scaled. The King's predictable deals weigh three times as much once divided.
    scaled = _call_advantages("std")
    assert scaled == pytest.approx([-math.sqrt(3), -math.sqrt(3), math.sqrt(3)])
    assert sum(scaled) < 0
    centred = _call_advantages("none")
    assert centred == pytest.approx([-0.75, -0.75, 2.25])
    assert sum(centred) > 0


def test_unscaled_terms_are_the_returns_less_their_mean() -> None:
    returns = torch.tensor([3.0, 1.0, -1.0, 1.0], dtype=torch.float64)
    assert normalise(returns, 1e-6, scale=False).tolist() == pytest.approx([2.0, 0.0, -2.0, 0.0])
    assert normalise(torch.tensor([1.0, 1.0]), 1e-6, scale=False).tolist() == [0.0, 0.0]
    # The history baseline without the spread: the example of test_history_baseline, not divided by sqrt(8/3).
    terms = history_outcome_terms(torch.tensor([3.0, 1.0, -1.0], dtype=torch.float64),
                                  torch.tensor([0, 0, 1, 1, 2, 2, 2]),
                                  [("0",), ("0pb",), ("0",), ("0pb",), ("0",), ("0pp",), None], 0.0, scale=False)
    assert terms.tolist() == pytest.approx([2.0, 1.0, 0.0, -1.0, -2.0, -2.0, -2.0])


def test_the_setting_is_read_from_the_config_refused_when_unknown_and_named_on_the_card() -> None:
    default = load_config(KUHN)
    assert advantage_config(default).outcome_scale == "std"
    unscaled = load_config(KUHN, ["algorithm.outcome_scale=none"])
    assert advantage_config(unscaled).outcome_scale == "none"
    with pytest.raises(ConfigError, match="outcome_scale"):
        load_config(KUHN, ["algorithm.outcome_scale=batch"])
    with pytest.raises(ValueError, match="outcome_scale"):
        AdvantageConfig(outcome_scale="batch")  # type: ignore[arg-type]
    assert dict(_method_rows(default))["baseline"] == "group"
    assert dict(_method_rows(unscaled))["baseline"] == "group, the outcome not divided by its group's std"
