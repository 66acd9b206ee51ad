"""Ablation of the advantage: outcome-only, process-only and hybrid on the same budget, several seeds.

    python bench/ablation.py [--config configs/kuhn_poker_tiny.yaml] [--seeds 0 1 2] [--steps 30] [key=value ...]

Prints, per mode, the final exploitability and return against random (mean over seeds with a 95%
interval), next to the warm-started policy's figures from the same runs (step 0).
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import strat  # noqa: F401  (thread and offline defaults first)
from strat.config import load_config
from strat.eval.stats import mean_interval
from strat.train.trainer import Trainer

MODES = ("outcome", "process", "hybrid")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--config", default="configs/kuhn_poker_tiny.yaml")
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--steps", type=int, default=None, help="override schedule.steps for every run")
    parser.add_argument("--out", default="runs/ablation")
    parser.add_argument("--modes", nargs="+", default=list(MODES), choices=MODES)
    parser.add_argument("overrides", nargs="*", help="key=value overrides applied to every run")
    args = parser.parse_args()

    import ray

    ray.init(include_dashboard=False, log_to_driver=False, configure_logging=False)
    results: dict[str, list[dict]] = {mode: [] for mode in args.modes}
    try:
        for seed in args.seeds:
            for mode in args.modes:
                overrides = [*args.overrides, f"algorithm.advantage_mode={mode}", f"run.seed={seed}",
                             f"run.name={mode}_seed{seed}", f"run.output_dir={args.out}"]
                if args.steps is not None:
                    overrides += [f"schedule.steps={args.steps}", f"schedule.eval_every={args.steps}"]
                config = load_config(args.config, overrides)
                records = Trainer(config, config.run_dir).run()
                evals = [r for r in records if "eval/return_vs_random" in r]
                results[mode].append({"seed": seed, "before": evals[0], "after": evals[-1]})
                print(f"{mode} seed {seed}: exploitability {evals[0].get('eval/exploitability')} -> "
                      f"{evals[-1].get('eval/exploitability')}", flush=True)
    finally:
        ray.shutdown()

    print("\n| mode | seeds | exploitability before | exploitability after | return vs random after |")
    print("|---|---|---|---|---|")
    for mode, runs in results.items():
        def summary(key: str, when: str) -> str:
            values = [r[when][key] for r in runs if r[when].get(key) is not None]
            if not values:
                return "-"
            mean, half = mean_interval(values)
            return f"{mean:.3f} ± {half:.3f}" if len(values) > 1 else f"{mean:.3f}"
        print(f"| {mode} | {len(runs)} | {summary('eval/exploitability', 'before')} | "
              f"{summary('eval/exploitability', 'after')} | {summary('eval/return_vs_random', 'after')} |")
    out = Path(args.out) / "ablation.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(results, indent=2, default=str))
    print(f"\nper-run figures: {out}")


if __name__ == "__main__":
    main()
