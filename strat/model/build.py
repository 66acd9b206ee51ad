"""Building the learner's model: device, precision, frozen parameters, LoRA adapters and FSDP2 sharding."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import torch
import torch.distributed as dist
from torch.distributed.checkpoint.state_dict import StateDictOptions, set_model_state_dict
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard

from strat.model.lora_targets import DEFAULT_LORA_TARGETS

DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}


@dataclass(frozen=True)
class LoraSettings:
    """A LoRA adapter on the named linear layers (peft); `("all-linear",)` takes every linear layer."""

    r: int = 16
    alpha: float = 32.0
    dropout: float = 0.0
    target_modules: tuple[str, ...] = DEFAULT_LORA_TARGETS


def freeze(model: torch.nn.Module, patterns: Sequence[str]) -> None:
    """Turn off the gradient of every parameter whose name contains one of `patterns`; each pattern must match."""
    names = [name for name, _ in model.named_parameters()]
    for pattern in patterns:
        if not any(pattern in name for name in names):
            raise ValueError(f"learner.freeze: {pattern!r} names no parameter of the model (e.g. {names[0]!r})")
    for name, param in model.named_parameters():
        if any(pattern in name for pattern in patterns):
            param.requires_grad_(False)
    if not any(param.requires_grad for param in model.parameters()):
        raise ValueError(f"learner.freeze {list(patterns)} leaves nothing to train")


def resolve_device(name: str) -> torch.device:
    """`auto` -> the current GPU when one is visible, else the CPU; `cuda` without a GPU is refused."""
    if name not in ("auto", "cpu", "cuda"):
        raise ValueError(f"learner device {name!r} (allowed: auto, cpu, cuda)")
    if name == "cpu" or (name == "auto" and not torch.cuda.is_available()):
        return torch.device("cpu")
    if not torch.cuda.is_available():
        raise RuntimeError("learner.device=cuda but this process sees no GPU (does the learner actor get one?"
                           " resources.gpus_learner)")
    return torch.device("cuda", torch.cuda.current_device())


def decoder_layers(model: torch.nn.Module) -> torch.nn.ModuleList:
    """The repeated transformer blocks (the `...layers` ModuleList of a Hugging Face decoder, also under peft)."""
    for name, module in model.named_modules():
        if isinstance(module, torch.nn.ModuleList) and name.split(".")[-1] in ("layers", "h", "blocks") and len(module):
            return module
    raise ValueError(f"no decoder layer list found in {type(model).__name__}; FSDP2 wraps one per layer")


def shard_model(model: torch.nn.Module, device: torch.device, param_dtype: torch.dtype | None = None) -> torch.nn.Module:
    """FSDP2: `fully_shard` each decoder layer, then the root, over all ranks of the default process group.

    `param_dtype` (e.g. bf16) is the compute dtype of a MixedPrecisionPolicy whose gradients are reduced
    in float32; the sharded parameters (the master weights) keep their own dtype."""
    if not (dist.is_available() and dist.is_initialized()):
        raise RuntimeError("FSDP2 needs torch.distributed initialised (one learner process per GPU)")
    mesh = init_device_mesh(device.type, (dist.get_world_size(),))
    policy = MixedPrecisionPolicy(param_dtype=param_dtype, reduce_dtype=torch.float32 if param_dtype else None)
    for layer in decoder_layers(model):
        fully_shard(layer, mesh=mesh, mp_policy=policy)
    fully_shard(model, mesh=mesh, mp_policy=policy)
    return model


def build_sharded(build: Callable[[bool], torch.nn.Module], device: torch.device,
                  param_dtype: torch.dtype | None = None) -> torch.nn.Module:
    """An FSDP2-sharded model that no rank holds whole on `device`, and only rank 0 holds whole in CPU memory.

    `build(on_meta)` makes the model: with its weights (`on_meta=False`, called on rank 0 alone, in CPU memory), or
    the same module tree on the meta device (`on_meta=True`, every rank: no storage). Every rank shards its meta
    tree (`shard_model`) and allocates its own shards on `device`; rank 0 then broadcasts its weights one tensor at
    a time, each rank keeping its shard, and its buffers (non-persistent ones, such as the rotary embedding's
    `inv_freq`, are in no state dict). A collective: every rank calls it."""
    rank = dist.get_rank() if dist.is_available() and dist.is_initialized() else 0
    source = build(False) if rank == 0 else None
    model = build(True)
    shard_model(model, device, param_dtype)
    model.to_empty(device=device)
    load_from_rank0(model, source)
    return model


@torch.no_grad()
def load_from_rank0(model: torch.nn.Module, source: torch.nn.Module | None) -> None:
    """Fill the sharded `model`'s parameters and buffers from rank 0's whole `source` (None on the other ranks),
    which has the same module tree; a collective."""
    state = source.state_dict() if source is not None else {}
    set_model_state_dict(model, state, options=StateDictOptions(full_state_dict=True, broadcast_from_rank0=True))
    theirs = dict(source.named_buffers()) if source is not None else {}
    for name, buffer in model.named_buffers():
        if source is not None:
            buffer.copy_(theirs[name])
        dist.broadcast(buffer, src=0)
    for name, module in model.named_modules():
        for attribute, value in vars(module).items():
            if isinstance(value, torch.Tensor) and value.is_meta:
                raise RuntimeError(f"{name}.{attribute} is still on the meta device after loading: a tensor held"
                                   " outside parameters and buffers, which a sharded build cannot fill")


def wants_fsdp(setting: bool | None) -> bool:
    """Whether to shard with FSDP2: as `setting` says, or (None) when torch.distributed runs over several ranks."""
    if setting is False:
        return False
    running = dist.is_available() and dist.is_initialized()
    if setting is True:
        return True
    return running and dist.get_world_size() > 1


def add_lora(model: torch.nn.Module, lora: LoraSettings, seed: int) -> tuple[torch.nn.Module, dict[str, float]]:
    """`model` with LoRA adapters (peft) on `lora`'s target layers, initialised from `seed`; and each adapted
    layer's scaling (alpha / r), by module name, for merging."""
    try:  # peft is an optional dependency (the `gpu` and `dev` extras): imported only when LoRA is on
        from peft import LoraConfig, get_peft_model
        from peft.tuners.lora import LoraLayer
    except ImportError:
        raise RuntimeError("learner.lora needs peft: install the `gpu` or `dev` extra (peft==0.21.0)") from None

    scaling: dict[str, float] = {}
    targets: list[str] | str = list(lora.target_modules)
    if targets == ["all-linear"]:
        targets = "all-linear"
    config = LoraConfig(r=lora.r, lora_alpha=lora.alpha, lora_dropout=lora.dropout, target_modules=targets,
                        bias="none", task_type="CAUSAL_LM")
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)  # the adapters' initialisation is part of the run's seed
        model = get_peft_model(model, config)
    for name, module in model.named_modules():
        if isinstance(module, LoraLayer) and "default" in module.scaling:
            if getattr(module, "fan_in_fan_out", False):
                raise ValueError(f"LoRA on {name}: fan_in_fan_out (Conv1D) layers are not supported by the merge")
            scaling[name] = float(module.scaling["default"])
    if not scaling:
        raise ValueError(f"LoRA target_modules {lora.target_modules} matched no layer of the model")
    return model, scaling
