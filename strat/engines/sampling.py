"""Sampling-distribution log-probs shared by the learner and the `hf` engine."""

from __future__ import annotations

import torch


def sampling_logprobs(logits: torch.Tensor, temperature: float, top_p: float = 1.0) -> torch.Tensor:
    """Log-probs of the distribution tokens are sampled from: temperature-scaled and, for
    top_p < 1, renormalised over the nucleus (as vLLM's processed_logprobs)."""
    if temperature <= 0:
        return torch.log_softmax(logits.float(), dim=-1)
    scaled = logits.float() / temperature
    if top_p < 1.0:
        sorted_logits, order = torch.sort(scaled, dim=-1, descending=False)
        cumulative = torch.softmax(sorted_logits, dim=-1).cumsum(dim=-1)
        drop_sorted = cumulative <= 1.0 - top_p
        drop_sorted[..., -1] = False  # always keep the most likely token
        drop = torch.zeros_like(drop_sorted).scatter(-1, order, drop_sorted)
        scaled = scaled.masked_fill(drop, float("-inf"))
    return torch.log_softmax(scaled, dim=-1)
