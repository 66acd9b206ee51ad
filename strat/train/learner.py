# Over 500 lines: one class holds the model, its optimizer, reference and snapshot, and every call that uses them
# (the update's stages, weights out, checkpoints); the bookkeeping and the weight I/O live in their own modules.
"""The policy update: a transformers model and AdamW, log-probs recomputed at the sampling
temperature, the configured loss, gradient accumulation and clipping. No Ray here: the
learner actor wraps this class.

`PolicyLearner.update` runs four named stages (records and bookkeeping in `strat.train.update_plan`):
1. `_plan`: minibatches, each rank's micro-batches, FSDP2's padding rounds;
2. `_proximal_logprobs`: update-start log-probs of the samples the first optimizer step does not reach;
3. `_optimizer_step`, per minibatch and epoch: `_micro_step` (forward, the registered loss with its KL and entropy
   terms, backward) on each micro-batch, `_rehearse` (DPH-RL's term), then clipping and the step;
4. `_metrics`.
Weights in and out (LoRA merging, weight directories, checkpoint adapters) are `strat.model.weight_io`'s.

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
  for export and checkpoints (a collective: every rank calls them; rank 0 writes). At start only rank 0 reads the
  weights; the others build on the meta device and take their shards by broadcast (`build.build_sharded`); the KL
  reference is sharded the same way.

Imports torch, transformers, safetensors and Strat's pure modules only (no config schema, games, Ray or vLLM), so
that it runs where only those are installed (`tests/layout/test_light_imports.py`).
"""

from __future__ import annotations

import contextlib
import math
import os
import time
from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import torch
from transformers import AutoConfig, AutoModelForCausalLM, AutoTokenizer, GenerationConfig

from strat.algorithm.losses import LossOutput, policy_loss, rehearsal_loss
from strat.algorithm.records import TrainBatch, TrainSample
from strat.engines.base import stop_token_ids
from strat.model import checkpoint, weight_io
from strat.model.build import DTYPES, add_lora, build_sharded, freeze, resolve_device, wants_fsdp
from strat.train.learner_settings import LearnerSettings
from strat.train.lr_schedule import lr_factor
from strat.train.move_tokens import MoveChoices, MoveTokens
from strat.train.prefix import can_share_prefix
from strat.train.rehearsal import draw_batch
from strat.train.sequences import sequence_forward, sequence_logprobs
from strat.train.update_plan import (
    MicroBatch,
    OptimizerStep,
    ProximalLogprobs,
    UpdatePlan,
    UpdateTally,
    fixed_chunks,
    micro_batches,
    minibatches,
    rank_chunks,
)


@dataclass(frozen=True)
class StepOutcome:
    """How an optimizer step ended."""

    stepped: bool
    """False when a non-finite loss or gradient skipped it."""
    grad_norm: float
    """The gradient norm before clipping (over every rank)."""


