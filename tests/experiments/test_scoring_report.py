"""experiments/does_scoring_on_targets_help/scoring_report.py: per-arm process-score diagnostics from the runs'
metrics, means over seeds."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from strat.eval.summaries import Evaluation, Figure, Reference, RunSummary

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
    # The confirmation's seeds apart from those that chose: seed 1 alone.
    assert report.diagnostics_table(tmp_path, ["targets"], seeds=[1]).splitlines()[2].startswith(
        "| targets | 1 | 0.100 | 0.050 |")


def _summary(arm: str, seed: int, value: float, half: float) -> RunSummary:
    """A liars_dice run whose final return against the heuristic player is `value` +- `half`."""
    after = Evaluation(60, return_vs={"heuristic": Figure(value, value - half, value + half)})
    return RunSummary(section="ablation", config="configs/liars_dice_tiny.yaml", game="liars_dice", game_options={},
                      seed=seed, command="strat train", commit="abc", date="2026-12-03", steps=60,
                      before=Evaluation(0), after=after, arm=arm)


def test_the_games_table_pairs_the_hybrid_with_outcome_by_seed(report) -> None:
    reference = Reference("heuristic", random=-0.5, heuristic=0.0)  # span 0.5: normalised = (R + 0.5) / 0.5
    half = 1.96 * 0.05  # return interval half-width: standard error 0.05, 0.1 once normalised
    runs = [_summary("outcome", 0, -0.25, half), _summary("outcome", 1, -0.20, half),
            _summary("targets-segment-state", 0, -0.20, half), _summary("targets-segment-state", 1, -0.20, half),
            _summary("targets-segment-state", 2, 0.0, half)]  # seed 2 unpaired: left out
    row = report.games_table(runs, {"liars_dice": reference}, "targets-segment-state").splitlines()[2]
    # Normalised: outcome 0.5, 0.6; hybrid 0.6, 0.6. Differences +0.1, 0.0: mean +0.05, sd 0.0707, t(1) 12.706,
    # half-width 12.706 * 0.0707 / sqrt(2) = 0.635. Over deals: 1.96 * sqrt(4 * 0.1^2) / 2 = 0.196.
    cells = [c.strip() for c in row.strip("|").split("|")]
    assert cells[:2] == ["liars_dice", "2"]
    assert cells[2] == "+0.550 [-0.085, +1.185]"
    assert cells[3] == "+0.600 [+0.600, +0.600]"
    assert cells[4] == "+0.050 [-0.585, +0.685]"
    assert cells[5] == "+0.050 [-0.146, +0.246]"
    assert cells[6] == "no"  # judged over seeds: -0.585 < -0.05


def test_a_control_is_paired_with_the_arm_it_names(report) -> None:
    reference = Reference("heuristic", random=-0.5, heuristic=0.0)
    half = 1.96 * 0.05
    runs = [_summary("outcome", 0, -0.40, half), _summary("hybrid", 0, -0.20, half), _summary("hybrid", 1, -0.10, half),
            _summary("shuffled", 0, -0.30, half), _summary("shuffled", 1, -0.30, half)]
    table = report.games_table(runs, {"liars_dice": reference}, "shuffled", "hybrid").splitlines()
    assert table[0].startswith("| game | seeds | hybrid | shuffled | shuffled minus hybrid, over seeds |")
    # Normalised: hybrid 0.6, 0.8; shuffled 0.4, 0.4 (outcome, unpaired with the control's reference, is left out).
    # Differences -0.2, -0.4: mean -0.3; over deals 1.96 * sqrt(4 * 0.1^2) / 2 = 0.196.
    cells = [c.strip() for c in table[2].strip("|").split("|")]
    assert cells[:2] == ["liars_dice", "2"]
    assert cells[5] == "-0.300 [-0.496, -0.104]"
