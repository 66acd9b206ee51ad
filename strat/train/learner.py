# Over 500 lines: one class holds the update and its FSDP2, LoRA and checkpoint paths, which share its state.
"""The policy update: a transformers model and AdamW, log-probs recomputed at the sampling
temperature, the configured loss, gradient accumulation and clipping. No Ray here: the
learner actor wraps this class.

Options (from the `learner` config section):
- device: `auto` (the GPU when one is visible), `cpu`, `cuda`.
- dtype `bfloat16` is mixed precision, the standard for RL trainers that keep their own optimizer
  (verl, TRL): float32 master weights and AdamW state, bf16 matmuls through `torch.autocast` on one
  device, or FSDP2's `MixedPrecisionPolicy(param_dtype=bf16, reduce_dtype=float32)` when sharded.
  Pure bf16 weights would silently drop updates smaller than bf16's resolution (lr x update <
  |w| / 256). With LoRA the frozen base weights are stored in bf16 (no update ever touches them)
  and the adapters in float32.
- gradient checkpointing (non-reentrant).
- LoRA through `peft`: only the adapters train. Everything that leaves the learner for inference
  (`state_dict`, `export_weights_dir`, the snapshot opponent, the checkpoint's top-level weights) is
  the MERGED full model under Hugging Face names, so engines and `strat eval/play` never see an
  adapter. A checkpoint also holds the adapter in `adapter/` (peft format); resume rebuilds the
  base model from the configured model path and loads the adapter and its optimizer state.
- FSDP2 (`torch.distributed.fsdp.fully_shard`, per decoder layer then the root) when the learner runs
  under torch.distributed with world size > 1 (or `fsdp=True`); the driver starts such ranks as one
  `strat.train.learner_actor.LearnerGroup`. Every rank is handed the whole batch and trains on its part
  (`split_for_ranks`), so that the step equals the single-process one. Full state dicts are gathered
  for export and checkpoints (a collective: every rank calls them; rank 0 writes).
"""

from __future__ import annotations

import contextlib
import math
import os
import random
import shutil
import time
from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Literal

import torch
from safetensors.torch import load_file, save_file
from torch.distributed.checkpoint.state_dict import (
    StateDictOptions,
    get_model_state_dict,
    get_optimizer_state_dict,
    set_model_state_dict,
    set_optimizer_state_dict,
)
from transformers import AutoModelForCausalLM, AutoTokenizer

from strat.algorithm.losses import LossConfig, policy_loss, rehearsal_loss
from strat.algorithm.reasoning import move_mention_indices
from strat.algorithm.records import TrainBatch, TrainSample
from strat.engines.base import stop_token_ids
from strat.model import checkpoint
from strat.model.build import DTYPES, LoraSettings, add_lora, freeze, resolve_device, shard_model, wants_fsdp
from strat.model.safetensors_io import replace_dir, write_safetensors
from strat.train.lr_schedule import LrSchedule, lr_factor
from strat.train.prefix import can_share_prefix
from strat.train.rehearsal import draw_batch
from strat.train.sequences import sequence_forward, sequence_logprobs, split_for_ranks


@dataclass(frozen=True)
class LearnerSettings:
    """What the learner needs from the experiment config."""

    lr: float = 1e-4
    lr_schedule: LrSchedule = "constant"
    """`constant`, or `linear` / `cosine` decay to `lr_final` times `lr` at update `total_updates - 1`."""
    lr_final: float = 0.1
    total_updates: int = 1
    """The run's updates (its steps), over which a decaying schedule runs."""
    kl_reference: Literal["initial", "snapshot"] = "initial"
    """The KL penalty's reference: `initial` weights, or `snapshot`: the snapshot opponent's, moved with it."""
    epochs: int = 1
    minibatches: int = 1
    """Optimizer steps per epoch, each on its own part of the batch (PPO-style minibatches)."""
    micro_batch: int = 16
    grad_clip: float = 1.0
    temperature: float = 1.0
    top_p: float = 1.0
    """Nucleus mass the engines sample with: log-probs are the truncated distribution's for top_p < 1."""
    loss: LossConfig = LossConfig()
    stale: bool = False
    """Weight tokens by proximal/behaviour (samples from an older policy, max_staleness > 0)."""
    seed: int = 0
    device: str = "cpu"
    """`auto`, `cpu` or `cuda`."""
    dtype: str = "float32"
    """Compute dtype, `float32` or `bfloat16` (mixed precision over float32 master weights)."""
    gradient_checkpointing: bool = False
    lora: LoraSettings | None = None
    """Train a LoRA adapter instead of all weights (None: full fine-tuning)."""
    export_dtype: str | None = None
    """The dtype of the weights handed to engines (`state_dict`, `export_weights_dir`); None keeps float32."""
    fsdp: bool | None = None
    """Shard with FSDP2. None: when torch.distributed is initialised with world size > 1."""
    move_names: tuple[str, ...] = ()
    """The game's move names, for the move entropy bonus (`loss.move_entropy_coef`), which needs them."""
    freeze: tuple[str, ...] = ()
    """Parameters whose name contains one of these stay as loaded (no gradient, no optimizer state)."""
    rehearsal_batch: int = 16
    """DPH-RL (`loss.dph_divergence`): rehearsal samples drawn for each optimizer step's divergence term."""
    share_prefix: bool = True
    """Run each micro-batch's common prompt prefix once and reuse its keys and values (`strat.train.prefix`);
    not under FSDP2 or on models with sliding-window or linear attention layers (whole sequences there)."""

    def __post_init__(self) -> None:
        if self.loss.move_entropy_coef > 0 and not self.move_names:
            raise ValueError("loss.move_entropy_coef > 0 needs the game's move names (move_names)")


