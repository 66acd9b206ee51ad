"""experiments/which_learning_signals_are_worth_a_run/kuhn_dynamics.py, the tabular surrogate of the training
dynamics: its exploitability is OpenSpiel's, and a run is reproducible from its seed."""

from __future__ import annotations

import numpy as np
import pyspiel
import pytest
from open_spiel.python import policy as openspiel_policy
from open_spiel.python.algorithms import exploitability as openspiel_exploitability

from .conftest import experiment_module


@pytest.fixture(scope="module")
def dynamics():
    yield from experiment_module("kuhn_dynamics")


def _openspiel(dynamics, bets: np.ndarray) -> float:
    game = pyspiel.load_game("kuhn_poker")
    table = openspiel_policy.TabularPolicy(game)
    for key, row in table.state_lookup.items():
        bet = bets[dynamics.infoset(int(key[0]), key[1:])]
        table.action_probability_array[row] = [1.0 - bet, bet]
    return openspiel_exploitability.exploitability(game, table)


def test_exploitability_is_openspiels(dynamics) -> None:
    rng = np.random.default_rng(0)
    tables = [np.ones(12), np.full(12, 0.5), dynamics.contrarian(), *rng.random((3, 12))]
    for bets in tables:
        assert dynamics.exploitability(bets) == pytest.approx(_openspiel(dynamics, bets), abs=1e-9)
    assert dynamics.exploitability(np.ones(12)) == pytest.approx(1 / 3)  # always bet / call


def test_runs_reproduce_from_the_seed_and_report_every_five_steps(dynamics) -> None:
    first = dynamics.simulate(steps=12, groups=4, move_entropy=0.5, shared=1.0, specific=0.2, seed=3)
    assert [step for step, _ in first] == [5, 10, 12]
    assert dynamics.simulate(steps=12, groups=4, move_entropy=0.5, shared=1.0, specific=0.2, seed=3) == first
    assert dynamics.simulate(steps=12, groups=4, seed=4) != first
    assert all(0.0 <= e <= 3.0 for _, e in first)


def test_the_warm_start_players_and_the_kl(dynamics) -> None:
    """The timid and station starts are the scripted players' tables (OpenSpiel: 0.388 and 0.442); the KL to the
    snapshot, made large, holds the policy at its start through the first snapshot period."""
    assert _openspiel(dynamics, dynamics.timid()) == pytest.approx(0.3879, abs=1e-3)
    assert _openspiel(dynamics, dynamics.station()) == pytest.approx(0.4417, abs=1e-3)
    assert dynamics.station()[dynamics.infoset(0, "b")] == 0.5
    assert dynamics.station()[dynamics.infoset(0, "p")] == 0.1
    free = dynamics.simulate(init="timid", steps=5, groups=4, lr=0.05, seed=1)[-1][1]
    held = dynamics.simulate(init="timid", steps=5, groups=4, lr=0.05, kl=1000.0, seed=1)[-1][1]
    assert abs(free - 0.3879) > 0.03 and abs(held - 0.3879) < 0.01


def test_a_split_shared_logit_changes_the_run(dynamics) -> None:
    tied = dynamics.simulate(init="timid", steps=10, groups=4, shared=1.0, specific=0.2, seed=2)
    split = dynamics.simulate(init="timid", steps=10, groups=4, shared=1.0, specific=0.2, split_shared=True, seed=2)
    assert split != tied
    assert dynamics.simulate(init="timid", steps=10, groups=4, split_shared=True, seed=2) == \
        dynamics.simulate(init="timid", steps=10, groups=4, seed=2)  # without a shared logit nothing to split


