"""The policy update's plan and its working records, as `PolicyLearner.update` runs it in four stages:

1. plan (`plan_update`): the batch in seeded minibatches, one optimizer step each per epoch; each rank's part of a
   minibatch in length-bucketed micro-batches; under FSDP2 the padding rounds (`padded_rounds`) that give every rank
   as many forwards as the busiest one;
2. proximal log-probs (`ProximalLogprobs`): the weights at the update's start, for the samples that the first
   optimizer step's own forward does not reach;
3. the optimizer steps, adding their figures to an `UpdateTally`;
4. the metrics, from the tally.

Bookkeeping only: no model here."""

from __future__ import annotations

import math
import random
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Generic, TypeVar

import torch

from strat.algorithm.records import TrainBatch, TrainSample
from strat.train.move_tokens import MoveChoices
from strat.train.sequences import split_for_ranks

T = TypeVar("T")


@dataclass(frozen=True)
class Round(Generic[T]):
    """One forward (and backward) a rank runs: its own chunk of samples, or under FSDP2 a padding round."""

    samples: list[T]
    counted: bool
    """False for a padding round: it runs because another rank has more chunks, and its loss is weighted 0."""


@dataclass(frozen=True)
class MicroBatch:
    """One forward/backward pass of an optimizer step."""

    rows: list[int]
    """Each sample's position in the update's batch (the key of its proximal log-probs)."""
    batch: TrainBatch
    counted: bool
    """False for an FSDP2 padding round (weight 0)."""
    moves: MoveChoices | None
    """Where its responses name a move, with the candidates there (only with the move entropy bonus)."""


@dataclass(frozen=True)
class OptimizerStep:
    """One optimizer step: a minibatch of one epoch, as this rank's micro-batches."""

    number: int
    epoch: int
    samples: int
    """Samples in the whole minibatch (every rank's part): the denominator of `seq_mean` shares."""
    tokens: int
    """Response tokens in the whole minibatch: the denominator of `token_mean` shares."""
    micro_batches: list[MicroBatch]


@dataclass(frozen=True)
class UpdatePlan:
    """Every optimizer step of one update, in order."""

    samples: list[TrainSample]
    """The update's batch (responses with at least one token)."""
    tokens: int
    """Its response tokens."""
    steps: list[OptimizerStep]


@dataclass
class UpdateTally:
    """What the optimizer steps of one update add up, in the order they run (so that every float sum is the same
    one whatever the grouping of the code)."""

    sums: dict[str, float] = field(default_factory=dict)
    """Each loss figure (`loss/policy`, `loss/kl`, ...) summed over the steps that were taken, each step's value
    being its share-weighted mean over its minibatch (this rank's part of it under FSDP2)."""
    gap_sum: float = 0.0
    """|proximal - behaviour| log-prob summed over the first epoch's counted tokens."""
    gap_tokens: int = 0
    stepped: int = 0
    """Optimizer steps taken."""
    skipped: int = 0
    """Optimizer steps skipped for a non-finite loss or gradient: their figures are left out of `sums`."""
    grad_norm: float | None = None
    """The last step's gradient norm (before clipping), of the steps taken."""
    dph_seconds: float = 0.0

    def close_step(self, figures: dict[str, float], stepped: bool, grad_norm: float) -> None:
        """Count one optimizer step; a step that was taken adds its `figures` and its gradient norm, a skipped one
        only its figures' names (so that an update whose every step was skipped still names them)."""
        self.stepped += stepped
        self.skipped += not stepped
        if stepped:
            self.grad_norm = grad_norm
        for name, value in figures.items():
            self.sums[name] = self.sums.get(name, 0.0) + (value if stepped else 0.0)


class ProximalLogprobs:
    """The proximal (update-start) log-probs of each sample's response tokens, by the sample's position in the
    batch; the first value kept for a position stays."""

    def __init__(self) -> None:
        self._rows: dict[int, torch.Tensor] = {}

    def keep(self, rows: Sequence[int], values: torch.Tensor, mask: torch.Tensor) -> None:
        """Keep each row's values on its response tokens (`mask`), under its sample's position."""
        for row, position in enumerate(rows):
            if position not in self._rows:
                self._rows[position] = values[row][mask[row]]

    def gather(self, rows: Sequence[int], like: torch.Tensor) -> torch.Tensor:
        """The kept values of `rows`, right-padded with zeros into a tensor shaped like `like` ([B, R])."""
        out = torch.zeros_like(like)
        for row, position in enumerate(rows):
            values = self._rows[position]
            out[row, : values.shape[0]] = values
        return out


def minibatches(samples: Sequence[T], count: int, seed: int, update: int, epoch: int) -> list[list[T]]:
    """The batch in `count` parts of near-equal size, one optimizer step each (the whole batch for one); a shuffle
    seeded by (seed, update, epoch) decides which samples go together. Fewer parts when there are fewer samples."""
    count = min(count, len(samples))
    if count <= 1:
        return [list(samples)]
    order = list(range(len(samples)))
    random.Random(hash((seed, update, epoch, 1)) & 0xFFFFFFFF).shuffle(order)
    return [[samples[i] for i in order[part::count]] for part in range(count)]


def micro_batches(samples: Sequence[TrainSample], size: int, seed: int, update: int, epoch: int
                  ) -> list[list[TrainSample]]:
    """Micro-batches of `size` samples: a seeded shuffle, then within each run of `4 x size` samples the similar
    lengths together, so that padding does not eat the budget."""
    order = list(range(len(samples)))
    random.Random(hash((seed, update, epoch)) & 0xFFFFFFFF).shuffle(order)
    chunks = [order[i : i + size * 4] for i in range(0, len(order), size * 4)]
    batches = []
    for chunk in chunks:
        chunk.sort(key=lambda i: len(samples[i].prompt_token_ids) + len(samples[i].response_token_ids))
        batches.extend([samples[i] for i in chunk[j : j + size]] for j in range(0, len(chunk), size))
    return batches


def padded_rounds(own: list[list[T]], rounds: int, filler: list[T]) -> list[Round[T]]:
    """This rank's chunks, then padding rounds up to `rounds` (the busiest rank's count): under FSDP2 every forward
    and backward is a collective, so every rank runs as many. A padding round reruns `filler`, weighted 0."""
    return [Round(own[index], True) if index < len(own) else Round(filler, False) for index in range(rounds)]


def rank_chunks(samples: Sequence[T], world_size: int, rank: int, cut: Callable[[list[T]], list[list[T]]]
                ) -> list[Round[T]]:
    """Rank `rank`'s part of `samples` (`split_for_ranks`) cut into chunks by `cut`, padded to the busiest rank's
    number of chunks; a padding round repeats the rank's first chunk, or the batch's first sample when it has none."""
    parts = split_for_ranks(samples, world_size)
    own = cut(parts[rank])
    rounds = max(len(cut(part)) for part in parts)
    return padded_rounds(own, rounds, own[0] if own else list(samples[:1]))


def fixed_chunks(samples: Sequence[T], world_size: int, rank: int, size: int) -> list[Round[T]]:
    """Rank `rank`'s part of `samples` in consecutive chunks of `size`, padded to the busiest rank's number of chunks
    with the batch's first sample (the rehearsal batches, drawn already shuffled)."""
    parts = split_for_ranks(samples, world_size)
    own = [parts[rank][i : i + size] for i in range(0, len(parts[rank]), size)]
    rounds = max(math.ceil(len(part) / size) for part in parts)
    return padded_rounds(own, rounds, list(samples[:1]))
