"""The inference engine interface every backend implements."""

from __future__ import annotations

import os
from abc import ABC, abstractmethod
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import torch

    from strat.sync.process_group import TensorMeta


@dataclass(frozen=True)
class SamplingParams:
    """How to sample one batch; temperature 0 means greedy."""

    max_tokens: int = 128
    temperature: float = 1.0
    top_p: float = 1.0
    seed: int | None = None
    """Seed of the batch; each prompt i samples from (seed, i), so results do not depend on batching."""


@dataclass(frozen=True)
class Generation:
    """One completion: its text, token ids and the per-token log-probs of the sampling distribution."""

    prompt_token_ids: tuple[int, ...]
    token_ids: tuple[int, ...]
    logprobs: tuple[float, ...]
    text: str
    finish_reason: str
    """`stop` (end-of-turn token) or `length` (hit max_tokens)."""


class Engine(ABC):
    """Batched generation with log-probs, and in-place weight updates."""

    @property
    @abstractmethod
    def tokenizer(self):  # -> transformers.PreTrainedTokenizerBase
        """The model's tokenizer."""

    @abstractmethod
    def generate(self, prompts: Sequence[Sequence[int]], params: SamplingParams) -> list[Generation]:
        """Complete each prompt (token ids); one Generation per prompt, in order."""

    @abstractmethod
    def load_state_dict(self, state: Mapping[str, torch.Tensor]) -> None:
        """Replace the weights by a (Hugging Face named) state dict."""

    @abstractmethod
    def load_weights_dir(self, path: str | os.PathLike[str]) -> None:
        """Replace the weights by those in a directory of safetensors files."""

    @property
    @abstractmethod
    def weight_group_ranks(self) -> int:
        """How many processes of this engine join a weight group (one per tensor-parallel worker)."""

    @abstractmethod
    def join_weight_group(self, address: str, first_rank: int, world_size: int, backend: str) -> None:
        """Join a weight group (`strat.sync.process_group`) at ranks `first_rank`.. (`weight_group_ranks` of them); blocks
        until every member has joined. Leaves the group it was in before, if any."""

    @abstractmethod
    def receive_weights(self, metadata: Sequence[TensorMeta]) -> None:
        """Replace the weights by those the learner broadcasts in the weight group, `metadata` listing them in order."""

    @abstractmethod
    def close(self) -> None:
        """Free the engine's resources."""

    def encode_chat(self, messages: Sequence[Mapping[str, str]]) -> list[int]:
        """Token ids of chat messages in the model's template, ready for the assistant's turn."""
        ids = self.tokenizer.apply_chat_template(list(messages), add_generation_prompt=True, tokenize=True)
        if isinstance(ids, Mapping):
            ids = ids["input_ids"]
        return list(ids)

    def generate_chat(
        self, conversations: Sequence[Sequence[Mapping[str, str]]], params: SamplingParams
    ) -> list[Generation]:
        """Complete each conversation at the assistant's turn."""
        return self.generate([self.encode_chat(messages) for messages in conversations], params)

    def __enter__(self) -> Engine:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def stop_token_ids(tokenizer) -> list[int]:
    """End-of-turn ids: the tokenizer's eos and, for ChatML models, <|im_end|> and <|endoftext|>."""
    ids = []
    for token in (tokenizer.eos_token, "<|im_end|>", "<|endoftext|>"):
        if token is None:
            continue
        token_id = tokenizer.convert_tokens_to_ids(token)
        if isinstance(token_id, int) and token_id != tokenizer.unk_token_id and token_id not in ids:
            ids.append(token_id)
    return ids