def test_the_surrogates_best_response_gains_the_exploitability(dynamics) -> None:
    """The surrogate's exploiter: against each seat's best response the policy loses exactly its NashConv (OpenSpiel's
    exploitability, twice over in two-player zero-sum), and a pure best response to a player who always bets folds
    the Jack and calls with the Queen and the King."""

    def value(first: np.ndarray, second: np.ndarray) -> float:  # player 0's expected return
        total = 0.0
        for cards in ((a, b) for a in range(3) for b in range(3) if a != b):
            def walk(history: str) -> float:
                end = dynamics._terminal(history, cards)
                if end is not None:
                    return end
                seat = len(history) % 2
                p = (first, second)[seat][dynamics.infoset(cards[seat], history)]
                return p * walk(history + "b") + (1 - p) * walk(history + "p")
            total += walk("") / 6
        return total

    rng = np.random.default_rng(5)
    for bets in (dynamics.timid(), *rng.random((3, 12))):
        gains = value(dynamics.best_response(bets, 0), bets) - value(bets, dynamics.best_response(bets, 1))
        assert gains / 2 == pytest.approx(_openspiel(dynamics, bets), abs=1e-9)
    always = dynamics.best_response(np.ones(12), 1)
    assert [always[dynamics.infoset(card, "b")] for card in range(3)] == [0.0, 1.0, 1.0]
    assert dynamics.simulate(init="timid", steps=5, groups=4, mix=(0.4, 0.2, 0.2, 0.2), br_estimated=True,
                             seed=1) != dynamics.simulate(init="timid", steps=5, groups=4, seed=1)


def test_against_a_fixed_policy_the_best_response_captures_its_exploitability(dynamics) -> None:
    """`--fixed`: the figure is the learner's seat-averaged return against the fixed policy. The best response (each
    seat's half of the table) takes exactly the fixed policy's exploitability (OpenSpiel's), the policy itself 0; a
    learner trained against the uniform random player alone captures most of it, a seed reproduces its run."""
    rng = np.random.default_rng(7)
    for fixed in (dynamics.timid(), np.ones(12), *rng.random((3, 12))):
        first, second = dynamics.best_response(fixed, 0), dynamics.best_response(fixed, 1)
        merged = np.array([(first if len(h) % 2 == 0 else second)[dynamics.infoset(c, h)]
                           for c in range(3) for h in dynamics.HISTORIES])
        assert dynamics.return_against(merged, fixed) == pytest.approx(_openspiel(dynamics, fixed), abs=1e-9)
        assert dynamics.return_against(fixed, fixed) == pytest.approx(0.0, abs=1e-12)
    uniform = np.full(12, 0.5)
    run = dynamics.simulate(init="timid", steps=30, groups=8, lr=0.5, fixed=uniform, seed=0)
    assert run == dynamics.simulate(init="timid", steps=30, groups=8, lr=0.5, fixed=uniform, seed=0)
    assert run[-1][1] > 0.5 * dynamics.exploitability(uniform) > dynamics.return_against(dynamics.timid(), uniform)


def test_without_the_std_the_queen_learns_to_call_the_bets_of_a_bluffing_checkpoint(dynamics) -> None:
    """Against a checkpoint that bets the Jack first 0.61 of the time and the King 0.84 (a step-30 checkpoint's
    measured table, issue 42), the Queen facing a bet should call: it wins 2 from the Jack 42% of the time. Divided by
    each deal's std, the advantage weighs the King's predictable deals more and the call is hardly learned; without it
    the call is (the learned table `final`, mean over seeds; measured over 10 seeds at step 60: 0.25 against 0.74,
    from the timid start's 0.25)."""
    fixed = np.array([0.61, 0.15, 0.12, 0.19, 0.80, 0.50, 0.47, 0.45, 0.84, 0.96, 0.98, 0.70])
    queen_calls = dynamics.infoset(1, "b")
    called = {}
    for scale in (True, False):
        final: list[np.ndarray] = []
        for seed in range(3):
            dynamics.simulate(init="timid", steps=60, lr=0.1, scale=scale, fixed=fixed, seed=seed, final=final)
        assert len(final) == 3 and all(table.shape == (12,) for table in final)
        called[scale] = float(np.mean([table[queen_calls] for table in final]))
    assert called[False] > 0.7 and called[True] < 0.4, called
