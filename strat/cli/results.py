"""`strat results`: a finished run's summary for docs/results/, and docs/results.md's tables made from them."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from strat.eval.summaries import (
    ABLATION,
    NO_RUNS,
    RunSummary,
    ablation_section,
    game_label,
    games_section,
    load_summaries,
    replace_section,
    scripted_reference,
    summarize_run,
    write_summary,
)

results_app = typer.Typer(help="Run summaries (docs/results/) and the results tables made from them.",
                          no_args_is_help=True)


@results_app.command("summarize")
def summarize(
    run_dir: Annotated[Path, typer.Argument(help="A finished run directory (with provenance.json).")],
    out: Annotated[Path, typer.Option(help="The summary file to write, e.g. docs/results/games/NAME-seed0.json.")],
    section: Annotated[str, typer.Option(help="The results section it belongs to.")] = "games",
    arm: Annotated[
        str | None, typer.Option(help="The ablation arm the run trained (needed for --section ablation).")
    ] = None,
    exploitability_before: Annotated[
        Path | None, typer.Option(help="eval.json of `strat eval` on the warm-started policy (its exploitability).")
    ] = None,
    exploitability_after: Annotated[
        Path | None, typer.Option(help="eval.json of `strat eval` on the final checkpoint (its exploitability).")
    ] = None,
    matches_before: Annotated[
        Path | None, typer.Option(help="eval.json of `strat eval` on the warm-started policy: its return, win and "
                                       "draw rates against each opponent in it replace the run's own (more games).")
    ] = None,
    matches_after: Annotated[
        Path | None, typer.Option(help="eval.json of `strat eval` on the final checkpoint: as --matches-before. Give "
                                       "both the same --games and --seed, so that both play the same deals.")
    ] = None,
) -> None:
    """Summarise a finished run: its command, commit, seed, first and last evaluation with 95% intervals."""
    summary = summarize_run(run_dir, section, exploitability_before, exploitability_after, arm, matches_before,
                            matches_after)
    typer.echo(f"summary written to {write_summary(summary, out)}")


@results_app.command("table")
def table(
    results: Annotated[Path, typer.Option(help="Folder of committed run summaries.")] = Path("docs/results"),
    doc: Annotated[Path, typer.Option(help="The results document whose generated sections are rewritten.")] = Path(
        "docs/results.md"),
    reference_games: Annotated[int, typer.Option(help="Games per scripted reference return.")] = 20_000,
) -> None:
    """Rewrite docs/results.md's generated sections (games, ablation) from the summaries, each between its own
    markers (hand-written text is kept). Each section reads its own folder, `<results>/games/` and
    `<results>/ablation/`: other folders hold the summaries of separate reports (issue 38's scoring arms, the league,
    the constrained move, Leduc's arms), whose runs on other settings must not pool into these tables."""
    games = [s for s in _summaries_in(results / "games") if s.section == "games"]
    ablation = [s for s in _summaries_in(results / ABLATION) if s.section == ABLATION]
    references = {}
    for summary in games:
        label = game_label(summary)
        if label not in references:
            references[label] = scripted_reference(summary.game, summary.game_options, num_games=reference_games)
    text = doc.read_text() if doc.is_file() else ""
    text = replace_section(text, "games", games_section(games, references) if games else NO_RUNS)
    text = replace_section(text, ABLATION, ablation_section(ablation) if ablation else NO_RUNS)
    doc.write_text(text)
    typer.echo(f"{doc}: games section from {len(games)} summaries, ablation section from {len(ablation)}")


def _summaries_in(folder: Path) -> list[RunSummary]:
    """The summaries under `folder`, none where it does not exist."""
    return load_summaries(folder) if folder.is_dir() else []
