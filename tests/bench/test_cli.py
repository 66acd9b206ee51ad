"""`strat bench` on the command line: options, errors, and the JSON it prints (run_bench stubbed)."""

from __future__ import annotations

import json

from strat import cli
from strat.benchmarks.results import BenchReport, WeightSync


def _fake_report(config: str, quick: bool, only) -> BenchReport:
    report = BenchReport(config=config, quick=quick, machine={"cpus": 2})
    report.sync = WeightSync(syncs=2, seconds_per_sync=0.1, step_s=5.0)
    report.errors = {} if only is None else {"asked": ",".join(sorted(only))}
    return report


def test_bench_json_output(monkeypatch, capsys, tmp_path) -> None:
    import strat.benchmarks

    monkeypatch.setattr(strat.benchmarks, "run_bench", _fake_report)
    out = tmp_path / "bench.json"
    assert cli.main(["bench", "--json", "--quick", "--only", "sync,memory", "--out", str(out)]) == 0
    captured = capsys.readouterr()
    data = json.loads(captured.out)
    assert data["quick"] is True and data["config"] == "configs/kuhn_poker_tiny.yaml"
    (sync,) = data["figures"]
    assert sync["key"] == "weight_sync.share" and sync["value"] == 0.02
    assert sync["numerator"] == 0.1 and sync["baseline"] == 5.0 and sync["target"] == "<= 0.05" and sync["met"] is True
    assert data["errors"] == {"asked": "memory,sync"}
    assert "| Weight sync share of step |" in captured.err
    assert json.loads(out.read_text()) == data


def test_bench_table_output(monkeypatch, capsys) -> None:
    import strat.benchmarks

    monkeypatch.setattr(strat.benchmarks, "run_bench", _fake_report)
    assert cli.main(["bench"]) == 0
    assert capsys.readouterr().out.startswith("| figure | value |")


def test_bench_rejects_unknown_figures_and_missing_config(capsys, tmp_path) -> None:
    assert cli.main(["bench", "--only", "rollout,speed"]) == 2
    assert "--only speed: unknown figure" in capsys.readouterr().err
    assert cli.main(["bench", "--config", str(tmp_path / "none.yaml")]) == 2
    assert "no such file" in capsys.readouterr().err
