"""experiments/does_scoring_on_targets_help/scoring_report.py: per-arm process-score diagnostics from the runs'
metrics, means over seeds."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from .conftest import experiment_module


@pytest.fixture(scope="module")
def report():
    yield from experiment_module("scoring_report")


def _run(folder: Path, steps: list[dict]) -> None:
    folder.mkdir(parents=True)
    (folder / "provenance.json").write_text("{}")
    (folder / "metrics.jsonl").write_text("".join(json.dumps(step) + "\n" for step in steps))


def test_each_arm_averages_its_steps_then_its_seeds(report, tmp_path: Path) -> None:
    _run(tmp_path / "targets-seed0", [
        {"step": 0, "cot/score_var_sampled": 9.0},  # the evaluation before training is not a step
        {"step": 1, "cot/score_var_sampled": 0.2, "cot/score_var_target": 0.1, "time/step_s": 10.0,
         "throughput/gen_tokens_per_s": 100.0, "time/rollout_s": 5.0},
        {"step": 2, "cot/score_var_sampled": 0.4, "cot/score_var_target": 0.1, "time/step_s": 12.0},
    ])
    _run(tmp_path / "targets-seed1", [{"step": 1, "cot/score_var_sampled": 0.1, "cot/score_var_target": 0.05}])
    (tmp_path / "targets-seed2").mkdir()  # unfinished: no provenance, left out
    assert report.run_means(tmp_path / "targets-seed0") == pytest.approx(
        {"cot/score_var_sampled": 0.3, "cot/score_var_target": 0.1, "time/step_s": 11.0, "tokens": 500.0})
    table = report.diagnostics_table(tmp_path, ["targets", "outcome"]).splitlines()
    # Seed means 0.3 and 0.1: mean 0.2, sd 0.1414; t(1) = 12.706, half-width 12.706 * 0.1414 / sqrt(2) = 1.271.
    # 0.1 and 0.05: mean 0.075, sd 0.0354, half-width 0.318.
    assert table[2].startswith("| targets | 2 | 0.200 [-1.071, 1.471] | 0.075 [-0.243, 0.393] |"), table[2]
    assert table[3] == "| outcome | 0 | " + " | ".join(["-"] * 8) + " |"
