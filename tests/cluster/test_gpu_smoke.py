"""bench/gpu_smoke.py runs end to end on a tiny CPU shape, refuses a full run without a GPU, and
stays self-contained (a lent GPU machine has no Strat install)."""

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[2] / "bench" / "gpu_smoke.py"


def test_gpu_smoke_imports_nothing_from_strat() -> None:
    assert not re.search(r"^\s*(import|from)\s+(strat|games|ray|vllm)\b", SCRIPT.read_text(), re.MULTILINE)


def test_gpu_smoke_cpu_shape_runs_and_reports() -> None:
    done = subprocess.run([sys.executable, str(SCRIPT), "--cpu-smoke"], capture_output=True, text=True, timeout=180)
    assert done.returncode == 0, done.stderr[-2000:]
    result = json.loads(done.stdout.strip().splitlines()[-1])
    assert result["learner_tokens_per_s"] > 0 and result["gen_tokens_per_s"] > 0


def test_gpu_smoke_without_a_gpu_refuses_in_one_line() -> None:
    import torch

    if torch.cuda.is_available():
        pytest.skip("this machine has a GPU: the refusal is for machines without one")
    done = subprocess.run([sys.executable, str(SCRIPT)], capture_output=True, text=True, timeout=120)
    assert done.returncode == 2 and "--cpu-smoke" in done.stderr and done.stderr.count("\n") == 1
