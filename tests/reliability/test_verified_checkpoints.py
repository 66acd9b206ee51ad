"""Checkpoints carry a manifest (every file, its size and SHA-256) in their COMPLETE marker: resume, eval and export
verify a checkpoint before they load it, name a damaged one in one line, and resume falls back past it (or, with
--strict, refuses). A full disk during a checkpoint write (injected: STRAT_INJECT_FAULTS=enospc:N) leaves the
previous checkpoint intact and stops the run in one line."""

import errno
import json
import logging
import shutil
from pathlib import Path

import pytest

from strat import cli
from strat.config import save_resolved
from strat.errors import UserError
from strat.model import checkpoint, manifest
from strat.train.learner import LearnerSettings, PolicyLearner
from strat.train.trainer import checkpoint_failure

from .conftest import small_config

DAMAGEABLE = ("model.safetensors", "optimizer.pt", "rng.json", "loop_state.json")


@pytest.fixture(scope="module")
def saved_run(tmp_path_factory: pytest.TempPathFactory, tiny_model_dir: Path) -> Path:
    """A run directory (config.yaml) with checkpoints of steps 1 and 2 written by the learner, with manifests."""
    output = tmp_path_factory.mktemp("verified")
    config = small_config(output, tiny_model_dir)
    run_dir = config.run_dir
    run_dir.mkdir(parents=True)
    save_resolved(config, run_dir)
    learner = PolicyLearner(tiny_model_dir, LearnerSettings())
    for step in (1, 2):
        learner.save(run_dir, step, {"baseline": {}}, keep=3)
    return run_dir


@pytest.fixture
def run_copy(saved_run: Path, tmp_path: Path) -> Path:
    copy = tmp_path / saved_run.name
    shutil.copytree(saved_run, copy)
    return copy


