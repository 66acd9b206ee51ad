"""bench/gpu_smoke.py runs end to end on a tiny CPU shape, Strat's own learner included, refuses a full run without a
GPU, and imports no Strat code at its top (a lent GPU machine has only torch and transformers installed; Strat's
learner comes from the source tree and needs nothing more)."""

import ast
import json
import subprocess
import sys
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[2] / "bench" / "gpu_smoke.py"


def test_gpu_smoke_imports_nothing_from_strat_at_its_top() -> None:
    top = ast.parse(SCRIPT.read_text()).body
    modules = [alias.name for node in top if isinstance(node, ast.Import) for alias in node.names]
    modules += [node.module for node in top if isinstance(node, ast.ImportFrom) and node.module]
    assert modules and not [m for m in modules if m.split(".")[0] in ("strat", "games", "ray", "vllm")]


def test_gpu_smoke_cpu_shape_runs_and_reports() -> None:
    done = subprocess.run([sys.executable, str(SCRIPT), "--cpu-smoke"], capture_output=True, text=True, timeout=180)
    assert done.returncode == 0, done.stderr[-2000:]
    result = json.loads(done.stdout.strip().splitlines()[-1])
    assert result["learner_tokens_per_s"] > 0 and result["gen_tokens_per_s"] > 0
    # Strat's learner ran one update; in float32 on one device it recomputes the engine's log-probs exactly.
    assert result["strat_update_s"] > 0 and result["strat_engine_learner_gap"] < 1e-5
    assert result["strat_heavy_modules"] == []


def test_gpu_smoke_without_a_gpu_refuses_in_one_line() -> None:
    import torch

    if torch.cuda.is_available():
        pytest.skip("this machine has a GPU: the refusal is for machines without one")
    done = subprocess.run([sys.executable, str(SCRIPT)], capture_output=True, text=True, timeout=120)
    assert done.returncode == 2 and "--cpu-smoke" in done.stderr and done.stderr.count("\n") == 1
