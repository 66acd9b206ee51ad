"""A training model's weights in and out: full state dicts (gathered under FSDP2), LoRA adapters merged into plain
Hugging Face weights, weight directories written atomically, and the adapters `strat.model.checkpoint` saves and
loads through when the model is not a plain transformers model (LoRA, FSDP2).

Everything that leaves the learner for inference is the merged full model under Hugging Face names, so that engines
and `strat eval/play` never see an adapter."""

from __future__ import annotations

import os
import shutil
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import torch
from safetensors.torch import load_file, save_file
from torch.distributed.checkpoint.state_dict import (
    StateDictOptions,
    get_model_state_dict,
    get_optimizer_state_dict,
    set_model_state_dict,
    set_optimizer_state_dict,
)

from strat.model.build import DTYPES
from strat.model.safetensors_io import replace_dir, write_safetensors

PEFT_PREFIX = "base_model.model."
"""What peft puts before the Hugging Face names of a wrapped model's tensors."""


def full_state(model: torch.nn.Module, sharded: bool) -> dict[str, torch.Tensor]:
    """Every tensor of `model` under its own names (peft's when LoRA is on), on CPU, copied. Under FSDP2
    (`sharded`) a collective: every rank must call it, and rank 0 alone gets the tensors."""
    if sharded:
        state = get_model_state_dict(model, options=StateDictOptions(full_state_dict=True, cpu_offload=True))
        return {name: tensor.detach().clone() for name, tensor in state.items()}
    return {name: tensor.detach().to("cpu", copy=True) for name, tensor in model.state_dict().items()}


def merge_lora(full: dict[str, torch.Tensor], lora_scaling: Mapping[str, float] | None) -> dict[str, torch.Tensor]:
    """The model as a plain one: Hugging Face names, each LoRA layer's delta (B @ A x its scaling, by module name in
    `lora_scaling`) merged into its weight in float32. Without LoRA (None), or with nothing gathered (FSDP2 ranks
    other than 0), `full` itself."""
    if lora_scaling is None or not full:
        return full
    merged: dict[str, torch.Tensor] = {}
    for name, tensor in full.items():
        if ".lora_" in name:
            continue
        plain = name.removeprefix(PEFT_PREFIX)
        merged[plain.replace(".base_layer.", ".")] = tensor
    for module, scaling in lora_scaling.items():
        plain = module.removeprefix(PEFT_PREFIX)
        key = f"{plain}.weight"
        lora_a = full[f"{module}.lora_A.default.weight"].float()
        lora_b = full[f"{module}.lora_B.default.weight"].float()
        merged[key] = merged[key].float() + (lora_b @ lora_a) * scaling
    return merged


def cast_floats(state: dict[str, torch.Tensor], dtype: str | None) -> dict[str, torch.Tensor]:
    """`state` with its floating-point tensors in `dtype` (a `DTYPES` name); None leaves them as they are."""
    if dtype is None:
        return state
    target = DTYPES[dtype]
    return {name: t.to(target) if t.is_floating_point() else t for name, t in state.items()}


def write_weights_dir(state: dict[str, torch.Tensor], model_config: Any, path: str | os.PathLike[str]) -> str:
    """Write `state` as safetensors + `model_config`'s config.json into `path`, atomically: into a temporary sibling
    first, then renamed. Returns the absolute path."""
    target = Path(path).absolute()
    target.parent.mkdir(parents=True, exist_ok=True)
    staging = target.with_name(f".{target.name}.tmp-{os.getpid()}")
    if staging.exists():
        shutil.rmtree(staging)
    staging.mkdir()
    write_safetensors(state, staging)
    model_config.save_pretrained(staging)
    replace_dir(staging, target)
    return str(target)


def optimizer_state(model: torch.nn.Module, optimizer: torch.optim.Optimizer, sharded: bool) -> dict[str, Any]:
    """The optimizer's state dict; under FSDP2 the full one, keyed by parameter name (a collective)."""
    if sharded:
        return get_optimizer_state_dict(model, optimizer, options=StateDictOptions(full_state_dict=True, cpu_offload=True))
    return optimizer.state_dict()


