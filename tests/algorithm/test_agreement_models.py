"""The models behind embedding and judge agreement: pooling by hand, batched chat verdicts, a tiny embedder."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import pytest
import torch

from strat.engines import Generation, SamplingParams
from strat.train.agreement_models import JUDGE_SAMPLING, TextEmbedder, chat_completions, mean_pool


def test_mean_pool_by_hand() -> None:
    nan = float("nan")
    hidden = torch.tensor([[[1.0, 2.0], [3.0, 4.0], [nan, 100.0]], [[5.0, 5.0], [6.0, 6.0], [7.0, 7.0]]])
    mask = torch.tensor([[1, 1, 0], [0, 0, 0]])
    pooled = mean_pool(hidden, mask)
    # Row 0: mean of the two kept tokens (2, 3), over its norm sqrt 13 (the padding's NaN is dropped);
    # row 1 keeps no token.
    assert pooled[0].tolist() == pytest.approx([2 / 13**0.5, 3 / 13**0.5])
    assert pooled[1].tolist() == [0.0, 0.0]
    with pytest.raises(ValueError, match="mask"):
        mean_pool(hidden, mask[:, :2])


class _CountingEngine:
    """Prompt ids are one token per character of the user message; the completion names the prompt's length."""

    def __init__(self) -> None:
        self.calls: list[tuple[list[list[int]], SamplingParams]] = []

    def encode_chat(self, messages: Sequence[dict[str, str]]) -> list[int]:
        return [1] * len(messages[-1]["content"])

    def generate(self, prompts: Sequence[Sequence[int]], params: SamplingParams) -> list[Generation]:
        self.calls.append(([list(p) for p in prompts], params))
        return [Generation(tuple(p), (), (), f"Score: {len(p)}", "stop") for p in prompts]


def test_chat_completions_is_one_call_and_skips_prompts_too_long() -> None:
    engine = _CountingEngine()
    conversations = [[{"role": "user", "content": "x" * n}] for n in (3, 40, 5)]
    # 40 tokens + 16 to generate do not fit in 50: that prompt is not sent and gets no verdict.
    texts = chat_completions(engine, conversations, JUDGE_SAMPLING, max_model_len=50)  # type: ignore[arg-type]
    assert texts == ["Score: 3", "", "Score: 5"]
    assert len(engine.calls) == 1
    prompts, params = engine.calls[0]
    assert [len(p) for p in prompts] == [3, 5]
    assert (params.temperature, params.max_tokens) == (0.0, 16)


def test_tiny_embedder_is_normalised_and_batch_invariant(tiny_model_dir: Path) -> None:
    texts = ["a bet shows strength", "player 0 bet shows strength\nbelief: King", ""]
    batched = TextEmbedder(tiny_model_dir)(texts)
    one_by_one = TextEmbedder(tiny_model_dir, batch_size=1)(texts)
    assert [sum(x * x for x in v) for v in batched] == pytest.approx([1.0, 1.0, 0.0], abs=1e-5)
    for a, b in zip(batched, one_by_one, strict=True):
        assert a == pytest.approx(b, abs=1e-5)
