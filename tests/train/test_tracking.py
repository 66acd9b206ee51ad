"""Weights & Biases tracking (`logging.wandb`): the logger against a fake wandb module (what it sends, what a resume
skips), the refusal without wandb, and a real offline run of 2 steps resumed for 2 more, read back from wandb's own
run files: one run id, steps 1-4 each logged once with metrics.jsonl's values, and no API key anywhere."""

from __future__ import annotations

import importlib.machinery
import json
import struct
import sys
import types
from pathlib import Path
from typing import Any

import pytest

from strat import cli, metrics
from strat.config_loading import load_config
from strat.errors import ConfigError
from strat.train.summary import before_after
from strat.train.tracking import STEP_METRIC, TRANSCRIPT_COLUMNS, open_tracker, read_state

ROOT = Path(__file__).resolve().parents[2]
DEFAULT = ROOT / "configs" / "kuhn_poker_tiny.yaml"
SECRET = "test-api-key-0123456789abcdef0123456789abcdef"


class FakeRun:
    def __init__(self, kwargs: dict[str, Any]) -> None:
        self.kwargs = kwargs
        self.logged: list[tuple[int, dict[str, Any]]] = []
        self.config = types.SimpleNamespace(update=lambda values, allow_val_change: None)
        self.metrics: list[tuple[str, str | None]] = []
        self.exit_code: int | None = None

    def define_metric(self, name: str, step_metric: str | None = None) -> None:
        self.metrics.append((name, step_metric))

    def log(self, values: dict[str, Any], step: int) -> None:
        self.logged.append((step, values))

    def finish(self, exit_code: int) -> None:
        self.exit_code = exit_code


@pytest.fixture
def fake_wandb(monkeypatch: pytest.MonkeyPatch) -> list[FakeRun]:
    """A stand-in `wandb` module; the runs it started, in order."""
    runs: list[FakeRun] = []

    def init(**kwargs: Any) -> FakeRun:
        runs.append(FakeRun(kwargs))
        return runs[-1]

    module = types.ModuleType("wandb")
    module.__spec__ = importlib.machinery.ModuleSpec("wandb", None)  # found by find_spec, as an installed one is
    module.init = init
    module.Table = lambda columns, data: ("table", tuple(columns), [tuple(row) for row in data])
    module.Image = lambda path: ("image", Path(path).read_bytes()[:8])
    monkeypatch.setitem(sys.modules, "wandb", module)
    monkeypatch.delenv("WANDB_DIR", raising=False)
    return runs


def _config(tmp_path: Path, *extra: str):
    return load_config(DEFAULT, [f"run.output_dir={tmp_path}", "logging.wandb.project=strat-tests",
                                 "logging.wandb.tags=[a, b]", *extra])


def test_records_go_to_one_run_at_their_step_and_a_resume_sends_no_step_twice(
        tmp_path: Path, fake_wandb: list[FakeRun]) -> None:
    config = _config(tmp_path, "logging.wandb.group=g")
    run_dir = config.run_dir
    run_dir.mkdir(parents=True)
    log = metrics.MetricsLog(run_dir, tensorboard=False, tracker=open_tracker(config, run_dir))
    log.write({"step": 0, "eval/return_vs_random": 0.25, "eval/return_vs_random_ci": 0.5,
               "eval/exploitability": 0.4, "eval/exploitability_ci": [0.3, 0.5]})
    log.write({"step": 1, "reward/mean": -1.0, "cot/score_mean": None, "loss/kl": 0.0})
    log.write({"step": 2, "reward/mean": 0.5, "eval/return_vs_random": 0.75, "eval/return_vs_random_ci": 0.25,
               "eval/exploitability": 0.2, "eval/exploitability_ci": [0.1, 0.3]})
    [first] = fake_wandb
    run_id = read_state(run_dir).run_id
    assert first.kwargs["id"] == run_id and first.kwargs["resume"] == "allow" and first.kwargs["dir"] == str(run_dir)
    assert (first.kwargs["project"], first.kwargs["group"], first.kwargs["tags"]) == ("strat-tests", "g", ["a", "b"])
    assert first.kwargs["config"]["model"]["path"] == config.model.path
    assert (STEP_METRIC, None) in first.metrics and ("*", STEP_METRIC) in first.metrics
    assert first.logged[:2] == [
        (0, {STEP_METRIC: 0, "eval/return_vs_random": 0.25, "eval/return_vs_random_ci": 0.5,
             "eval/exploitability": 0.4, "eval/exploitability_ci/low": 0.3, "eval/exploitability_ci/high": 0.5}),
        (1, {STEP_METRIC: 1, "reward/mean": -1.0, "loss/kl": 0.0}),  # None is left out, not logged as 0
    ]
    log.close()
    step, closing = first.logged[-1]
    assert step == 2 and first.exit_code == 0
    assert closing["eval/before_after"] == (
        "table", ("measure", "before (step 0)", "after (step 2)"),
        [("return vs random", "0.250 ± 0.500", "0.750 ± 0.250"),
         ("exploitability", "0.400 [0.300, 0.500]", "0.200 [0.100, 0.300]"),
         ("format valid rate", "-", "-")])
    assert closing["eval/learning_curves"] == ("image", b"\x89PNG\r\n\x1a\n")

    # The process died after sending step 3 but before its checkpoint: the resume from step 2 re-runs step 3, whose
    # new values reach metrics.jsonl; W&B already has a step 3 and gets no second one. Step 4 is new.
    log = metrics.MetricsLog(run_dir, tensorboard=False, tracker=open_tracker(config, run_dir))
    log.write({"step": 3, "reward/mean": 1.0})
    log.close(complete=False)
    log = metrics.MetricsLog(run_dir, tensorboard=False, resume_step=2, tracker=open_tracker(config, run_dir))
    log.tracker.log_transcripts(3, [])
    log.write({"step": 3, "reward/mean": 2.0})
    log.write({"step": 4, "reward/mean": 3.0})
    log.close()
    _, crashed, resumed = fake_wandb
    assert crashed.exit_code == 1 and [step for step, _ in crashed.logged] == [3]
    assert crashed.kwargs["id"] == resumed.kwargs["id"] == run_id
    assert [step for step, _ in resumed.logged] == [4, 4]  # step 4, then the closing table and plot at step 4
    assert [r["reward/mean"] for r in metrics.read(run_dir) if r["step"] >= 3] == [2.0, 3.0]
    assert read_state(run_dir).last_step == 4


