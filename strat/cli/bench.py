"""`strat bench`: efficiency figures against plain baselines measured in the same run (`strat.benchmarks`).

The benchmarks are imported inside the verb: they import torch and Ray, and `strat --help` registers every verb."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from strat.errors import UserError


def bench(
    config: Annotated[Path, typer.Option(help="Experiment YAML the figures are measured on.")] = Path(
        "configs/kuhn_poker_tiny.yaml"
    ),
    json_output: Annotated[bool, typer.Option("--json", help="Print every figure as JSON (the table goes to stderr).")] = False,
    quick: Annotated[bool, typer.Option(help="Shrink every measurement (a few minutes; indicative figures).")] = False,
    only: Annotated[
        list[str] | None,
        typer.Option(help="Measure only these figures: rollout, learner, sync, overlap, scaling, memory, e2e."),
    ] = None,
    out: Annotated[Path | None, typer.Option(help="Also write the JSON report to this file.")] = None,
) -> None:
    """Measure rollout and learner efficiency, weight sync, overlap, scaling, memory and end-to-end speed
    against plain baselines, on the same prompts and token counts."""
    from strat.benchmarks import FIGURES, run_bench  # deferred for start-up cost (torch, Ray)

    if not config.is_file():
        raise UserError(f"--config {config}: no such file")
    figures = [name.strip() for item in (only or []) for name in item.split(",") if name.strip()]
    unknown = sorted(set(figures) - set(FIGURES))
    if unknown:
        raise UserError(f"--only {','.join(unknown)}: unknown figure (allowed: {', '.join(FIGURES)})")
    report = run_bench(str(config), quick=quick, only=figures or None)
    text = report.dumps()
    if out is not None:
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(text + "\n")
    if json_output:
        typer.echo(report.table(), err=True)
        typer.echo(text)
    else:
        typer.echo(report.table())
        for name, error in report.errors.items():
            typer.echo(f"{name}: not measured ({error})", err=True)
