"""The live progress bar of `strat train` and its closing summary table."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.logging import RichHandler
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

_SHOWN = (
    ("reward/mean", "reward"),
    ("format/valid_rate", "valid"),
    ("cot/score_mean", "cot"),
    ("eval/exploitability", "expl"),
    ("time/step_s", "s/step"),
)


def _fmt(value: Any) -> str:
    if value is None:
        return "-"
    if isinstance(value, list):
        return "[" + ", ".join(_fmt(v) for v in value) + "]"
    return f"{value:.3f}" if isinstance(value, float) else str(value)


def _held_out_keys(record: dict[str, Any]) -> list[str]:
    """`eval/return_vs_<name>` keys of the held-out opponents (all but random) in `record`."""
    return [key for key in record if key.startswith("eval/return_vs_") and not key.endswith("_ci")
            and key != "eval/return_vs_random"]


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
        shown = [*_SHOWN, *((key, "vs " + key.removeprefix("eval/return_vs_")) for key in _held_out_keys(self._last))]
        figures = "  ".join(f"{label} {_fmt(self._last.get(key))}" for key, label in shown)
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
        evals = [r for r in records if "eval/return_vs_random" in r]
        table = Table(title=f"Strat-Reasoner run {run_dir}")
        table.add_column("measure")
        table.add_column("before (step %s)" % (evals[0]["step"] if evals else "-"))
        table.add_column("after (step %s)" % (evals[-1]["step"] if evals else "-"))
        opponents = ["random", *(k.removeprefix("eval/return_vs_") for k in _held_out_keys(evals[0] if evals else {}))]
        rows = [
            *((f"return vs {name}", f"eval/return_vs_{name}", f"eval/return_vs_{name}_ci") for name in opponents),
            *((f"win rate vs {name}", f"eval/win_rate_vs_{name}", None) for name in opponents),
            ("exploitability", "eval/exploitability", "eval/exploitability_ci"),
        ]
        for label, key, ci in rows:
            if evals and (key in evals[0] or key in evals[-1]):
                table.add_row(label, *(self._with_ci(r, key, ci) for r in (evals[0], evals[-1])))
        train_rows = [r for r in records if r.get("step", 0) > 0]
        if train_rows:
            table.add_row("format valid rate", _fmt(train_rows[0].get("format/valid_rate")),
                          _fmt(train_rows[-1].get("format/valid_rate")))
        self.console.print(table)
        self.console.print(f"metrics: {run_dir / 'metrics.jsonl'}  checkpoints: {run_dir / 'checkpoints'}")

    @staticmethod
    def _with_ci(record: dict[str, Any], key: str, ci: str | None) -> str:
        value = record.get(key)
        if ci is None or record.get(ci) is None:
            return _fmt(value)
        interval = record[ci]
        if isinstance(interval, list):
            return f"{_fmt(value)} [{_fmt(interval[0])}, {_fmt(interval[1])}]"
        return f"{_fmt(value)} ± {_fmt(interval)}"
