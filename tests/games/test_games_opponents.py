"""Opponents: the interface, equilibrium exploitability, heuristic strength, minimax optimality."""

from __future__ import annotations

import functools
import math
import random
import statistics

import pyspiel
import pytest
from open_spiel.python import policy as policy_lib
from open_spiel.python.algorithms import exploitability

import games
from games import equilibrium, heuristics
from games.opponents import Opponent, make_opponent, opponent_names, reference_opponents


def tabular_policy(
    name: str, opponent: Opponent, **options
) -> tuple[pyspiel.Game, policy_lib.TabularPolicy]:
    """`opponent`'s play at every information state of the game, as an OpenSpiel policy."""
    env = games.make(name, **options)
    game = env.pyspiel_state.get_game()

    def probs(state: pyspiel.State) -> dict[int, float]:
        env.load_state(state)
        return opponent.action_probs(env, f"player_{state.current_player()}")

    return game, policy_lib.tabular_policy_from_callable(game, probs)


def mean_return(name: str, hero: str, villain: str, deals: int, **options) -> tuple[float, float]:
    """Mean and standard error of `hero`'s return against `villain` in every other seat.

    Each deal (seed) is played once with `hero` in each seat, which cancels most card luck.
    """
    env = games.make(name, **options)
    n = env.spec.num_players
    hero_player = make_opponent(hero, name, seed=1, **options)
    villain_player = make_opponent(villain, name, seed=2, **options)
    per_deal = []
    for deal in range(deals):
        total = 0.0
        for seat in range(n):
            env.reset(seed=deal)
            hero_agent = f"player_{seat}"
            for agent in env.turns():
                player = hero_player if agent == hero_agent else villain_player
                env.step(player.act(env, agent))
            total += env.returns()[hero_agent]
        per_deal.append(total / n)
    return statistics.fmean(per_deal), statistics.stdev(per_deal) / math.sqrt(deals)


def test_opponent_names_and_errors():
    assert opponent_names("kuhn_poker") == [
        "random", "heuristic", "contrarian", "timid", "bully", "station", "reader", "equilibrium"
    ]
    assert "reader" not in opponent_names("kuhn_poker", players=3)  # its belief is about one opponent
    assert opponent_names("leduc_poker") == ["random", "heuristic", "contrarian", "timid", "equilibrium"]
    assert opponent_names("tic_tac_toe") == ["random", "heuristic", "striker", "minimax"]
    assert opponent_names("liars_dice") == ["random", "heuristic", "contrarian", "timid", "truthful"]
    assert opponent_names("connect_four") == ["random", "heuristic", "striker"]
    assert opponent_names("bargaining") == ["random", "heuristic"]
    # An evaluation's default: random and the references, not the weak players a warm start imitates.
    assert reference_opponents("kuhn_poker") == ["random", "heuristic", "equilibrium"]
    assert reference_opponents("kuhn_poker", players=3) == ["random", "heuristic", "equilibrium"]
    assert reference_opponents("leduc_poker") == ["random", "heuristic", "equilibrium"]
    assert reference_opponents("tic_tac_toe") == ["random", "heuristic", "minimax"]
    assert reference_opponents("liars_dice") == ["random", "heuristic"]
    with pytest.raises(ValueError, match="'minimax' is not available.*kuhn_poker"):
        make_opponent("minimax", "kuhn_poker")
    with pytest.raises(ValueError, match="unknown opponent 'genius'.*random"):
        make_opponent("genius", "kuhn_poker")
    with pytest.raises(ValueError, match="unknown game 'chess'"):
        opponent_names("chess")


@pytest.mark.parametrize("name", games.names())
def test_action_probs_are_distributions_over_legal_actions(name):
    env = games.make(name)
    opponents = [make_opponent(o, name, seed=0) for o in opponent_names(name)]
    rng = random.Random(0)
    for game in range(20):
        env.reset(seed=game)
        for agent in env.turns():
            for opponent in opponents:
                probs = opponent.action_probs(env, agent)
                assert set(probs) <= set(env.legal_actions())
                assert math.isclose(sum(probs.values()), 1.0, abs_tol=1e-9)
                assert opponent.act(env, agent) in env.legal_actions()
            env.step(rng.choice(env.legal_actions()))


def test_opponents_are_reproducible_for_a_seed():
    env = games.make("leduc_poker")
    env.reset(seed=0)
    first = [make_opponent("random", "leduc_poker", seed=5).act(env, "player_0") for _ in range(5)]
    second = [make_opponent("random", "leduc_poker", seed=5).act(env, "player_0") for _ in range(5)]
    assert first == second


