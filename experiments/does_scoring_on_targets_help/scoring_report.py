"""The scoring ablation's report (issue 38's arms: outcome, hybrid, targets, targets-segment): the final figures
against outcome-only, paired by seed, and what the process score looked like in each run.

    python experiments/does_scoring_on_targets_help/scoring_report.py
        --runs /work/runs/abl38 --summaries /work/runs/abl38/summaries

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

from strat.eval.summaries import ablation_section, load_summaries, seed_interval

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


def diagnostics_table(runs: Path, arms: Sequence[str]) -> str:
    lines = ["| arm | seeds | " + " | ".join(name for name, _ in COLUMNS) + " |",
             "|---|---|" + "---|" * len(COLUMNS)]
    for arm in arms:
        dirs = sorted(d for d in runs.glob(f"{arm}-seed*") if (d / "provenance.json").is_file())
        means = [run_means(d) for d in dirs]
        cells = [cell([m[key] for m in means if key in m], 0 if key == "tokens" else 1 if key == "time/step_s" else 3)
                 for _, key in COLUMNS]
        lines.append(f"| {arm} | {len(dirs)} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", type=Path, required=True, help="the ablation's --out folder")
    parser.add_argument("--summaries", type=Path, required=True, help="the ablation's --results folder")
    parser.add_argument("--arms", default="outcome,hybrid,targets,targets-segment,targets-state,targets-segment-state")
    args = parser.parse_args(argv)
    summaries = load_summaries(args.summaries)
    if not summaries:
        print(f"no summaries in {args.summaries}", file=sys.stderr)
        return 1
    print(ablation_section(summaries, reference="outcome", where=f"{args.summaries}/"))
    print()
    print(diagnostics_table(args.runs, args.arms.split(",")))
    return 0


if __name__ == "__main__":
    sys.exit(main())
