"""Prefix sharing for the learner's forward passes: the prompt prefix that every sample of a micro-batch shares
(the system prompt, or a longer common prefix) goes through the model once, and its keys and values, expanded
over the batch, serve every sample's own suffix.

The prefix forward is part of the autograd graph (nothing is detached), so the gradient through the shared keys
and values reaches the prefix's computation, summed over the samples: the same gradient as the unshared
forward's, up to float rounding. Positions and masks are those of the unshared forward: a sample's k-th real
token is at position k either way.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from transformers import DynamicCache

from strat.algorithm.records import TrainBatch


@dataclass(frozen=True)
class SplitBatch:
    """A left-padded prompt batch cut into its shared prefix and each row's suffix (still left-padded)."""

    prefix_ids: torch.Tensor
    """[1, L] the shared prefix's tokens."""
    suffix_ids: torch.Tensor
    """[B, P - L] each row's prompt after the prefix, left-padded with token 0 (masked: any id would do)."""
    suffix_mask: torch.Tensor
    """[B, P - L] bool, True on each row's real suffix tokens."""


def shared_prefix_length(prompt_ids: torch.Tensor, prompt_mask: torch.Tensor) -> int:
    """The length of the longest prefix that every row's prompt (left-padded, [B, P]) starts with, short of
    each row's last token: the logits at a prompt's last token predict the first response token, so that token
    must stay in every row's own part."""
    lengths = prompt_mask.sum(dim=-1)
    shortest = int(lengths.min())
    if shortest <= 1:
        return 0
    width = prompt_ids.shape[1]
    starts = width - lengths
    columns = starts[:, None] + torch.arange(shortest - 1, device=prompt_ids.device)[None, :]
    aligned = prompt_ids.gather(1, columns)
    agree = (aligned == aligned[:1]).all(dim=0)
    differ = (~agree).nonzero()
    return int(differ[0, 0]) if differ.numel() else shortest - 1


def split_prompts(prompt_ids: torch.Tensor, prompt_mask: torch.Tensor, length: int) -> SplitBatch:
    """Cut the left-padded prompts [B, P] after their first `length` tokens (which every row shares)."""
    width = prompt_ids.shape[1]
    lengths = prompt_mask.sum(dim=-1)
    starts = width - lengths
    prefix = prompt_ids[:1, int(starts[0]) : int(starts[0]) + length]
    # A row's suffix occupies columns starts + length .. P - 1, all at or after column `length`.
    columns = torch.arange(width, device=prompt_ids.device)[None, :]
    keep = (columns >= (starts + length)[:, None])[:, length:]
    suffix = torch.where(keep, prompt_ids[:, length:], torch.zeros_like(prompt_ids[:, length:]))
    return SplitBatch(prefix, suffix, keep)


def prefix_cache(model: torch.nn.Module, prefix_ids: torch.Tensor, batch_size: int) -> DynamicCache:
    """The prefix's keys and values from one forward over it, expanded to `batch_size` rows (still in the graph)."""
    positions = torch.arange(prefix_ids.shape[1], device=prefix_ids.device)[None, :]
    out = model(input_ids=prefix_ids, position_ids=positions, use_cache=True, logits_to_keep=1)
    layers = [(keys.expand(batch_size, -1, -1, -1), values.expand(batch_size, -1, -1, -1))
              for keys, values, *_ in out.past_key_values]
    return DynamicCache(layers)


def batch_logits(model: torch.nn.Module, batch: TrainBatch, keep: int, share_prefix: bool) -> torch.Tensor:
    """The logits at the last `keep` positions of each row of prompt + response. With `share_prefix` the prompt
    prefix that all rows share runs once (`shared_prefix_length`; none for a single row); the logits are the same
    either way, up to float rounding."""
    rows = batch.prompt_ids.shape[0]
    length = shared_prefix_length(batch.prompt_ids, batch.prompt_mask) if share_prefix and rows > 1 else 0
    if length == 0:
        attention = batch.attention_mask.long()
        positions = (attention.cumsum(-1) - 1).clamp(min=0)
        return model(input_ids=batch.input_ids, attention_mask=attention, position_ids=positions,
                     logits_to_keep=keep).logits
    split = split_prompts(batch.prompt_ids, batch.prompt_mask, length)
    cache = prefix_cache(model, split.prefix_ids, rows)
    suffix_ids = torch.cat([split.suffix_ids, batch.response_ids], dim=1)
    suffix_mask = torch.cat([split.suffix_mask, batch.response_mask], dim=1).long()
    positions = length + (suffix_mask.cumsum(-1) - 1).clamp(min=0)
    attention = torch.cat([suffix_mask.new_ones((rows, length)), suffix_mask], dim=1)
    return model(input_ids=suffix_ids, attention_mask=attention, position_ids=positions, past_key_values=cache,
                 logits_to_keep=keep).logits