__all__ = ["LearnerSettings", "PolicyLearner", "StepOutcome"]


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
        self.lora_scaling: dict[str, float] = {}
        """Each LoRA layer's scaling (alpha / r), by module name, for merging the adapters into exported weights."""
        self.model = self._build_model(trust_remote_code)
        self.model.train()
        self.optimizer = torch.optim.AdamW(self._trainable(), lr=settings.lr)
        pad = self.tokenizer.pad_token_id
        self.pad_id = pad if pad is not None else self.tokenizer.eos_token_id
        self.reference = self._build_reference(trust_remote_code)
        self.updates = 0
        self.move_tokens = MoveTokens(self.tokenizer, settings.move_names)
        """The game's move names as this tokenizer spells them (the move entropy bonus)."""
        self.snapshot: dict[str, torch.Tensor] | None = None
        """The weights of the frozen snapshot opponent, kept so that a checkpoint can restore it."""
        self.rehearsal: list[TrainSample] = []
        """DPH-RL's rehearsal samples, their `behaviour_logprobs` the initial policy's (`set_rehearsal`)."""
        # Not under FSDP2: there a shared forward would gather every layer's weights twice (prefix, then
        # suffixes), and two root forwards before one backward are untested with its gradient hooks.
        self.share_prefix = settings.share_prefix and not self.sharded and can_share_prefix(self.model)
        """Whether forwards run each micro-batch's common prompt prefix once (`settings.share_prefix`)."""

    def _build_model(self, trust_remote_code: bool) -> torch.nn.Module:
        """The trainable model: float32 master weights, with gradient checkpointing, LoRA, frozen parameters and
        FSDP2 sharding as the settings ask, on the learner's device. Under FSDP2 only rank 0 reads the weights
        (`build.build_sharded`)."""
        settings = self.settings
        if self.sharded:
            return build_sharded(lambda on_meta: self._policy_tree(trust_remote_code, on_meta), self.device,
                                 self.compute_dtype if settings.dtype != "float32" else None)
        model = self._policy_tree(trust_remote_code, on_meta=False)
        model.to(self.device)
        return model

    def _policy_tree(self, trust_remote_code: bool, on_meta: bool) -> torch.nn.Module:
        """The trainable model in CPU memory (or its module tree on the meta device), before sharding."""
        settings = self.settings
        # Master weights are float32. Frozen LoRA base weights need no master copy: bf16 storage then
        # (not under FSDP2, which wants one dtype per sharded group).
        low_precision_base = settings.lora is not None and settings.dtype == "bfloat16" and not self.sharded
        storage = self.compute_dtype if low_precision_base else torch.float32
        model = self._load_pretrained(storage, trust_remote_code, on_meta)
        if settings.gradient_checkpointing:
            model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
            model.config.use_cache = False
        if settings.lora is not None:
            # On the meta device the adapters' seeded initialisation is lost: rank 0 broadcasts its own.
            model, self.lora_scaling = add_lora(model, settings.lora, settings.seed)
        if settings.freeze:
            freeze(model, settings.freeze)
        return model

    def _load_pretrained(self, dtype: torch.dtype, trust_remote_code: bool, on_meta: bool) -> torch.nn.Module:
        """The configured model with its weights in `dtype`, in CPU memory; or (`on_meta`) its module tree on the
        meta device, which holds no storage."""
        if not on_meta:
            return AutoModelForCausalLM.from_pretrained(
                self.model_path, dtype=dtype, trust_remote_code=trust_remote_code, use_safetensors=True
            )
        config = AutoConfig.from_pretrained(self.model_path, trust_remote_code=trust_remote_code)
        with torch.device("meta"):
            model = AutoModelForCausalLM.from_config(config, dtype=dtype, trust_remote_code=trust_remote_code)
        with contextlib.suppress(OSError):  # as from_pretrained: the directory's generation config, when it has one
            model.generation_config = GenerationConfig.from_pretrained(self.model_path)
        return model

    def _build_reference(self, trust_remote_code: bool) -> torch.nn.Module | None:
        """The KL penalty's frozen reference, when it needs its own copy of the model. Frozen, so it is stored in
        the compute dtype; under FSDP2 sharded as the policy is (only rank 0 reads the weights)."""
        settings = self.settings
        if settings.loss.kl_type == "none" or (settings.lora is not None and settings.kl_reference != "snapshot"):
            return None
        # With LoRA and the initial policy as reference, it is the base model itself, adapters disabled: no
        # second copy; an anchor on the snapshot needs its own.

        def tree(on_meta: bool) -> torch.nn.Module:
            model = self._load_pretrained(self.compute_dtype, trust_remote_code, on_meta).eval()
            model.requires_grad_(False)
            return model

        if self.sharded:
            return build_sharded(tree, self.device).eval()
        return tree(on_meta=False).to(self.device)

    def _trainable(self) -> list[torch.nn.Parameter]:
        return [p for p in self.model.parameters() if p.requires_grad]

    def _autocast(self) -> contextlib.AbstractContextManager:
        """bf16 compute over float32 weights on one device (FSDP2 casts the parameters itself)."""
        if self.compute_dtype == torch.float32 or self.sharded:
            return contextlib.nullcontext()
        return torch.autocast(device_type=self.device.type, dtype=self.compute_dtype)

    def take_snapshot(self) -> dict[str, torch.Tensor]:
        """Freeze a copy of the current weights as the snapshot opponent's (and the KL anchor's, with
        `kl_reference: snapshot`). Under FSDP2 a collective; only rank 0 gets the weights (the others, {})."""
        if not self.sharded:
            self.snapshot = self.state_dict()
            self._anchor_to_snapshot(self.snapshot)
            return self.snapshot
        merged = self.merged_state_dict()  # float32, on rank 0 alone
        self.snapshot = weight_io.cast_floats(merged, self.settings.export_dtype)
        self._anchor_to_snapshot(merged, from_rank0=True)
        return self.snapshot

    def _anchor_to_snapshot(self, state: dict[str, torch.Tensor], from_rank0: bool = False) -> None:
        """With `kl_reference: snapshot`, the frozen reference takes the snapshot's weights (`state`). Under FSDP2 a
        collective: each rank keeps its shard of `state`, which with `from_rank0` only rank 0 holds (and
        broadcasts)."""
        if self.settings.kl_reference != "snapshot":
            return
        if self.reference is None:
            raise ValueError("kl_reference=snapshot needs a reference model (kl_type forward or reverse)")
        if self.sharded:
            missing, unexpected = weight_io.load_model_state(self.reference, state, True, from_rank0=from_rank0)
        else:
            result = self.reference.load_state_dict(state, strict=False)
            missing, unexpected = result.missing_keys, result.unexpected_keys
        missing = [name for name in missing if not name.endswith("lm_head.weight")]
        if unexpected or missing:
            raise ValueError(f"the snapshot does not fit the reference model (missing {missing[:5]},"
                             f" unexpected {unexpected[:5]})")

    def move_choices(self, samples: Sequence[TrainSample], width: int) -> MoveChoices:
        """Where each response names a move and the tokens a move could start with there (`MoveTokens.choices`)."""
        return self.move_tokens.choices(samples, width, self.device)

    def minibatches(self, samples: Sequence[TrainSample], epoch: int) -> list[list[TrainSample]]:
        """This update's minibatches of `samples` in `epoch` (`update_plan.minibatches`)."""
        return minibatches(samples, self.settings.minibatches, self.settings.seed, self.updates, epoch)

    def micro_batches(self, samples: Sequence[TrainSample], epoch: int) -> list[list[TrainSample]]:
        """This update's micro-batches of `samples` in `epoch` (`update_plan.micro_batches`)."""
        return micro_batches(samples, self.settings.micro_batch, self.settings.seed, self.updates, epoch)

    @torch.no_grad()
    def _frozen_logprobs(self, model: torch.nn.Module, batch: TrainBatch) -> torch.Tensor:
        was_training = model.training
        model.eval()
        with self._autocast():
            out = sequence_logprobs(model, batch, self.settings.temperature, share_prefix=self.share_prefix,
                                    top_p=self.settings.top_p)
        if self.sharded:
            # FSDP2 leaves the root's own parameters (embeddings, head) gathered after a forward, for the backward
            # that follows a training one; none follows here.
            model.reshard()
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

    # --- the update ------------------------------------------------------------------------

    def update(self, samples: Sequence[TrainSample]) -> dict[str, float]:
        """One policy update on `samples`: `minibatches` optimizer steps per epoch, each on its own part of the
        batch (one step per epoch on the whole batch by default); returns diagnostics.

        Under FSDP2 every rank is given the same whole batch and trains on its own part of each minibatch
        (`split_for_ranks`); the steps and the diagnostics are those of the whole batch on one process.
        A non-finite loss or gradient skips that step alone (`learn/skipped_minibatches`); the loss figures are means
        over the steps that were taken."""
        samples = [s for s in samples if s.response_token_ids]
        if not samples:
            return {"loss/policy": 0.0, "learn/samples": 0.0, "learn/skipped_minibatches": 0.0}
        if self.settings.loss.dph_divergence != "none" and not self.rehearsal:
            raise ValueError(f"dph_divergence={self.settings.loss.dph_divergence!r} needs rehearsal samples"
                             " (set_rehearsal)")
        plan = self._plan(samples)
        proximal = self._proximal_logprobs(plan)
        lr = self._set_lr()
        tally = UpdateTally()
        for step in plan.steps:
            figures: dict[str, float] = {}
            outcome = self._optimizer_step(step, proximal, tally, figures)
            tally.close_step(figures, outcome.stepped, outcome.grad_norm)
        self.updates += 1
        return self._metrics(plan, tally, lr)

    def _plan(self, samples: list[TrainSample]) -> UpdatePlan:
        """Stage 1: every optimizer step of the update (epochs x minibatches), each as this rank's micro-batches,
        FSDP2's padding rounds included, collated on the device."""
        position = {id(sample): index for index, sample in enumerate(samples)}
        steps = []
        for epoch in range(self.settings.epochs):
            for minibatch in self.minibatches(samples, epoch):
                rounds = rank_chunks(minibatch, self.world_size, self.rank,
                                     lambda part, epoch=epoch: self.micro_batches(part, epoch))
                prepared = [self._micro_batch([position[id(s)] for s in r.samples], r.samples, r.counted)
                            for r in rounds]
                tokens = sum(len(s.response_token_ids) for s in minibatch)
                steps.append(OptimizerStep(len(steps), epoch, len(minibatch), tokens, prepared))
        return UpdatePlan(samples, sum(len(s.response_token_ids) for s in samples), steps)

    def _micro_batch(self, rows: list[int], chunk: list[TrainSample], counted: bool) -> MicroBatch:
        batch = TrainBatch.collate(chunk, self.pad_id).to(self.device)
        moves = None
        if self.settings.loss.move_entropy_coef > 0:
            moves = self.move_choices(chunk, batch.response_ids.shape[1])
        return MicroBatch(rows, batch, counted, moves)

    def _proximal_logprobs(self, plan: UpdatePlan) -> ProximalLogprobs:
        """Stage 2: proximal log-probs (the weights at the update's start) of the samples that later steps train on
        and the first step does not: the first step's training forward, before its optimizer step, gives the rest
        (`_micro_step`). With one minibatch nothing is left to compute; with k, the samples of minibatches 2..k
        (and, under FSDP2, those a rank owns only in a later epoch)."""
        proximal = ProximalLogprobs()
        if len(plan.steps) < 2:  # the same on every rank: no collective below
            return proximal
        known = {row for micro in plan.steps[0].micro_batches for row in micro.rows}
        wanted = []
        for step in plan.steps[1:]:
            for micro in step.micro_batches:
                wanted.append((micro, not known.issuperset(micro.rows)))
                known.update(micro.rows)
        # Under FSDP2 every forward is a collective: a micro-batch runs on every rank when one rank needs it.
        counts = self._sum_over_ranks([float(needed) for _, needed in wanted])
        for (micro, _), count in zip(wanted, counts, strict=True):
            if count > 0:
                proximal.keep(micro.rows, self._frozen_logprobs(self.model, micro.batch), micro.batch.response_mask)
        return proximal

    def _set_lr(self) -> float:
        """This update's learning rate under the schedule, set on every parameter group (also what a resumed run's
        changed `algorithm.lr` takes)."""
        settings = self.settings
        lr = settings.lr * lr_factor(settings.lr_schedule, self.updates, settings.total_updates, settings.lr_final)
        for group in self.optimizer.param_groups:
            group["lr"] = lr
        return lr

    def _optimizer_step(self, step: OptimizerStep, proximal: ProximalLogprobs, tally: UpdateTally,
                        figures: dict[str, float]) -> StepOutcome:
        """Stage 3, once per minibatch and epoch: forward and backward over the step's micro-batches (and DPH-RL's
        rehearsal batch), then the clipped optimizer step, unless this step's loss or its gradient is not finite.
        Each figure goes into `figures` as its share of the step's mean (this rank's part under FSDP2)."""
        self.optimizer.zero_grad(set_to_none=True)
        for micro in step.micro_batches:
            self._micro_step(step, micro, proximal, tally, figures)
        if self.settings.loss.dph_divergence != "none":
            started = time.perf_counter()
            figures["loss/dph"] = self._rehearse(step.number)
            tally.dph_seconds += time.perf_counter() - started
        norm = torch.nn.utils.clip_grad_norm_(self._trainable(), self.settings.grad_clip)
        if hasattr(norm, "full_tensor"):  # a DTensor under FSDP2
            norm = norm.full_tensor()
        # The ranks decide together: a rank that stepped alone would leave its shards out of step. This step's own
        # policy loss, so that a non-finite minibatch skips itself and no other.
        [step_loss] = self._sum_over_ranks([figures.get("loss/policy", 0.0)])
        if not math.isfinite(float(norm)) or not math.isfinite(step_loss):
            self.optimizer.zero_grad(set_to_none=True)
            return StepOutcome(False, float(norm))
        self.optimizer.step()
        return StepOutcome(True, float(norm))

    def _micro_step(self, step: OptimizerStep, micro: MicroBatch, proximal: ProximalLogprobs, tally: UpdateTally,
                    figures: dict[str, float]) -> None:
        """One micro-batch's forward, loss and backward, its loss weighted by its share of the minibatch; its
        figures, so weighted, are added to the step's `figures`."""
        settings = self.settings
        batch = micro.batch
        with self._autocast():
            # The entropy costs another pass over the vocabulary: only when its bonus is on.
            logprobs, entropy, move_entropy = sequence_forward(
                self.model, batch, settings.temperature, entropy=settings.loss.entropy_coef > 0,
                candidates=micro.moves.candidates if micro.moves is not None else None,
                share_prefix=self.share_prefix, top_p=settings.top_p,
            )
        if step.number == 0:  # before the first optimizer step: the weights are still those of the update's start
            proximal.keep(micro.rows, logprobs.detach(), batch.response_mask)
        old = proximal.gather(micro.rows, batch.behaviour_logprobs)
        if step.epoch == 0 and micro.counted:
            mask = batch.response_mask
            tally.gap_sum += float((old - batch.behaviour_logprobs)[mask].abs().sum())
            tally.gap_tokens += int(mask.sum())
        # The truncated proximal/behaviour weight applies at every staleness: at 0 it corrects the engine's numerics
        # against the learner's (proximal = the learner's recomputation, behaviour = the engine's log-probs).
        out = policy_loss(
            settings.loss, logprobs, old, batch.advantages, batch.response_mask,
            behaviour_logprobs=batch.behaviour_logprobs,
            ref_logprobs=self._reference_logprobs(batch), entropy=entropy, move_entropy=move_entropy,
            move_mask=micro.moves.mask if micro.moves is not None else None,
        )
        # Each micro-batch's mean is weighted by its share of the minibatch, so that the accumulated gradient is
        # that of one mean over all its tokens (or all its sequences). FSDP2 averages the ranks' gradients: scaled
        # by the world size, the average is that sum.
        if settings.loss.loss_agg == "seq_mean":
            share = len(micro.rows) / step.samples
        else:
            share = int(batch.response_mask.sum()) / step.tokens
        share *= float(micro.counted)
        (out.loss * (share * self.world_size)).backward()
        for name, value in _loss_figures(out):
            figures[name] = figures.get(name, 0.0) + float(value.detach()) * share

    def _rehearse(self, number: int) -> float:
        """Optimizer step `number`'s DPH-RL term (`losses.rehearsal_loss`) on a batch drawn from the rehearsal set,
        its gradient added to the step's; returns its value. Under FSDP2 each rank takes its part of the batch."""
        settings = self.settings
        drawn = draw_batch(self.rehearsal, settings.rehearsal_batch, settings.seed, self.updates, number)
        tokens = sum(len(s.response_token_ids) for s in drawn)
        value = 0.0
        for chunk in fixed_chunks(drawn, self.world_size, self.rank, settings.micro_batch):
            batch = TrainBatch.collate(chunk.samples, self.pad_id).to(self.device)
            with self._autocast():
                logprobs = sequence_logprobs(self.model, batch, settings.temperature, share_prefix=self.share_prefix,
                                             top_p=settings.top_p)
            out = rehearsal_loss(settings.loss, logprobs, batch.behaviour_logprobs, batch.response_mask)
            if settings.loss.loss_agg == "seq_mean":
                share = len(chunk.samples) / len(drawn)
            else:
                share = int(batch.response_mask.sum()) / tokens
            share *= float(chunk.counted)
            (out.loss * (share * self.world_size)).backward()
            value += float(out.loss.detach()) * share
        return value

    def _metrics(self, plan: UpdatePlan, tally: UpdateTally, lr: float) -> dict[str, float]:
        """Stage 4: the update's diagnostics, summed over the FSDP2 ranks; the loss figures are means over the
        optimizer steps that were taken (NaN when every one was skipped)."""
        names = sorted(tally.sums)
        *values, gap_sum, gap_tokens = self._sum_over_ranks(
            [*(tally.sums[n] for n in names), tally.gap_sum, float(tally.gap_tokens)])
        stepped = tally.stepped
        metrics = {name: value / stepped if stepped else math.nan for name, value in zip(names, values, strict=True)}
        if tally.grad_norm is not None:
            metrics["learn/grad_norm"] = tally.grad_norm
        metrics["learn/samples"] = float(len(plan.samples))
        metrics["learn/tokens"] = float(plan.tokens)
        metrics["learn/skipped_minibatches"] = float(tally.skipped)
        metrics["logprob/engine_learner_gap"] = gap_sum / max(gap_tokens, 1)
        if self.settings.loss.dph_divergence != "none":
            metrics["time/dph_s"] = tally.dph_seconds
        metrics["learn/lr"] = lr
        return metrics

    def _sum_over_ranks(self, values: list[float]) -> list[float]:
        """The values summed over the FSDP2 ranks (a collective: every rank calls it); as they are on one process."""
        if self.world_size == 1:
            return values
        tensor = torch.tensor(values, dtype=torch.float64, device=self.device)
        torch.distributed.all_reduce(tensor)
        return tensor.tolist()

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

    # --- weights out -------------------------------------------------------------------------

    def merged_state_dict(self, full: dict[str, torch.Tensor] | None = None) -> dict[str, torch.Tensor]:
        """The policy as a plain model: Hugging Face names, LoRA deltas merged in (float32), on CPU."""
        full = weight_io.full_state(self.model, self.sharded) if full is None else full
        return weight_io.merge_lora(full, self.lora_scaling if self.settings.lora is not None else None)

    def state_dict(self) -> dict[str, torch.Tensor]:
        """The policy's weights for inference: Hugging Face names, LoRA merged, on CPU, in `export_dtype`."""
        return weight_io.cast_floats(self.merged_state_dict(), self.settings.export_dtype)

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
        if self.rank != 0:
            return str(Path(path).absolute())
        return weight_io.write_weights_dir(state, self._base_model().config, path)

    @torch.no_grad()
    def greedy(self, prompts: Sequence[Sequence[int]], max_new_tokens: int) -> list[list[int]]:
        """Greedy completions (token ids, up to and including the end-of-turn token) from the training
        model itself, via transformers `generate`, one prompt at a time: what a synced engine must
        reproduce."""
        stops = stop_token_ids(self.tokenizer, self.model_path)
        was_training = self.model.training
        self.model.eval()
        if self.sharded:
            # FSDP2 gathers the root's own weights (embeddings, head) in the root's forward, which peft's
            # generate goes around: gathered for the whole generation instead (a collective: every rank calls).
            self.model.unshard()
        try:
            return [self._greedy_one(prompt, max_new_tokens, stops) for prompt in prompts]
        finally:
            self.model.train(was_training)
            if self.sharded:
                self.model.reshard()

    def _greedy_one(self, prompt: Sequence[int], max_new_tokens: int, stops: list[int]) -> list[int]:
        ids = torch.tensor([list(prompt)], dtype=torch.long, device=self.device)
        with self._autocast():
            out = self.model.generate(
                input_ids=ids, attention_mask=torch.ones_like(ids), max_new_tokens=max_new_tokens,
                do_sample=False, eos_token_id=stops, pad_token_id=self.pad_id,
            )
        new = out[0, ids.shape[1]:].tolist()
        ends = [new.index(s) for s in stops if s in new]
        return new[: min(ends) + 1] if ends else new

    # --- checkpoints -----------------------------------------------------------------------

    def save(self, run_dir: Path, step: int, loop_state: dict[str, Any], keep: int) -> checkpoint.Checkpoint:
        """Write a checkpoint: full weights at the top level (merged when LoRA is on, so that eval, play and
        engines can load it as a plain model), the adapter in `adapter/` with LoRA, optimizer, RNG, loop state."""
        extra = {"snapshot": self.snapshot} if self.snapshot is not None else None
        state = {"updates": self.updates, **loop_state}
        if self.settings.lora is None and not self.sharded:
            return checkpoint.save(run_dir, step, self.model, self.tokenizer, self.optimizer, state, keep,
                                   extra_weights=extra)
        full = weight_io.full_state(self.model, self.sharded)
        peft_model = self.model if self.settings.lora is not None else None
        writer = weight_io.CheckpointWriter(self.merged_state_dict(full), self._base_model(), peft_model, full)
        optimizer = weight_io.PrecomputedOptimizerState(
            weight_io.optimizer_state(self.model, self.optimizer, self.sharded))
        if self.rank != 0:
            return checkpoint.Checkpoint(checkpoint.checkpoint_dir(run_dir, step), step)
        return checkpoint.save(run_dir, step, writer, self.tokenizer, optimizer, state, keep, extra_weights=extra)

    def load(self, ckpt: checkpoint.Checkpoint) -> dict[str, Any]:
        """Restore weights, optimizer and RNG from a checkpoint; returns its loop state."""
        if self.settings.lora is not None:
            self._load_adapter(ckpt)
        else:
            self._load_full_weights(ckpt)
        if self.sharded:
            checkpoint.load_optimizer(ckpt, weight_io.ShardedOptimizerLoader(self.model, self.optimizer))
        else:
            checkpoint.load_optimizer(ckpt, self.optimizer)
        checkpoint.load_rng(ckpt)
        loop_state = checkpoint.load_loop_state(ckpt)
        self.updates = int(loop_state.get("updates", 0))
        if (ckpt.path / "snapshot" / "model.safetensors").is_file():
            self.snapshot = weight_io.load_weights(ckpt.path / "snapshot")
            self._anchor_to_snapshot(self.snapshot)
        return loop_state

    def _load_adapter(self, ckpt: checkpoint.Checkpoint) -> None:
        adapter_file = ckpt.path / "adapter" / "adapter_model.safetensors"
        if not adapter_file.is_file():
            raise ValueError(f"checkpoint {ckpt.path} holds no LoRA adapter (it was written with"
                             " learner.lora.enabled=false); resume it with the same learner settings")
        missing, unexpected = weight_io.load_model_state(self.model, weight_io.load_adapter(adapter_file), self.sharded)
        missing = [m for m in missing if ".lora_" in m]
        if unexpected or missing:
            raise ValueError(f"the adapter in {ckpt.path} does not match learner.lora"
                             f" (missing {missing[:5]}, unexpected {unexpected[:5]})")

    def _load_full_weights(self, ckpt: checkpoint.Checkpoint) -> None:
        if (ckpt.path / "adapter" / "adapter_model.safetensors").is_file():
            raise ValueError(f"checkpoint {ckpt.path} was trained with LoRA; resume it with learner.lora.enabled=true"
                             " and the same adapter settings")
        missing, unexpected = weight_io.load_model_state(self.model, weight_io.load_weights(ckpt.path), self.sharded)
        if unexpected or [m for m in missing if not m.endswith("lm_head.weight")]:
            raise ValueError(f"checkpoint {ckpt.path} does not match the model (missing {missing}, unexpected {unexpected})")


def _loss_figures(out: LossOutput) -> list[tuple[str, torch.Tensor]]:
    """A micro-batch's loss figures, by metric name, in the order the update sums them."""
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
    return figures
