"""The step's phase timings: each named phase adds up its own time, every phase appears in the record (0 when it
did not run), and an unknown phase is refused."""

from __future__ import annotations

import time

import pytest

from strat.metrics import PhaseTimer
from strat.train.trainer import STEP_PHASES


def test_phases_add_up_and_every_phase_is_recorded() -> None:
    timer = PhaseTimer(STEP_PHASES)
    with timer.phase("sync"):
        time.sleep(0.02)
    with timer.phase("sync"):  # with overlap a step syncs twice: both count
        time.sleep(0.02)
    with pytest.raises(RuntimeError), timer.phase("learn"):  # a failing phase still counts its time
        time.sleep(0.01)
        raise RuntimeError("boom")
    record = timer.record()
    assert set(record) == {f"time/{name}_s" for name in STEP_PHASES} | {"time/step_s"}
    assert 0.04 <= record["time/sync_s"] < record["time/step_s"]
    assert record["time/learn_s"] >= 0.01
    assert record["time/eval_s"] == 0.0 and record["time/checkpoint_s"] == 0.0
    assert record["time/step_s"] >= record["time/sync_s"] + record["time/learn_s"]


def test_an_unknown_phase_is_refused() -> None:
    timer = PhaseTimer(STEP_PHASES)
    with pytest.raises(KeyError, match="unknown phase 'rolout'"), timer.phase("rolout"):
        pass
