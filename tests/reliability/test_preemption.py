"""Pre-emption: SIGTERM finishes the step, writes a checkpoint and exits cleanly; SIGKILL mid-run,
then `strat train --resume`, continues from the last complete checkpoint as if never stopped."""

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from safetensors.torch import load_file

from strat import metrics
from strat.model import checkpoint
from strat.sync.fingerprint import fingerprint
from strat.train.trainer import Trainer

from .conftest import DEFAULT, small_config, small_overrides

pytestmark = pytest.mark.faults
STRAT = str(Path(sys.executable).parent / "strat")


def _start(args: list[str], log: Path) -> subprocess.Popen:
    handle = log.open("w")
    return subprocess.Popen([STRAT, *args], stdout=handle, stderr=subprocess.STDOUT, start_new_session=True)


def _wait_for(condition, process: subprocess.Popen, log: Path, timeout_s: float = 240.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        if process.poll() is not None:
            raise AssertionError(f"strat train ended early ({process.returncode}):\n{log.read_text()[-3000:]}")
        if time.monotonic() > deadline:
            process.kill()
            raise AssertionError(f"timed out:\n{log.read_text()[-3000:]}")
        time.sleep(0.2)


def _steps(run_dir: Path) -> list[int]:
    return [r["step"] for r in metrics.read(run_dir)]


def _comparable(records: list[dict]) -> list[dict]:
    return [{k: v for k, v in r.items() if not k.startswith(("time/", "throughput/", "faults/"))} for r in records]


def test_sigterm_checkpoints_and_exits_cleanly(tmp_path: Path, tiny_model_dir: Path) -> None:
    # With overlap: the rollout in flight at the SIGTERM goes into the checkpoint.
    overrides = small_overrides(tmp_path, tiny_model_dir, "schedule.steps=50", "schedule.checkpoint_every=0",
                                "schedule.max_staleness=1")
    run_dir = tmp_path / "kuhn_poker_tiny"
    log = tmp_path / "train.log"
    process = _start(["train", str(DEFAULT), *overrides], log)
    _wait_for(lambda: len(_steps(run_dir)) >= 1, process, log)
    process.send_signal(signal.SIGTERM)
    assert process.wait(timeout=120) == 0, log.read_text()[-3000:]
    steps = _steps(run_dir)
    assert steps == list(range(1, len(steps) + 1)) and len(steps) < 50
    assert checkpoint.latest(run_dir).step == steps[-1]
    text = log.read_text()
    assert f"stopped by SIGTERM after step {steps[-1]} of 50" in text
    assert "Traceback" not in text

    # The checkpoint continues the run.
    resumed = subprocess.run([STRAT, "train", "--resume", str(run_dir), f"schedule.steps={steps[-1] + 1}"],
                             capture_output=True, text=True, timeout=300)
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    assert _steps(run_dir) == list(range(1, steps[-1] + 2))
    # The step after the stop trains on the stored rollout, which ran on the update before the stop's (step s + 1 on
    # s - 1), not on the checkpoint's weights.
    assert metrics.read(run_dir)[-1]["rollout/weights_version"] == steps[-1] - 1


def _weights(run_dir: Path) -> list[list[list]]:
    """Per step of the ledger, the (version, fingerprint) of the weights its rollouts ran on."""
    return [line["weights"] for line in metrics.read_ledger(run_dir)]


def _file_fingerprint(folder: Path) -> str:
    return fingerprint(load_file(folder / "model.safetensors").items())


# The default schedule: the next rollout runs during the update, on weights one update older (max_staleness=1). Step 2
# is a checkpoint and an evaluation, so its checkpoint holds the rollout of step 3, collected early for the evaluation.
OVERLAP = ["schedule.steps=4", "schedule.checkpoint_every=2", "schedule.keep_checkpoints=3", "schedule.max_staleness=1",
           "schedule.eval_every=2", "eval.games=4", "eval.samples_per_infoset=0"]


def test_sigkill_then_resume_matches_an_uninterrupted_run(local_ray, tmp_path: Path, tiny_model_dir: Path) -> None:
    reference = small_config(tmp_path / "reference", tiny_model_dir, *OVERLAP)
    Trainer(reference, reference.run_dir).run()

    overrides = small_overrides(tmp_path / "killed", tiny_model_dir, *OVERLAP)
    run_dir = tmp_path / "killed" / "kuhn_poker_tiny"
    log = tmp_path / "train.log"
    process = _start(["train", str(DEFAULT), *overrides], log)
    # Killed with step 3 logged and step 4 under way: the last complete checkpoint is step 2.
    _wait_for(lambda: 3 in _steps(run_dir), process, log)
    os.killpg(process.pid, signal.SIGKILL)
    process.wait(timeout=60)
    assert checkpoint.latest(run_dir).step == 2

    resumed = subprocess.run([STRAT, "train", "--resume", str(run_dir)], capture_output=True, text=True, timeout=300)
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    assert _steps(run_dir) == [0, 1, 2, 3, 4], "no step lost or logged twice"
    assert json.loads((checkpoint.latest(run_dir).path / "loop_state.json").read_text())["step"] == 4
    # Same weights, optimizer moments, random streams and in-flight rollout after the resume: the same numbers.
    records = metrics.read(run_dir)
    assert _comparable(records) == _comparable(metrics.read(reference.run_dir))
    # Rollout s ran on the update of step s - 2 (the initial weights for steps 1 and 2).
    assert [r["rollout/weights_version"] for r in records[1:]] == [0, 0, 1, 2]
    ledger = metrics.read_ledger(run_dir)
    assert [line["step"] for line in ledger] == [1, 2, 3, 4]
    assert ledger == metrics.read_ledger(reference.run_dir)
    weights = _weights(run_dir)
    assert [[version for version, _ in step] for step in weights] == [[0], [0], [1], [2]]
    prints = [step[0][1] for step in weights]
    # The fingerprints are of the weights themselves: the initial model's, and the checkpoint of step 2's.
    assert prints[0] == prints[1] == _file_fingerprint(tiny_model_dir)
    assert prints[3] == _file_fingerprint(checkpoint.checkpoint_dir(run_dir, 2))
    assert len(set(prints[1:])) == 3


class _Crash(Exception):
    """Stands for the driver dying right after a step was logged."""


def test_vllm_resume_plays_the_same_episodes_on_the_same_weights(local_ray, tmp_path: Path, tiny_model_dir: Path) -> None:
    # One vLLM engine (no snapshot opponent). The run dies after step 3 is logged: up to there it is an uninterrupted
    # run, and its checkpoint of step 2 holds the rollout of step 3, which ran on the weights of step 1.
    config = small_config(
        tmp_path, tiny_model_dir, "engine.backend=vllm", "schedule.steps=4", "schedule.checkpoint_every=2",
        "schedule.max_staleness=1", "game.opponents=[{kind: self, weight: 0.8}, {kind: scripted, name: random, weight: 0.2}]",
    )

    def crash_after_step_3(record: dict) -> None:
        if record["step"] == 3:
            raise _Crash

    with pytest.raises(_Crash):
        Trainer(config, config.run_dir).run(crash_after_step_3)
    uninterrupted = (_comparable(metrics.read(config.run_dir)), metrics.read_ledger(config.run_dir))
    assert checkpoint.latest(config.run_dir).step == 2
    Trainer(config, config.run_dir, resume=True).run()

    records = metrics.read(config.run_dir)
    assert [r["step"] for r in records] == [1, 2, 3, 4]
    assert [r["rollout/weights_version"] for r in records] == [0, 0, 1, 2]
    assert _comparable(records[:3]) == uninterrupted[0]
    ledger = metrics.read_ledger(config.run_dir)
    assert ledger[:3] == uninterrupted[1]
    assert [version for version, _ in ledger[3]["weights"]] == [2]
    assert ledger[3]["weights"][0][1] not in {line["weights"][0][1] for line in ledger[:3]}
