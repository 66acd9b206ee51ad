"""The inference engine interface every backend implements."""

from __future__ import annotations

import json
import os
from abc import ABC, abstractmethod
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
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
    actions: tuple[tuple[str, ...], ...] = ()
    """With `reasoning.constrain_action`: each prompt's legal moves by name, in order; once a response opens
    `<action>` it may only name one of them (`strat.engines.action_constraint`). Empty: free decoding."""


@dataclass(frozen=True)
class Generation:
    """One completion: its text, token ids and the per-token log-probs of the sampling distribution."""

    prompt_token_ids: tuple[int, ...]
    token_ids: tuple[int, ...]
    logprobs: tuple[float, ...]
    text: str
    finish_reason: str
    """`stop` (end-of-turn token) or `length` (hit max_tokens)."""
    allowed_token_ids: tuple[tuple[int, ...], ...] = ()
    """Under a constrained move (`SamplingParams.actions`): for each token, the ids it was sampled among, whose
    renormalised distribution `logprobs` is of (empty where free). Empty when nothing was constrained."""


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
    def weights_fingerprint(self) -> str:
        """A short fingerprint of the weights as this engine holds them (`strat.sync.fingerprint`)."""

    @abstractmethod
    def close(self) -> None:
        """Free the engine's resources."""

    def encode_chat(self, messages: Sequence[Mapping[str, str]]) -> list[int]:
        """Token ids of chat messages in the model's template, ready for the assistant's turn."""
        return chat_prompt_ids(self.tokenizer, messages)

    def generate_chat(
        self, conversations: Sequence[Sequence[Mapping[str, str]]], params: SamplingParams
    ) -> list[Generation]:
        """Complete each conversation at the assistant's turn."""
        return self.generate([self.encode_chat(messages) for messages in conversations], params)

    def __enter__(self) -> Engine:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


_SYSTEM_PROBE = "strat-system-probe"
_RENDERS_SYSTEM: dict[str | None, bool] = {}
"""Whether a chat template (by its text) renders a system message; probed once per template."""


def renders_system(tokenizer) -> bool:
    """Whether the chat template renders a system message (some raise on one, some drop it silently)."""
    template = tokenizer.chat_template
    if template not in _RENDERS_SYSTEM:
        probe = [{"role": "system", "content": _SYSTEM_PROBE}, {"role": "user", "content": "u"}]
        try:
            text = tokenizer.apply_chat_template(probe, add_generation_prompt=True, tokenize=False)
        except Exception:  # noqa: BLE001  (jinja's TemplateError from raise_exception, or any template failure)
            text = ""
        _RENDERS_SYSTEM[template] = isinstance(text, str) and _SYSTEM_PROBE in text
    return _RENDERS_SYSTEM[template]


def chat_messages(tokenizer, messages: Sequence[Mapping[str, str]]) -> list[dict[str, str]]:
    """`messages` as the template takes them: without a system role, the system text opens the first user turn."""
    messages = [dict(message) for message in messages]
    if not any(m["role"] == "system" for m in messages) or renders_system(tokenizer):
        return messages
    system = "\n\n".join(m["content"] for m in messages if m["role"] == "system")
    rest = [m for m in messages if m["role"] != "system"]
    first_user = next((i for i, m in enumerate(rest) if m["role"] == "user"), None)
    if first_user is None:
        return [{"role": "user", "content": system}, *rest]
    rest[first_user] = {**rest[first_user], "content": f"{system}\n\n{rest[first_user]['content']}"}
    return rest


def chat_prompt_ids(tokenizer, messages: Sequence[Mapping[str, str]]) -> list[int]:
    """Token ids of chat messages in the tokenizer's template (`chat_messages`), ready for the assistant's turn."""
    ids = tokenizer.apply_chat_template(chat_messages(tokenizer, messages), add_generation_prompt=True, tokenize=True)
    if isinstance(ids, Mapping):
        ids = ids["input_ids"]
    return list(ids)


def generation_eos_ids(model_dir: str | os.PathLike[str] | None) -> list[int]:
    """The end-of-turn ids in a model directory's `generation_config.json` (`eos_token_id`, an int or a list)."""
    if model_dir is None:
        return []
    file = Path(model_dir) / "generation_config.json"
    if not file.is_file():
        return []
    eos = json.loads(file.read_text()).get("eos_token_id")
    if eos is None:
        return []
    return [int(eos)] if isinstance(eos, int) else [int(i) for i in eos]


def stop_token_ids(tokenizer, model_dir: str | os.PathLike[str] | None = None) -> list[int]:
    """End-of-turn ids: the tokenizer's eos, those of the model's `generation_config.json` (e.g. Gemma's
    <end_of_turn>, Llama 3's <|eot_id|>) and, for ChatML models, <|im_end|> and <|endoftext|>."""
    ids: list[int] = []
    for token in (tokenizer.eos_token, "<|im_end|>", "<|endoftext|>"):
        if token is None:
            continue
        token_id = tokenizer.convert_tokens_to_ids(token)
        if isinstance(token_id, int) and token_id != tokenizer.unk_token_id and token_id not in ids:
            ids.append(token_id)
    for token_id in generation_eos_ids(model_dir):
        if token_id not in ids:
            ids.append(token_id)
    return ids
