"""Bad configuration and environment are refused before any actor starts, in one line."""

import json
import shutil
from pathlib import Path

import pytest

from strat import cli
from strat.config_loading import load_config

from .conftest import DEFAULT, small_overrides


def _refusal(capsys: pytest.CaptureFixture, argv: list[str]) -> str:
    code = cli.main(argv)
    err = capsys.readouterr().err.strip()
    assert code == 2, err
    # Progress log lines may come first; the refusal is the one last line, without a traceback.
    assert "Traceback" not in err
    last = err.splitlines()[-1]
    assert last.startswith("strat: error: ")
    return last


def _no_ray_started() -> None:
    import ray

    assert not ray.is_initialized(), "the refusal came after Ray (and the actors) started"


@pytest.mark.parametrize(("override", "expected"), [
    ("game.name=chess", "chess"),
    ("game.opponents=[{kind: scripted, name: grandmaster, weight: 1}]", "grandmaster"),
    ("model.path=/nonexistent/model", "no model directory"),
    ("resources.agents=0", "resources.agents"),
])
def test_bad_config_is_refused_in_one_line(capsys, tmp_path: Path, override: str, expected: str) -> None:
    err = _refusal(capsys, ["train", str(DEFAULT), f"run.output_dir={tmp_path}", override])
    assert expected in err
    _no_ray_started()


def test_model_without_safetensors_is_refused(capsys, tmp_path: Path, tiny_model_dir: Path) -> None:
    pickled = tmp_path / "pickled_model"
    shutil.copytree(tiny_model_dir, pickled)
    for weights in pickled.glob("*.safetensors"):
        weights.unlink()
    (pickled / "pytorch_model.bin").write_bytes(b"not loaded")
    err = _refusal(capsys, ["train", str(DEFAULT), f"model.path={pickled}"])
    assert "no *.safetensors" in err


def test_resume_without_a_checkpoint_is_refused(capsys, tmp_path: Path, tiny_model_dir: Path) -> None:
    err = _refusal(capsys, ["train", "--resume", str(tmp_path / "nowhere")])
    assert "no config.yaml" in err
    from strat.config import save_resolved

    run_dir = tmp_path / "run"
    run_dir.mkdir()
    save_resolved(load_config(DEFAULT, small_overrides(tmp_path, tiny_model_dir)), run_dir)
    err = _refusal(capsys, ["train", "--resume", str(run_dir)])
    assert "no complete checkpoint" in err
    _no_ray_started()


def test_resume_from_a_checkpoint_of_an_unknown_format_is_refused(capsys, tmp_path: Path, tiny_model_dir: Path) -> None:
    from strat.config import save_resolved
    from strat.model import checkpoint

    run_dir = tmp_path / "run"
    run_dir.mkdir()
    save_resolved(load_config(DEFAULT, small_overrides(tmp_path, tiny_model_dir)), run_dir)
    written = checkpoint.checkpoint_dir(run_dir, 3)
    written.mkdir(parents=True)
    (written / "loop_state.json").write_text(json.dumps({"format": 99, "step": 3}))
    (written / checkpoint.COMPLETE).write_text("3")
    err = _refusal(capsys, ["train", "--resume", str(run_dir)])
    assert "has format 99" in err and "reads formats 1, 2" in err
    _no_ray_started()


def test_unwritable_run_directory_is_refused(capsys, tmp_path: Path, tiny_model_dir: Path) -> None:
    blocker = tmp_path / "a_file"
    blocker.write_text("not a directory")
    err = _refusal(capsys, ["train", str(DEFAULT), *small_overrides(blocker, tiny_model_dir)])
    assert "not writable" in err
    _no_ray_started()


def test_full_disk_is_refused_before_training(
    capsys, tmp_path: Path, tiny_model_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr("strat.train.trainer.shutil.disk_usage", lambda path: shutil._ntuple_diskusage(10**9, 10**9, 1024))
    err = _refusal(capsys, ["train", str(DEFAULT), *small_overrides(tmp_path, tiny_model_dir)])
    assert "MiB free but" in err and "checkpoint" in err
    _no_ray_started()


def test_impossible_resources_are_refused_before_actors_start(capsys, tmp_path: Path, tiny_model_dir: Path) -> None:
    err = _refusal(capsys, ["train", str(DEFAULT), *small_overrides(tmp_path, tiny_model_dir), "resources.agents=64"])
    assert "the actors need" in err and "CPU" in err
    import ray

    assert not ray.is_initialized(), "the local Ray that Strat started is shut down again"