def test_transcripts_are_a_table_with_one_row_per_turn(tmp_path: Path, fake_wandb: list[FakeRun]) -> None:
    from strat.algorithm.records import Episode, ScoredEpisode, Turn, TurnScore

    turns = (Turn("e0", "player_0", 0, 1, "bet", prompt_text="P0", response_text="R0"),
             Turn("e0", "player_1", 1, 0, "pass", valid=False, fallback_used=True, penalty=-3.0, response_text="??"))
    episode = Episode("e0", "g0", 7, "kuhn_poker", ("player_0", "player_1"), ("player_0", "player_1"), turns,
                      {"player_0": 1.0, "player_1": -1.0})
    scored = ScoredEpisode(episode, (TurnScore("player_0", 0, 1.0, None, None, 0.75, True),))
    config = _config(tmp_path)
    config.run_dir.mkdir(parents=True)
    tracker = open_tracker(config, config.run_dir)
    tracker.log_transcripts(5, [scored])
    [(step, values)] = fake_wandb[0].logged
    assert step == 5
    assert values["samples/transcripts"] == ("table", TRANSCRIPT_COLUMNS, [
        (5, "e0", 0, "player_0", "bet", True, 0.75, 1.0, "P0", "R0"),
        (5, "e0", 1, "player_1", "pass", False, None, -3.0, "", "??"),  # the penalty is the learning outcome
    ])


