"""The process environment defaults (`strat.process_env`: one OpenMP thread, quiet logs) are set where a process
starts, never on import: `import strat` leaves the environment alone, the `strat` command's `main` sets them before
anything imports torch, and every Ray actor gets them (user values first) in the job's runtime env (`start_ray`)
and in its own (`Fleet`)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tomllib
from pathlib import Path
from typing import Any

import pytest

from strat.process_env import DEFAULTS, apply_defaults, with_defaults
from strat.train import ray_node

ROOT = Path(__file__).resolve().parents[2]
KUHN = ROOT / "configs" / "kuhn_poker_tiny.yaml"


def _fresh(code: str, **env: str) -> dict[str, Any]:
    """Run `code` in a new interpreter whose environment has none of the defaults (plus `env`); the JSON it prints
    last."""
    clean = {key: value for key, value in os.environ.items() if key not in DEFAULTS}
    done = subprocess.run([sys.executable, "-c", code], env={**clean, **env}, capture_output=True, text=True,
                          cwd=ROOT, timeout=120, check=False)
    assert done.returncode == 0, done.stderr[-2000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


def test_importing_strat_changes_no_environment_variable() -> None:
    code = ("import json, os, sys\nbefore = dict(os.environ)\nimport strat\nafter = dict(os.environ)\n"
            "import strat.cli, strat.process_env, strat.train.ray_node\n"
            "print(json.dumps({'changed': sorted(k for k in {*before, *after} if before.get(k) != after.get(k)),\n"
            f"                 'set': sorted(k for k in {sorted(DEFAULTS)!r} if k in os.environ),\n"
            "                 'heavy': sorted(m for m in ('torch', 'vllm', 'transformers') if m in sys.modules)}))")
    found = _fresh(code)
    assert found["changed"] == []
    # Nor do the command's modules or `ray_node` set a default (pettingzoo, which the games import, sets variables
    # of its own); and so that `main` sets them before torch or vLLM loads, the command's modules import neither.
    assert found["set"] == []
    assert found["heavy"] == []


def test_the_strat_command_sets_the_defaults_first_and_keeps_the_users_values() -> None:
    scripts = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["scripts"]
    assert scripts["strat"] == "strat.cli:main"  # `python -m strat.cli` calls the same `main`
    code = ("import json, os, sys\nfrom strat.cli import main\nassert 'torch' not in sys.modules\n"
            "main(['--help'])\n"
            f"print(json.dumps({{key: os.environ.get(key) for key in {sorted(DEFAULTS)!r}}}))")
    assert _fresh(code) == DEFAULTS
    assert _fresh(code, OMP_NUM_THREADS="3") == {**DEFAULTS, "OMP_NUM_THREADS": "3"}


def test_apply_defaults_and_with_defaults_keep_the_users_values(monkeypatch: pytest.MonkeyPatch) -> None:
    for key in DEFAULTS:
        monkeypatch.delenv(key, raising=False)
    monkeypatch.setenv("OMP_NUM_THREADS", "4")
    assert with_defaults() == {**DEFAULTS, "OMP_NUM_THREADS": "4"}
    assert with_defaults({}) == DEFAULTS
    apply_defaults()
    assert {key: os.environ[key] for key in DEFAULTS} == {**DEFAULTS, "OMP_NUM_THREADS": "4"}


@pytest.mark.parametrize("address", [None, "ray://head:10001"], ids=["local-node", "joined-cluster"])
def test_start_ray_gives_every_actor_the_defaults(monkeypatch: pytest.MonkeyPatch, address: str | None) -> None:
    """Whether `start_ray` starts a node or joins one, the job's runtime env carries the defaults (the driver's value
    where it has one) and the driver's offline and cache settings."""
    for key in DEFAULTS:
        monkeypatch.delenv(key, raising=False)
    monkeypatch.setenv("TOKENIZERS_PARALLELISM", "true")
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    seen: list[dict[str, Any]] = []
    monkeypatch.setattr(ray_node.ray, "is_initialized", lambda: False)
    monkeypatch.setattr(ray_node.ray, "init", lambda **kwargs: seen.append(kwargs))
    assert ray_node.start_ray(address)
    env_vars = seen[0]["runtime_env"]["env_vars"]
    assert env_vars == ray_node.actor_env_vars()
    assert {key: env_vars[key] for key in DEFAULTS} == {**DEFAULTS, "TOKENIZERS_PARALLELISM": "true"}
    assert env_vars["HF_HUB_OFFLINE"] == "1" and env_vars["STRAT_CACHE_DIR"] == os.environ["STRAT_CACHE_DIR"]
    assert "OMP_NUM_THREADS" not in os.environ  # the driver's own environment is left alone


