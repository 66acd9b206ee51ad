"""The run warns once, through the trainer's logger, when the engine's and the learner's log-probs differ by more than
numerics (`LOGPROB_GAP_WARNING`), naming the figure, the threshold and what it means."""

from __future__ import annotations

import logging
from types import SimpleNamespace

import pytest

from strat.train.trainer import LOGPROB_GAP_WARNING, Trainer


def _trainer(staleness: int) -> Trainer:
    trainer = Trainer.__new__(Trainer)  # only what the check reads
    trainer.config = SimpleNamespace(schedule=SimpleNamespace(max_staleness=staleness))
    trainer._gap_warned = set()
    return trainer


@pytest.mark.parametrize("staleness", [0, 1])
def test_one_warning_per_run_above_the_threshold(caplog: pytest.LogCaptureFixture, staleness: int) -> None:
    trainer = _trainer(staleness)
    with caplog.at_level(logging.WARNING, logger="strat.train"):
        trainer._check_logprob_gap({"step": 1, "logprob/engine_learner_gap": 1e-4})
        trainer._check_logprob_gap({"step": 2})
        assert not caplog.records
        trainer._check_logprob_gap({"step": 3, "logprob/engine_learner_gap": 0.03})
        trainer._check_logprob_gap({"step": 4, "logprob/engine_learner_gap": 0.05})
    assert len(caplog.records) == 1
    message = caplog.records[0].getMessage()
    assert "\n" not in message
    assert f"step 3: logprob/engine_learner_gap 0.03 > {LOGPROB_GAP_WARNING:g}" in message
    assert "bf16" in message and "algorithm.is_cap" in message
    assert ("drift" in message) == (staleness > 0)


def test_a_co_trained_policy_s_gap_warns_once_naming_it(caplog: pytest.LogCaptureFixture) -> None:
    """A co-trained policy's gap (`<name>/logprob/engine_learner_gap`) warns on its own, once, naming its figure."""
    trainer = _trainer(0)
    with caplog.at_level(logging.WARNING, logger="strat.train"):
        trainer._check_logprob_gap({"step": 1, "logprob/engine_learner_gap": 1e-4,
                                    "small/logprob/engine_learner_gap": 0.02})
        trainer._check_logprob_gap({"step": 2, "logprob/engine_learner_gap": 0.04,
                                    "small/logprob/engine_learner_gap": 0.05})
    messages = [record.getMessage() for record in caplog.records]
    assert len(messages) == 2
    assert messages[0].startswith(f"step 1: small/logprob/engine_learner_gap 0.02 > {LOGPROB_GAP_WARNING:g}")
    assert messages[1].startswith("step 2: logprob/engine_learner_gap 0.04")