def truncate(path: Path) -> None:
    data = path.read_bytes()
    path.write_bytes(data[: len(data) // 2])


def flip_middle(path: Path) -> None:
    data = bytearray(path.read_bytes())
    middle = len(data) // 2
    for i in range(middle, min(middle + 8, len(data))):
        data[i] ^= 0xFF
    path.write_bytes(bytes(data))


def _one_line_error(capsys: pytest.CaptureFixture, argv: list[str]) -> str:
    code = cli.main(argv)
    err = capsys.readouterr().err
    assert code == 2, err
    assert "Traceback" not in err
    lines = [line for line in err.splitlines() if line.strip()]
    assert lines[-1].startswith("strat: error: "), err
    return lines[-1]


def test_the_marker_lists_every_file_with_its_size_and_hash(saved_run: Path) -> None:
    folder = checkpoint.checkpoint_dir(saved_run, 2)
    data = json.loads((folder / checkpoint.COMPLETE).read_text())
    assert data["step"] == 2 and data["hash"] == "sha256"
    on_disk = sorted(p.relative_to(folder).as_posix() for p in folder.rglob("*") if p.is_file())
    listed = [entry["path"] for entry in data["files"]]
    assert listed == [name for name in on_disk if name != checkpoint.COMPLETE]
    assert set(DAMAGEABLE) <= set(listed)
    for entry in data["files"]:
        assert (folder / entry["path"]).stat().st_size == entry["size"]
        assert manifest.file_hash(folder / entry["path"]) == entry["sha256"]
    assert checkpoint.verify(checkpoint.Checkpoint(folder, 2)).status == "verified"


@pytest.mark.parametrize("name", DAMAGEABLE)
@pytest.mark.parametrize("damage", [truncate, flip_middle], ids=["truncated", "flipped"])
def test_a_damaged_file_is_named_with_its_step_and_what_is_wrong(run_copy: Path, name: str, damage) -> None:
    folder = checkpoint.checkpoint_dir(run_copy, 2)
    damage(folder / name)
    verdict = checkpoint.verify(checkpoint.Checkpoint(folder, 2))
    assert verdict.status == "damaged" and verdict.damage.file == name
    line = verdict.damage.line()
    assert "\n" not in line and "step_2" in line and name in line
    assert ("the manifest says" in line) if damage is truncate else ("other content" in line)


def test_a_missing_file_and_an_unreadable_marker_are_damage(run_copy: Path) -> None:
    folder = checkpoint.checkpoint_dir(run_copy, 2)
    (folder / "rng.json").unlink()
    assert checkpoint.verify(checkpoint.Checkpoint(folder, 2)).damage.problem == "is missing"
    (folder / checkpoint.COMPLETE).write_text('{"step": 2, "fil')
    damage = checkpoint.verify(checkpoint.Checkpoint(folder, 2)).damage
    assert damage.file == checkpoint.COMPLETE and "not a readable manifest" in damage.problem


def test_a_checkpoint_from_before_manifests_loads_with_a_note(run_copy: Path, caplog, tiny_model_dir: Path) -> None:
    folder = checkpoint.checkpoint_dir(run_copy, 2)
    (folder / checkpoint.COMPLETE).write_text("2")
    old = checkpoint.Checkpoint(folder, 2)
    assert checkpoint.verify(old).status == "unverifiable"
    point = checkpoint.resume_point(run_copy)
    assert point.checkpoint.step == 2 and not point.verified and not point.damaged
    with caplog.at_level(logging.WARNING, logger="strat.checkpoint"):
        checkpoint.require_verified(old)
    assert "cannot be verified" in caplog.text and "step_2" in caplog.text
    assert PolicyLearner(tiny_model_dir, LearnerSettings()).load(old)["step"] == 2


def test_resume_falls_back_to_the_newest_checkpoint_that_verifies(run_copy: Path) -> None:
    truncate(checkpoint.checkpoint_dir(run_copy, 2) / "model.safetensors")
    point = checkpoint.resume_point(run_copy)
    assert point.checkpoint.step == 1 and point.verified
    assert [(d.step, d.file) for d in point.damaged] == [(2, "model.safetensors")]
    moved = checkpoint.set_aside(point.damaged)
    line = point.fallback_line(moved)
    assert "\n" not in line and line.startswith("resuming from step_1, the newest checkpoint that verifies")
    assert "step_2" in line and "model.safetensors" in line and "step 2 will be trained again" in line
    assert [p.name for p in moved] == ["step_2.damaged"]
    assert [c.step for c in checkpoint.complete_checkpoints(run_copy)] == [1]


def test_strict_resume_refuses_and_no_verifiable_checkpoint_is_refused(run_copy: Path) -> None:
    flip_middle(checkpoint.checkpoint_dir(run_copy, 2) / "optimizer.pt")
    with pytest.raises(UserError, match=r"step_2 .*optimizer\.pt.*--strict refuses"):
        checkpoint.resume_point(run_copy, strict=True)
    truncate(checkpoint.checkpoint_dir(run_copy, 1) / "loop_state.json")
    with pytest.raises(UserError, match=r"no checkpoint of .* verifies: .*step_2.*; .*step_1"):
        checkpoint.resume_point(run_copy)


def test_strict_resume_of_a_damaged_checkpoint_exits_2_in_one_line(run_copy: Path, capsys) -> None:
    truncate(checkpoint.checkpoint_dir(run_copy, 2) / "rng.json")
    line = _one_line_error(capsys, ["train", "--resume", str(run_copy), "--strict"])
    assert "step_2" in line and "rng.json" in line and "--strict" in line
    assert checkpoint.checkpoint_dir(run_copy, 2).is_dir(), "a refused resume moves nothing"
    import ray

    assert not ray.is_initialized()


def test_eval_and_export_of_a_damaged_checkpoint_exit_2_in_one_line(run_copy: Path, capsys, tmp_path: Path) -> None:
    flip_middle(checkpoint.checkpoint_dir(run_copy, 2) / "model.safetensors")
    for argv in (["eval", "--policy", str(run_copy), "--backend", "hf"],
                 ["eval", "--policy", str(checkpoint.checkpoint_dir(run_copy, 2)), "--backend", "hf"],
                 ["export", str(run_copy), "--out", str(tmp_path / "out")]):
        line = _one_line_error(capsys, argv)
        assert "step_2" in line and "model.safetensors" in line and "other content" in line
    assert not (tmp_path / "out").exists()


def test_injected_full_disk_leaves_the_previous_checkpoint_intact(
    run_copy: Path, tiny_model_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    before = {p.name: p.read_bytes() for p in checkpoint.checkpoint_dir(run_copy, 2).iterdir() if p.is_file()}
    monkeypatch.setenv("STRAT_INJECT_FAULTS", "enospc:3")
    learner = PolicyLearner(tiny_model_dir, LearnerSettings())
    with pytest.raises(OSError) as caught:
        learner.save(run_copy, 3, {"baseline": {}}, keep=2)
    assert caught.value.errno == errno.ENOSPC
    assert sorted(p.name for p in (run_copy / "checkpoints").iterdir()) == ["step_1", "step_2"], "staging removed"
    assert {p.name: p.read_bytes() for p in checkpoint.checkpoint_dir(run_copy, 2).iterdir() if p.is_file()} == before
    assert checkpoint.verify(checkpoint.latest(run_copy)).status == "verified"
    line = checkpoint_failure(3, run_copy, caught.value, "the last complete checkpoint is step 2: continue with ...")
    assert "\n" not in line and "No space left on device" in line and "MiB free there" in line
    assert "staging folder was removed" in line and "step 2" in line
    # Other steps write as usual.
    learner.save(run_copy, 4, {"baseline": {}}, keep=3)
    assert checkpoint.verify(checkpoint.latest(run_copy)).status == "verified"