@pytest.mark.parametrize(("name", "bound"), [("kuhn_poker", 0.001), ("leduc_poker", 0.02)])
def test_equilibrium_exploitability(name, bound):
    game, policy = tabular_policy(name, make_opponent("equilibrium", name))
    assert exploitability.exploitability(game, policy) < bound
    _, uniform = tabular_policy(name, make_opponent("random", name))
    assert exploitability.exploitability(game, uniform) > 0.4


def test_equilibrium_three_player_kuhn_is_near_nash():
    opponent = make_opponent("equilibrium", "kuhn_poker", players=3)
    game, policy = tabular_policy("kuhn_poker", opponent, players=3)
    assert exploitability.nash_conv(game, policy) < 0.003


def test_equilibrium_is_cached_on_disk(tmp_path, monkeypatch):
    monkeypatch.setenv("STRAT_CACHE_DIR", str(tmp_path))
    equilibrium._policy_table.cache_clear()
    try:
        table = equilibrium.policy_table("kuhn_poker")
        files = list(tmp_path.iterdir())
        assert [f.suffix for f in files] == [".json"]
        equilibrium._policy_table.cache_clear()
        assert equilibrium.policy_table("kuhn_poker") == table
        assert len(table) == 12
    finally:
        equilibrium._policy_table.cache_clear()


