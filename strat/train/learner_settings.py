"""What the learner needs from the experiment config (`strat.train.settings.learner_settings` builds it)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from strat.algorithm.losses import LossConfig
from strat.model.build import LoraSettings
from strat.train.lr_schedule import LrSchedule


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
