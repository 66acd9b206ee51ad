"""Sampling-distribution log-probs shared by the learner and the `hf` engine."""

from __future__ import annotations

import torch


def outside_nucleus(scaled: torch.Tensor, top_p: float) -> torch.Tensor:
    """True on the tokens nucleus sampling drops from softmax(`scaled`) ([..., V]): the least likely ones whose
    mass together is at most 1 - top_p, never the most likely token (as vLLM). No gradient flows through it."""
    with torch.no_grad():
        sorted_logits, order = torch.sort(scaled, dim=-1, descending=False)
        cumulative = torch.softmax(sorted_logits, dim=-1).cumsum(dim=-1)
        drop_sorted = cumulative <= 1.0 - top_p
        drop_sorted[..., -1] = False  # always keep the most likely token
        return torch.zeros_like(drop_sorted).scatter(-1, order, drop_sorted)


def sampling_logprobs(logits: torch.Tensor, temperature: float, top_p: float = 1.0) -> torch.Tensor:
    """Log-probs of the distribution tokens are sampled from: temperature-scaled and, for
    top_p < 1, renormalised over the nucleus (as vLLM's processed_logprobs)."""
    if temperature <= 0:
        return torch.log_softmax(logits.float(), dim=-1)
    scaled = logits.float() / temperature
    if top_p < 1.0:
        scaled = scaled.masked_fill(outside_nucleus(scaled, top_p), float("-inf"))
    return torch.log_softmax(scaled, dim=-1)


def sampled_token_logprobs(
    logits: torch.Tensor, token_ids: torch.Tensor, temperature: float, top_p: float
) -> torch.Tensor:
    """Log-probs [B, T] of `token_ids` under the distribution `sampling_logprobs` samples from, `logits` [B, T, V]
    predicting them, with gradient: the learner's log-probs for top_p < 1, equal to the engine's for a sampled token.

    Each scored token stays in its nucleus: one just outside it (float noise at the nucleus' edge, or weights that
    have moved since the token was sampled) gets its mass renormalised with the nucleus' instead of -inf."""
    scaled = logits.float() / temperature
    drop = outside_nucleus(scaled, top_p).scatter(-1, token_ids.unsqueeze(-1), False)
    logprobs = torch.log_softmax(scaled.masked_fill(drop, float("-inf")), dim=-1)
    return logprobs.gather(-1, token_ids.unsqueeze(-1)).squeeze(-1)
