"""The live progress bar of `strat train` and its closing summary table."""

from __future__ import annotations

import logging
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.logging import RichHandler
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from strat.train.summary import before_after, fmt, held_out_keys

_SHOWN = (
    ("reward/mean", "reward"),
    ("format/valid_rate", "valid"),
    ("cot/score_mean", "cot"),
    ("eval/exploitability", "expl"),
    ("time/step_s", "s/step"),
)


def cotrained_rewards(record: dict[str, Any]) -> list[str]:
    """Each co-trained policy's reward key (`<name>/reward/mean`) in `record`, sorted: shown beside the first
    policy's."""
    return sorted(key for key in record if key.endswith("/reward/mean") and key.count("/") == 2)


@contextmanager
def stage_logs() -> Iterator[None]:
    """Strat's own log lines (INFO and up) on stderr while a supervised stage runs (`strat sft`, `strat pretrain`):
    its size, then a line a minute with the step, the loss and the time left. The handler is removed afterwards and
    nothing else about logging changes."""
    logger = logging.getLogger("strat")
    handler = RichHandler(console=Console(stderr=True), show_path=False, show_level=False)
    level = logger.level
    logger.addHandler(handler)
    if logger.getEffectiveLevel() > logging.INFO:
        logger.setLevel(logging.INFO)
    try:
        yield
    finally:
        logger.removeHandler(handler)
        logger.setLevel(level)


class TrainProgress:
    """A rich progress bar updated once per step with the key figures."""

    def __init__(self) -> None:
        self.console = Console(stderr=True)
        self._progress = Progress(
            TextColumn("[bold]train"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
            TextColumn("{task.fields[figures]}"), console=self.console, transient=False,
        )
        self._task = None
        self._last: dict[str, Any] = {}

    def __enter__(self) -> TrainProgress:
        self._progress.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._progress.stop()

    def update(self, record: dict[str, Any]) -> None:
        self._last.update({k: v for k, v in record.items() if v is not None})
        shown = [*_SHOWN, *((key, "vs " + key.removeprefix("eval/return_vs_")) for key in held_out_keys(self._last)),
                 *((key, key.removesuffix("/mean")) for key in cotrained_rewards(self._last))]
        figures = "  ".join(f"{label} {fmt(self._last.get(key))}" for key, label in shown)
        if self._task is None:
            self._task = self._progress.add_task("train", total=None, figures=figures)
        self._progress.update(self._task, completed=record["step"], figures=figures)

    def show_logs(self) -> None:
        """Route Strat's own log lines above the progress bar."""
        handler = RichHandler(console=self.console, show_path=False, show_level=False)
        logger = logging.getLogger("strat")
        logger.handlers = [handler]
        logger.setLevel(logging.INFO)
        logger.propagate = False

    def start(self, total_steps: int) -> None:
        self._task = self._progress.add_task("train", total=total_steps, figures="starting actors")

    def summary(self, run_dir: Path, records: list[dict[str, Any]]) -> None:
        """Before (first evaluation) against after (last evaluation), with 95% intervals."""
        summary = before_after(records)
        table = Table(title=f"Strat-Reasoner run {run_dir}")
        table.add_column("measure")
        table.add_column(f"before (step {fmt(summary.before_step)})")
        table.add_column(f"after (step {fmt(summary.after_step)})")
        for row in summary.rows:
            table.add_row(*row)
        self.console.print(table)
        self.console.print(f"metrics: {run_dir / 'metrics.jsonl'}  checkpoints: {run_dir / 'checkpoints'}")