def _keep_rows(store: dict[int, torch.Tensor], rows: Sequence[int], values: torch.Tensor, mask: torch.Tensor) -> None:
    """Keep each row's per-token values (its response tokens only) under the sample's position, first one wins."""
    for row, position in enumerate(rows):
        if position not in store:
            store[position] = values[row][mask[row]]


def _gather_rows(store: dict[int, torch.Tensor], rows: Sequence[int], like: torch.Tensor) -> torch.Tensor:
    """The kept per-token values of `rows`, right-padded with zeros into a tensor shaped like `like` ([B, R])."""
    out = torch.zeros_like(like)
    for row, position in enumerate(rows):
        values = store[position]
        out[row, : values.shape[0]] = values
    return out


class PolicyLearner:
    """Owns the trainable policy; `update` applies one step of the configured loss."""

    def __init__(self, model_path: str | Path, settings: LearnerSettings, trust_remote_code: bool = False) -> None:
        if settings.dtype not in ("float32", "bfloat16"):
            raise ValueError(f"learner dtype {settings.dtype!r} (allowed: float32, bfloat16)")
        self.settings = settings
        self.model_path = Path(model_path)
        self.device = resolve_device(settings.device)
        self.sharded = wants_fsdp(settings.fsdp)
        distributed = self.sharded and torch.distributed.is_initialized()
        self.rank = torch.distributed.get_rank() if distributed else 0
        self.world_size = torch.distributed.get_world_size() if distributed else 1
        self.compute_dtype = DTYPES[settings.dtype]
        self.tokenizer = AutoTokenizer.from_pretrained(model_path, trust_remote_code=trust_remote_code)
        # Master weights are float32. Frozen LoRA base weights need no master copy: bf16 storage then
        # (not under FSDP2, which wants one dtype per sharded group).
        low_precision_base = settings.lora is not None and settings.dtype == "bfloat16" and not self.sharded
        storage = self.compute_dtype if low_precision_base else torch.float32
        model = AutoModelForCausalLM.from_pretrained(
            model_path, dtype=storage, trust_remote_code=trust_remote_code, use_safetensors=True
        )
        if settings.gradient_checkpointing:
            model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
            model.config.use_cache = False
        self.lora_scaling: dict[str, float] = {}
        """Each LoRA layer's scaling (alpha / r), by module name, for merging the adapters into exported weights."""
        if settings.lora is not None:
            model, self.lora_scaling = add_lora(model, settings.lora, settings.seed)
        if settings.freeze:
            freeze(model, settings.freeze)
        model.to(self.device)
        if self.sharded:
            shard_model(model, self.device, self.compute_dtype if settings.dtype != "float32" else None)
        self.model = model
        self.model.train()
        self.optimizer = torch.optim.AdamW(self._trainable(), lr=settings.lr)
        pad = self.tokenizer.pad_token_id
        self.pad_id = pad if pad is not None else self.tokenizer.eos_token_id
        self.reference: torch.nn.Module | None = None
        if settings.loss.kl_type != "none" and (settings.lora is None or settings.kl_reference == "snapshot"):
            # With LoRA and the initial policy as reference, it is the base model itself, adapters disabled: no
            # second copy; an anchor on the snapshot needs its own. Frozen, so it is stored in the compute dtype.
            # (Not sharded under FSDP2: each rank holds a full copy.)
            self.reference = AutoModelForCausalLM.from_pretrained(
                model_path, dtype=self.compute_dtype, trust_remote_code=trust_remote_code, use_safetensors=True
            ).to(self.device).eval()
            self.reference.requires_grad_(False)
        self.updates = 0
        self._pieces: dict[int, str] = {}
        """Each token id's text, decoded alone (for finding where moves are named)."""
        self._move_tokens: tuple[list[int], list[int]] | None = None
        self.snapshot: dict[str, torch.Tensor] | None = None
        """The weights of the frozen snapshot opponent, kept so that a checkpoint can restore it."""
        self.rehearsal: list[TrainSample] = []
        """DPH-RL's rehearsal samples, their `behaviour_logprobs` the initial policy's (`set_rehearsal`)."""
        # Not under FSDP2: there a shared forward would gather every layer's weights twice (prefix, then
        # suffixes), and two root forwards before one backward are untested with its gradient hooks.
        self.share_prefix = settings.share_prefix and not self.sharded and can_share_prefix(self.model)
        """Whether forwards run each micro-batch's common prompt prefix once (`settings.share_prefix`)."""

    def _trainable(self) -> list[torch.nn.Parameter]:
        return [p for p in self.model.parameters() if p.requires_grad]

    def _autocast(self) -> contextlib.AbstractContextManager:
        """bf16 compute over float32 weights on one device (FSDP2 casts the parameters itself)."""
        if self.compute_dtype == torch.float32 or self.sharded:
            return contextlib.nullcontext()
        return torch.autocast(device_type=self.device.type, dtype=self.compute_dtype)

    def take_snapshot(self) -> dict[str, torch.Tensor]:
        """Freeze a copy of the current weights as the snapshot opponent's (and the KL anchor's, with
        `kl_reference: snapshot`)."""
        self.snapshot = self.state_dict()
        if self.sharded and self.settings.kl_reference == "snapshot":
            # Under FSDP2 only rank 0 holds the gathered snapshot; every rank's reference copy needs it. A
            # collective, as is this whole call.
            full = get_model_state_dict(self.model, options=StateDictOptions(full_state_dict=True))
            copied = {name: tensor.detach().to("cpu", copy=True) for name, tensor in full.items()}
            self._anchor_to_snapshot(self.merged_state_dict(copied))
        else:
            self._anchor_to_snapshot(self.snapshot)
        return self.snapshot

    def _anchor_to_snapshot(self, state: dict[str, torch.Tensor]) -> None:
        """With `kl_reference: snapshot`, the frozen reference takes the snapshot's weights (`state`)."""
        if self.settings.kl_reference != "snapshot":
            return
        if self.reference is None:
            raise ValueError("kl_reference=snapshot needs a reference model (kl_type k1 or k3)")
        result = self.reference.load_state_dict(state, strict=False)
        missing = [name for name in result.missing_keys if not name.endswith("lm_head.weight")]
        if result.unexpected_keys or missing:
            raise ValueError(f"the snapshot does not fit the reference model (missing {missing[:5]},"
                             f" unexpected {result.unexpected_keys[:5]})")

    def move_choices(self, samples: Sequence[TrainSample], width: int) -> tuple[torch.Tensor, torch.Tensor]:
        """Where each response names a move (`strat.algorithm.reasoning.move_mention_indices` with `settings.move_names`) and
        the tokens a move could start with there: [B, width] bool and [B, width, K] token ids (-1 for none).

        The candidates are the first tokens of the move names spelt as the named token is (after a space or not);
        a mention whose token starts no name that way (merged with the text before it) is left out."""
        spaced, plain = self._move_first_tokens()
        size = max(len(spaced), len(plain), 1)
        mask = torch.zeros((len(samples), width), dtype=torch.bool)
        candidates = torch.full((len(samples), width, size), -1, dtype=torch.long)
        for row, sample in enumerate(samples):
            pieces = []
            for token in sample.response_token_ids:
                if token not in self._pieces:
                    self._pieces[token] = self.tokenizer.decode([token])
                pieces.append(self._pieces[token])
            for index in move_mention_indices(pieces, self.settings.move_names):
                token = sample.response_token_ids[index]
                options = spaced if pieces[index][:1].isspace() else plain
                if token not in options:
                    continue
                mask[row, index] = True
                candidates[row, index, : len(options)] = torch.tensor(options, dtype=torch.long)
        return mask.to(self.device), candidates.to(self.device)

    def _move_first_tokens(self) -> tuple[list[int], list[int]]:
        """The distinct first tokens of the move names after a space, and without one."""
        if self._move_tokens is None:
            def first(text: str) -> list[int]:
                ids = self.tokenizer.encode(text, add_special_tokens=False)
                return ids[:1]

            names = [name.strip() for name in self.settings.move_names if name.strip()]
            spaced = sorted({token for name in names for token in first(" " + name)})
            plain = sorted({token for name in names for token in first(name)})
            self._move_tokens = (spaced, plain)
        return self._move_tokens

    def _minibatches(self, samples: Sequence[TrainSample], epoch: int) -> list[list[TrainSample]]:
        """The batch in `minibatches` parts of near-equal size, one optimizer step each (the whole batch for one);
        a seeded shuffle per update and epoch decides which samples go together. Fewer parts when there are
        fewer samples."""
        count = min(self.settings.minibatches, len(samples))
        if count <= 1:
            return [list(samples)]
        order = list(range(len(samples)))
        random.Random(hash((self.settings.seed, self.updates, epoch, 1)) & 0xFFFFFFFF).shuffle(order)
        return [[samples[i] for i in order[part::count]] for part in range(count)]

    def _micro_batches(self, samples: Sequence[TrainSample], epoch: int) -> list[list[TrainSample]]:
        order = list(range(len(samples)))
        random.Random(hash((self.settings.seed, self.updates, epoch)) & 0xFFFFFFFF).shuffle(order)
        # Similar lengths together, so that padding does not eat the budget.
        size = self.settings.micro_batch
        chunks = [order[i : i + size * 4] for i in range(0, len(order), size * 4)]
        batches = []
        for chunk in chunks:
            chunk.sort(key=lambda i: len(samples[i].prompt_token_ids) + len(samples[i].response_token_ids))
            batches.extend([samples[i] for i in chunk[j : j + size]] for j in range(0, len(chunk), size))
        return batches

    @torch.no_grad()
    def _frozen_logprobs(self, model: torch.nn.Module, batch: TrainBatch) -> torch.Tensor:
        was_training = model.training
        model.eval()
        with self._autocast():
            out = sequence_logprobs(model, batch, self.settings.temperature, share_prefix=self.share_prefix,
                                    top_p=self.settings.top_p)
        model.train(was_training)
        return out

    def _reference_logprobs(self, batch: TrainBatch) -> torch.Tensor | None:
        """Log-probs under the frozen reference: a copy of the initial model, or with LoRA the base model."""
        if self.reference is not None:
            return self._frozen_logprobs(self.reference, batch)
        if self.settings.loss.kl_type != "none" and self.settings.lora is not None:
            with self.model.disable_adapter():
                return self._frozen_logprobs(self.model, batch)
        return None

    def _proximal_logprobs(self, steps: Sequence[tuple[int, int, list[tuple[list[int], TrainBatch, bool, Any]]]]
                           ) -> dict[int, torch.Tensor]:
        """Proximal log-probs (the weights at the update's start), by sample position, of the samples that later
        steps train on and the first step does not: the first step's training forward, before its optimizer
        step, gives the rest. With one minibatch nothing is left to compute; with k, the samples of minibatches
        2..k (and, under FSDP2, those a rank owns only in a later epoch)."""
        proximal: dict[int, torch.Tensor] = {}
        if len(steps) < 2:  # the same on every rank: no collective below
            return proximal
        known = {row for rows, *_ in steps[0][2] for row in rows}
        plan = []
        for _, _, prepared in steps[1:]:
            for rows, batch, _, _ in prepared:
                plan.append((rows, batch, not known.issuperset(rows)))
                known.update(rows)
        # Under FSDP2 every forward is a collective: a micro-batch runs on every rank when one rank needs it.
        wanted = self._sum_over_ranks([float(needed) for *_, needed in plan])
        for (rows, batch, _), count in zip(plan, wanted, strict=True):
            if count > 0:
                _keep_rows(proximal, rows, self._frozen_logprobs(self.model, batch), batch.response_mask)
        return proximal

    def update(self, samples: Sequence[TrainSample]) -> dict[str, float]:
        """One policy update on `samples`: `minibatches` optimizer steps per epoch, each on its own part of the
        batch (one step per epoch on the whole batch by default); returns diagnostics.

        Under FSDP2 every rank is given the same whole batch and trains on its own part of each minibatch
        (`split_for_ranks`); the steps and the diagnostics are those of the whole batch on one process.
        A non-finite loss or gradient skips that step and is reported as `learn/skipped`."""
        settings = self.settings
        samples = [s for s in samples if s.response_token_ids]
        if not samples:
            return {"loss/policy": 0.0, "learn/samples": 0.0, "learn/skipped": 0.0}
        total_tokens = sum(len(s.response_token_ids) for s in samples)
        seq_mean = settings.loss.loss_agg == "seq_mean"
        sums: dict[str, float] = {}
        gap_sum, gap_tokens, skipped = 0.0, 0, 0
        grad_norm: float | None = None
        move_bonus = settings.loss.move_entropy_coef > 0
        rehearse = settings.loss.dph_divergence != "none"
        if rehearse and not self.rehearsal:
            raise ValueError(f"dph_divergence={settings.loss.dph_divergence!r} needs rehearsal samples (set_rehearsal)")
        dph_seconds = 0.0
        position = {id(sample): index for index, sample in enumerate(samples)}
        # One entry per optimizer step: the minibatch's sample and token counts and its micro-batches, each
        # with the positions of its samples in the batch.
        steps: list[tuple[int, int, list[tuple[list[int], TrainBatch, bool, Any]]]] = []
        for epoch in range(settings.epochs):
            for minibatch in self._minibatches(samples, epoch):
                parts = split_for_ranks(minibatch, self.world_size)
                own = self._micro_batches(parts[self.rank], epoch)
                # Under FSDP2 each forward and backward is a collective: every rank runs as many micro-batches
                # as the busiest one, the extra ones (a repeat, or any sample when a rank has none) weighted 0.
                rounds = max(len(self._micro_batches(part, epoch)) for part in parts)
                prepared = []
                for index in range(rounds):
                    counted = index < len(own)
                    chunk = own[index] if counted else (own[0] if own else minibatch[:1])
                    batch = TrainBatch.collate(chunk, self.pad_id).to(self.device)
                    rows = [position[id(s)] for s in chunk]
                    moves = self.move_choices(chunk, batch.response_ids.shape[1]) if move_bonus else None
                    prepared.append((rows, batch, counted, moves))
                steps.append((len(minibatch), sum(len(s.response_token_ids) for s in minibatch), prepared))
        proximal = self._proximal_logprobs(steps)
        lr = settings.lr * lr_factor(settings.lr_schedule, self.updates, settings.total_updates, settings.lr_final)
        for group in self.optimizer.param_groups:  # also what a resumed run's changed `algorithm.lr` takes
            group["lr"] = lr
        for number, (step_samples, step_tokens, prepared) in enumerate(steps):
            self.optimizer.zero_grad(set_to_none=True)
            for rows, batch, counted, moves in prepared:
                with self._autocast():
                    # The entropy costs another pass over the vocabulary: only when its bonus is on.
                    logprobs, entropy, move_entropy = sequence_forward(
                        self.model,
                        batch,
                        settings.temperature,
                        entropy=settings.loss.entropy_coef > 0,
                        candidates=moves[1] if moves is not None else None,
                        share_prefix=self.share_prefix,
                        top_p=settings.top_p,
                    )
                if number == 0:  # before the first optimizer step: the weights are still those of the update's start
                    _keep_rows(proximal, rows, logprobs.detach(), batch.response_mask)
                old = _gather_rows(proximal, rows, batch.behaviour_logprobs)
                if number < len(steps) // settings.epochs and counted:  # the first epoch's steps
                    mask = batch.response_mask
                    gap_sum += float((old - batch.behaviour_logprobs)[mask].abs().sum())
                    gap_tokens += int(mask.sum())
                ref = self._reference_logprobs(batch)
                out = policy_loss(
                    settings.loss,
                    logprobs,
                    old,
                    batch.advantages,
                    batch.response_mask,
                    behaviour_logprobs=batch.behaviour_logprobs if settings.stale else None,
                    ref_logprobs=ref,
                    entropy=entropy,
                    move_entropy=move_entropy,
                    move_mask=moves[0] if moves is not None else None,
                )
                # Each micro-batch's mean is weighted by its share of the minibatch, so that the accumulated
                # gradient is that of one mean over all its tokens (or all its sequences). FSDP2 averages the
                # ranks' gradients: scaled by the world size, the average is that sum.
                share = len(rows) / step_samples if seq_mean else int(batch.response_mask.sum()) / step_tokens
                share *= float(counted)
                (out.loss * (share * self.world_size)).backward()
                figures = [
                    ("loss/policy", out.loss),
                    ("loss/clip_frac", out.clip_fraction),
                    ("loss/approx_kl", out.approx_kl),
                    ("loss/ratio_mean", out.ratio_mean),
                    ("loss/kl", out.divergence if out.divergence is not None else torch.zeros(())),
                ]
                if out.entropy is not None:
                    figures.append(("policy/entropy", out.entropy))
                if out.move_entropy is not None:
                    figures.append(("policy/move_entropy", out.move_entropy))
                for name, value in figures:
                    sums[name] = sums.get(name, 0.0) + float(value.detach()) * share / len(steps)
            if rehearse:
                started = time.perf_counter()
                sums["loss/dph"] = sums.get("loss/dph", 0.0) + self._rehearse(number) / len(steps)
                dph_seconds += time.perf_counter() - started
            norm = torch.nn.utils.clip_grad_norm_(self._trainable(), settings.grad_clip)
            if hasattr(norm, "full_tensor"):  # a DTensor under FSDP2
                norm = norm.full_tensor()
            # The ranks decide together: a rank that stepped alone would leave its shards out of step.
            [loss_sum] = self._sum_over_ranks([sums.get("loss/policy", 0.0)])
            if not math.isfinite(float(norm)) or not math.isfinite(loss_sum):
                self.optimizer.zero_grad(set_to_none=True)
                skipped += 1
                continue
            grad_norm = float(norm)
            self.optimizer.step()
        self.updates += 1
        names = sorted(sums)
        *values, gap_sum, gap_tokens = self._sum_over_ranks([*(sums[n] for n in names), gap_sum, float(gap_tokens)])
        sums = dict(zip(names, values, strict=True))
        if grad_norm is not None:
            sums["learn/grad_norm"] = grad_norm
        sums["learn/samples"] = float(len(samples))
        sums["learn/tokens"] = float(total_tokens)
        sums["learn/skipped"] = float(skipped)
        sums["logprob/engine_learner_gap"] = gap_sum / max(gap_tokens, 1)
        if rehearse:
            sums["time/dph_s"] = dph_seconds
        sums["learn/lr"] = lr
        return sums

    def set_rehearsal(self, samples: Sequence[TrainSample], score: bool) -> list[TrainSample]:
        """Keep `samples` as DPH-RL's rehearsal set, and return it. With `score`, their log-probs under the current
        weights (the initial policy's, at a run's start) replace their behaviour log-probs first; every FSDP2 rank
        runs the same forwards. Without, those already are the initial policy's (stored samples, on resume)."""
        samples = [s for s in samples if s.response_token_ids]
        if score:
            scored = []
            size = self.settings.micro_batch
            for start in range(0, len(samples), size):
                chunk = samples[start : start + size]
                logprobs = self._frozen_logprobs(self.model, TrainBatch.collate(chunk, self.pad_id).to(self.device))
                scored.extend(
                    replace(sample, behaviour_logprobs=tuple(logprobs[row, : len(sample.response_token_ids)].tolist()))
                    for row, sample in enumerate(chunk)
                )
            samples = scored
        self.rehearsal = samples
        return samples

    def _rehearse(self, number: int) -> float:
        """Optimizer step `number`'s DPH-RL term (`losses.rehearsal_loss`) on a batch drawn from the rehearsal set,
        its gradient added to the step's; returns its value. Under FSDP2 each rank takes its part of the batch."""
        settings = self.settings
        drawn = draw_batch(self.rehearsal, settings.rehearsal_batch, settings.seed, self.updates, number)
        size = settings.micro_batch
        parts = split_for_ranks(drawn, self.world_size)
        own = [parts[self.rank][i : i + size] for i in range(0, len(parts[self.rank]), size)]
        rounds = max(math.ceil(len(part) / size) for part in parts)
        tokens = sum(len(s.response_token_ids) for s in drawn)
        value = 0.0
        for index in range(rounds):
            counted = index < len(own)
            chunk = own[index] if counted else drawn[:1]  # every rank runs as many forwards (collectives)
            batch = TrainBatch.collate(chunk, self.pad_id).to(self.device)
            with self._autocast():
                logprobs = sequence_logprobs(self.model, batch, settings.temperature, share_prefix=self.share_prefix,
                                             top_p=settings.top_p)
            out = rehearsal_loss(settings.loss, logprobs, batch.behaviour_logprobs, batch.response_mask)
            if settings.loss.loss_agg == "seq_mean":
                share = len(chunk) / len(drawn)
            else:
                share = int(batch.response_mask.sum()) / tokens
            share *= float(counted)
            (out.loss * (share * self.world_size)).backward()
            value += float(out.loss.detach()) * share
        return value

    def _sum_over_ranks(self, values: list[float]) -> list[float]:
        """The values summed over the FSDP2 ranks (a collective: every rank calls it); as they are on one process."""
        if self.world_size == 1:
            return values
        tensor = torch.tensor(values, dtype=torch.float64, device=self.device)
        torch.distributed.all_reduce(tensor)
        return tensor.tolist()

    # --- weights out -------------------------------------------------------------------------

    def _full_state(self) -> dict[str, torch.Tensor]:
        """Every tensor of the training model under its own names (peft's when LoRA is on), on CPU,
        copied. A collective under FSDP2: every rank must call it."""
        if self.sharded:
            state = get_model_state_dict(self.model, options=StateDictOptions(full_state_dict=True, cpu_offload=True))
            return {name: tensor.detach().clone() for name, tensor in state.items()}
        return {name: tensor.detach().to("cpu", copy=True) for name, tensor in self.model.state_dict().items()}

    def merged_state_dict(self, full: dict[str, torch.Tensor] | None = None) -> dict[str, torch.Tensor]:
        """The policy as a plain model: Hugging Face names, LoRA deltas merged in (float32), on CPU."""
        full = self._full_state() if full is None else full
        if self.settings.lora is None or not full:  # under FSDP2 only rank 0 holds the gathered weights
            return full
        prefix = "base_model.model."
        merged: dict[str, torch.Tensor] = {}
        for name, tensor in full.items():
            if ".lora_" in name:
                continue
            plain = name[len(prefix):] if name.startswith(prefix) else name
            merged[plain.replace(".base_layer.", ".")] = tensor
        for module, scaling in self.lora_scaling.items():
            plain = module[len(prefix):] if module.startswith(prefix) else module
            key = f"{plain}.weight"
            lora_a = full[f"{module}.lora_A.default.weight"].float()
            lora_b = full[f"{module}.lora_B.default.weight"].float()
            merged[key] = merged[key].float() + (lora_b @ lora_a) * scaling
        return merged

    def state_dict(self) -> dict[str, torch.Tensor]:
        """The policy's weights for inference: Hugging Face names, LoRA merged, on CPU, in `export_dtype`."""
        state = self.merged_state_dict()
        dtype = self.settings.export_dtype
        if dtype is None:
            return state
        target = DTYPES[dtype]
        return {name: t.to(target) if t.is_floating_point() else t for name, t in state.items()}

    def _base_model(self) -> torch.nn.Module:
        """The Hugging Face model under any peft wrapper."""
        return self.model.get_base_model() if self.settings.lora is not None else self.model

    def export_weights_dir(self, path: str | os.PathLike[str]) -> str:
        """Write the current weights (as `state_dict`) as safetensors + config.json into `path`, atomically:
        into a temporary sibling first, then renamed. Returns the absolute path. Under FSDP2 every rank
        calls it and rank 0 writes."""
        return self._write_weights_dir(self.state_dict(), path)

    def take_snapshot_dir(self, path: str | os.PathLike[str]) -> str:
        """Freeze the current weights as the snapshot opponent's and write them to `path` (as `export_weights_dir`)."""
        return self._write_weights_dir(self.take_snapshot(), path)

    def _write_weights_dir(self, state: dict[str, torch.Tensor], path: str | os.PathLike[str]) -> str:
        target = Path(path).absolute()
        if self.rank != 0:
            return str(target)
        target.parent.mkdir(parents=True, exist_ok=True)
        staging = target.with_name(f".{target.name}.tmp-{os.getpid()}")
        if staging.exists():
            shutil.rmtree(staging)
        staging.mkdir()
        write_safetensors(state, staging)
        self._base_model().config.save_pretrained(staging)
        replace_dir(staging, target)
        return str(target)

    @torch.no_grad()
    def greedy(self, prompts: Sequence[Sequence[int]], max_new_tokens: int) -> list[list[int]]:
        """Greedy completions (token ids, up to and including the end-of-turn token) from the training
        model itself, via transformers `generate`, one prompt at a time: what a synced engine must
        reproduce."""
        stops = stop_token_ids(self.tokenizer, self.model_path)
        was_training = self.model.training
        self.model.eval()
        outputs = []
        if self.sharded:
            # FSDP2 gathers the root's own weights (embeddings, head) in the root's forward, which peft's
            # generate goes around: gathered for the whole generation instead (a collective: every rank calls).
            self.model.unshard()
        try:
            for prompt in prompts:
                ids = torch.tensor([list(prompt)], dtype=torch.long, device=self.device)
                with self._autocast():
                    out = self.model.generate(
                        input_ids=ids, attention_mask=torch.ones_like(ids), max_new_tokens=max_new_tokens,
                        do_sample=False, eos_token_id=stops, pad_token_id=self.pad_id,
                    )
                new = out[0, ids.shape[1]:].tolist()
                ends = [new.index(s) for s in stops if s in new]
                outputs.append(new[: min(ends) + 1] if ends else new)
        finally:
            self.model.train(was_training)
            if self.sharded:
                self.model.reshard()
        return outputs

    # --- checkpoints -----------------------------------------------------------------------

    def save(self, run_dir: Path, step: int, loop_state: dict[str, Any], keep: int) -> checkpoint.Checkpoint:
        """Write a checkpoint: full weights at the top level (merged when LoRA is on, so that eval, play and
        engines can load it as a plain model), the adapter in `adapter/` with LoRA, optimizer, RNG, loop state."""
        extra = {"snapshot": self.snapshot} if self.snapshot is not None else None
        state = {"updates": self.updates, **loop_state}
        if self.settings.lora is None and not self.sharded:
            return checkpoint.save(run_dir, step, self.model, self.tokenizer, self.optimizer, state, keep,
                                   extra_weights=extra)
        full = self._full_state()
        writer = _CheckpointWriter(self, full)
        optimizer = _OptimizerState(self._optimizer_state())
        target = checkpoint.checkpoint_dir(run_dir, step)
        if self.rank != 0:
            return checkpoint.Checkpoint(target, step)
        return checkpoint.save(run_dir, step, writer, self.tokenizer, optimizer, state, keep, extra_weights=extra)

    def _optimizer_state(self) -> dict[str, Any]:
        if self.sharded:
            return get_optimizer_state_dict(self.model, self.optimizer,
                                            options=StateDictOptions(full_state_dict=True, cpu_offload=True))
        return self.optimizer.state_dict()

    def _load_model_state(self, state: dict[str, torch.Tensor]) -> tuple[list[str], list[str]]:
        """Load (part of) a full state dict under the training model's own names; (missing, unexpected)."""
        if self.sharded:
            result = set_model_state_dict(self.model, state, options=StateDictOptions(full_state_dict=True, strict=False))
        else:
            result = self.model.load_state_dict(state, strict=False)
        return list(result.missing_keys), list(result.unexpected_keys)

    def load(self, ckpt: checkpoint.Checkpoint) -> dict[str, Any]:
        """Restore weights, optimizer and RNG from a checkpoint; returns its loop state."""
        adapter_file = ckpt.path / "adapter" / "adapter_model.safetensors"
        if self.settings.lora is not None:
            if not adapter_file.is_file():
                raise ValueError(f"checkpoint {ckpt.path} holds no LoRA adapter (it was written with"
                                 " learner.lora.enabled=false); resume it with the same learner settings")
            state = {_adapter_key(name): tensor for name, tensor in load_file(adapter_file).items()}
            missing, unexpected = self._load_model_state(state)
            missing = [m for m in missing if ".lora_" in m]
            if unexpected or missing:
                raise ValueError(f"the adapter in {ckpt.path} does not match learner.lora"
                                 f" (missing {missing[:5]}, unexpected {unexpected[:5]})")
        else:
            if adapter_file.is_file():
                raise ValueError(f"checkpoint {ckpt.path} was trained with LoRA; resume it with learner.lora.enabled=true"
                                 " and the same adapter settings")
            state: dict[str, torch.Tensor] = {}
            for file in sorted(ckpt.path.glob("*.safetensors")):
                state.update(load_file(file))
            missing, unexpected = self._load_model_state(state)
            if unexpected or [m for m in missing if not m.endswith("lm_head.weight")]:
                raise ValueError(f"checkpoint {ckpt.path} does not match the model (missing {missing}, unexpected {unexpected})")
        if self.sharded:
            checkpoint.load_optimizer(ckpt, _ShardedOptimizerLoader(self))
        else:
            checkpoint.load_optimizer(ckpt, self.optimizer)
        checkpoint.load_rng(ckpt)
        loop_state = checkpoint.load_loop_state(ckpt)
        self.updates = int(loop_state.get("updates", 0))
        if (ckpt.path / "snapshot" / "model.safetensors").is_file():
            self.snapshot = load_file(ckpt.path / "snapshot" / "model.safetensors")
            self._anchor_to_snapshot(self.snapshot)
        return loop_state


