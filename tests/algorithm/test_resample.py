"""Resampling zero-spread groups (algorithm.zero_spread=resample): which groups are flat, how fresh groups
take their places, and the extra groups' plans."""

from strat.algorithm.advantage import replace_zero_spread_groups, zero_spread_group_ids
from strat.config import OpponentConfig
from strat.play.rollout import RolloutSettings, plan_groups

from .helpers import episode, turn

SELF = ("player_0", "player_1")


def _group(group_id: str, returns: list[float], ego: tuple[str, ...] = ("player_0",), penalty_in: int | None = None):
    """Episodes of one group; player_0 gets each return in `returns` (player_1 the opposite)."""
    out = []
    for index, value in enumerate(returns):
        turns = [turn("player_0", 0, penalty=-3.0 if index == penalty_in else None)]
        out.append(episode(f"{group_id}-e{index}", group_id, turns, {"player_0": value, "player_1": -value}, ego))
    return out


def test_a_group_is_flat_when_every_learning_seat_got_one_outcome() -> None:
    episodes = (
        _group("a", [1.0, 1.0, 1.0])          # flat
        + _group("b", [1.0, -1.0, 1.0])       # spread
        + _group("c", [2.0, 2.0], ego=SELF)   # flat for both seats
        + _group("d", [1.0, 1.0], penalty_in=1)  # the penalty is the outcome: -3 vs 1, spread
        + _group("e", [1.0])                  # one episode: not a group with spread to lose
    )
    assert zero_spread_group_ids(episodes) == ["a", "c"]


def test_with_turn_scoped_penalties_a_group_of_penalised_games_is_flat_only_when_every_turn_is() -> None:
    both_penalised = _group("a", [1.0, 1.0], penalty_in=0) + _group("a2", [1.0])  # -3 and 1: spread either way
    every_game = [
        episode(f"b-e{i}", "b", [turn("player_0", 0), turn("player_0", 2, penalty=-3.0)],
                {"player_0": 1.0, "player_1": -1.0})
        for i in range(2)
    ]
    all_invalid = [
        episode(f"c-e{i}", "c", [turn("player_0", 0, penalty=-3.0)], {"player_0": float(i), "player_1": 0.0})
        for i in range(2)
    ]
    episodes = both_penalised + every_game + all_invalid
    # Scope game: b's games both end at the penalty (flat), and so do c's.
    assert zero_spread_group_ids(episodes) == ["b", "c"]
    # Scope turn: b's valid turns (+1) stand against its invalid ones (-3); c has only invalid turns.
    assert zero_spread_group_ids(episodes, "turn") == ["c"]
    replaced, count = replace_zero_spread_groups(episodes, _group("r", [1.0, -1.0]), "turn")
    assert count == 1 and [e.group_id for e in replaced][-2:] == ["r", "r"]


def test_fresh_groups_with_spread_take_the_flat_groups_places_in_order() -> None:
    episodes = _group("a", [1.0, 1.0]) + _group("b", [1.0, -1.0]) + _group("c", [-1.0, -1.0])
    fresh = _group("r1", [2.0, 2.0]) + _group("r2", [2.0, -2.0]) + _group("r3", [1.0, -2.0])
    replaced, count = replace_zero_spread_groups(episodes, fresh)
    assert count == 2
    # r1 is flat too and is not used; r2 replaces a, r3 replaces c; b stays where it was.
    assert [e.episode_id for e in replaced] == ["r2-e0", "r2-e1", "b-e0", "b-e1", "r3-e0", "r3-e1"]


def test_flat_groups_stay_when_no_fresh_group_has_spread() -> None:
    episodes = _group("a", [1.0, 1.0]) + _group("b", [1.0, -1.0])
    replaced, count = replace_zero_spread_groups(episodes, _group("r1", [-2.0, -2.0]))
    assert count == 0 and replaced == episodes


def test_resample_plans_are_new_groups_and_reproducible() -> None:
    settings = RolloutSettings(game="kuhn_poker", opponents=(OpponentConfig(kind="self", weight=0.5),
                                                             OpponentConfig(kind="scripted", name="random", weight=0.5)))
    first = plan_groups(settings, 0, 5, 0, 4)
    again = plan_groups(settings, 0, 5, 0, 4, resample_round=0)
    round1 = plan_groups(settings, 0, 5, 0, 4, resample_round=1)
    round2 = plan_groups(settings, 0, 5, 0, 4, resample_round=2)
    assert first == again  # round 0 is the step's own plan, unchanged
    assert round1 == plan_groups(settings, 0, 5, 0, 4, resample_round=1)
    ids = [p.group_id for p in first + round1 + round2]
    seeds = [p.seed for p in first + round1 + round2]
    assert len(set(ids)) == 12 and len(set(seeds)) == 12
    assert round1[0].group_id == "s5-w0-r1-g0"
