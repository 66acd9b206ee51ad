"""The closing before/after table of a run: its first evaluation against its last, with 95% intervals."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


def held_out_keys(record: dict[str, Any]) -> list[str]:
    """`eval/return_vs_<name>` keys of the held-out opponents (all but random) in `record`."""
    return [key for key in record if key.startswith("eval/return_vs_") and not key.endswith("_ci")
            and key != "eval/return_vs_random"]


def _eval_rows(first: dict[str, Any]) -> list[tuple[str, str, str | None]]:
    """Label, metrics.jsonl key and interval key (a half-width, or [low, high]) of each evaluation row: return and
    win rate against random and each held-out opponent of the first evaluation, then exploitability."""
    opponents = ["random", *(key.removeprefix("eval/return_vs_") for key in held_out_keys(first))]
    return [
        *((f"return vs {name}", f"eval/return_vs_{name}", f"eval/return_vs_{name}_ci") for name in opponents),
        *((f"win rate vs {name}", f"eval/win_rate_vs_{name}", None) for name in opponents),
        ("exploitability", "eval/exploitability", "eval/exploitability_ci"),
    ]


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
            for label, key, ci in (_eval_rows(evals[0]) if evals else []) if key in evals[0] or key in evals[-1]]
    train_rows = [r for r in records if r.get("step", 0) > 0]
    if train_rows:
        rows.append(("format valid rate", fmt(train_rows[0].get("format/valid_rate")),
                     fmt(train_rows[-1].get("format/valid_rate"))))
    return BeforeAfter(evals[0]["step"] if evals else None, evals[-1]["step"] if evals else None, tuple(rows))
