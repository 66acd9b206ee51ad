"""The policy update: a transformers model and AdamW, log-probs recomputed at the sampling
temperature, the configured loss, gradient accumulation and clipping. No Ray here: the
learner actor wraps this class."""

from __future__ import annotations

import math
import random
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from strat import checkpoint
from strat.losses import LossConfig, policy_loss, token_logprobs
from strat.records import TrainBatch, TrainSample


@dataclass(frozen=True)
class LearnerSettings:
    """What the learner needs from the experiment config."""

    lr: float = 1e-4
    epochs: int = 1
    micro_batch: int = 16
    grad_clip: float = 1.0
    temperature: float = 1.0
    loss: LossConfig = LossConfig()
    stale: bool = False
    """Weight tokens by proximal/behaviour (samples from an older policy, max_staleness > 0)."""
    seed: int = 0


def sequence_logprobs(model: torch.nn.Module, batch: TrainBatch, temperature: float) -> torch.Tensor:
    """Log-probs [B, R] of the response tokens under the temperature-scaled model (0 on padding)."""
    input_ids = batch.input_ids
    attention = batch.attention_mask.long()
    positions = (attention.cumsum(-1) - 1).clamp(min=0)
    response_len = batch.response_ids.shape[1]
    # Logits at position p predict the token at p + 1, so the last R + 1 positions cover the response;
    # computing only those keeps the vocabulary projection off the prompt.
    logits = model(
        input_ids=input_ids, attention_mask=attention, position_ids=positions, logits_to_keep=response_len + 1
    ).logits
    predicting = logits[:, :-1, :]
    logprobs = token_logprobs(predicting, batch.response_ids, temperature)
    return torch.where(batch.response_mask, logprobs, torch.zeros_like(logprobs))


