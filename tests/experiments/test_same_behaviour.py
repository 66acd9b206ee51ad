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
