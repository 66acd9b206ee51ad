"""The scoring ablation's report (issue 38's arms: outcome, hybrid, targets, targets-segment): the final figures
against outcome-only, paired by seed, and what the process score looked like in each run.

    python experiments/does_scoring_on_targets_help/scoring_report.py
        --runs /work/runs/abl38 --summaries /work/runs/abl38/summaries [--seeds 5,6,7,8,9]
    python experiments/does_scoring_on_targets_help/scoring_report.py --games
        --runs /work/runs/abl38-games --summaries /work/runs/abl38-games/summaries [--arm A --reference-arm B]

`--seeds` keeps the summaries and runs of those seeds only: the confirmation on fresh seeds is reported apart from
the seeds that chose the arm. `--games` reports the other games (a run folder per config stem under `--runs`): per
game, the normalised return against the held-out heuristic player of `outcome` and of the hybrid arm, and the
hybrid's minus outcome-only's, paired by seed, in two intervals: over seeds (t-based: the training runs' spread) and
over the evaluation deals (normal, each seed's deal-level standard errors combined; both arms play the same deals).

The first table is `strat results table`'s ablation table with `outcome` as the reference (each arm minus
outcome-only on the same seed, t-based 95% intervals). The second is per arm, means over seeds (each seed's mean over
its training steps) with t-based 95% intervals where there are two seeds or more:

- `var sampled` / `var target`: the per-turn variance of the process score against the sampled move and dealt card,
  and against the estimated policy and posterior, on the same turns (arms that estimate targets);
- `corr sampled` / `corr target`: the correlation of those scores with the turn's outcome;
- `belief gap`: the most likely value's posterior probability minus the belief's (0: the belief names it);
- `coverage`: the share of prediction and belief scores made on targets;
- `tokens/step`, `step s`: generated tokens and wall time per training step (timings are noisy when other work
  shares the machine).
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from pathlib import Path

from strat.eval.summaries import (
    Figure,
    Reference,
    RunSummary,
    ablation_section,
    game_label,
    load_summaries,
    normalised_return,
    scripted_reference,
    seed_interval,
)

COLUMNS = (
    ("var sampled", "cot/score_var_sampled"),
    ("var target", "cot/score_var_target"),
    ("corr sampled", "cot/outcome_corr_sampled"),
    ("corr target", "cot/outcome_corr_target"),
    ("belief gap", "cot/belief_gap"),
    ("coverage", "cot/target_coverage"),
    ("tokens/step", "tokens"),
    ("step s", "time/step_s"),
)


def run_means(run_dir: Path) -> dict[str, float]:
    """Each column's mean over the run's training steps (keys a step lacks are skipped)."""
    sums: dict[str, list[float]] = {}
    for line in (run_dir / "metrics.jsonl").read_text().splitlines():
        record = json.loads(line)
        if record.get("step", 0) <= 0:
            continue
        if "throughput/gen_tokens_per_s" in record and "time/rollout_s" in record:
            record["tokens"] = record["throughput/gen_tokens_per_s"] * record["time/rollout_s"]
        for _, key in COLUMNS:
            if record.get(key) is not None:
                sums.setdefault(key, []).append(float(record[key]))
    return {key: sum(values) / len(values) for key, values in sums.items()}


def cell(values: Sequence[float], digits: int) -> str:
    if not values:
        return "-"
    figure = seed_interval(values)
    if figure.low is None or figure.high is None:
        return f"{figure.value:.{digits}f}"
    return f"{figure.value:.{digits}f} [{figure.low:.{digits}f}, {figure.high:.{digits}f}]"


def diagnostics_table(runs: Path, arms: Sequence[str], seeds: Sequence[int] | None = None) -> str:
    lines = ["| arm | seeds | " + " | ".join(name for name, _ in COLUMNS) + " |",
             "|---|---|" + "---|" * len(COLUMNS)]
    for arm in arms:
        dirs = sorted(d for d in runs.glob(f"{arm}-seed*") if (d / "provenance.json").is_file()
                      and (seeds is None or int(d.name.rsplit("-seed", 1)[1]) in seeds))
        means = [run_means(d) for d in dirs]
        cells = [cell([m[key] for m in means if key in m], 0 if key == "tokens" else 1 if key == "time/step_s" else 3)
                 for _, key in COLUMNS]
        lines.append(f"| {arm} | {len(dirs)} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


MARGIN = -0.05
"""Issue 38's bar for the other games: the hybrid's minus outcome-only's normalised return has a lower 95% bound
at or above this."""


def _normalised(run: RunSummary, reference: Reference) -> tuple[float, float] | None:
    """The run's final normalised return against the heuristic player and its deal-level standard error."""
    figure = run.after.return_vs.get("heuristic")
    value = None if figure is None else normalised_return(figure.value, reference)
    if figure is None or value is None:
        return None
    span = abs(reference.heuristic - reference.random)
    se = 0.0 if figure.low is None or figure.high is None else (figure.high - figure.low) / (2 * 1.96) / span
    return value, se


