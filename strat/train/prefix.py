"""Prefix sharing for the learner's forward passes: the prompt prefix that every sample of a micro-batch shares
(the system prompt, or a longer common prefix) goes through the model once, and its keys and values, expanded
over the batch, serve every sample's own suffix.

The prefix forward is part of the autograd graph (nothing is detached), so the gradient through the shared keys
and values reaches the prefix's computation, summed over the samples: the same gradient as the unshared
forward's, up to float rounding. Positions and masks are those of the unshared forward: a sample's k-th real
token is at position k either way.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import torch
from transformers.cache_utils import Cache, DynamicLayer
from transformers.modeling_layers import GradientCheckpointingLayer

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


def can_share_prefix(model: torch.nn.Module) -> bool:
    """Whether every layer of `model` attends to all earlier tokens (no sliding window, no linear attention):
    the caches here hold plain keys and values and the masks are plain causal ones."""
    config = model.config.get_text_config(decoder=True)
    return set(getattr(config, "layer_types", None) or ["full_attention"]) == {"full_attention"}


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


class _RecordingLayer(DynamicLayer):
    """Keeps the first keys and values it is given (the prefix's) and hands back what it is given, so that a
    checkpointed layer's replay in the backward pass changes nothing."""

    def update(self, key_states: torch.Tensor, value_states: torch.Tensor, *args: Any, **kwargs: Any
               ) -> tuple[torch.Tensor, torch.Tensor]:
        if not self.is_initialized:
            self.lazy_initialization(key_states, value_states)
            self.keys, self.values = key_states, value_states
        return key_states, value_states


class _PrefixLayer(DynamicLayer):
    """Puts the prefix's keys and values before those it is given and keeps nothing: the same on every call,
    a checkpointed layer's replay included."""

    def __init__(self, keys: torch.Tensor, values: torch.Tensor) -> None:
        super().__init__()
        self.lazy_initialization(keys, values)
        self.keys, self.values = keys, values
        self.calls = 0

    def update(self, key_states: torch.Tensor, value_states: torch.Tensor, *args: Any, **kwargs: Any
               ) -> tuple[torch.Tensor, torch.Tensor]:
        self.calls += 1
        return torch.cat([self.keys, key_states], dim=-2), torch.cat([self.values, value_states], dim=-2)


@contextlib.contextmanager
def _cache_under_checkpointing(model: torch.nn.Module) -> Iterator[None]:
    """Let checkpointed decoder layers keep the cache (transformers drops it, as a cache that grows would grow
    again on the replay; these layers' caches do not)."""
    layers = [m for m in model.modules() if isinstance(m, GradientCheckpointingLayer) and m.gradient_checkpointing]
    for layer in layers:
        layer._can_checkpoint_with_cache = True
    try:
        yield
    finally:
        for layer in layers:
            del layer._can_checkpoint_with_cache


def prefix_cache(model: torch.nn.Module, prefix_ids: torch.Tensor, batch_size: int) -> Cache:
    """The prefix's keys and values from one forward over it, expanded to `batch_size` rows (still in the graph)."""
    layers = model.config.get_text_config(decoder=True).num_hidden_layers
    recorded = Cache(layers=[_RecordingLayer() for _ in range(layers)])
    positions = torch.arange(prefix_ids.shape[1], device=prefix_ids.device)[None, :]
    model(input_ids=prefix_ids, position_ids=positions, past_key_values=recorded, logits_to_keep=1)
    if not all(layer.is_initialized for layer in recorded.layers):
        raise RuntimeError("prefix sharing: the model's layers did not hand their keys and values to the cache")
    return Cache(layers=[_PrefixLayer(layer.keys.expand(batch_size, -1, -1, -1),
                                      layer.values.expand(batch_size, -1, -1, -1)) for layer in recorded.layers])


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
    suffix_ids = torch.cat([split.suffix_ids, batch.response_ids], dim=1)
    suffix_mask = torch.cat([split.suffix_mask, batch.response_mask], dim=1).long()
    positions = length + (suffix_mask.cumsum(-1) - 1).clamp(min=0)
    attention = torch.cat([suffix_mask.new_ones((rows, length)), suffix_mask], dim=1)
    with _cache_under_checkpointing(model):
        cache = prefix_cache(model, split.prefix_ids, rows)
        logits = model(input_ids=suffix_ids, attention_mask=attention, position_ids=positions,
                       past_key_values=cache, logits_to_keep=keep).logits
    if not all(layer.calls for layer in cache.layers):
        raise RuntimeError("prefix sharing: the model's layers did not read the prefix's keys and values")
    return logits
