"""No secret of the environment in a training run's outputs: a one-step local run with HF_TOKEN, RAY_AUTH_TOKEN and
WANDB_API_KEY set to marker values; its run directory, stdout and stderr and Ray's session directory (logs included)
hold none of them (the markers: `secret_markers` in tests/conftest.py). The submitted job's side is
`test_submit_follow_runs_a_tiny_job_that_carries_no_secret` in tests/cluster/test_submit.py."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from .conftest import DEFAULT, small_overrides

RUN_TIMEOUT_S = 420


@pytest.fixture
def ray_tmp() -> Iterator[Path]:
    # Not under tmp_path: Ray's socket paths there would exceed the 107-byte AF_UNIX limit.
    path = Path(tempfile.mkdtemp(prefix="strat-ray-"))
    yield path
    shutil.rmtree(path, ignore_errors=True)


@pytest.mark.slow
def test_a_one_step_run_writes_no_secret(tmp_path: Path, tiny_model_dir: Path, ray_tmp: Path, secret_markers) -> None:
    env = {**os.environ, "RAY_TMPDIR": str(ray_tmp)}
    env.pop("RAY_ADDRESS", None)
    command = [sys.executable, "-m", "strat.cli", "train", str(DEFAULT), *small_overrides(tmp_path, tiny_model_dir),
               "schedule.steps=1", "schedule.checkpoint_every=1", "logging.samples_every=1", "run.name=secrets"]
    done = subprocess.run(command, env=env, capture_output=True, timeout=RUN_TIMEOUT_S, check=False)
    assert done.returncode == 0, done.stderr.decode(errors="replace")[-3000:]
    run_dir = tmp_path / "secrets"
    assert (run_dir / "metrics.jsonl").is_file() and (run_dir / "checkpoints" / "step_1" / "COMPLETE").is_file()
    sessions = list(ray_tmp.glob("ray/session_*/logs")) or list(ray_tmp.glob("session_*/logs"))
    assert sessions, f"no Ray session logs under {ray_tmp}"
    files = secret_markers.files_under
    found = secret_markers.leaks([("stdout", done.stdout), ("stderr", done.stderr), *files(run_dir), *files(ray_tmp)])
    assert not found, found
