"""Checkpoints written atomically: safetensors weights, tokenizer, optimizer, RNG and loop state.

Nothing is loaded through unrestricted pickle: weights are safetensors, the optimizer goes
through `torch.load(weights_only=True)`, loop and RNG state are JSON.
"""

from __future__ import annotations

import json
import os
import random
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch
from safetensors.torch import save_file

from strat.errors import ConfigError

COMPLETE = "COMPLETE"
"""Marker written last; a directory without it is an interrupted write and is ignored."""

FORMAT = 2
"""The checkpoint format this code writes (`format` in loop_state.json). 1: no `format` key and no next rollout;
2: with overlap, the rollout in flight at the checkpoint is stored in `next_rollout.json`."""
READABLE_FORMATS = (1, 2)

NEXT_ROLLOUT = "next_rollout"
"""The loop-state key whose value (JSON data) is written to, and read back from, its own compact file."""


@dataclass(frozen=True)
class Checkpoint:
    """A complete checkpoint directory and the step it was taken after."""

    path: Path
    step: int


def checkpoint_dir(run_dir: Path, step: int) -> Path:
    return run_dir / "checkpoints" / f"step_{step}"


def rng_state() -> dict[str, Any]:
    """The process-wide random state (python, numpy, torch) as JSON-safe data."""
    version, internal, gauss = random.getstate()
    np_state = np.random.get_state()
    return {
        "python": [version, list(internal), gauss],
        "numpy": [np_state[0], np_state[1].tolist(), int(np_state[2]), int(np_state[3]), float(np_state[4])],
        "torch": torch.get_rng_state().tolist(),
    }


def set_rng_state(state: dict[str, Any]) -> None:
    """Restore what `rng_state` returned."""
    version, internal, gauss = state["python"]
    random.setstate((version, tuple(internal), gauss))
    name, keys, pos, has_gauss, cached = state["numpy"]
    np.random.set_state((name, np.asarray(keys, dtype=np.uint32), pos, has_gauss, cached))
    torch.set_rng_state(torch.tensor(state["torch"], dtype=torch.uint8))


def save(
    run_dir: Path,
    step: int,
    model: Any,
    tokenizer: Any,
    optimizer: torch.optim.Optimizer | None,
    loop_state: dict[str, Any],
    keep: int,
    extra_weights: dict[str, dict[str, torch.Tensor]] | None = None,
) -> Checkpoint:
    """Write `checkpoints/step_<step>/` atomically (staging dir, marker, rename), keep the last `keep`.

    `extra_weights` (e.g. the frozen snapshot opponent) go to `<name>/model.safetensors`."""
    target = checkpoint_dir(run_dir, step)
    staging = target.with_name(target.name + ".partial")
    if staging.exists():
        shutil.rmtree(staging)
    try:
        staging.mkdir(parents=True)
        model.save_pretrained(staging, safe_serialization=True)
        tokenizer.save_pretrained(staging)
        if optimizer is not None:
            torch.save(optimizer.state_dict(), staging / "optimizer.pt")
        for name, state in (extra_weights or {}).items():
            (staging / name).mkdir()
            save_file({k: v.contiguous() for k, v in state.items()}, staging / name / "model.safetensors")
        (staging / "rng.json").write_text(json.dumps(rng_state()))
        state = {"format": FORMAT, "step": step, **loop_state}
        if NEXT_ROLLOUT in state:
            (staging / f"{NEXT_ROLLOUT}.json").write_text(json.dumps(state.pop(NEXT_ROLLOUT)))
        (staging / "loop_state.json").write_text(json.dumps(state, indent=2))
        _fsync_tree(staging)
        (staging / COMPLETE).write_text(str(step))
        _fsync_tree(staging)
    except BaseException:
        # A failed write (a full disk) leaves nothing behind; the previous checkpoints are untouched.
        shutil.rmtree(staging, ignore_errors=True)
        raise
    if target.exists():
        shutil.rmtree(target)
    staging.rename(target)
    _prune(run_dir, keep)
    return Checkpoint(target, step)


def _fsync_tree(folder: Path) -> None:
    """Flush a folder's files and the folder itself, so that a crash cannot leave the marker
    on disk before the data it vouches for."""
    for path in [*folder.rglob("*"), folder]:
        try:
            fd = os.open(path, os.O_RDONLY)
        except OSError:
            continue
        try:
            os.fsync(fd)
        except OSError:
            pass
        finally:
            os.close(fd)


def complete_checkpoints(run_dir: Path) -> list[Checkpoint]:
    """Complete checkpoints of a run, oldest first; interrupted writes are skipped."""
    root = run_dir / "checkpoints"
    found = []
    if root.is_dir():
        for path in root.iterdir():
            if path.is_dir() and path.name.startswith("step_") and (path / COMPLETE).is_file():
                suffix = path.name[len("step_") :]
                if suffix.isdigit():
                    found.append(Checkpoint(path, int(suffix)))
    return sorted(found, key=lambda c: c.step)


def latest(run_dir: Path) -> Checkpoint | None:
    """The newest complete checkpoint, or None."""
    found = complete_checkpoints(run_dir)
    return found[-1] if found else None


def load_optimizer(checkpoint: Checkpoint, optimizer: torch.optim.Optimizer) -> None:
    """Restore the optimizer state (tensors and numbers only; no arbitrary objects)."""
    state = torch.load(checkpoint.path / "optimizer.pt", map_location="cpu", weights_only=True)
    optimizer.load_state_dict(state)


def load_loop_state(checkpoint: Checkpoint) -> dict[str, Any]:
    """The loop state saved with `checkpoint`, with its next rollout (under NEXT_ROLLOUT) when it holds one."""
    state = json.loads((checkpoint.path / "loop_state.json").read_text())
    rollout = checkpoint.path / f"{NEXT_ROLLOUT}.json"
    if rollout.is_file():
        state[NEXT_ROLLOUT] = json.loads(rollout.read_text())
    return state


def check_format(checkpoint: Checkpoint) -> None:
    """Refuse, in one line, a checkpoint in a format this code cannot read (one a newer Strat wrote)."""
    try:
        found = json.loads((checkpoint.path / "loop_state.json").read_text()).get("format", 1)
    except (OSError, ValueError, AttributeError) as err:
        raise ConfigError(f"checkpoint {checkpoint.path}: loop_state.json cannot be read ({err})") from None
    if found not in READABLE_FORMATS:
        raise ConfigError(
            f"checkpoint {checkpoint.path} has format {found!r}; this Strat reads formats "
            f"{', '.join(map(str, READABLE_FORMATS))} (resume it with the Strat version that wrote it)"
        )


def load_rng(checkpoint: Checkpoint) -> None:
    set_rng_state(json.loads((checkpoint.path / "rng.json").read_text()))


def _prune(run_dir: Path, keep: int) -> None:
    for old in complete_checkpoints(run_dir)[:-keep]:
        shutil.rmtree(old.path, ignore_errors=True)
