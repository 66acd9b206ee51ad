"""experiments/does_averaging_the_weights_help/average_checkpoints.py: the average of a run's last K checkpoints,
parameter by parameter, written as a run folder `strat eval` reads (values computed by hand)."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file, save_file

from .conftest import experiment_module


@pytest.fixture(scope="module")
def averaging():
    yield from experiment_module("average_checkpoints")


def _run(tmp_path: Path, steps: dict[int, float]) -> Path:
    """A run folder with a checkpoint per step whose every weight is the step's value."""
    run = tmp_path / "run"
    for step, value in steps.items():
        folder = run / "checkpoints" / f"step_{step}"
        folder.mkdir(parents=True)
        save_file({"w": torch.full((2, 2), value), "b": torch.full((3,), -value)}, str(folder / "model.safetensors"))
        (folder / "config.json").write_text("{}")
        (folder / "optimizer.pt").write_text("not copied")
        (folder / "COMPLETE").write_text(str(step))
    (run / "config.yaml").write_text("run: {name: run}\n")
    return run


def test_the_last_k_checkpoints_are_averaged_into_a_run_folder(averaging, tmp_path: Path) -> None:
    run = _run(tmp_path, {1: 1.0, 2: 2.0, 3: 4.0, 4: 8.0})
    out = averaging.write_average(run, 3, tmp_path / "avg")
    folder = out / "checkpoints" / "step_4"
    weights = load_file(folder / "model.safetensors")
    assert torch.equal(weights["w"], torch.full((2, 2), (2.0 + 4.0 + 8.0) / 3))
    assert torch.equal(weights["b"], torch.full((3,), -(2.0 + 4.0 + 8.0) / 3))
    assert (folder / "config.json").is_file()
    # The averaged checkpoint carries a manifest of its own files, which verifies, and catches a damaged copy.
    from strat.model import manifest

    listed = manifest.read(folder, 4)
    assert isinstance(listed, manifest.Manifest) and {f.path for f in listed.files} == {"config.json",
                                                                                      "model.safetensors"}
    assert manifest.verify(folder, 4).status == "verified"
    (folder / "model.safetensors").write_bytes((folder / "model.safetensors").read_bytes()[:-1] + b"\0")
    assert manifest.verify(folder, 4).status == "damaged"
    assert not (folder / "optimizer.pt").exists() and (out / "config.yaml").is_file()
    one = averaging.write_average(run, 1, tmp_path / "one")
    assert torch.equal(load_file(one / "checkpoints" / "step_4" / "model.safetensors")["w"], torch.full((2, 2), 8.0))


def test_too_few_or_gapped_checkpoints_are_refused(averaging, tmp_path: Path) -> None:
    run = _run(tmp_path, {1: 1.0, 3: 3.0, 4: 4.0})
    with pytest.raises(SystemExit, match="fewer than --last 5"):
        averaging.write_average(run, 5, tmp_path / "avg")
    with pytest.raises(SystemExit, match=r"not consecutive steps \(\[1, 3, 4\]\)"):
        averaging.write_average(run, 3, tmp_path / "avg")
