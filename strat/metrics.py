"""Per-step metrics: one JSON line per step in `metrics.jsonl`, and TensorBoard events with the same names."""

from __future__ import annotations

import contextlib
import json
import math
import time
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from torch.utils.tensorboard import SummaryWriter

from strat.jsonl import JsonLines, read_lines
from strat.sync.fingerprint import WeightsTag

if TYPE_CHECKING:
    from strat.train.tracking import WandbTracker


class MetricsLog:
    """Appends step records; on resume, lines after the resumed step are dropped so none repeats. Each record also
    goes to TensorBoard and, when there is one, to the run's W&B tracker (`strat.train.tracking`)."""

    def __init__(self, run_dir: Path, tensorboard: bool = True, resume_step: int | None = None,
                 tracker: WandbTracker | None = None) -> None:
        self.path = run_dir / "metrics.jsonl"
        if resume_step is not None and self.path.exists():
            truncate_after(self.path, resume_step)
        self._writer = None
        if tensorboard:
            self._writer = SummaryWriter(log_dir=str(run_dir / "tensorboard"))
        self.tracker = tracker

    def write(self, record: dict[str, Any]) -> None:
        step = int(record["step"])
        clean = {key: jsonable(value) for key, value in record.items()}
        with self.path.open("a") as handle:
            handle.write(json.dumps(clean, sort_keys=True) + "\n")
        if self._writer is not None:
            for key, value in clean.items():
                if key != "step" and isinstance(value, (int, float)) and value is not None:
                    self._writer.add_scalar(key, value, step)
            self._writer.flush()
        if self.tracker is not None:
            self.tracker.log(clean)

    def close(self, complete: bool = True) -> None:
        """Flush and close the outputs; `complete` is False when the run failed. A second call does nothing."""
        if self._writer is not None:
            self._writer.close()
            self._writer = None
        if self.tracker is not None:
            self.tracker.close(complete)
            self.tracker = None


class PhaseTimer:
    """Wall time per named phase of a training step; a phase entered twice adds up."""

    def __init__(self, phases: tuple[str, ...]) -> None:
        self.seconds = dict.fromkeys(phases, 0.0)
        self.started = time.perf_counter()

    @contextlib.contextmanager
    def phase(self, name: str) -> Iterator[None]:
        if name not in self.seconds:
            raise KeyError(f"unknown phase {name!r} (phases: {', '.join(self.seconds)})")
        started = time.perf_counter()
        try:
            yield
        finally:
            self.seconds[name] += time.perf_counter() - started

    def record(self) -> dict[str, float]:
        """`time/<phase>_s` of every phase (0 for one that did not run), and `time/step_s` since the timer began."""
        return {**{f"time/{name}_s": value for name, value in self.seconds.items()},
                "time/step_s": time.perf_counter() - self.started}


def read(run_dir: Path) -> list[dict[str, Any]]:
    """Every record of a run's metrics.jsonl (none when it has none), read strictly (`strat.jsonl`): a torn last line
    (a run still writing, or killed mid-write) is skipped with a warning, any other unreadable line is an error."""
    return read_lines(run_dir / "metrics.jsonl").records


def read_for_report(run_dir: Path) -> JsonLines:
    """metrics.jsonl for a report that must go on: unreadable lines skipped and counted (`JsonLines.skipped_note`)."""
    return read_lines(run_dir / "metrics.jsonl", lenient=True)


def _step_of(record: dict[str, Any]) -> int:
    try:
        return int(record["step"])
    except (ValueError, KeyError, TypeError):
        return 1 << 62


def jsonable(value: Any) -> Any:
    """`value` as strict JSON takes it: non-finite floats as null, numpy and torch scalars as Python numbers, dict
    keys as strings, tuples as lists."""
    if isinstance(value, dict):
        return {str(key): jsonable(item) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return [jsonable(item) for item in value]
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if hasattr(value, "item"):
        return jsonable(value.item())
    return value


class EpisodeLedger:
    """`episodes.jsonl`: per step, the (group id, seed, episode id) of every episode it trained on, and the
    (version, fingerprint) of the weights its rollouts ran on (one pair unless resampling or a disagreement among
    agents added another).

    An audit trail independent of the step's counters: restarts and resumes can be checked
    against it (no episode lost, none counted twice, none played on other weights). Truncated on resume like the
    metrics."""

    def __init__(self, run_dir: Path, resume_step: int | None = None) -> None:
        self.path = run_dir / "episodes.jsonl"
        if resume_step is not None and self.path.exists():
            truncate_after(self.path, resume_step)

    def write(self, step: int, episodes: list[Any], weights: Sequence[WeightsTag]) -> None:
        line = {"step": step, "weights": [[tag.version, tag.fingerprint] for tag in weights],
                "episodes": [[e.group_id, e.seed, e.episode_id] for e in episodes]}
        with self.path.open("a") as handle:
            handle.write(json.dumps(line) + "\n")


def read_ledger(run_dir: Path) -> list[dict[str, Any]]:
    """Every line of a run's episodes.jsonl, read strictly as `read` reads the metrics."""
    return read_lines(run_dir / "episodes.jsonl").records


def truncate_after(path: Path, step: int) -> None:
    """Drop the records of `path` after `step` (a resume replays them), and a torn last line; an unreadable line
    before it is an error (`strat.jsonl`). Nothing to do when there is no such file."""
    if not path.exists():
        return
    kept = [line.text for line in read_lines(path).lines if _step_of(line.record) <= step]
    tmp = path.with_suffix(path.suffix + ".tmp")
    tmp.write_text("".join(line + "\n" for line in kept))
    tmp.replace(path)
