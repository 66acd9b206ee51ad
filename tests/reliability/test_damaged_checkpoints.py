"""A run whose newest checkpoint was damaged on disk after it was written resumes from the newest one that verifies,
says so in one line, and ends as an uninterrupted run would: the replayed steps once each in metrics.jsonl and the
ledger, with the same numbers. A full disk during a checkpoint write stops the run in one line (make test-faults)."""

import logging
import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest

from strat import cli, metrics
from strat.model import checkpoint
from strat.train.trainer import Trainer

from .conftest import small_config
from .test_verified_checkpoints import flip_middle, truncate

pytestmark = pytest.mark.faults

# Overlap (max_staleness=1), so that each checkpoint before the last step stores the next step's rollout
# (next_rollout.json). The run is stopped after step 2 of 3: its newest checkpoint, step_2, holds every kind of file.
BASE = ["schedule.steps=3", "schedule.checkpoint_every=1", "schedule.keep_checkpoints=3", "schedule.max_staleness=1"]
# Two whole resumes (the weights, and the stored next rollout that overlap replays): that every other file's damage
# is found and named is checked without a run, in test_verified_checkpoints.py.
DAMAGE = [
    ("model.safetensors", truncate),
    ("next_rollout.json", flip_middle),
]


class _Stop(Exception):
    """Stands for the run being stopped right after step 2 was logged."""


class _Lines(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.INFO)
        self.lines: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.lines.append(record.getMessage())


@pytest.fixture
def train_log(monkeypatch: pytest.MonkeyPatch) -> Iterator[_Lines]:
    """The driver's log lines (`strat train` routes the `strat` logger to its progress display, and keeps them from
    the root logger); the `strat` logger is put back as it was afterwards."""
    strat = logging.getLogger("strat")
    monkeypatch.setattr(strat, "handlers", list(strat.handlers))
    monkeypatch.setattr(strat, "propagate", strat.propagate)
    monkeypatch.setattr(strat, "level", strat.level)
    lines = _Lines()
    driver = logging.getLogger("strat.train")
    driver.addHandler(lines)
    yield lines
    driver.removeHandler(lines)


def _comparable(records: list[dict]) -> list[dict]:
    return [{k: v for k, v in r.items() if not k.startswith(("time/", "throughput/", "faults/"))} for r in records]


@pytest.fixture(scope="module")
def stopped_run(local_ray, tmp_path_factory: pytest.TempPathFactory, tiny_model_dir: Path) -> Path:
    """A run of 3 steps stopped after step 2 was logged: checkpoints 1 and 2, records of an uninterrupted run."""
    config = small_config(tmp_path_factory.mktemp("damaged"), tiny_model_dir, *BASE)

    def stop_after_step_2(record: dict) -> None:
        if record["step"] == 2:
            raise _Stop

    with pytest.raises(_Stop):
        Trainer(config, config.run_dir).run(stop_after_step_2)
    assert [c.step for c in checkpoint.complete_checkpoints(config.run_dir)] == [1, 2]
    assert (checkpoint.checkpoint_dir(config.run_dir, 2) / "next_rollout.json").is_file()
    return config.run_dir


@pytest.mark.parametrize(("name", "damage"), DAMAGE, ids=[name for name, _ in DAMAGE])
def test_resume_falls_back_past_a_damaged_file_and_ends_as_an_uninterrupted_run(
    stopped_run: Path, tmp_path: Path, capsys, train_log: _Lines, name: str, damage
) -> None:
    run_dir = tmp_path / stopped_run.name
    shutil.copytree(stopped_run, run_dir)
    damage(checkpoint.checkpoint_dir(run_dir, 2) / name)
    code = cli.main(["train", "--resume", str(run_dir), "schedule.steps=2"])
    err = capsys.readouterr().err
    assert code == 0, err[-3000:]
    assert "Traceback" not in err
    fallback = [line for line in train_log.lines if line.startswith("resuming from step_1")]
    assert len(fallback) == 1 and "\n" not in fallback[0], train_log.lines
    assert f"checkpoint step_2 ({checkpoint.checkpoint_dir(run_dir, 2)}) is damaged: {name} " in fallback[0]
    assert "step 2 will be trained again (moved aside: step_2.damaged)" in fallback[0]

    records = metrics.read(run_dir)
    ledger = metrics.read_ledger(run_dir)
    assert [r["step"] for r in records] == [1, 2], "step 2 once"
    assert [line["step"] for line in ledger] == [1, 2]
    # hf engine, overlap: the replayed steps train on the same episodes and weights as the uninterrupted run.
    assert _comparable(records) == _comparable(metrics.read(stopped_run))
    assert ledger == metrics.read_ledger(stopped_run)
    final = checkpoint.latest(run_dir)
    assert final.step == 2 and checkpoint.verify(final).status == "verified"
    assert (run_dir / "checkpoints" / "step_2.damaged" / name).is_file()


def test_a_full_disk_at_a_checkpoint_stops_the_run_in_one_line(
    stopped_run: Path, tmp_path: Path, capsys, monkeypatch: pytest.MonkeyPatch, train_log: _Lines
) -> None:
    # As if the run had been killed during step 2: step_1 is the newest checkpoint, and step 2's write fails.
    run_dir = tmp_path / stopped_run.name
    shutil.copytree(stopped_run, run_dir)
    shutil.rmtree(checkpoint.checkpoint_dir(run_dir, 2))
    step_1 = checkpoint.checkpoint_dir(run_dir, 1)
    before = {p.relative_to(step_1): p.read_bytes() for p in step_1.rglob("*") if p.is_file()}
    monkeypatch.setenv("STRAT_INJECT_FAULTS", "enospc:2")
    code = cli.main(["train", "--resume", str(run_dir), "schedule.steps=2"])
    err = capsys.readouterr().err
    assert code == 1, err[-3000:]
    assert "Traceback" not in err
    last = err.strip().splitlines()[-1]
    assert last.startswith("strat: run stopped: checkpoint of step 2 could not be written"), err[-3000:]
    assert "No space left on device" in last and "MiB free there" in last
    assert "the last complete checkpoint is step 1" in last
    assert sorted(p.name for p in (run_dir / "checkpoints").iterdir()) == ["step_1"], "no staging folder left"
    assert {p.relative_to(step_1): p.read_bytes() for p in step_1.rglob("*") if p.is_file()} == before
    assert checkpoint.verify(checkpoint.latest(run_dir)).status == "verified"
