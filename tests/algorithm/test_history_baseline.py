"""The history baseline of the outcome term (`algorithm.baseline: history`): a turn's return is compared with the
returns of its group's turns at the same history (same deal, same moves so far), so a second move is judged against
the other second moves made where it was made, not against games in which the first move went elsewhere."""

from __future__ import annotations

import dataclasses
import math
from pathlib import Path

import pytest
import torch

from strat.algorithm.advantage import AdvantageConfig, compute_advantages
from strat.algorithm.baselines import history_outcome_terms, normalise
from strat.algorithm.records import ScoredEpisode, TurnScore
from strat.config_loading import load_config
from strat.errors import ConfigError
from strat.train.settings import advantage_config
from strat.train.step_metrics import advantage_metrics

from .helpers import episode, turn

ROOT = Path(__file__).resolve().parents[2]


def _game(name: str, moves: list[tuple[str, str]], ret: float, group: str = "g") -> ScoredEpisode:
    """A Kuhn-like game of player_1 (the ego seat here) holding the Queen against the King: `moves` its
    (information state, move) turns; player_1's return `ret`."""
    turns = [dataclasses.replace(turn("player_1", index, move, episode_id=name), info_state=state)
             for index, (state, move) in enumerate(moves)]
    ep = episode(name, group, turns, {"player_0": -ret, "player_1": ret}, ego=("player_1",),
                 private_info={"player_0": "K", "player_1": "Q"})
    return ScoredEpisode(ep, ())


def _group() -> list[ScoredEpisode]:
    """Four games of one deal. In two the opponent checked and player_1 checked back (its first move, at '1p':
    return -1 each); in two the opponent bet and player_1, at '1b', called (-2) or folded (-1)."""
    return [_game("a", [("1p", "check")], -1.0), _game("b", [("1p", "check")], -1.0),
            _game("c", [("1b", "call")], -2.0), _game("d", [("1b", "fold")], -1.0)]


def _by_episode(config: AdvantageConfig, episodes: list[ScoredEpisode]) -> dict[str, float]:
    samples, _ = compute_advantages(episodes, config)
    return {s.episode_id: s.advantage for s in samples}


def test_the_group_baseline_blames_the_fold_for_being_bet_into() -> None:
    # Returns (-1, -1, -2, -1): mean -1.25, population std sqrt(3)/4 = 0.4330.
    group = _by_episode(AdvantageConfig(mode="outcome", eps=0.0), _group())
    assert group == pytest.approx({"a": 0.25 / 0.4330127, "b": 0.25 / 0.4330127, "c": -0.75 / 0.4330127,
                                   "d": 0.25 / 0.4330127})


def test_the_history_baseline_compares_moves_made_at_the_same_history() -> None:
    # '1p': both -1, no spread -> 0 and 0. '1b': (-2, -1), mean -1.5 -> -0.5, +0.5; over the group's std 0.4330.
    history = _by_episode(AdvantageConfig(mode="outcome", eps=0.0, baseline="history"), _group())
    assert history == pytest.approx({"a": 0.0, "b": 0.0, "c": -0.5 / 0.4330127, "d": 0.5 / 0.4330127})


def test_turns_alone_at_their_history_are_counted() -> None:
    # '1p' and '1b' hold two turns each: none alone. A fifth game at '1pb' is alone there.
    games = [*_group(), _game("e", [("1pb", "call")], -2.0)]
    _, stats = compute_advantages(games, AdvantageConfig(mode="outcome", eps=0.0, baseline="history"))
    assert stats.history_alone_turns == 1
    assert advantage_metrics(stats)["adv/history_alone_frac"] == pytest.approx(1 / 5)
    _, plain = compute_advantages(games, AdvantageConfig(mode="outcome", eps=0.0))
    assert plain.history_alone_turns is None and "adv/history_alone_frac" not in advantage_metrics(plain)


def test_the_first_move_gets_exactly_the_group_normalised_return() -> None:
    returns = torch.tensor([1.0, -1.0, 2.0, 0.0], dtype=torch.float64)
    first = history_outcome_terms(returns, torch.arange(4), [("0",)] * 4, 1e-6)
    assert torch.allclose(first, normalise(returns, 1e-6))


