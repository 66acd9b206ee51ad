"""Checkpoints written atomically: safetensors weights, tokenizer, optimizer, RNG and loop state.

Nothing is loaded through unrestricted pickle: weights are safetensors, the optimizer goes
through `torch.load(weights_only=True)`, loop and RNG state are JSON.
"""

from __future__ import annotations

import errno
import json
import logging
import os
import random
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch
from safetensors.torch import save_file

from strat.errors import ConfigError, UserError
from strat.faults import injected_steps
from strat.model import manifest

log = logging.getLogger("strat.checkpoint")

COMPLETE = manifest.MARKER
"""Marker written last, holding the manifest (`strat.model.manifest`); a directory without it is an interrupted
write and is ignored."""

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
        if step in injected_steps("enospc"):
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), str(staging / "optimizer.pt"))
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
        manifest.write(staging, step)
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


def verify(checkpoint: Checkpoint) -> manifest.Verdict:
    """`checkpoint`'s files against its manifest (`strat.model.manifest.verify`)."""
    return manifest.verify(checkpoint.path, checkpoint.step)


def unverifiable_note(checkpoint: Checkpoint) -> str:
    return (f"checkpoint step_{checkpoint.step} ({checkpoint.path}) was written before checkpoints carried a manifest:"
            " it cannot be verified, and is loaded as it is")


def require_verified(checkpoint: Checkpoint) -> None:
    """Refuse a damaged checkpoint in one line (step, file, what was wrong); note one that cannot be verified."""
    verdict = verify(checkpoint)
    if verdict.damage is not None:
        raise UserError(verdict.damage.line())
    if verdict.status == "unverifiable":
        log.warning(unverifiable_note(checkpoint))


@dataclass(frozen=True)
class ResumePoint:
    """The checkpoint a resumed run starts from: the newest that verifies (or cannot be verified, being older than
    manifests), and the newer ones that failed verification."""

    checkpoint: Checkpoint
    verified: bool
    damaged: tuple[manifest.Damage, ...] = ()

    def fallback_line(self, moved: list[Path]) -> str:
        """The one line a resume that fell back logs, with where the damaged checkpoints were `moved` (`set_aside`)."""
        newest = max(d.step for d in self.damaged)
        replayed = (f"step {newest}" if newest == self.checkpoint.step + 1
                    else f"steps {self.checkpoint.step + 1}-{newest}")
        why = "; ".join(d.line() for d in sorted(self.damaged, key=lambda d: -d.step))
        return (f"resuming from step_{self.checkpoint.step}, the newest checkpoint that verifies: {why}; {replayed}"
                f" will be trained again (moved aside: {', '.join(path.name for path in moved)})")


DAMAGED_SUFFIX = ".damaged"
"""What a checkpoint folder that failed verification is renamed with when a resume falls back past it."""


def resume_point(run_dir: Path, strict: bool = False) -> ResumePoint:
    """The newest complete checkpoint of `run_dir` that verifies, newest first; one written before manifests is
    taken as it is. `strict` refuses the first damaged one instead of falling back past it. Refused in one line: no
    complete checkpoint, or none that verifies."""
    found = complete_checkpoints(run_dir)
    if not found:
        raise ConfigError(f"no complete checkpoint in {run_dir} to resume from")
    damaged: list[manifest.Damage] = []
    for candidate in reversed(found):
        verdict = verify(candidate)
        if verdict.damage is None:
            return ResumePoint(candidate, verdict.status == "verified", tuple(damaged))
        if strict:
            raise UserError(f"{verdict.damage.line()}; --strict refuses to fall back to an older checkpoint (without"
                            " it the run resumes from the newest one that verifies)")
        damaged.append(verdict.damage)
    raise UserError(f"no checkpoint of {run_dir} verifies: " + "; ".join(d.line() for d in damaged))


def set_aside(damaged: tuple[manifest.Damage, ...]) -> list[Path]:
    """Rename damaged checkpoint folders to `step_N.damaged` (`step_N.damaged-2`, ... when taken), out of the
    complete checkpoints' way; returns the new paths."""
    moved = []
    for damage in damaged:
        target = damage.folder.with_name(damage.folder.name + DAMAGED_SUFFIX)
        count = 1
        while target.exists():
            count += 1
            target = damage.folder.with_name(f"{damage.folder.name}{DAMAGED_SUFFIX}-{count}")
        damage.folder.rename(target)
        moved.append(target)
    return moved


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
