"""The learner reads in one screen and runs where only torch, transformers and safetensors are installed:

- every function of the update's modules has McCabe complexity <= 10 (ruff's C901);
- `PolicyLearner.update` is a short plan of named stages;
- `strat.train.learner` imports, builds a learner and runs an update with the config schema, the games, Ray, vLLM,
  pydantic, OpenSpiel, PettingZoo and gymnasium made unimportable (a lent GPU machine has none of them)."""

from __future__ import annotations

import ast
import os
import subprocess
import sys
import textwrap
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
UPDATE_MODULES = [
    "strat/train/learner.py",
    "strat/train/update_plan.py",
    "strat/train/move_tokens.py",
    "strat/train/sequences.py",
    "strat/train/prefix.py",
    "strat/train/rehearsal.py",
    "strat/train/learner_actor.py",
    "strat/model/weight_io.py",
    "strat/algorithm/losses.py",
]
HEAVY = ("pydantic", "pyspiel", "pettingzoo", "gymnasium", "ray", "vllm", "games", "strat.config", "strat.eval",
         "strat.cluster")


def test_the_update_modules_stay_simple() -> None:
    result = subprocess.run(
        [sys.executable, "-m", "ruff", "check", "--no-cache", "--select", "C901", "--config",
         "lint.mccabe.max-complexity=10", "--output-format", "concise", *UPDATE_MODULES],
        cwd=ROOT, capture_output=True, text=True, check=False,
    )
    assert result.returncode == 0, result.stdout + result.stderr


def test_update_reads_as_named_stages() -> None:
    tree = ast.parse((ROOT / "strat/train/learner.py").read_text())
    (learner,) = [node for node in tree.body if isinstance(node, ast.ClassDef) and node.name == "PolicyLearner"]
    (update,) = [node for node in learner.body if isinstance(node, ast.FunctionDef) and node.name == "update"]
    called = {node.func.attr for node in ast.walk(update)
              if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)}
    assert {"_plan", "_proximal_logprobs", "_optimizer_step", "_metrics"} <= called
    assert update.end_lineno - update.lineno < 30


def test_the_learner_needs_only_torch_transformers_and_safetensors(tiny_model_dir: Path) -> None:
    code = textwrap.dedent(f"""
        import importlib.abc, sys

        class Missing(importlib.abc.MetaPathFinder):
            def find_spec(self, name, path=None, target=None):
                if any(name == heavy or name.startswith(heavy + ".") for heavy in {HEAVY!r}):
                    raise ImportError(f"{{name}} is not installed here")
                return None

        sys.meta_path.insert(0, Missing())
        from strat.algorithm.records import TrainSample
        from strat.train.learner import LearnerSettings, PolicyLearner

        learner = PolicyLearner({str(tiny_model_dir)!r}, LearnerSettings(minibatches=2))
        samples = [TrainSample(f"g{{i}}", f"e{{i}}", "player_0", 0, (5, 6, 7), (8, 9), (-1.0, -1.0), float(i % 2))
                   for i in range(4)]
        metrics = learner.update(samples)
        assert metrics["learn/samples"] == 4.0, metrics
        print(sorted(name for name in sys.modules if name.split(".")[0] in {{"pydantic", "ray", "vllm", "games"}}))
    """)
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    result = subprocess.run([sys.executable, "-c", code], cwd=ROOT, env=env, capture_output=True, text=True,
                            timeout=300, check=False)
    assert result.returncode == 0, result.stderr[-3000:]
    assert result.stdout.strip() == "[]"