class PolicyLearner:
    """Owns the trainable policy; `update` applies one step of the configured loss."""

    def __init__(self, model_path: str | Path, settings: LearnerSettings, trust_remote_code: bool = False) -> None:
        from transformers import AutoModelForCausalLM, AutoTokenizer

        self.settings = settings
        self.tokenizer = AutoTokenizer.from_pretrained(model_path, trust_remote_code=trust_remote_code)
        self.model = AutoModelForCausalLM.from_pretrained(
            model_path, dtype=torch.float32, trust_remote_code=trust_remote_code
        )
        self.model.train()
        self.optimizer = torch.optim.AdamW(self.model.parameters(), lr=settings.lr)
        pad = self.tokenizer.pad_token_id
        self.pad_id = pad if pad is not None else self.tokenizer.eos_token_id
        self.reference: torch.nn.Module | None = None
        if settings.loss.kl_type != "none":
            self.reference = AutoModelForCausalLM.from_pretrained(
                model_path, dtype=torch.float32, trust_remote_code=trust_remote_code
            ).eval()
            self.reference.requires_grad_(False)
        self.updates = 0
        self.snapshot: dict[str, torch.Tensor] | None = None
        """The weights of the frozen snapshot opponent, kept so that a checkpoint can restore it."""

    def take_snapshot(self) -> dict[str, torch.Tensor]:
        """Freeze a copy of the current weights as the snapshot opponent's."""
        self.snapshot = self.state_dict()
        return self.snapshot

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
        out = sequence_logprobs(model, batch, self.settings.temperature)
        model.train(was_training)
        return out

    def update(self, samples: Sequence[TrainSample]) -> dict[str, float]:
        """One policy update on `samples` (one optimizer step per epoch); returns diagnostics.

        A non-finite loss or gradient skips the step and is reported as `learn/skipped`."""
        settings = self.settings
        samples = [s for s in samples if s.response_token_ids]
        if not samples:
            return {"loss/policy": 0.0, "learn/samples": 0.0, "learn/skipped": 0.0}
        total_tokens = sum(len(s.response_token_ids) for s in samples)
        seq_mean = settings.loss.loss_agg == "seq_mean"
        sums: dict[str, float] = {}
        gap_sum, gap_tokens, skipped = 0.0, 0, 0
        prepared = []
        for epoch in range(settings.epochs):
            for chunk in self._micro_batches(samples, epoch):
                batch = TrainBatch.collate(chunk, self.pad_id)
                key = tuple((s.episode_id, s.agent, s.turn_index) for s in chunk)
                prepared.append((epoch, key, batch))
        # Proximal log-probs: the learner's weights at the start of this update. With one epoch the
        # weights do not change before the single optimizer step, so the training forward gives them.
        proximal: dict[tuple, torch.Tensor] = {}
        if settings.epochs > 1:
            for _, key, batch in prepared:
                if key not in proximal:
                    proximal[key] = self._frozen_logprobs(self.model, batch)
        for epoch in range(settings.epochs):
            self.optimizer.zero_grad(set_to_none=True)
            for batch_epoch, key, batch in prepared:
                if batch_epoch != epoch:
                    continue
                logprobs = sequence_logprobs(self.model, batch, settings.temperature)
                if key not in proximal:
                    proximal[key] = logprobs.detach()
                if epoch == 0:
                    mask = batch.response_mask
                    gap_sum += float((proximal[key] - batch.behaviour_logprobs)[mask].abs().sum())
                    gap_tokens += int(mask.sum())
                ref = self._frozen_logprobs(self.reference, batch) if self.reference is not None else None
                out = policy_loss(
                    settings.loss,
                    logprobs,
                    proximal[key],
                    batch.advantages,
                    batch.response_mask,
                    behaviour_logprobs=batch.behaviour_logprobs if settings.stale else None,
                    ref_logprobs=ref,
                )
                # Each micro-batch's mean is weighted by its share of the whole batch, so that the
                # accumulated gradient is that of one mean over all tokens (or all sequences).
                share = len(key) / len(samples) if seq_mean else int(batch.response_mask.sum()) / total_tokens
                (out.loss * share).backward()
                for name, value in (
                    ("loss/policy", out.loss),
                    ("loss/clip_frac", out.clip_fraction),
                    ("loss/approx_kl", out.approx_kl),
                    ("loss/ratio_mean", out.ratio_mean),
                    ("loss/kl", out.divergence if out.divergence is not None else torch.zeros(())),
                ):
                    sums[name] = sums.get(name, 0.0) + float(value.detach()) * share / settings.epochs
            norm = torch.nn.utils.clip_grad_norm_(self.model.parameters(), settings.grad_clip)
            if not math.isfinite(float(norm)) or not math.isfinite(sums.get("loss/policy", 0.0)):
                self.optimizer.zero_grad(set_to_none=True)
                skipped += 1
                continue
            sums["learn/grad_norm"] = float(norm)
            self.optimizer.step()
        self.updates += 1
        sums["learn/samples"] = float(len(samples))
        sums["learn/tokens"] = float(total_tokens)
        sums["learn/skipped"] = float(skipped)
        sums["logprob/engine_learner_gap"] = gap_sum / max(gap_tokens, 1)
        return sums

    def state_dict(self) -> dict[str, torch.Tensor]:
        """The policy's weights (Hugging Face names), detached, on CPU."""
        return {name: tensor.detach().cpu().clone() for name, tensor in self.model.state_dict().items()}

    def save(self, run_dir: Path, step: int, loop_state: dict[str, Any], keep: int) -> checkpoint.Checkpoint:
        extra = {"snapshot": self.snapshot} if self.snapshot is not None else None
        return checkpoint.save(run_dir, step, self.model, self.tokenizer, self.optimizer,
                               {"updates": self.updates, **loop_state}, keep, extra_weights=extra)

    def load(self, ckpt: checkpoint.Checkpoint) -> dict[str, Any]:
        """Restore weights, optimizer and RNG from a checkpoint; returns its loop state."""
        from safetensors.torch import load_file

        state: dict[str, torch.Tensor] = {}
        for file in sorted(ckpt.path.glob("*.safetensors")):
            state.update(load_file(file))
        missing, unexpected = self.model.load_state_dict(state, strict=False)
        if unexpected or [m for m in missing if not m.endswith("lm_head.weight")]:
            raise ValueError(f"checkpoint {ckpt.path} does not match the model (missing {missing}, unexpected {unexpected})")
        checkpoint.load_optimizer(ckpt, self.optimizer)
        checkpoint.load_rng(ckpt)
        loop_state = checkpoint.load_loop_state(ckpt)
        self.updates = int(loop_state.get("updates", 0))
        if (ckpt.path / "snapshot" / "model.safetensors").is_file():
            self.snapshot = load_file(ckpt.path / "snapshot" / "model.safetensors")
        return loop_state
