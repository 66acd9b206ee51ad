"""Joining or starting the Ray cluster a run uses, the same way for `strat train` and `strat bench`, and the
environment every actor's process gets."""

from __future__ import annotations

import os
import sys

import ray

from strat.process_env import chosen_by_user, with_defaults

ACTOR_ENV_KEYS = ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE", "STRAT_CACHE_DIR", "STRAT_INJECT_FAULTS")
"""The driver's environment variables every actor gets, where the driver has them (offline hub, the model cache,
the reliability tests' fault injection, which the learner reads when it writes a checkpoint), besides the process defaults (`strat.process_env.DEFAULTS`: threads, logs)."""


def actor_env_vars() -> dict[str, str]:
    """The environment variables of every actor's process: the process defaults (`strat.process_env`; the driver's
    value where it set one), the driver's ACTOR_ENV_KEYS, and vLLM in-process.

    They travel in Ray's runtime env, which Ray puts in a worker's environment before its Python starts. An actor's
    `__init__` would be too late: OpenMP reads `OMP_NUM_THREADS` when torch loads, and the worker imports torch as it
    unpickles the actor's class (its module imports torch). And they do not depend on the node: a worker otherwise
    inherits the environment of its node's raylet (of `ray start`, on a cluster Strat did not start), not the
    driver's, with OMP_NUM_THREADS set by Ray to the actor's num_cpus where that has none. A value set only on a
    node, not where the driver runs, is overridden here: set it in the driver's environment (or with
    `strat submit --env`)."""
    env_vars = with_defaults()
    env_vars.update({key: os.environ[key] for key in ACTOR_ENV_KEYS if key in os.environ})
    env_vars["VLLM_ENABLE_V1_MULTIPROCESSING"] = "0"
    return env_vars


def actor_threads(num_cpus: float, num_gpus: float) -> dict[str, str]:
    """The OpenMP threads of an actor that holds `num_cpus` CPUs and `num_gpus` GPUs, as env vars on top of
    `actor_env_vars()`: a GPU actor (a CUDA engine, learner or judge) gets one thread per CPU it holds, so that its
    CPU-side work (the learner's weight gather and safetensors write, tokenisation) is not single-threaded; a CPU
    actor keeps the one thread that keeps small ops from stalling on a busy box. An `OMP_NUM_THREADS` the user set
    where the driver runs wins."""
    if num_gpus <= 0 or chosen_by_user("OMP_NUM_THREADS"):
        return {}
    return {"OMP_NUM_THREADS": str(max(1, int(num_cpus)))}


def start_ray(address: str | None = None, local: bool = False) -> bool:
    """Join the cluster at `address` (or `$RAY_ADDRESS`), or start a local node: every CPU, no dashboard, Ray's
    token authentication on. The job's runtime env carries `actor_env_vars()`, so that every actor of the run, on
    any node, gets them. Returns whether a node was started or joined here (False when Ray was already initialised:
    the caller must not shut it down, and its job carries no such runtime env: `Fleet` gives its actors the same
    variables itself). `local` always starts a local node, whatever `$RAY_ADDRESS` says (benchmarks measure this
    machine)."""
    if ray.is_initialized():
        return False
    env_vars = actor_env_vars()
    if not local:
        address = address or ("auto" if os.environ.get("RAY_ADDRESS") else None)
    else:
        address = None
    if address:
        ray.init(address=address, runtime_env={"env_vars": env_vars}, log_to_driver=False)
    else:
        keep_token_auth()
        ray.init(
            num_cpus=max(2, os.cpu_count() or 2),
            include_dashboard=False,
            dashboard_host="127.0.0.1",
            runtime_env={"env_vars": env_vars},
            log_to_driver=False,
            configure_logging=False,
        )
    return True


def keep_token_auth() -> None:
    """Drop an inherited `RAY_AUTH_MODE=disabled` before a local node starts. Ray 2.60 binds the GCS, the raylet and
    every worker to all interfaces whatever node IP it is given (only the dashboard, off here, takes a host), so its
    token authentication (on by default) is what keeps other machines from running code in the run."""
    if os.environ.get("RAY_AUTH_MODE", "").strip().lower() == "disabled":
        del os.environ["RAY_AUTH_MODE"]
        print("strat: RAY_AUTH_MODE=disabled ignored: a local Ray node listens on every interface and keeps token"
              " authentication on", file=sys.stderr)
