"""Model weights on disk: safetensors files (sharded as Hugging Face shards them) and directories replaced
atomically."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import torch
from safetensors.torch import save_file

MAX_SHARD_BYTES = 5 * 2**30
"""Safetensors files written by the learner are split at this size (as Hugging Face does)."""


def write_safetensors(state: dict[str, torch.Tensor], directory: Path, max_shard_bytes: int = MAX_SHARD_BYTES) -> list[Path]:
    """Write `state` as `model.safetensors`, or as shards with a Hugging Face index when it is larger
    than `max_shard_bytes`; returns the files."""
    shards: list[dict[str, torch.Tensor]] = [{}]
    size = 0
    for name, tensor in state.items():
        nbytes = tensor.numel() * tensor.element_size()
        if shards[-1] and size + nbytes > max_shard_bytes:
            shards.append({})
            size = 0
        shards[-1][name] = tensor.contiguous()
        size += nbytes
    if len(shards) == 1:
        save_file(shards[0], directory / "model.safetensors", metadata={"format": "pt"})
        return [directory / "model.safetensors"]
    files, weight_map = [], {}
    for index, shard in enumerate(shards, start=1):
        file = directory / f"model-{index:05d}-of-{len(shards):05d}.safetensors"
        save_file(shard, file, metadata={"format": "pt"})
        files.append(file)
        weight_map.update(dict.fromkeys(shard, file.name))
    total = sum(t.numel() * t.element_size() for t in state.values())
    (directory / "model.safetensors.index.json").write_text(
        json.dumps({"metadata": {"total_size": total}, "weight_map": weight_map}, indent=2)
    )
    return files


def replace_dir(staging: Path, target: Path) -> None:
    """Put `staging` at `target`: a rename, after moving any existing `target` aside."""
    old = None
    if target.exists():
        old = target.with_name(f".{target.name}.old-{os.getpid()}")
        if old.exists():
            shutil.rmtree(old)
        target.rename(old)
    staging.rename(target)
    if old is not None:
        shutil.rmtree(old, ignore_errors=True)
