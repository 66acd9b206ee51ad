"""The closing before/after table of a run: its first evaluation against its last, with 95% intervals."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

_EVAL_ROWS = (
    ("return vs random", "eval/return_vs_random", "eval/return_vs_random_ci"),
    ("win rate vs random", "eval/win_rate_vs_random", None),
    ("exploitability", "eval/exploitability", "eval/exploitability_ci"),
)
"""Label, metrics.jsonl key and interval key (a half-width, or [low, high]) of each evaluation row."""


@dataclass(frozen=True)
class BeforeAfter:
    """The table: the steps of the first and last evaluation, and (measure, before, after) rows as text."""

    before_step: int | None
    after_step: int | None
    rows: tuple[tuple[str, str, str], ...]


def fmt(value: Any) -> str:
    """A figure as the tables show it: floats to 3 decimals, None as `-`."""
    if value is None:
        return "-"
    if isinstance(value, list):
        return "[" + ", ".join(fmt(v) for v in value) + "]"
    return f"{value:.3f}" if isinstance(value, float) else str(value)


def _with_ci(record: dict[str, Any], key: str, ci: str | None) -> str:
    value = record.get(key)
    if ci is None or record.get(ci) is None:
        return fmt(value)
    interval = record[ci]
    if isinstance(interval, list):
        return f"{fmt(value)} [{fmt(interval[0])}, {fmt(interval[1])}]"
    return f"{fmt(value)} ± {fmt(interval)}"


def before_after(records: list[dict[str, Any]]) -> BeforeAfter:
    """The first evaluation against the last, and the format valid rate of the first training step against the
    last; `records` are metrics.jsonl's (or a run's returned records), in step order."""
    evals = [r for r in records if "eval/return_vs_random" in r]
    rows = [(label, *(_with_ci(r, key, ci) for r in (evals[0], evals[-1])))
            for label, key, ci in _EVAL_ROWS if evals and key in evals[0]]
    train_rows = [r for r in records if r.get("step", 0) > 0]
    if train_rows:
        rows.append(("format valid rate", fmt(train_rows[0].get("format/valid_rate")),
                     fmt(train_rows[-1].get("format/valid_rate"))))
    return BeforeAfter(evals[0]["step"] if evals else None, evals[-1]["step"] if evals else None, tuple(rows))
