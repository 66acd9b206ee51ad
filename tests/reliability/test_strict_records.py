"""A run's records are read strictly: only a torn last line of metrics.jsonl, episodes.jsonl or overrides.jsonl is
skipped, with a warning; any other unreadable line is an error naming the file and the line. Reports go on past
unreadable lines and say how many they skipped."""

import json
import logging
from pathlib import Path

import pytest

from strat import cli, metrics
from strat.eval.report import EvalReport, write_report
from strat.jsonl import RecordError, read_lines
from strat.train.resume import read_overrides

GOOD = [{"step": 1, "reward/mean": 0.1}, {"step": 2, "reward/mean": 0.2}, {"step": 3, "reward/mean": 0.3}]


def _lines(records: list[dict]) -> list[str]:
    return [json.dumps(record) for record in records]


def _write(path: Path, lines: list[str], newline_at_end: bool = True) -> None:
    path.write_text("\n".join(lines) + ("\n" if newline_at_end else ""))


def test_a_torn_last_line_is_skipped_with_a_warning(tmp_path: Path, caplog) -> None:
    lines = _lines(GOOD)
    _write(tmp_path / "metrics.jsonl", [*lines, lines[0][:9]], newline_at_end=False)
    with caplog.at_level(logging.WARNING, logger="strat.records"):
        assert metrics.read(tmp_path) == GOOD
    assert "metrics.jsonl: the last line (4) is torn" in caplog.text


@pytest.mark.parametrize("bad", ['{"step": 2, "reward/me', "[1, 2]", "\udcff".encode("utf-8", "surrogateescape")],
                         ids=["cut", "not-an-object", "binary"])
def test_an_unreadable_middle_line_is_an_error_with_its_line_number(tmp_path: Path, bad) -> None:
    lines = _lines(GOOD)
    path = tmp_path / "metrics.jsonl"
    raw = [line.encode() for line in lines]
    raw[1] = bad if isinstance(bad, bytes) else bad.encode()
    path.write_bytes(b"\n".join(raw) + b"\n")
    with pytest.raises(RecordError, match=r"metrics\.jsonl, line 2: unreadable record") as caught:
        metrics.read(tmp_path)
    assert "\n" not in str(caught.value)
    # A report reads on, and counts what it skipped.
    read = metrics.read_for_report(tmp_path)
    assert read.records == [GOOD[0], GOOD[2]] and read.skipped == (2,)
    assert read.skipped_note().endswith("1 unreadable line(s) skipped (line 2)")


def test_ledger_and_overrides_are_read_strictly(tmp_path: Path) -> None:
    ledger = [json.dumps({"step": s, "weights": [], "episodes": []}) for s in (1, 2, 3)]
    _write(tmp_path / "episodes.jsonl", [ledger[0], "garbage", ledger[2]])
    with pytest.raises(RecordError, match=r"episodes\.jsonl, line 2"):
        metrics.read_ledger(tmp_path)
    override = json.dumps({"step": 2, "changes": [{"key": "algorithm.lr", "before": 0.1, "after": 0.2}]})
    _write(tmp_path / "overrides.jsonl", [override, '{"step": 3, "chan'], newline_at_end=False)
    assert [r.step for r in read_overrides(tmp_path)] == [2]
    _write(tmp_path / "overrides.jsonl", [override, '{"step": 3}', override])
    with pytest.raises(RecordError, match=r"overrides\.jsonl, line 2: not a resume's record"):
        read_overrides(tmp_path)


def test_resume_truncation_keeps_the_text_and_refuses_a_damaged_middle(tmp_path: Path) -> None:
    path = tmp_path / "metrics.jsonl"
    lines = [json.dumps({"step": 0}), *_lines(GOOD)]
    _write(path, [*lines, '{"step": 4, "rew'], newline_at_end=False)
    metrics.truncate_after(path, 2)
    assert path.read_text() == "".join(line + "\n" for line in lines[:3])
    _write(path, [lines[0], "{oops", *lines[1:]])
    with pytest.raises(RecordError, match="line 2"):
        metrics.truncate_after(path, 2)
    assert read_lines(tmp_path / "absent.jsonl").records == []


def test_an_evaluation_report_notes_the_skipped_lines(tmp_path: Path) -> None:
    pytest.importorskip("matplotlib")
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    _write(run_dir / "metrics.jsonl", [_lines(GOOD)[0], "not json", _lines(GOOD)[2]])
    write_report(EvalReport(game="kuhn_poker", game_options={}, seed=0, policies=()), tmp_path / "out", (), run_dir)
    assert "metrics.jsonl: 1 unreadable line(s) skipped (line 2)" in (tmp_path / "out" / "eval.md").read_text()


def test_results_summary_of_a_run_with_a_damaged_metrics_line_exits_2(tmp_path: Path, capsys) -> None:
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    (run_dir / "config.yaml").write_text("schedule: {steps: 3}\n")
    (run_dir / "provenance.json").write_text("{}")
    _write(run_dir / "metrics.jsonl", [_lines(GOOD)[0], "not json", _lines(GOOD)[2]])
    code = cli.main(["results", "summarize", str(run_dir), "--out", str(tmp_path / "summary.json")])
    err = capsys.readouterr().err
    assert code == 2 and "Traceback" not in err
    expected = (f"strat: error: {run_dir / 'metrics.jsonl'}, line 2: unreadable record (not JSON: Expecting value at"
                " column 1); only a torn last line is skipped: repair or remove line 2")
    assert err.strip().splitlines() == [expected]