@pytest.mark.parametrize(
    ("name", "options", "deals"),
    [("kuhn_poker", {}, 3000), ("kuhn_poker", {"players": 3}, 1500), ("leduc_poker", {}, 5000)],
)
def test_poker_heuristic_beats_random_and_loses_to_equilibrium(name, options, deals):
    mean, error = mean_return(name, "heuristic", "random", deals // 4, **options)
    assert mean - 1.96 * error > 0, (mean, error)
    mean, error = mean_return(name, "heuristic", "equilibrium", deals, **options)
    assert mean + 1.96 * error < 0, (mean, error)


def test_kuhn_contrarian_is_card_aware_and_weak():
    """Three times in four it plays the heuristic's move upside down: by hand, J bets 3/4, K bets 1/4, Q bets 1/4
    (Q is one of the two highest cards), and as a whole it is far more exploitable than uniform play."""
    contrarian = make_opponent("contrarian", "kuhn_poker")
    env = games.make("kuhn_poker")
    game, policy = tabular_policy("kuhn_poker", contrarian)
    for state_key, probs in policy.to_dict().items():
        card = int(state_key[0])
        bet = dict(probs)[1]
        assert bet == pytest.approx(0.75 if card == 0 else 0.25), state_key
    _, uniform = tabular_policy("kuhn_poker", make_opponent("random", "kuhn_poker"))
    assert exploitability.exploitability(game, policy) > exploitability.exploitability(game, uniform) + 0.2
    env.reset(seed=0)
    assert set(contrarian.action_probs(env, env.agent_selection)) == set(env.legal_actions(env.agent_selection))


def test_kuhn_timid_ranks_its_cards_right_and_is_weak():
    """By hand: at every information set the King bets (or calls) 1/2, the Queen 1/4 and the Jack 1/10; it ranks
    the cards the right way round, yet it is more exploitable (0.388) than always betting (1/3) and far from the
    equilibrium's 0, and uniform play's 0.458 is the reference OpenSpiel gives on the same tree."""
    timid = make_opponent("timid", "kuhn_poker")
    game, policy = tabular_policy("kuhn_poker", timid)
    for state_key, probs in policy.to_dict().items():
        assert dict(probs)[1] == pytest.approx((0.1, 0.25, 0.5)[int(state_key[0])]), state_key
    assert exploitability.exploitability(game, policy) == pytest.approx(0.3879, abs=1e-3)
    _, uniform = tabular_policy("kuhn_poker", make_opponent("random", "kuhn_poker"))
    assert exploitability.exploitability(game, uniform) == pytest.approx(0.4583, abs=1e-3)
    assert "timid" not in opponent_names("tic_tac_toe")


def test_leduc_timid_ranks_its_hand_right_and_is_weak():
    """By hand, at each of the 936 information sets: with nothing owed it raises one time in ten with a Jack (no
    pair), one time in four with a Queen and half the time with a King or a pair; facing a raise it folds 13/15, 2/3
    and 1/3 of the time (9/10, 3/4 and 1/2 facing a second raise, which cannot be raised again). OpenSpiel scores it
    1.329 exploitable (uniform play 2.374, the heuristic player 1.300), and against the heuristic player it scores
    between the random player and the equilibrium, outside the intervals."""
    timid = make_opponent("timid", "leduc_poker")
    game, policy = tabular_policy("leduc_poker", timid)
    table = policy.to_dict()
    assert len(table) == 936
    for state_key, probs in table.items():
        card = int(state_key.split("[Private: ")[1].split("]")[0]) // 2
        public = int(state_key.split("[Public: ")[1].split("]")[0]) // 2 if "[Public: " in state_key else None
        strength = 2 if card == 2 or card == public else card
        legal = {action: p for action, p in probs if p > 0}
        if 0 in legal and len(legal) == 3:  # facing a raise
            assert legal[0] == pytest.approx((13 / 15, 2 / 3, 1 / 3)[strength]), state_key
        elif 0 in legal:  # facing the round's second raise, which cannot be raised again
            assert legal[0] == pytest.approx((0.9, 0.75, 0.5)[strength]), state_key
        else:
            assert legal[2] == pytest.approx((0.1, 0.25, 0.5)[strength]), state_key
    assert exploitability.exploitability(game, policy) == pytest.approx(1.329, abs=2e-3)
    mean, error = mean_return("leduc_poker", "timid", "heuristic", 2000)
    for other in ("random", "equilibrium"):
        baseline, baseline_error = mean_return("leduc_poker", other, "heuristic", 2000)
        gap = 1.96 * math.hypot(error, baseline_error)
        assert (mean > baseline + gap) if other == "random" else (mean < baseline - gap), (other, mean, baseline)


def test_kuhn_bully_reads_the_betting_and_is_weak():
    """By hand: with no bet before it (player 0's opening, player 1 after a check) it bets the King 9/10 and the
    Queen and the Jack 1/2; facing a bet (player 1 after a bet, player 0 after check-bet) it calls as the timid player
    does (King 1/2, Queen 1/4, Jack 1/10). OpenSpiel scores it more exploitable (0.408) than always betting (1/3)."""
    bully = make_opponent("bully", "kuhn_poker")
    game, policy = tabular_policy("kuhn_poker", bully)
    table = policy.to_dict()
    assert len(table) == 12
    for state_key, probs in table.items():
        card, history = int(state_key[0]), state_key[1:]
        expected = (0.1, 0.25, 0.5)[card] if "b" in history else (0.5, 0.5, 0.9)[card]
        assert dict(probs)[1] == pytest.approx(expected), state_key
    assert exploitability.exploitability(game, policy) == pytest.approx(0.4083, abs=1e-3)
    assert "bully" not in opponent_names("leduc_poker")


def test_kuhn_station_bets_timidly_and_calls_at_random():
    """By hand: with no bet before it, it bets as the timid player does (King 1/2, Queen 1/4, Jack 1/10); facing a
    bet it calls half the time whatever its card. OpenSpiel scores it 0.442 exploitable."""
    game, policy = tabular_policy("kuhn_poker", make_opponent("station", "kuhn_poker"))
    for state_key, probs in policy.to_dict().items():
        card, history = int(state_key[0]), state_key[1:]
        assert dict(probs)[1] == pytest.approx(0.5 if "b" in history else (0.1, 0.25, 0.5)[card]), state_key
    assert exploitability.exploitability(game, policy) == pytest.approx(0.4417, abs=1e-3)


def test_kuhn_reader_moves_on_its_belief_and_is_weak():
    """By hand: believing a card below its own it bets (or calls) 0.9 * 1/2 + 0.1/2 = 1/2, otherwise 0.1/2 = 1/20;
    its belief is either card it does not hold at even chance, so the King bets 1/2, the Queen (1/2 + 1/20) / 2 =
    0.275 and the Jack 1/20 at every information set. OpenSpiel scores it 0.368 exploitable, more than always betting
    (1/3)."""
    game, policy = tabular_policy("kuhn_poker", make_opponent("reader", "kuhn_poker"))
    for state_key, probs in policy.to_dict().items():
        assert dict(probs)[1] == pytest.approx((0.05, 0.275, 0.5)[int(state_key[0])]), state_key
    assert exploitability.exploitability(game, policy) == pytest.approx(0.3684, abs=1e-3)
    env = games.make("kuhn_poker")
    env.reset(seed=0)
    agent = env.agent_selection
    own = env.card(agent)
    draws = [heuristics.kuhn_poker_reader_turn(env, agent, random.Random(seed))[1:] for seed in range(40)]
    names = ("Jack", "Queen", "King")
    # Each belief names a card one does not hold, and the move's probabilities are those of that belief.
    assert {belief for belief, _ in draws} == {name for card, name in enumerate(names) if card != own}
    for belief, probs in draws:
        assert probs[1] == pytest.approx(0.5 if names.index(belief) < own else 0.05)


def _liars_dice_deals():
    """One reset Liar's dice env per deal of the default game (one six-sided die each): all 36 (die 0, die 1)."""
    deals = {}
    for seed in range(2000):
        env = games.make("liars_dice")
        env.reset(seed=seed)
        deals.setdefault((env.dice("player_0")[0], env.dice("player_1")[0]), seed)
    assert len(deals) == 36
    return deals


def test_liars_dice_truthful_bids_only_what_its_die_shows():
    """By hand: it opens with one of its own face (one one when its die is the wild six), tops a bid only with a
    face its die backs, and calls "liar" when it has none; so every bid it makes is true, and against the heuristic
    player it scores +2/36 as player 0 and -6/36 as player 1 over the 36 deals (an independent enumeration of the
    one-die game with both players' rules written out gives the same)."""
    truthful = make_opponent("truthful", "liars_dice")
    heuristic = make_opponent("heuristic", "liars_dice")
    names = {}
    deals = _liars_dice_deals()
    for (die_0, die_1), seed in deals.items():
        env = games.make("liars_dice")
        env.reset(seed=seed)
        opening = truthful.act(env, "player_0")
        names[die_0] = env.action_name(opening)
        count, face = env.bid(opening)
        assert count <= [die_0, die_1].count(face) + (face != 6) * [die_0, die_1].count(6)  # true for every deal
    assert names == {1: "bid 1 one", 2: "bid 1 two", 3: "bid 1 three", 4: "bid 1 four", 5: "bid 1 five",
                     6: "bid 1 one"}
    env = games.make("liars_dice")
    env.reset(seed=deals[(2, 5)])
    env.step(env.all_action_names().index("bid 1 four"))
    assert env.action_name(truthful.act(env, "player_1")) == "bid 1 five"
    env.step(truthful.act(env, "player_1"))
    assert env.action_name(truthful.act(env, "player_0")) == "liar"  # a two tops nothing above one five
    totals = []
    for seat in range(2):
        total = 0.0
        for seed in deals.values():
            env = games.make("liars_dice")
            env.reset(seed=seed)
            for agent in env.turns():
                player = truthful if agent == f"player_{seat}" else heuristic
                env.step(player.act(env, agent))
            total += env.returns()[f"player_{seat}"]
        totals.append(total)
    assert totals == [2.0, -6.0]


def test_liars_dice_timid_opens_on_its_die_and_plays_at_random_after():
    """By hand, holding a three: half the time "bid 1 three", else uniform over the 12 opening bids; a wild six bids
    sixes. So over the 36 deals its opening margin (P(own face) minus P(another face), as the perception probe
    counts it) is 0.5 exactly. Every later turn is uniform. It is weak: against the heuristic player it scores between
    the random player and the truthful bidder, both outside the intervals."""
    timid = make_opponent("timid", "liars_dice")
    deals = _liars_dice_deals()
    env = games.make("liars_dice")
    env.reset(seed=deals[(3, 5)])
    names = env.all_action_names()
    opening = {names[a]: p for a, p in timid.action_probs(env, "player_0").items()}
    assert len(opening) == 12 and opening["bid 1 three"] == pytest.approx(0.5 + 0.5 / 12)
    assert all(p == pytest.approx(0.5 / 12) for name, p in opening.items() if name != "bid 1 three")
    env.step(names.index("bid 1 five"))
    reply = timid.action_probs(env, "player_1")
    assert len(reply) > 2 and len(set(reply.values())) == 1  # uniform over the bids above and "liar"
    for (die_0, _), seed in deals.items():
        env = games.make("liars_dice")
        env.reset(seed=seed)
        by_face: dict[int, float] = {}
        for action, p in timid.action_probs(env, "player_0").items():
            face = env.bid(action)[1]
            by_face[face] = by_face.get(face, 0.0) + p
        others = [p for face, p in by_face.items() if face != die_0]
        assert by_face[die_0] - statistics.fmean(others) == pytest.approx(0.5)
    mean, error = mean_return("liars_dice", "timid", "heuristic", 2000)
    for other in ("random", "truthful"):
        baseline, baseline_error = mean_return("liars_dice", other, "heuristic", 2000)
        gap = 1.96 * math.hypot(error, baseline_error)
        assert (mean > baseline + gap) if other == "random" else (mean < baseline - gap), (other, mean, baseline)


def test_liars_dice_contrarian_reads_its_die_the_wrong_way_round():
    """By hand, holding a three: it opens leaning to the one-count bids on the faces its die does not back (one,
    two, four, five and six, for a six counts only as a six in a bid on sixes: 0.5 / 5 each on top of the uniform
    0.5 / 12), and it doubts ("liar") a bid on threes, which its
    die backs."""
    contrarian = make_opponent("contrarian", "liars_dice")
    env = games.make("liars_dice")
    env.reset(seed=_liars_dice_deals()[(3, 5)])
    names = env.all_action_names()
    opening = {names[a]: p for a, p in contrarian.action_probs(env, "player_0").items()}
    assert len(opening) == 12 and sum(opening.values()) == pytest.approx(1.0)  # no "liar" before a bid
    for face in ("one", "two", "four", "five", "six"):
        assert opening[f"bid 1 {face}"] == pytest.approx(0.5 / 12 + 0.5 / 5)
    assert opening["bid 1 three"] == opening["bid 2 ones"] == pytest.approx(0.5 / 12)
    env.step(names.index("bid 1 three"))
    env.step(names.index("bid 2 threes"))
    reply = {names[a]: p for a, p in contrarian.action_probs(env, "player_0").items()}
    assert reply["liar"] == pytest.approx(0.5 + 0.5 / len(reply))  # it holds a three: the wrong move is to doubt


def test_liars_dice_contrarian_is_weaker_than_random_against_the_heuristic_player():
    contrarian, error = mean_return("liars_dice", "contrarian", "heuristic", 1000)
    baseline, baseline_error = mean_return("liars_dice", "random", "heuristic", 1000)
    assert contrarian < baseline - 1.96 * math.hypot(error, baseline_error), (contrarian, baseline)


@pytest.mark.parametrize(("name", "deals"), [("kuhn_poker", 2000), ("leduc_poker", 2000), ("liars_dice", 2000)])
def test_contrarian_loses_to_random(name, deals):
    mean, error = mean_return(name, "contrarian", "random", deals)
    assert mean + 1.96 * error < 0, (mean, error)


@pytest.mark.parametrize("name", ["tic_tac_toe", "connect_four", "liars_dice", "bargaining"])
def test_heuristic_does_better_than_random(name):
    heuristic, error = mean_return(name, "heuristic", "random", 150)
    baseline, baseline_error = mean_return(name, "random", "random", 150)
    assert heuristic - baseline > 1.96 * math.hypot(error, baseline_error), (heuristic, baseline)


def test_striker_takes_a_win_and_never_blocks():
    """Tic-tac-toe: x holds a1 a2 (a3 wins), o holds b1 b2 (b3 wins). x's striker takes a3; o's, with x's a3 open
    and its own b3 too, takes b3 (and b1 in the mirror position); with no line of its own to complete it plays any
    empty cell, x's winning a3 no likelier: it never blocks."""
    env = games.make("tic_tac_toe")
    striker = make_opponent("striker", "tic_tac_toe")
    env.reset(seed=0)
    for cell in (0, 3, 1, 4):  # x a1, o b1, x a2, o b2
        env.step(cell)
    assert striker.action_probs(env, env.agent_selection) == {2: 1.0}
    env.step(6)  # x c1 instead: now o can win at b3
    assert striker.action_probs(env, env.agent_selection) == {5: 1.0}
    env.reset(seed=0)
    for cell in (0, 4, 1, 5, 8):  # x a1, o b2, x a2, o b3, x c3 (blocks nothing of o's: b1 is open)
        env.step(cell)
    assert striker.action_probs(env, env.agent_selection) == {3: 1.0}
    env.reset(seed=0)
    for cell in (0, 4, 1):  # x a1, o b2, x a2: x threatens a3, o has no line to complete
        env.step(cell)
    probs = striker.action_probs(env, env.agent_selection)
    assert set(probs) == set(env.legal_actions()) and len(set(probs.values())) == 1


def test_connect_four_striker_completes_its_line_where_the_piece_lands():
    """x's three stacked in column 0 wins on a fourth; o's three in a row along the bottom (columns 1-3) win at column
    4 or nowhere else (column 0 is x's). The striker takes its own win and otherwise plays any open column."""
    env = games.make("connect_four")
    striker = make_opponent("striker", "connect_four")
    env.reset(seed=0)
    assert striker.action_probs(env, "player_0") == dict.fromkeys(range(7), 1 / 7)  # nothing to complete
    for column in (0, 1, 0, 2, 0, 3):  # x 0, o 1, x 0, o 2, x 0, o 3
        env.step(column)
    assert striker.action_probs(env, env.agent_selection) == {0: 1.0}  # x's fourth in column 0
    env.step(6)  # x plays elsewhere: o completes the bottom row at column 4
    assert striker.action_probs(env, env.agent_selection) == {4: 1.0}


def test_line_moves_are_the_mover_s_wins_and_the_cells_it_must_block():
    """Tic-tac-toe: x a1 b1 and o a2 b2 (actions 0 1 and 3 4), x to move: x wins at c1 and must block c2; after x
    a3, o wins at c2 and must block c1. Connect Four: x stacked three in column 0 and o three along the bottom (columns 1-3): x wins in
    column 0 and blocks o in column 4. A game without lines is refused."""
    env = games.make("tic_tac_toe")
    env.reset(seed=0)
    assert heuristics.line_moves(env, "player_0") == heuristics.LineMoves((), ())
    for cell in (0, 3, 1, 4):
        env.step(cell)
    assert heuristics.line_moves(env, env.agent_selection) == heuristics.LineMoves(wins=(2,), blocks=(5,))
    env.step(6)
    assert heuristics.line_moves(env, env.agent_selection) == heuristics.LineMoves(wins=(5,), blocks=(2,))
    env = games.make("connect_four")
    env.reset(seed=0)
    for column in (0, 1, 0, 2, 0, 3):
        env.step(column)
    assert heuristics.line_moves(env, env.agent_selection) == heuristics.LineMoves(wins=(0,), blocks=(4,))
    kuhn = games.make("kuhn_poker")
    kuhn.reset(seed=0)
    with pytest.raises(ValueError, match="tic-tac-toe and Connect Four"):
        heuristics.line_moves(kuhn, kuhn.agent_selection)


def test_striker_is_between_random_and_the_heuristic_player():
    """It beats random (it takes every win it is offered) and loses to the heuristic player (which also blocks),
    each outside the 95% interval."""
    for name in ("tic_tac_toe", "connect_four"):
        against_random, error = mean_return(name, "striker", "random", 150)
        assert against_random - 1.96 * error > 0, (name, against_random, error)
        against_heuristic, error = mean_return(name, "striker", "heuristic", 150)
        assert against_heuristic + 1.96 * error < 0, (name, against_heuristic, error)


@functools.cache
def negamax(board: tuple[str, ...], mark: str) -> int:
    """Value of `board` for the player about to place `mark` (1 win, 0 draw, -1 loss)."""
    lines = [(0, 1, 2), (3, 4, 5), (6, 7, 8), (0, 3, 6), (1, 4, 7), (2, 5, 8), (0, 4, 8), (2, 4, 6)]
    other = "o" if mark == "x" else "x"
    if any(board[a] == board[b] == board[c] == other for a, b, c in lines):
        return -1
    empty = [i for i, cell in enumerate(board) if cell == "."]
    if not empty:
        return 0
    return max(-negamax(board[:i] + (mark,) + board[i + 1:], other) for i in empty)


def test_minimax_plays_optimally_at_every_reachable_state():
    env = games.make("tic_tac_toe")
    minimax = make_opponent("minimax", "tic_tac_toe")
    game = env.pyspiel_state.get_game()
    seen: set[str] = set()
    stack = [game.new_initial_state()]
    while stack:
        state = stack.pop()
        if state.is_terminal() or str(state) in seen:
            continue
        seen.add(str(state))
        board = tuple("".join(str(state).split()))
        mark = "x" if state.current_player() == 0 else "o"
        value = negamax(board, mark)
        env.load_state(state)
        agent = f"player_{state.current_player()}"
        for action in minimax.action_probs(env, agent):
            child = board[:action] + (mark,) + board[action + 1:]
            assert -negamax(child, "o" if mark == "x" else "x") == value, (str(state), action)
        stack.extend(state.child(action) for action in state.legal_actions())
    assert len(seen) == 4520  # non-terminal positions of tic-tac-toe


def test_equilibrium_for_other_options_fails_clearly():
    env = games.make("kuhn_poker", players=3)
    env.reset(seed=0)
    two_player = make_opponent("equilibrium", "kuhn_poker")
    with pytest.raises(ValueError, match="same options as the env"):
        two_player.act(env, env.agent_selection)