def test_a_later_turn_is_judged_by_what_followed_it() -> None:
    # Three members of returns (3, 1, -1): mean 1, population std sqrt(8/3) = 1.633. Their first moves share a history
    # (group terms +1.225, 0, -1.225). The second turns of members 0 and 1 share a history: (3, 1) centred on 2 ->
    # +1, -1, over 1.633. Member 2's second turn is alone at its history and keeps its group term; so does a turn
    # whose history is unknown.
    returns = torch.tensor([3.0, 1.0, -1.0], dtype=torch.float64)
    turn_episode = torch.tensor([0, 0, 1, 1, 2, 2, 2])
    histories = [("0",), ("0pb",), ("0",), ("0pb",), ("0",), ("0pp",), None]
    terms = history_outcome_terms(returns, turn_episode, histories, 0.0)
    std = math.sqrt(8 / 3)
    assert terms.tolist() == pytest.approx([2 / std, 1 / std, 0.0, -1 / std, -2 / std, -2 / std, -2 / std])


def test_no_spread_gives_zeros_and_a_lone_turn_keeps_its_group_term() -> None:
    flat = history_outcome_terms(torch.tensor([1.0, 1.0]), torch.tensor([0, 1]), [("x",), ("y",)], 1e-6)
    assert flat.tolist() == [0.0, 0.0]
    apart = history_outcome_terms(torch.tensor([1.0, -1.0]), torch.tensor([0, 1]), [("x",), ("y",)], 0.0)
    assert apart.tolist() == pytest.approx([1.0, -1.0])


def test_the_deal_is_part_of_the_history() -> None:
    # The same information state against different private cards of the opponent is not the same history: with
    # another game at each (returns -2, -1 against the King; +2, +1 against the Jack), each pair is centred apart.
    def against_jack(game: ScoredEpisode) -> ScoredEpisode:
        return ScoredEpisode(dataclasses.replace(game.episode, private_info={"player_0": "J", "player_1": "Q"}), ())

    games = [_game("a", [("1b", "call")], -2.0), _game("b", [("1b", "call")], -1.0),
             against_jack(_game("c", [("1b", "call")], 2.0)), against_jack(_game("d", [("1b", "call")], 1.0))]
    history = _by_episode(AdvantageConfig(mode="outcome", eps=0.0, baseline="history"), games)
    std = math.sqrt(2.5)  # returns (-2, -1, 2, 1): mean 0, population variance 2.5
    assert history == pytest.approx({"a": -0.5 / std, "b": 0.5 / std, "c": 0.5 / std, "d": -0.5 / std})


def test_two_seats_at_the_same_information_state_are_not_pooled() -> None:
    # Without per-role statistics both seats share one statistics group; equal information-state strings of the two
    # seats are still two histories: each seat's turn is alone at its own.
    turns = [dataclasses.replace(turn(agent, index, episode_id="a"), info_state="s")
             for index, agent in enumerate(("player_0", "player_1"))]
    ep = episode("a", "g", turns, {"player_0": 1.0, "player_1": -1.0}, ego=("player_0", "player_1"))
    _, stats = compute_advantages([ScoredEpisode(ep, ())],
                                  AdvantageConfig(mode="outcome", eps=0.0, baseline="history", per_role=False))
    assert stats.history_alone_turns == 2  # pooled, they would be one history of two turns


def test_the_process_term_is_added_unchanged() -> None:
    # Hybrid: the history-based outcome term plus lam times the group-normalised process term. Games c and d are
    # scored 0.8 and 0.2 (normalised +1, -1), a and b unscored (0).
    def with_score(game: ScoredEpisode, score: float) -> ScoredEpisode:
        return ScoredEpisode(game.episode, (TurnScore("player_1", 0, score, None, None, score, True),))

    games = _group()
    games[2], games[3] = with_score(games[2], 0.8), with_score(games[3], 0.2)
    hybrid = _by_episode(AdvantageConfig(mode="hybrid", lam=0.5, eps=0.0, baseline="history"), games)
    assert hybrid == pytest.approx({"a": 0.0, "b": 0.0, "c": -0.5 / 0.4330127 + 0.5, "d": 0.5 / 0.4330127 - 0.5})


def test_the_config_key_and_its_refusal() -> None:
    config = load_config(ROOT / "configs" / "kuhn_poker_tiny.yaml", ["algorithm.baseline=history"])
    assert advantage_config(config).baseline == "history"
    with pytest.raises(ConfigError, match="baseline"):
        load_config(ROOT / "configs" / "kuhn_poker_tiny.yaml", ["algorithm.baseline=histories"])
    with pytest.raises(ValueError, match="unknown baseline"):
        AdvantageConfig(baseline="value")  # type: ignore[arg-type]
