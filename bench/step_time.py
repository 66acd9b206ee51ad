"""The training step's time at fixed work, this checkout against another: the same config, eval and checkpoints off,
`--rounds` runs of each code in turns, and where each step's time went.

    git worktree add --detach /tmp/base 9439390          # the code to compare against
    python bench/step_time.py --baseline /tmp/base [--config configs/kuhn_poker_tiny.yaml] [--steps 12] [--skip 2]
                              [--rounds 3] [--out runs/step_time] [--json FILE] [key=value ...]

Each run is `strat train CONFIG schedule.steps=N schedule.eval_every=0 schedule.checkpoint_every=0 ...` in a fresh
process importing that checkout's code (its own cached warm start: the run's first minutes, outside every step), in
the order baseline, this, baseline, this, ...: on a shared machine the interleaving spreads the noise over both.
The work is fixed by the config (groups per step, group size, token limits), not by the samples: each code draws its
own, so the samples and tokens per step are printed beside the times to show that the work was the same.

Per run, from the steps after the first `--skip` (start-up: the first rollout runs alone, caches fill): the median
step time; generated tokens per second of step time (their sums' ratio); and the median of each timed phase
(`time/<phase>_s`: rollout, the wait for it, compare, advantage, learn, sync...), the profile of where the step went.
With overlap (`schedule.max_staleness: 1`) the rollout runs beside the update, so the step is about the longer of the
two, not their sum. Per code, the median over its runs; then the change in step time (the target of the step's speed
work: at least 30% lower) and the ratio of generated tokens per step-second.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass, replace
from pathlib import Path

HERE = Path(__file__).resolve().parent.parent
FIXED = ("schedule.eval_every=0", "schedule.checkpoint_every=0")
"""Overrides of every run: no evaluation and no checkpoints inside the timed steps."""
PHASES = ("rollout", "rollout_wait", "compare", "advantage", "learn", "sync", "snapshot", "checkpoint")
"""The phases reported (those a checkout logs; older ones log fewer)."""


@dataclass(frozen=True)
class RunFigures:
    """One training run's steady steps."""

    steps: int
    """Steps measured (after the skipped ones)."""
    step_s: float
    """Median step time."""
    gen_tok_per_step_s: float
    """Generated tokens over the steps' summed time."""
    samples: float
    """Mean training samples per step (the work: the same config gives about the same on both sides)."""
    gen_tokens: float
    """Mean generated tokens per step."""
    phases: dict[str, float]
    """Median of `time/<phase>_s` per phase logged."""
    wall_s: float = 0.0
    """The whole process's wall time (model loading and warm start included)."""


def run_figures(records: Sequence[dict[str, float]], skip: int) -> RunFigures:
    """The figures of one run's metrics.jsonl records (training steps only), leaving out steps 1..`skip`."""
    steps = [r for r in records if "time/step_s" in r and r.get("step", 0) > skip]
    if not steps:
        raise ValueError(f"no training step after step {skip} in the metrics")
    step_s = [float(r["time/step_s"]) for r in steps]
    gen = [float(r.get("throughput/gen_tokens_per_s", 0.0)) * float(r.get("time/rollout_s", 0.0)) for r in steps]
    phases = {p: statistics.median(float(r[f"time/{p}_s"]) for r in steps)
              for p in PHASES if all(f"time/{p}_s" in r for r in steps)}
    return RunFigures(steps=len(steps), step_s=statistics.median(step_s), gen_tok_per_step_s=sum(gen) / sum(step_s),
                      samples=statistics.mean(float(r.get("learn/samples", 0.0)) for r in steps),
                      gen_tokens=statistics.mean(gen), phases=phases)


@dataclass(frozen=True)
class SideFigures:
    """One code's figures: the medians over its runs."""

    runs: int
    step_s: float
    gen_tok_per_step_s: float
    samples: float
    gen_tokens: float
    phases: dict[str, float]


def side_figures(runs: Sequence[RunFigures]) -> SideFigures:
    """The median of each figure over one code's runs (a phase only where every run logged it)."""
    names = [p for p in PHASES if all(p in r.phases for r in runs)]
    return SideFigures(runs=len(runs), step_s=statistics.median(r.step_s for r in runs),
                       gen_tok_per_step_s=statistics.median(r.gen_tok_per_step_s for r in runs),
                       samples=statistics.median(r.samples for r in runs),
                       gen_tokens=statistics.median(r.gen_tokens for r in runs),
                       phases={p: statistics.median(r.phases[p] for r in runs) for p in names})


@dataclass(frozen=True)
class Comparison:
    baseline: SideFigures
    this: SideFigures
    step_time_change: float
    """this / baseline - 1: -0.30 is a step 30% shorter."""
    throughput_ratio: float
    """this / baseline generated tokens per step-second."""


