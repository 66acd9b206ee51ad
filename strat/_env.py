"""Process-wide defaults that must be set before torch or vLLM is imported: offline hub, one OpenMP thread, quiet logs."""

import os

_DEFAULTS = {
    # No model hub is reachable: fail fast instead of ~17 s of look-ups.
    "HF_HUB_OFFLINE": "1",
    "TRANSFORMERS_OFFLINE": "1",
    # With 2 threads small ops stall on a 2-core box; users can raise it.
    "OMP_NUM_THREADS": "1",
    "TOKENIZERS_PARALLELISM": "false",
    # Keep the console for Strat's own progress: no per-file loading bars.
    "HF_HUB_DISABLE_PROGRESS_BARS": "1",
    "TRANSFORMERS_VERBOSITY": "error",
    "VLLM_LOGGING_LEVEL": "WARNING",
}


def apply_defaults() -> None:
    """Set each default unless the user already chose a value."""
    for key, value in _DEFAULTS.items():
        os.environ.setdefault(key, value)
