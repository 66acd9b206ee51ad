"""How a batch of samples meets the model: the response tokens' log-probs (and entropies) under the
temperature-scaled policy, nucleus-truncated for top_p < 1 as the engines sample, and each data-parallel rank's
part of a batch."""

from __future__ import annotations

from collections.abc import Sequence

import torch

from strat.algorithm.losses import choice_entropy, token_entropy, token_logprobs
from strat.algorithm.records import TrainBatch, TrainSample
from strat.engines.sampling import sampled_token_logprobs
from strat.train.prefix import batch_logits

MASKED_LOGIT = -1e9
"""The logit a constrained position gives the tokens it does not allow."""


def sequence_logprobs(
    model: torch.nn.Module, batch: TrainBatch, temperature: float, *, share_prefix: bool = False, top_p: float = 1.0
) -> torch.Tensor:
    """Log-probs [B, R] of the response tokens under the temperature-scaled model, truncated to the nucleus for
    top_p < 1 (`engines.sampling.sampled_token_logprobs`) (0 on padding); with `share_prefix` the batch's common
    prompt prefix runs once (`strat.train.prefix`)."""
    return sequence_forward(model, batch, temperature, share_prefix=share_prefix, top_p=top_p)[0]


def sequence_logprobs_and_entropy(
    model: torch.nn.Module, batch: TrainBatch, temperature: float, entropy: bool = True, top_p: float = 1.0
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """Log-probs [B, R] of the response tokens (as `sequence_logprobs`) and, with `entropy`, the policy's entropy
    [B, R] at each of them, under the temperature-scaled model before truncation (0 on padding)."""
    logprobs, values, _ = sequence_forward(model, batch, temperature, entropy=entropy, top_p=top_p)
    return logprobs, values


def sequence_forward(
    model: torch.nn.Module,
    batch: TrainBatch,
    temperature: float,
    entropy: bool = False,
    candidates: torch.Tensor | None = None,
    share_prefix: bool = False,
    top_p: float = 1.0,
) -> tuple[torch.Tensor, torch.Tensor | None, torch.Tensor | None]:
    """As `sequence_logprobs_and_entropy`, and with `candidates` ([B, R, K] token ids, -1 for none) the entropy
    [B, R] of the choice between each position's candidates (`losses.choice_entropy`). With `share_prefix` the
    batch's common prompt prefix runs once (`strat.train.prefix`)."""
    # Logits at position p predict the token at p + 1, so the last R + 1 positions cover the response;
    # computing only those keeps the vocabulary projection off the prompt.
    logits = batch_logits(model, batch, batch.response_ids.shape[1] + 1, share_prefix)
    predicting = logits[:, :-1, :]
    if batch.allowed is not None:
        predicting = constrained_logits(predicting, batch.allowed)
    if top_p < 1.0:
        logprobs = sampled_token_logprobs(predicting, batch.response_ids, temperature, top_p)
    else:
        logprobs = token_logprobs(predicting, batch.response_ids, temperature)
    logprobs = torch.where(batch.response_mask, logprobs, torch.zeros_like(logprobs))
    values = choices = None
    if entropy:
        values = token_entropy(predicting, temperature)
        values = torch.where(batch.response_mask, values, torch.zeros_like(values))
    if candidates is not None:
        choices = choice_entropy(predicting, candidates, temperature)
        choices = torch.where(batch.response_mask, choices, torch.zeros_like(choices))
    return logprobs, values, choices


def constrained_logits(logits: torch.Tensor, allowed: torch.Tensor) -> torch.Tensor:
    """`logits` [B, R, V] with every token outside each constrained position's allowed ids ([B, R, K], -1 pads; a
    position with none is free) pushed to `MASKED_LOGIT`: the distribution the engine sampled a constrained move from
    (`strat.engines.action_constraint`; its softmax underflows to exactly 0 there, and entropies stay finite, where
    -inf would give 0 * -inf), with gradient through the allowed tokens' logits."""
    constrained = (allowed >= 0).any(dim=-1)
    if not bool(constrained.any()):
        return logits
    rows, columns = constrained.nonzero(as_tuple=True)
    ids = allowed[rows, columns]
    vocabulary = logits.shape[-1]
    # Pads point at one spare column, dropped after: a pad must not clear token 0's place.
    keep = torch.zeros((len(rows), vocabulary + 1), dtype=torch.bool, device=logits.device)
    keep.scatter_(1, torch.where(ids >= 0, ids, vocabulary), True)
    masked = logits[rows, columns].masked_fill(~keep[:, :vocabulary], MASKED_LOGIT)
    return logits.index_put((rows, columns), masked)


def split_for_ranks(samples: Sequence[TrainSample], world_size: int) -> list[list[TrainSample]]:
    """Each data-parallel rank's part of a batch: balanced by tokens (prompt + response; longest first, each to
    the lightest rank), every part in the batch's order. Deterministic, so that every rank computes the same
    split. A part may be empty when there are fewer samples than ranks."""
    if world_size < 1:
        raise ValueError(f"world_size={world_size}: at least one rank is needed")
    if world_size == 1:
        return [list(samples)]

    def tokens(index: int) -> int:
        return len(samples[index].prompt_token_ids) + len(samples[index].response_token_ids)

    loads = [0] * world_size
    owners: list[list[int]] = [[] for _ in range(world_size)]
    for index in sorted(range(len(samples)), key=lambda i: (-tokens(i), i)):
        rank = min(range(world_size), key=lambda r: (loads[r], r))
        loads[rank] += tokens(index)
        owners[rank].append(index)
    return [[samples[i] for i in sorted(indices)] for indices in owners]
