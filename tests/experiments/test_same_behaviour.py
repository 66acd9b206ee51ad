"""experiments/does_a_refactor_change_training/same_behaviour.py's comparison: time and throughput figures may
differ, nothing else may."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from .conftest import experiment_module


@pytest.fixture
def same():
    yield from experiment_module("same_behaviour")


def _run(root: Path, rows: list[dict[str, object]], episodes: str) -> Path:
    root.mkdir()
    (root / "metrics.jsonl").write_text("".join(json.dumps(row) + "\n" for row in rows))
    (root / "episodes.jsonl").write_text(episodes)
    return root


def test_only_time_and_throughput_may_differ(same, tmp_path: Path) -> None:
    old = _run(tmp_path / "old", [{"step": 1, "loss/policy": 0.5, "time/step_s": 3.0, "throughput/gen_tokens_per_s": 9.0}],
               '{"step": 1}\n')
    new = _run(tmp_path / "new", [{"step": 1, "loss/policy": 0.5, "time/step_s": 4.0, "throughput/gen_tokens_per_s": 7.0}],
               '{"step": 1}\n')
    assert same.compare(old, new) == []


def test_a_changed_metric_a_missing_row_and_other_episodes_are_named(same, tmp_path: Path) -> None:
    old = _run(tmp_path / "old", [{"step": 1, "loss/policy": 0.5}, {"step": 2, "loss/policy": 0.4}], '{"step": 1}\n')
    new = _run(tmp_path / "new", [{"step": 1, "loss/policy": 0.5000001, "learn/lr": 1.0}], '{"step": 2}\n')
    problems = same.compare(old, new)
    assert problems == ["metrics.jsonl has 2 rows against 1",
                        "row 0: learn/lr None != 1.0, loss/policy 0.5 != 0.5000001",
                        "episodes.jsonl differs"]


def test_set_overrides_reach_both_trees_before_the_variants_own(same, tmp_path: Path, monkeypatch) -> None:
    calls: list[tuple[list[str], dict[str, str]]] = []
    monkeypatch.setattr(same.subprocess, "call", lambda command, cwd, env, **_: calls.append((command, env)) or 0)
    monkeypatch.setattr("sys.argv", ["same_behaviour.py", "--old", str(tmp_path / "a"), "--new", str(tmp_path / "b"),
                                     "--out", str(tmp_path / "out"), "--variants", "plain", "--only", "old",
                                     "--set", "warm_start.episodes=100", "--set", "warm_start.max_seconds=100000"])
    assert same.main() == 0
    ((command, env),) = calls
    tail = command[command.index("eval.samples_per_infoset=4") + 1:]
    assert tail == ["warm_start.episodes=100", "warm_start.max_seconds=100000", *same.VARIANTS["plain"]]
    assert env["PYTHONPATH"] == str((tmp_path / "a").resolve())
