"""The models behind embedding and judge agreement: a mean-pooled text embedder and an engine's chat verdicts."""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Literal

from strat.algorithm.comparison import AgreementMethod, ChatMessages
from strat.engines import EngineSettings
from strat.engines.base import Engine, SamplingParams

if TYPE_CHECKING:
    import torch

# torch is imported where it is used: the comparator actor imports this module and, with the default token-F1
# agreement, never needs torch (importing it costs seconds of every actor start on a small CPU box).

JUDGE_SAMPLING = SamplingParams(max_tokens=16, temperature=0.0)
"""Greedy and short: the judge is asked for "Score: <0-10>" only."""


@dataclass(frozen=True)
class AgreementSettings:
    """How the comparator scores agreement: `comparison.*`, and the agents' `engine.*` for a separate judge."""

    method: AgreementMethod = "token_f1"
    judge_engine: Literal["separate", "policy"] = "separate"
    model_dir: str | None = None
    """The judge's model (agreement=judge on a separate engine) or the embedder's (agreement=embedding)."""
    backend: str = "hf"
    """The separate judge's engine backend, as the agents'."""
    engine: EngineSettings = field(default_factory=EngineSettings)
    """How the separate judge's engine is built."""


def chat_completions(
    engine: Engine, conversations: Sequence[ChatMessages], params: SamplingParams, max_model_len: int | None = None
) -> list[str]:
    """Each conversation's completion text from one batched `generate`. A prompt that leaves no room for
    `params.max_tokens` within `max_model_len` gets "" (no verdict) rather than failing the whole batch."""
    prompts = [engine.encode_chat(messages) for messages in conversations]
    fits = [max_model_len is None or len(prompt) + params.max_tokens <= max_model_len for prompt in prompts]
    texts = iter([g.text for g in engine.generate([p for p, ok in zip(prompts, fits, strict=True) if ok], params)])
    return [next(texts) if ok else "" for ok in fits]


def mean_pool(hidden: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """Mean of `hidden` [batch, tokens, dim] over the tokens `mask` [batch, tokens] keeps, L2-normalised per row;
    a row without tokens is all zeros."""
    import torch

    if hidden.dim() != 3 or mask.shape != hidden.shape[:2]:
        raise ValueError(f"mean_pool needs hidden [batch, tokens, dim] and mask [batch, tokens], "
                         f"got {tuple(hidden.shape)} and {tuple(mask.shape)}")
    keep = mask.bool().unsqueeze(-1)
    # masked_fill, not a product: a padded position's hidden state may be anything, NaN included.
    mean = hidden.float().masked_fill(~keep, 0.0).sum(dim=1) / keep.sum(dim=1).clamp(min=1)
    return torch.nn.functional.normalize(mean, dim=-1)


class TextEmbedder:
    """Texts -> mean-pooled, L2-normalised last hidden states of a transformers AutoModel, in batches."""

    def __init__(
        self, model_dir: str | os.PathLike[str], device: str = "cpu", batch_size: int = 32, max_length: int = 1024
    ) -> None:
        if batch_size < 1:
            raise ValueError(f"batch_size={batch_size}: at least 1")
        import torch
        from transformers import AutoModel, AutoTokenizer

        self.tokenizer = AutoTokenizer.from_pretrained(model_dir)
        # Right padding keeps every text's positions from 0, so a text embeds the same in any batch.
        self.tokenizer.padding_side = "right"
        if self.tokenizer.pad_token is None:
            self.tokenizer.pad_token = self.tokenizer.eos_token
        self.model = AutoModel.from_pretrained(model_dir, dtype=torch.float32, use_safetensors=True).to(device).eval()
        self.device = torch.device(device)
        self.batch_size = batch_size
        self.max_length = max_length

    def __call__(self, texts: Sequence[str]) -> list[list[float]]:
        import torch

        with torch.inference_mode():
            return self._embed(texts)

    def _embed(self, texts: Sequence[str]) -> list[list[float]]:
        vectors: list[list[float]] = []
        for start in range(0, len(texts), self.batch_size):
            batch = self.tokenizer(
                list(texts[start : start + self.batch_size]), padding=True, truncation=True,
                max_length=self.max_length, return_tensors="pt",
            ).to(self.device)
            ids, mask = batch["input_ids"], batch["attention_mask"]
            if ids.shape[1] == 0:  # only texts without tokens: nothing to run the model on
                vectors.extend([0.0] * self.model.config.hidden_size for _ in range(ids.shape[0]))
                continue
            hidden = self.model(input_ids=ids, attention_mask=mask).last_hidden_state
            vectors.extend(mean_pool(hidden, mask).cpu().tolist())
        return vectors
