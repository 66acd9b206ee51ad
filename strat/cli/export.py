"""`strat export`: a run's checkpoint as a Hugging Face model directory with a model card."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer


def export_command(
    run_dir: Annotated[Path, typer.Argument(help="Run directory (config.yaml, checkpoints/, metrics.jsonl).")],
    out: Annotated[Path, typer.Option(help="New (or empty) directory for the exported model.")],
    step: Annotated[int | None, typer.Option(help="Checkpoint step to export (default: the latest complete one).")] = None,
) -> None:
    """Export a run's checkpoint: safetensors (LoRA merged), tokenizer, chat template, generation config, model card."""
    # Deferred for start-up cost (torch, transformers).
    from strat.export.export import export_run

    exported = export_run(run_dir, out, step)
    merged = " (LoRA merged)" if exported.lora_merged else ""
    typer.echo(f"step {exported.checkpoint.step} of {run_dir} exported to {exported.out}{merged}; model card: "
               f"{exported.out / 'README.md'}")
    if exported.skipped_note:
        typer.echo(f"model card: {exported.skipped_note}", err=True)
