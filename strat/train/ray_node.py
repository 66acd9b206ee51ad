"""Joining or starting the Ray cluster a run uses, the same way for `strat train` and `strat bench`."""

from __future__ import annotations

import os
import sys

import ray

ACTOR_ENV_KEYS = ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE", "OMP_NUM_THREADS", "TOKENIZERS_PARALLELISM", "STRAT_CACHE_DIR")
"""The driver's environment variables every actor gets (offline hub, threads, the model cache)."""


def start_ray(address: str | None = None, local: bool = False) -> bool:
    """Join the cluster at `address` (or `$RAY_ADDRESS`), or start a local node: every CPU, no dashboard, Ray's
    token authentication on. Actors get the driver's ACTOR_ENV_KEYS, and vLLM in-process. Returns whether a node was
    started or joined here (False when Ray was already initialised: the caller must not shut it down). `local` always
    starts a local node, whatever `$RAY_ADDRESS` says (benchmarks measure this machine)."""
    if ray.is_initialized():
        return False
    env_vars = {key: os.environ[key] for key in ACTOR_ENV_KEYS if key in os.environ}
    env_vars["VLLM_ENABLE_V1_MULTIPROCESSING"] = "0"
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