def compare(baseline: Sequence[RunFigures], this: Sequence[RunFigures]) -> Comparison:
    old, new = side_figures(baseline), side_figures(this)
    return Comparison(old, new, new.step_s / old.step_s - 1.0, new.gen_tok_per_step_s / old.gen_tok_per_step_s)


def train_command(config: Path, steps: int, out: Path, name: str, overrides: Sequence[str]) -> list[str]:
    """The `strat train` command line of one timed run (`python -m strat.cli`, so that PYTHONPATH picks the code)."""
    return [sys.executable, "-m", "strat.cli", "train", str(config), f"schedule.steps={steps}", *FIXED,
            f"run.output_dir={out}", f"run.name={name}", *overrides]


def read_metrics(path: Path) -> list[dict[str, float]]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def timed_run(checkout: Path, config: Path, steps: int, skip: int, out: Path, name: str,
              overrides: Sequence[str]) -> RunFigures:
    """Trains in a fresh process on `checkout`'s code and reads its metrics; the log goes beside the run."""
    out.mkdir(parents=True, exist_ok=True)
    log = out / f"{name}.log"
    started = time.perf_counter()
    with log.open("w") as stream:
        done = subprocess.run(train_command(config, steps, out, name, overrides), check=False, cwd=checkout,
                              stdout=stream, stderr=subprocess.STDOUT, env={**os.environ, "PYTHONPATH": str(checkout)})
    wall = time.perf_counter() - started
    if done.returncode != 0:
        raise SystemExit(f"{name}: strat train exited {done.returncode}; its output is in {log}")
    return replace(run_figures(read_metrics(out / name / "metrics.jsonl"), skip), wall_s=wall)


def report(result: Comparison) -> str:
    """The comparison as a small table: one row per figure, baseline and this side by side."""
    old, new = result.baseline, result.this
    rows = [("step time (median, s)", old.step_s, new.step_s),
            ("generated tok / step-s", old.gen_tok_per_step_s, new.gen_tok_per_step_s),
            ("samples / step", old.samples, new.samples),
            ("generated tokens / step", old.gen_tokens, new.gen_tokens)]
    rows += [(f"  time/{p}_s (median)", old.phases[p], new.phases[p]) for p in PHASES
             if p in old.phases and p in new.phases]
    width = max(len(r[0]) for r in rows)
    lines = [f"{'':{width}}  {'baseline':>10}  {'this':>10}"]
    lines += [f"{label:{width}}  {a:10.2f}  {b:10.2f}" for label, a, b in rows]
    lines.append(f"step time {result.step_time_change:+.1%} (target: -30% or lower); "
                 f"generated tokens per step-second x{result.throughput_ratio:.2f}")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--baseline", type=Path, required=True, help="another checkout of this repository")
    parser.add_argument("--config", type=Path, default=HERE / "configs" / "kuhn_poker_tiny.yaml")
    parser.add_argument("--steps", type=int, default=12, help="steps per run")
    parser.add_argument("--skip", type=int, default=2, help="first steps left out of the figures")
    parser.add_argument("--rounds", type=int, default=3, help="runs per code, in turns")
    parser.add_argument("--out", type=Path, default=HERE / "runs" / "step_time", help="parent folder of the runs")
    parser.add_argument("--json", type=Path, help="also write every run's figures and the comparison here")
    parser.add_argument("overrides", nargs="*", help="key=value overrides of every run")
    args = parser.parse_args()
    if args.skip >= args.steps:
        parser.error(f"--skip {args.skip} leaves no step of --steps {args.steps}")
    if not (args.baseline / "strat" / "cli").is_dir():
        parser.error(f"--baseline {args.baseline}: not a checkout of this repository (no strat/cli)")
    config, out = args.config.resolve(), args.out.resolve() / time.strftime("%Y%m%d-%H%M%S")
    runs: dict[str, list[RunFigures]] = {"baseline": [], "this": []}
    for round_ in range(args.rounds):
        for side, checkout in (("baseline", args.baseline.resolve()), ("this", HERE)):
            figures = timed_run(checkout, config, args.steps, args.skip, out, f"{side}-r{round_}", args.overrides)
            runs[side].append(figures)
            print(f"round {round_ + 1}/{args.rounds} {side}: step {figures.step_s:.2f} s, "
                  f"{figures.gen_tok_per_step_s:.0f} gen tok/step-s, {figures.samples:.0f} samples/step "
                  f"({figures.wall_s:.0f} s in all)", flush=True)
    result = compare(runs["baseline"], runs["this"])
    print(report(result))
    if args.json is not None:
        args.json.write_text(json.dumps({"config": str(args.config), "steps": args.steps, "skip": args.skip,
                                         "overrides": args.overrides, "baseline": str(args.baseline),
                                         "runs": {k: [asdict(r) for r in v] for k, v in runs.items()},
                                         "comparison": asdict(result)}, indent=1))


if __name__ == "__main__":
    main()