def load_model_state(model: torch.nn.Module, state: dict[str, torch.Tensor], sharded: bool,
                     from_rank0: bool = False) -> tuple[list[str], list[str]]:
    """Load (part of) a full state dict under the model's own names, scattered under FSDP2; (missing, unexpected).
    Under FSDP2 a collective; with `from_rank0` only rank 0's `state` counts (it is broadcast, and rank 0 alone can
    tell what is missing)."""
    if sharded:
        options = StateDictOptions(full_state_dict=True, strict=False, broadcast_from_rank0=from_rank0)
        # A copy: set_model_state_dict puts the model's own (sharded) tensors into the dict it is given.
        result = set_model_state_dict(model, dict(state), options=options)
    else:
        result = model.load_state_dict(state, strict=False)
    return list(result.missing_keys), list(result.unexpected_keys)


def adapter_key(name: str) -> str:
    """peft's saved adapter name (`...q_proj.lora_A.weight`) -> the model's (`...q_proj.lora_A.default.weight`)."""
    for part in (".lora_A.", ".lora_B."):
        if part in name:
            head, tail = name.split(part, 1)
            return f"{head}{part}default.{tail}"
    return name


def load_adapter(file: Path) -> dict[str, torch.Tensor]:
    """A saved peft adapter's tensors under the wrapped model's names."""
    return {adapter_key(name): tensor for name, tensor in load_file(file).items()}


def load_weights(directory: Path) -> dict[str, torch.Tensor]:
    """Every `*.safetensors` file at the top of `directory`, as one state dict."""
    state: dict[str, torch.Tensor] = {}
    for file in sorted(directory.glob("*.safetensors")):
        state.update(load_file(file))
    return state


class CheckpointWriter:
    """What `checkpoint.save` calls `save_pretrained` on when the model is not a plain transformers model (LoRA,
    FSDP2): the merged full weights + config, and with LoRA the adapter in `adapter/` (peft format)."""

    def __init__(self, merged: dict[str, torch.Tensor], base_model: torch.nn.Module, peft_model: Any | None,
                 full: dict[str, torch.Tensor]) -> None:
        self.merged = merged
        self.base_model = base_model
        self.peft_model = peft_model
        """The peft-wrapped model with LoRA, None without."""
        self.full = full

    def save_pretrained(self, directory: str | os.PathLike[str], safe_serialization: bool = True) -> None:
        directory = Path(directory)
        write_safetensors(self.merged, directory)
        self.base_model.config.save_pretrained(directory)
        generation = getattr(self.base_model, "generation_config", None)
        if generation is not None:
            generation.save_pretrained(directory)
        if self.peft_model is not None:
            from peft import get_peft_model_state_dict  # optional dependency, as in `strat.model.build.add_lora`

            adapter = get_peft_model_state_dict(self.peft_model, state_dict=self.full)
            (directory / "adapter").mkdir()
            save_file({k: v.contiguous() for k, v in adapter.items()}, directory / "adapter" / "adapter_model.safetensors",
                      metadata={"format": "pt"})
            self.peft_model.peft_config["default"].save_pretrained(directory / "adapter")


class PrecomputedOptimizerState:
    """An optimizer state computed beforehand (a full state dict under FSDP2), for `checkpoint.save`."""

    def __init__(self, state: dict[str, Any]) -> None:
        self._state = state

    def state_dict(self) -> dict[str, Any]:
        return self._state


class ShardedOptimizerLoader:
    """Takes a full optimizer state dict from `checkpoint.load_optimizer` and scatters it (FSDP2)."""

    def __init__(self, model: torch.nn.Module, optimizer: torch.optim.Optimizer) -> None:
        self.model = model
        self.optimizer = optimizer

    def load_state_dict(self, state: dict[str, Any]) -> None:
        set_optimizer_state_dict(self.model, self.optimizer, self._keyed_by_name(state),
                                 options=StateDictOptions(full_state_dict=True))

    def _keyed_by_name(self, state: dict[str, Any]) -> dict[str, Any]:
        """A plain optimizer state (an unsharded learner's checkpoint) numbers the parameters in optimizer order;
        FSDP2's full state names them. Numbers are turned into the names of the same parameters."""
        saved = [key for group in state["param_groups"] for key in group["params"]]
        if all(isinstance(key, str) for key in saved):
            return state
        names = {id(param): name for name, param in self.model.named_parameters()}
        ours = [names[id(param)] for group in self.optimizer.param_groups for param in group["params"]]
        if len(saved) != len(ours):
            raise ValueError(f"the checkpoint's optimizer has {len(saved)} parameters, this learner's {len(ours)}"
                             " (another model or LoRA setting?)")
        named = dict(zip(saved, ours, strict=True))
        return {
            "state": {named[key]: value for key, value in state["state"].items()},
            "param_groups": [{**group, "params": [named[key] for key in group["params"]]}
                             for group in state["param_groups"]],
        }