def test_the_fleet_gives_each_actor_the_defaults_when_the_caller_started_ray(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """On a Ray the caller initialised (no runtime env of Strat's), each actor's own options carry the defaults."""
    from strat.config_loading import load_config
    from strat.train import fleet as fleet_module

    for key in DEFAULTS:
        monkeypatch.delenv(key, raising=False)
    options: list[tuple[str, dict[str, Any]]] = []

    class _Actor:
        def __init__(self, role: str) -> None:
            self.role = role

        def options(self, **kwargs: Any) -> _Actor:
            options.append((self.role, kwargs))
            return self

        def remote(self, *args: Any) -> object:
            return object()

    def start_learner(model_path: str, settings: Any, world_size: int, rank_options: Any, timeout_s: float) -> Any:
        options.extend(("learner", rank_options(rank)) for rank in range(world_size))
        return type("Group", (), {"ranks": [object()] * world_size})()

    monkeypatch.setattr(fleet_module.ray, "cluster_resources", lambda: {"CPU": 64.0, "GPU": 0.0})
    monkeypatch.setattr(fleet_module, "AgentActor", _Actor("agent"))
    monkeypatch.setattr(fleet_module, "RolloutWorker", _Actor("worker"))
    monkeypatch.setattr(fleet_module, "CoTComparator", _Actor("comparator"))
    monkeypatch.setattr(fleet_module.LearnerGroup, "start", staticmethod(start_learner))
    monkeypatch.setattr(fleet_module, "WeightSync", lambda *args, **kwargs: None)
    monkeypatch.setattr(fleet_module.Fleet, "_wait_ready", lambda self, handles: None)
    monkeypatch.setattr(fleet_module, "check_shared_storage", lambda *args: None)  # needs a running Ray
    config = load_config(KUHN, [f"run.output_dir={tmp_path}", "resources.learner_ranks=2"])
    fleet_module.Fleet(config, tmp_path, "unused", lambda: 1).start()
    assert {role for role, _ in options} == {"agent", "worker", "comparator", "learner"}
    for role, kwargs in options:
        env_vars = kwargs["runtime_env"]["env_vars"]
        assert {key: env_vars[key] for key in DEFAULTS} == DEFAULTS, role
        assert env_vars == ray_node.actor_env_vars(), role


@pytest.mark.parametrize(("user", "cpus", "gpus", "expected"), [(False, 8, 1, "8"), (False, 2, 0, None),
                                                                 (False, 0.5, 0.5, "1"), (True, 8, 1, None)])
def test_a_gpu_actor_gets_one_thread_per_cpu_unless_the_user_chose(
    monkeypatch: pytest.MonkeyPatch, user: bool, cpus: float, gpus: float, expected: str | None
) -> None:
    from strat import process_env

    monkeypatch.setattr(process_env, "_APPLIED", set() if user else {"OMP_NUM_THREADS"})
    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    assert ray_node.actor_threads(cpus, gpus).get("OMP_NUM_THREADS") == expected


def test_the_actor_threads_override_the_jobs_one_thread() -> None:
    """In Ray's merge of runtime envs an actor's env_vars win over the job's (`start_ray` puts one thread there)."""
    import ray

    ray.init(num_cpus=4, num_gpus=1, include_dashboard=False, log_to_driver=False,
             runtime_env={"env_vars": {**ray_node.actor_env_vars(), "OMP_NUM_THREADS": "1"}})
    try:
        @ray.remote
        def threads() -> str:
            return os.environ["OMP_NUM_THREADS"]

        gpu = threads.options(num_cpus=3, num_gpus=1, runtime_env={"env_vars": {"OMP_NUM_THREADS": "3"}})
        assert ray.get(gpu.remote(), timeout=120) == "3"
        assert ray.get(threads.options(num_cpus=1).remote(), timeout=120) == "1"
    finally:
        ray.shutdown()
