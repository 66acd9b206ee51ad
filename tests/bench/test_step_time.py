"""bench/step_time.py: the figures of a run's metrics and the comparison of two codes, by hand; the run's command."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from .conftest import bench_module


@pytest.fixture(scope="module")
def step_time():
    yield from bench_module("step_time")


def _step(step: int, step_s: float, rollout_s: float, tok_s: float, learn_s: float, samples: float) -> dict:
    return {"step": step, "time/step_s": step_s, "time/rollout_s": rollout_s, "throughput/gen_tokens_per_s": tok_s,
            "time/learn_s": learn_s, "time/rollout_wait_s": 0.5, "learn/samples": samples}


def test_run_figures_leave_out_the_first_steps_and_evaluation_records(step_time):
    records = [
        _step(1, 20.0, 20.0, 100.0, 9.0, 100),          # start-up: skipped
        _step(2, 6.0, 5.0, 200.0, 4.0, 100),            # 1,000 generated tokens
        {"step": 2, "eval/exploitability": 0.3},        # an evaluation record: not a step
        _step(3, 8.0, 6.0, 250.0, 6.0, 110),            # 1,500
        _step(4, 4.0, 4.0, 125.0, 3.0, 120),            # 500
    ]
    figures = step_time.run_figures(records, skip=1)
    assert figures.steps == 3
    assert figures.step_s == 6.0                        # median of 6, 8, 4
    assert figures.gen_tok_per_step_s == pytest.approx(3000 / 18)
    assert figures.gen_tokens == pytest.approx(1000.0)
    assert figures.samples == pytest.approx(110.0)
    assert figures.phases == {"rollout": 5.0, "rollout_wait": 0.5, "learn": 4.0}


def test_run_figures_refuse_a_run_with_nothing_left(step_time):
    with pytest.raises(ValueError, match="no training step after step 2"):
        step_time.run_figures([_step(1, 5.0, 5.0, 1.0, 1.0, 1), _step(2, 5.0, 5.0, 1.0, 1.0, 1)], skip=2)


def test_compare_takes_medians_over_runs_and_reports_the_change(step_time):
    def run(step_s: float, tok: float, learn: float) -> object:
        return step_time.RunFigures(steps=10, step_s=step_s, gen_tok_per_step_s=tok, samples=110, gen_tokens=15000,
                                    phases={"learn": learn, "rollout": 5.0})

    old = [run(9.0, 1800, 8.0), run(8.0, 2000, 8.5), run(10.0, 1700, 7.0)]
    new = [run(6.0, 2600, 4.0), run(5.0, 3000, 3.0), run(5.5, 2900, 5.0)]
    result = step_time.compare(old, new)
    assert result.baseline.step_s == 9.0 and result.this.step_s == 5.5
    assert result.step_time_change == pytest.approx(5.5 / 9.0 - 1)        # -38.9%
    assert result.throughput_ratio == pytest.approx(2900 / 1800)
    assert result.baseline.phases["learn"] == 8.0 and result.this.phases["learn"] == 4.0
    text = step_time.report(result)
    assert "-38.9%" in text and "x1.61" in text and "time/learn_s" in text


def test_a_phase_one_code_does_not_log_is_left_out(step_time):
    old = [step_time.RunFigures(1, 8.0, 1000, 110, 9000, {"learn": 7.0})]
    new = [step_time.RunFigures(1, 6.0, 1500, 110, 9000, {"learn": 5.0, "sync": 0.2})]
    text = step_time.report(step_time.compare(old, new))
    assert "time/learn_s" in text and "time/sync_s" not in text


def test_the_timed_run_trains_without_evaluation_or_checkpoints(step_time):
    command = step_time.train_command(Path("c.yaml"), 12, Path("/o"), "this-r0", ["engine.backend=hf"])
    assert command[:4] == [sys.executable, "-m", "strat.cli", "train"]
    assert command[4:] == ["c.yaml", "schedule.steps=12", "schedule.eval_every=0", "schedule.checkpoint_every=0",
                           "run.output_dir=/o", "run.name=this-r0", "engine.backend=hf"]