def test_without_wandb_check_refuses_in_one_line_and_runs_without_it_work(
        monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    monkeypatch.setitem(sys.modules, "wandb", None)  # as if not installed: find_spec and import both fail
    assert cli.main(["check", str(DEFAULT), "logging.wandb.project=p"]) == 2
    err = capsys.readouterr().err.strip()
    assert err == ("strat: error: logging.wandb: wandb is not installed (pip install 'strat-reasoner[wandb]', "
                   "or unset logging.wandb)")
    assert cli.main(["check", str(DEFAULT)]) == 0
    config = load_config(DEFAULT, [f"run.output_dir={tmp_path}"])
    assert config.logging.wandb is None and open_tracker(config, tmp_path) is None
    with pytest.raises(ConfigError):
        load_config(DEFAULT, ["logging.wandb={}"])


# --- wandb's own offline files ------------------------------------------------------------------------------------

_BLOCK, _HEADER = 32768, 7
_FULL, _FIRST, _MIDDLE, _LAST = 1, 2, 3, 4


def wandb_records(path: Path) -> list[Any]:
    """The protobuf records of a `.wandb` transaction log: a 7-byte file header (":W&B", 0xBEE1, version), then
    LevelDB-log chunks (crc32, length, type) in 32 KiB blocks, a block's tail too short for a header left as padding."""
    from wandb.proto import wandb_internal_pb2

    data = path.read_bytes()
    ident, magic, _ = struct.unpack("<4sHB", data[:_HEADER])
    assert (ident, magic) == (b":W&B", 0xBEE1), path
    position, pending, records = _HEADER, b"", []
    while position + _HEADER <= len(data):
        left = _BLOCK - position % _BLOCK
        if left < _HEADER:
            position += left
            continue
        _, length, kind = struct.unpack("<IHB", data[position:position + _HEADER])
        chunk = data[position + _HEADER:position + _HEADER + length]
        position += _HEADER + length
        if kind == 0:  # zero padding to the end of the block
            position += left - _HEADER - length
            continue
        pending = chunk if kind in (_FULL, _FIRST) else pending + chunk
        if kind in (_FULL, _LAST):
            record = wandb_internal_pb2.Record()
            record.ParseFromString(pending)
            records.append(record)
    return records


def _history(records: list[Any]) -> list[dict[str, Any]]:
    return [{(item.key or "/".join(item.nested_key)): json.loads(item.value_json) for item in record.history.item}
            for record in records if record.WhichOneof("record_type") == "history"]


@pytest.mark.slow
def test_offline_run_resumed_continues_one_wandb_run_with_every_step_once(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    pytest.importorskip("wandb")
    wandb_dir = tmp_path / "wandb_dir"
    wandb_dir.mkdir()
    monkeypatch.setenv("WANDB_MODE", "offline")
    monkeypatch.setenv("WANDB_DIR", str(wandb_dir))
    monkeypatch.setenv("WANDB_API_KEY", SECRET)
    monkeypatch.setenv("WANDB_SILENT", "true")
    overrides = [f"run.output_dir={tmp_path / 'runs'}", "run.name=tracked", "engine.backend=hf",
                 "warm_start.enabled=false", "schedule.steps=2", "schedule.eval_every=2", "eval.games=4",
                 "eval.samples_per_infoset=0", "schedule.checkpoint_every=2", "algorithm.group_size=2",
                 "algorithm.groups_per_step=2", "reasoning.max_new_tokens=16", "game.opponents=[{kind: self}]",
                 "logging.tensorboard=false", "logging.samples_every=1", "logging.wandb.project=strat-tests"]
    assert cli.main(["train", str(DEFAULT), *overrides]) == 0
    run_dir = tmp_path / "runs" / "tracked"
    assert cli.main(["train", "--resume", str(run_dir), "schedule.steps=4"]) == 0

    files = sorted(wandb_dir.glob("wandb/offline-run-*/run-*.wandb"))
    assert len(files) == 2, "one offline segment per process"
    run_ids = {record.run.run_id for file in files for record in wandb_records(file)
               if record.WhichOneof("record_type") == "run"}
    assert run_ids == {read_state(run_dir).run_id}
    rows = [row for file in files for row in _history(wandb_records(file))]
    expected = metrics.read(run_dir)
    assert [row[STEP_METRIC] for row in rows] == [0, 1, 2, 3, 4] == [r["step"] for r in expected]
    assert [row["_step"] for row in rows] == [0, 1, 2, 3, 4]
    for row, record in zip(rows, expected, strict=True):
        for key, value in record.items():
            if key == "step" or value is None:
                continue
            if isinstance(value, list):
                assert [row[f"{key}/low"], row[f"{key}/high"]] == pytest.approx(value), key
            else:
                assert row[key] == pytest.approx(value), key
    # Tables and images are logged as files of the segment that logged them, named in the row.
    segment_of = {0: files[0], 1: files[0], 2: files[0], 3: files[1], 4: files[1]}

    def media(step: int, key: str) -> Path:
        assert rows[step][f"{key}/_type"] in ("table-file", "image-file"), (step, key)
        return segment_of[step].parent / "files" / rows[step][f"{key}/path"]

    for step in (1, 2, 3, 4):
        table = json.loads(media(step, "samples/transcripts").read_text())
        assert table["columns"] == list(TRANSCRIPT_COLUMNS) and table["data"]
        transcript = (run_dir / "samples" / f"step_{step}.md").read_text()
        assert all(row[0] == step and f"## {row[1]} " in transcript for row in table["data"])
    # The closing table and curves of each process, at the last step it sent: the second over the whole run.
    assert "eval/before_after/_type" in rows[2] and "eval/learning_curves/_type" not in rows[3]
    assert media(4, "eval/learning_curves").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    table = json.loads(media(4, "eval/before_after").read_text())
    summary = before_after(expected)
    assert table["columns"] == ["measure", "before (step 0)", "after (step 4)"]
    assert [tuple(row) for row in table["data"]] == list(summary.rows)
    assert "strat-tests" in (run_dir / "config.yaml").read_text()
    for folder in (run_dir, wandb_dir):
        leaked = [str(p) for p in folder.rglob("*") if p.is_file() and SECRET.encode() in p.read_bytes()]
        assert not leaked, f"the API key was written to {leaked}"
