"""A checkpoint write killed half-way, or failing on a full disk, leaves the previous checkpoint
loadable and is ignored on resume."""

import errno
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import torch

from strat.model import checkpoint
from strat.train.learner import LearnerSettings, PolicyLearner

KILLED_WRITE = textwrap.dedent("""
    import os, signal, sys
    from pathlib import Path
    from strat.process_env import apply_defaults
    apply_defaults()  # as the `strat` command does, before torch is imported
    import torch
    from strat.train.learner import LearnerSettings, PolicyLearner

    run_dir, model = Path(sys.argv[1]), sys.argv[2]
    learner = PolicyLearner(model, LearnerSettings())
    learner.save(run_dir, 1, {"baseline": {}}, keep=3)
    real_save = torch.save

    def save_then_die(obj, f, *args, **kwargs):
        real_save(obj, f, *args, **kwargs)
        os.kill(os.getpid(), signal.SIGKILL)  # half-way: weights and optimizer written, no marker

    torch.save = save_then_die
    learner.save(run_dir, 2, {"baseline": {}}, keep=3)
""")


def _weights(learner: PolicyLearner) -> dict[str, torch.Tensor]:
    return {k: v.clone() for k, v in learner.model.state_dict().items()}


def test_write_killed_half_way_leaves_the_previous_checkpoint(tmp_path: Path, tiny_model_dir: Path) -> None:
    done = subprocess.run([sys.executable, "-c", KILLED_WRITE, str(tmp_path), str(tiny_model_dir)],
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == -9, done.stderr[-2000:]
    partial = tmp_path / "checkpoints" / "step_2.partial"
    assert (partial / "optimizer.pt").is_file() and not (partial / checkpoint.COMPLETE).exists()
    latest = checkpoint.latest(tmp_path)
    assert latest is not None and latest.step == 1
    learner = PolicyLearner(tiny_model_dir, LearnerSettings())
    assert learner.load(latest)["step"] == 1
    # The next write of that step replaces the debris.
    learner.save(tmp_path, 2, {"baseline": {}}, keep=3)
    assert [c.step for c in checkpoint.complete_checkpoints(tmp_path)] == [1, 2]
    assert not partial.exists()


def test_full_disk_during_a_write_leaves_nothing_half_written(
    tmp_path: Path, tiny_model_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    learner = PolicyLearner(tiny_model_dir, LearnerSettings(lr=0.05))
    learner.save(tmp_path, 1, {"baseline": {}}, keep=2)
    saved = _weights(learner)

    def no_space(*args, **kwargs):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(torch, "save", no_space)
    with pytest.raises(OSError, match="No space left"):
        learner.save(tmp_path, 2, {"baseline": {}}, keep=2)
    monkeypatch.undo()
    assert sorted(p.name for p in (tmp_path / "checkpoints").iterdir()) == ["step_1"]
    fresh = PolicyLearner(tiny_model_dir, LearnerSettings())
    fresh.load(checkpoint.latest(tmp_path))
    assert all(torch.equal(saved[k], v) for k, v in fresh.model.state_dict().items())
