"""Which weights an engine holds: the update that made them and a short fingerprint of the tensors themselves, so
that a record of a rollout can say what it ran on and a test can check it against a checkpoint."""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

import torch

SAMPLES_PER_TENSOR = 4096
"""At most this many elements of each tensor, at an even stride, go into a fingerprint: an update moves nearly
every weight, and a few thousand per tensor cost one small copy each, even for a large model on a GPU."""


@dataclass(frozen=True)
class WeightsTag:
    """The weights an agent holds: the step whose update produced them (0: the initial model) and their fingerprint."""

    version: int
    fingerprint: str


def fingerprint(tensors: Iterable[tuple[str, torch.Tensor]]) -> str:
    """12 hex digits over each tensor's name, shape and sampled values (as float32, so a bf16 copy of float32
    weights differs and a bf16 copy of bf16 weights does not), in name order."""
    digest = hashlib.blake2b(digest_size=6)
    for name, tensor in sorted(tensors, key=lambda item: item[0]):
        flat = tensor.detach().reshape(-1)
        sample = flat[:: max(1, flat.numel() // SAMPLES_PER_TENSOR)]
        digest.update(f"{name}:{tuple(tensor.shape)}".encode())
        digest.update(sample.to(device="cpu", dtype=torch.float32).contiguous().numpy().tobytes())
    return digest.hexdigest()


def combine(parts: Sequence[str]) -> str:
    """One fingerprint for an engine whose weights are split over workers (tensor parallelism), in rank order."""
    if len(parts) == 1:
        return parts[0]
    return hashlib.blake2b("|".join(parts).encode(), digest_size=6).hexdigest()
