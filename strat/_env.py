"""Process-wide defaults that must be set before torch or vLLM is imported: one OpenMP thread, quiet logs.

The Hugging Face Hub stays reachable (a `model.path` may be a Hub name); set `HF_HUB_OFFLINE=1` to keep it off."""

import os

_DEFAULTS = {
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
