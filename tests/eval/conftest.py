"""Fixtures of the evaluation tests: a run directory around the tiny model."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from strat.config import save_resolved
from strat.config_loading import load_config


@pytest.fixture(scope="session")
def tiny_run_dir(tiny_model_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """runs/tiny/ with config.yaml (short responses), metrics.jsonl and a complete checkpoint at step 2."""
    run_dir = tmp_path_factory.mktemp("runs") / "tiny"
    checkpoint = run_dir / "checkpoints" / "step_2"
    shutil.copytree(tiny_model_dir, checkpoint)
    (checkpoint / "COMPLETE").write_text("2")
    config = load_config(None, [f"model.path={tiny_model_dir}", "reasoning.max_new_tokens=8", "run.name=tiny"])
    save_resolved(config, run_dir)
    records = [
        {"step": 1, "reward/mean": -1.0, "format/valid_rate": 0.2, "cot/score_mean": 0.1},
        {"step": 2, "reward/mean": -0.5, "format/valid_rate": 0.4, "cot/score_mean": 0.2,
         "eval/return_vs_random": -0.2, "eval/return_vs_random_ci": 0.3,
         "eval/exploitability": 0.6, "eval/exploitability_ci": [0.4, 0.8]},
    ]
    (run_dir / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))
    return run_dir
