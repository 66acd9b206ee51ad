"""experiments/which_parts_of_strat_reasoner_help/paired_report.py: arms from several summary folders, relabelled in
the report only and paired by seed."""

from __future__ import annotations

from pathlib import Path

import pytest

from strat.eval.summaries import Evaluation, Figure, RunSummary, load_summary, write_summary

from .conftest import experiment_module


@pytest.fixture(scope="module")
def paired():
    yield from experiment_module("paired_report")


def _write(folder: Path, arm: str, seed: int, exploitability: float) -> Path:
    after = Evaluation(60, exploitability=Figure(exploitability, exploitability - 0.01, exploitability + 0.01))
    summary = RunSummary(section="ablation", config="configs/kuhn_poker_tiny.yaml", game="kuhn_poker",
                         game_options={}, seed=seed, command=f"strat train {arm} {seed}", commit="abc",
                         date="2026-12-04", steps=30, before=Evaluation(0), after=after, arm=arm)
    return write_summary(summary, folder / f"kuhn_poker_tiny-{arm}-seed{seed}.json")


def test_the_same_arm_at_two_depths_is_paired_by_seed(paired, tmp_path: Path, capsys) -> None:
    one, two = tmp_path / "depth1", tmp_path / "depth2"
    for seed, (a, b) in enumerate([(0.10, 0.20), (0.15, 0.20), (0.20, 0.30)]):
        _write(one, "tss", seed, a)
        _write(two, "tss", seed, b)
    _write(one, "outcome", 0, 0.5)  # another arm in the folder: left out by the :ARM filter
    written = _write(two, "tss", 3, 0.9)  # a seed only one arm ran: in its mean, not in the pairs
    assert paired.main(["--reference", "depth1", "--arm", f"depth1={one}:tss", "--arm", f"depth2={two}:tss"]) == 0
    table = capsys.readouterr().out.splitlines()
    rows = {line.split(" | ")[0].strip("| "): line for line in table if line.startswith("| depth")}
    # Differences 0.10, 0.05, 0.10: mean 0.0833, sd 0.0289, t(2) = 4.303, half-width 4.303 * 0.0289 / sqrt(3) = 0.072.
    assert "+0.083 [+0.012, +0.155] (n=3)" in rows["depth2"], rows["depth2"]
    assert rows["depth1"].startswith("| depth1 | 3 | 0.150") and "| reference |" in rows["depth1"]
    assert rows["depth2"].startswith("| depth2 | 4 |")
    assert load_summary(written).arm == "tss"  # the summaries are not changed
    assert paired.main(["--reference", "depth1", "--arm", f"depth1={one}:tss", "--arm", f"depth2={two}:tss",
                        "--seeds", "0,1"]) == 0
    assert "(n=2)" in capsys.readouterr().out


def test_bad_arms_are_refused_in_one_line(paired, tmp_path: Path, capsys) -> None:
    _write(tmp_path / "a", "tss", 0, 0.1)
    assert paired.main(["--reference", "x", "--arm", f"a={tmp_path / 'a'}"]) == 2
    assert "not one of the --arm labels" in capsys.readouterr().err
    assert paired.main(["--reference", "a", "--arm", f"a={tmp_path / 'a'}:outcome"]) == 2
    assert "no summaries of arm outcome" in capsys.readouterr().err
    assert paired.main(["--reference", "a", "--arm", f"a={tmp_path / 'missing'}"]) == 2
    assert "no folder" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        paired.main(["--reference", "a", "--arm", "nolabel"])