def games_table(summaries: Sequence[RunSummary], references: dict[str, Reference], arm: str,
                reference_arm: str = "outcome") -> str:
    """Per game: each arm's final normalised return against the heuristic player (means over seeds, t-based 95%
    intervals) and the arm's minus the reference arm's, paired by seed, over seeds and over deals."""
    header = ["game", "seeds", f"{reference_arm}", f"{arm}", f"{arm} minus {reference_arm}, over seeds",
              "over deals", f"lower bound >= {MARGIN}"]
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    by_game: dict[str, dict[str, dict[int, RunSummary]]] = {}
    for summary in summaries:
        by_game.setdefault(game_label(summary), {}).setdefault(str(summary.arm), {})[summary.seed] = summary
    for label, arms in by_game.items():
        reference = references[label]
        base, other = arms.get(reference_arm, {}), arms.get(arm, {})
        pairs = [(base[s], other[s]) for s in sorted(set(base) & set(other))]
        figures = [(_normalised(b, reference), _normalised(o, reference)) for b, o in pairs]
        figures = [(b, o) for b, o in figures if b is not None and o is not None]
        if not figures:
            lines.append(f"| {label} | 0 | " + " | ".join(["-"] * (len(header) - 2)) + " |")
            continue
        differences = [o[0] - b[0] for b, o in figures]
        mean = sum(differences) / len(differences)
        half = 1.96 * sum(b[1] ** 2 + o[1] ** 2 for b, o in figures) ** 0.5 / len(figures)
        over_seeds, over_deals = seed_interval(differences), Figure(mean, mean - half, mean + half)
        low = over_seeds.low if over_seeds.low is not None else over_deals.low
        verdict = "n/a" if low is None else ("yes" if low >= MARGIN else "no")
        lines.append(f"| {label} | {len(figures)} | " + " | ".join([
            seed_interval([b[0] for b, _ in figures]).text(signed=True),
            seed_interval([o[0] for _, o in figures]).text(signed=True),
            over_seeds.text(signed=True), over_deals.text(signed=True), verdict]) + " |")
    lines += ["", "Normalised return against the heuristic player: (R - R_random) / (R_heuristic - R_random), 0 plays"
              " like random and 1 like the heuristic player (scripted references: "
              + "; ".join(f"{label} R_random {r.random:+.3f}, R_heuristic {r.heuristic:+.3f}"
                          for label, r in references.items()) + "). The bar is judged on the interval over seeds"
              " (the deals' interval where one seed ran)."]
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", type=Path, required=True, help="the ablation's --out folder")
    parser.add_argument("--summaries", type=Path, required=True, help="the ablation's --results folder")
    parser.add_argument("--arms", default="outcome,hybrid,targets,targets-segment,targets-state,targets-segment-state")
    parser.add_argument("--seeds", type=lambda text: [int(s) for s in text.split(",")], default=None,
                        help="only these seeds, e.g. 5,6,7,8,9")
    parser.add_argument("--games", action="store_true", help="the other games' table (a run folder per config)")
    parser.add_argument("--arm", default="targets-segment-state", help="with --games: the hybrid arm compared")
    parser.add_argument("--reference-arm", default="outcome",
                        help="with --games: the arm it is compared with (paired by seed), e.g. hybrid for a control")
    args = parser.parse_args(argv)
    summaries = [s for s in load_summaries(args.summaries) if args.seeds is None or s.seed in args.seeds]
    if not summaries:
        print(f"no summaries in {args.summaries}" + (f" for seeds {args.seeds}" if args.seeds else ""),
              file=sys.stderr)
        return 1
    if args.games:
        references = {game_label(s): scripted_reference(s.game, s.game_options) for s in summaries}
        print(games_table(summaries, references, args.arm, args.reference_arm))
        for config in sorted({Path(s.config).stem for s in summaries}):
            print(f"\n{config}:\n")
            print(diagnostics_table(args.runs / config, [args.reference_arm, args.arm], args.seeds))
        print()
        print(ablation_section(summaries, reference=args.reference_arm, where=f"{args.summaries}/"))
        return 0
    print(ablation_section(summaries, reference="outcome", where=f"{args.summaries}/"))
    print()
    print(diagnostics_table(args.runs, args.arms.split(","), args.seeds))
    return 0


if __name__ == "__main__":
    sys.exit(main())