def _adapter_key(name: str) -> str:
    """peft's saved adapter name (`...q_proj.lora_A.weight`) -> the model's (`...q_proj.lora_A.default.weight`)."""
    for part in (".lora_A.", ".lora_B."):
        if part in name:
            head, tail = name.split(part, 1)
            return f"{head}{part}default.{tail}"
    return name


class _CheckpointWriter:
    """What `checkpoint.save` calls `save_pretrained` on when the model is not a plain transformers model
    (LoRA, FSDP2): merged full weights + config, and the adapter in `adapter/`."""

    def __init__(self, learner: PolicyLearner, full: dict[str, torch.Tensor]) -> None:
        self.learner = learner
        self.full = full

    def save_pretrained(self, directory: str | os.PathLike[str], safe_serialization: bool = True) -> None:
        directory = Path(directory)
        learner = self.learner
        write_safetensors(learner.merged_state_dict(self.full), directory)
        base = learner._base_model()
        base.config.save_pretrained(directory)
        generation = getattr(base, "generation_config", None)
        if generation is not None:
            generation.save_pretrained(directory)
        if learner.settings.lora is not None:
            from peft import get_peft_model_state_dict  # optional dependency, as in `strat.model.build.add_lora`

            adapter = get_peft_model_state_dict(learner.model, state_dict=self.full)
            (directory / "adapter").mkdir()
            save_file({k: v.contiguous() for k, v in adapter.items()}, directory / "adapter" / "adapter_model.safetensors",
                      metadata={"format": "pt"})
            learner.model.peft_config["default"].save_pretrained(directory / "adapter")


