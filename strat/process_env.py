"""Process-wide environment defaults: one OpenMP thread, no tokenizer threads, quiet logs. They must be in a
process's environment before torch or vLLM is imported (OpenMP reads `OMP_NUM_THREADS` once, when torch loads it),
so they are applied where a process starts, never on `import strat`:

- the `strat` command: `strat.cli.app.main` calls `apply_defaults()` first (`strat.cli` imports no torch);
- Ray actors: `strat.train.ray_node.actor_env_vars()` carries them (the driver's value where it has one) in the
  runtime env of the job (`start_ray`) and of each actor of a run (`Fleet`), so Ray sets them before the
  worker's Python starts;
- tests: `tests/conftest.py` calls `apply_defaults()` before anything imports torch;
- scripts (bench/*.py, experiments/*/*.py, a notebook, a subprocess that imports torch): call `apply_defaults()`
  before their heavy imports.

A value the user set wins over the default. The Hugging Face Hub stays reachable (a `model.path` may be a Hub name);
set `HF_HUB_OFFLINE=1` to keep it off."""

from __future__ import annotations

import os
from collections.abc import Mapping

DEFAULTS: dict[str, str] = {
    # With 2 threads small ops stall on a 2-core box; users can raise it.
    "OMP_NUM_THREADS": "1",
    "TOKENIZERS_PARALLELISM": "false",
    # Keep the console for Strat's own progress: no per-file loading bars.
    "HF_HUB_DISABLE_PROGRESS_BARS": "1",
    "TRANSFORMERS_VERBOSITY": "error",
    "VLLM_LOGGING_LEVEL": "WARNING",
}


def with_defaults(env: Mapping[str, str] | None = None) -> dict[str, str]:
    """The value of each default in `env` (`os.environ` when None), or the default where `env` has none: what
    another process (a Ray actor) should be given."""
    env = os.environ if env is None else env
    return {key: env.get(key, value) for key, value in DEFAULTS.items()}


_APPLIED: set[str] = set()
"""The defaults `apply_defaults` set in this process (the user had chosen no value)."""


def apply_defaults() -> None:
    """Set each default in this process's environment unless the user already chose a value."""
    for key, value in DEFAULTS.items():
        if key not in os.environ:
            os.environ[key] = value
            _APPLIED.add(key)


def chosen_by_user(key: str) -> bool:
    """Whether `key` is in this process's environment by the user's choice, not by `apply_defaults`."""
    return key in os.environ and key not in _APPLIED
