"""Validity per information state: where the game is small enough to list its information states (Kuhn, Leduc), the
exploitability's samples give each state's share of responses that named a legal action; the lowest is logged as
`eval/min_infoset_validity`, states below 0.8 are counted (`eval/low_validity_infosets`), named in the log and
listed in eval.md, and every state's share is in eval.json."""

from __future__ import annotations

import logging

import pytest

from games.opponents import make_opponent
from strat.eval.exploitability import (
    VALIDITY_FLOOR,
    decision_states,
    estimate_exploitability,
    exact_estimate,
    scripted_sampler,
)
from strat.eval.policies import PolicyInfo
from strat.eval.report import EvalReport, render_markdown, to_json
from strat.play.rollout import SampledMoves
from strat.train.trainer import Trainer

from .helpers import fake_policy

KUHN_STATES = [key for key, _, _ in decision_states("kuhn_poker", ())]


def _sampler_invalid_after_a_bet(n: int = 10, invalid: int = 3):
    """Scripted random moves; at every state facing a bet (its key ends in `b`), `invalid` of the `n` responses are
    marked as naming no legal action."""
    moves = scripted_sampler(make_opponent("random", "kuhn_poker").action_probs, seed=1)

    def sample(located, count):
        actions = moves(located, count)
        valid = [[not (key.endswith("b") and i < invalid) for i in range(count)] for key in KUHN_STATES]
        return SampledMoves(actions, valid)

    return sample


def test_each_states_share_by_hand() -> None:
    estimate = estimate_exploitability("kuhn_poker", _sampler_invalid_after_a_bet(), 10, bootstrap=20)
    shares = dict(estimate.infoset_validity)
    assert list(shares) == KUHN_STATES and len(shares) == 12
    # Facing a bet: player 1 after a bet ('0b', '1b', '2b'), player 0 after pass-bet ('0pb', '1pb', '2pb'): 7 of 10.
    facing = {"0b", "1b", "2b", "0pb", "1pb", "2pb"}
    assert {key for key in shares if key.endswith("b")} == facing
    assert all(shares[key] == pytest.approx(0.7) for key in facing)
    assert all(shares[key] == 1.0 for key in shares if key not in facing)
    assert estimate.min_validity == pytest.approx(0.7)
    assert {key for key, _ in estimate.low_validity()} == facing and VALIDITY_FLOOR == 0.8
    assert estimate.low_validity(floor=0.7) == []


def test_a_scripted_sampler_or_an_exact_policy_reports_none() -> None:
    probs = make_opponent("random", "kuhn_poker").action_probs
    assert estimate_exploitability("kuhn_poker", scripted_sampler(probs), 4, bootstrap=0).infoset_validity == ()
    assert exact_estimate("kuhn_poker", probs).min_validity is None


def test_the_llm_sampling_path_reports_validity() -> None:
    random_probs = make_opponent("random", "kuhn_poker").action_probs
    policy, _ = fake_policy("kuhn_poker", random_probs)
    assert policy.exploitability(8, seed=0, bootstrap=20).min_validity == 1.0
    garbage, _ = fake_policy("kuhn_poker", random_probs, garbage=1.0)
    estimate = garbage.exploitability(8, seed=0, bootstrap=20)
    assert estimate.min_validity == 0.0 and len(estimate.low_validity()) == 12


def test_report_and_json_list_the_states_below_the_floor() -> None:
    estimate = estimate_exploitability("kuhn_poker", _sampler_invalid_after_a_bet(), 10, bootstrap=20)
    report = EvalReport("kuhn_poker", {}, 0, (PolicyInfo(name="p", kind="llm", depth=2),), exploitability=estimate)
    text = render_markdown(report)
    assert "## Validity per information state" in text
    assert "Lowest share of responses naming a legal action: 0.700 over 12 information states; 6 below 0.8." in text
    listed = text.split("## Validity per information state")[1].split("## ")[0]
    assert "| `0pb` | 0.700 |" in listed and "| `0p` |" not in listed
    data = to_json(report)
    assert dict(map(tuple, data["exploitability"]["infoset_validity"]))["1b"] == pytest.approx(0.7)


def test_the_training_evaluation_logs_the_lowest_and_the_count(caplog: pytest.LogCaptureFixture) -> None:
    trainer = Trainer.__new__(Trainer)  # only what the figures read
    trainer.step = 4
    estimate = estimate_exploitability("kuhn_poker", _sampler_invalid_after_a_bet(), 10, bootstrap=20)
    with caplog.at_level(logging.WARNING, logger="strat.train"):
        figures = trainer._infoset_validity(estimate)
    assert figures == {"eval/min_infoset_validity": pytest.approx(0.7), "eval/low_validity_infosets": 6.0}
    (record,) = caplog.records
    assert record.getMessage().startswith("step 4: 6 of 12 information states below 80% valid responses")
    assert "'0pb' 70%" in record.getMessage()
    assert trainer._infoset_validity(exact_estimate("kuhn_poker", make_opponent("random", "kuhn_poker").action_probs)
                                     ) == {}