class _OptimizerState:
    """An optimizer state computed beforehand (a full state dict under FSDP2), for `checkpoint.save`."""

    def __init__(self, state: dict[str, Any]) -> None:
        self._state = state

    def state_dict(self) -> dict[str, Any]:
        return self._state


class _ShardedOptimizerLoader:
    """Takes a full optimizer state dict from `checkpoint.load_optimizer` and scatters it (FSDP2)."""

    def __init__(self, learner: PolicyLearner) -> None:
        self.learner = learner

    def load_state_dict(self, state: dict[str, Any]) -> None:
        set_optimizer_state_dict(self.learner.model, self.learner.optimizer, self._keyed_by_name(state),
                                 options=StateDictOptions(full_state_dict=True))

    def _keyed_by_name(self, state: dict[str, Any]) -> dict[str, Any]:
        """A plain optimizer state (an unsharded learner's checkpoint) numbers the parameters in optimizer order;
        FSDP2's full state names them. Numbers are turned into the names of the same parameters."""
        saved = [key for group in state["param_groups"] for key in group["params"]]
        if all(isinstance(key, str) for key in saved):
            return state
        names = {id(param): name for name, param in self.learner.model.named_parameters()}
        ours = [names[id(param)] for group in self.learner.optimizer.param_groups for param in group["params"]]
        if len(saved) != len(ours):
            raise ValueError(f"the checkpoint's optimizer has {len(saved)} parameters, this learner's {len(ours)}"
                             " (another model or LoRA setting?)")
        named = dict(zip(saved, ours, strict=True))
        return {
            "state": {named[key]: value for key, value in state["state"].items()},
            "param_groups": [{**group, "params": [named[key] for key in group["params"]]}
                             for group in state["param_groups"]],
        }
