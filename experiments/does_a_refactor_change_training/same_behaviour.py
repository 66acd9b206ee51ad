"""Does a refactor change what training does? Runs the same short training jobs from two source trees (e.g. a
`git worktree` of the last commit and the working tree) with the same venv, each tree with its own fresh model cache,
and compares what they wrote:

- every `metrics.jsonl` key apart from time and throughput figures must be equal, step by step;
- `episodes.jsonl` (which episodes each step trained on) must be byte-identical.

The runs use the hf engine and `schedule.max_staleness=0` (no rollout overlapping the update), so that both trees do
the same arithmetic in the same order. Usage:

    git worktree add /tmp/old HEAD
    python experiments/does_a_refactor_change_training/same_behaviour.py
        --old /tmp/old --new . --out /tmp/same [--variants default,plain,dph] [--set key=value ...]

`--set` adds overrides to every run of both trees: on a loaded machine the default warm start can reach its
`warm_start.max_seconds` at a different step in each tree, so that the models differ, not the code; `--set
warm_start.episodes=100 --set warm_start.max_seconds=100000` makes it short and never cut.

Exit status 0 when every variant matches, 1 otherwise; one line per variant says which keys differ."""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

CONFIG = "configs/kuhn_poker_tiny.yaml"
COMMON = [
    "engine.backend=hf", "schedule.max_staleness=0", "schedule.steps=4", "schedule.eval_every=4",
    "schedule.checkpoint_every=4", "eval.games=40", "eval.samples_per_infoset=4",
]
VARIANTS: dict[str, list[str]] = {
    # The default config: two minibatches and the KL anchor on the snapshot.
    "default": [],
    # One minibatch, no KL term.
    "plain": ["algorithm.minibatches=1", "algorithm.kl_type=none", "algorithm.kl_coef=0",
              "algorithm.kl_reference=initial"],
    # DPH-RL rehearsal on top of the default.
    "dph": ["algorithm.dph_divergence=forward_kl", "algorithm.dph_samples=32", "algorithm.dph_batch=8"],
    # The FiberPO surrogate (`fiberpo=true` is read by trees before and after `algorithm.policy_loss`).
    "fiberpo": ["algorithm.fiberpo=true"],
}
IGNORED_PREFIXES = ("time/", "throughput/")


def run(tree: Path, out: Path, variant: str, overrides: list[str], extra: list[str] | None = None) -> Path:
    """Train `variant` from the sources in `tree`; returns its run directory."""
    name = f"{variant}-{tree.name or 'tree'}"
    env = {**os.environ, "PYTHONPATH": str(tree), "STRAT_CACHE_DIR": str(out / f"cache-{tree.name}")}
    command = [sys.executable, "-m", "strat.cli", "train", CONFIG, f"run.name={name}", f"run.output_dir={out}",
               *COMMON, *(extra or []), *overrides]
    started = time.perf_counter()
    with open(out / f"{name}.log", "w") as log:
        code = subprocess.call(command, cwd=tree, env=env, stdout=log, stderr=subprocess.STDOUT)
    print(f"  {name}: exit {code} in {time.perf_counter() - started:.0f} s", flush=True)
    if code != 0:
        raise SystemExit(f"{name} failed: see {out / f'{name}.log'}")
    return out / name


def _metrics(run_dir: Path) -> list[dict[str, object]]:
    rows = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines() if line.strip()]
    return [{k: v for k, v in row.items() if not k.startswith(IGNORED_PREFIXES)} for row in rows]


def compare(old: Path, new: Path) -> list[str]:
    """What differs between two run directories (empty when nothing does)."""
    problems = []
    old_rows, new_rows = _metrics(old), _metrics(new)
    if len(old_rows) != len(new_rows):
        problems.append(f"metrics.jsonl has {len(old_rows)} rows against {len(new_rows)}")
    for index, (a, b) in enumerate(zip(old_rows, new_rows, strict=False)):
        keys = sorted(set(a) | set(b))
        differ = [k for k in keys if a.get(k) != b.get(k)]
        if differ:
            problems.append(f"row {index}: " + ", ".join(f"{k} {a.get(k)!r} != {b.get(k)!r}" for k in differ[:6]))
    if (old / "episodes.jsonl").read_bytes() != (new / "episodes.jsonl").read_bytes():
        problems.append("episodes.jsonl differs")
    return problems


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--old", type=Path, required=True, help="the source tree before the change")
    parser.add_argument("--new", type=Path, required=True, help="the source tree after it")
    parser.add_argument("--out", type=Path, required=True, help="where the runs and caches go (kept)")
    parser.add_argument("--variants", default=",".join(VARIANTS), help=f"comma-separated, of {', '.join(VARIANTS)}")
    parser.add_argument("--set", dest="extra", action="append", default=[], metavar="KEY=VALUE",
                        help="an override for every run of both trees (repeatable)")
    parser.add_argument("--only", choices=("old", "new", "both"), default="both",
                        help="run one side only (its runs are reused by a later call)")
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    trees = {"old": args.old.resolve(), "new": args.new.resolve()}
    if trees["old"].name == trees["new"].name:
        parser.error("the two trees need different folder names (they name the runs and caches)")
    failed = 0
    for variant in args.variants.split(","):
        if variant not in VARIANTS:
            parser.error(f"unknown variant {variant!r} (known: {', '.join(VARIANTS)})")
        dirs = {}
        for side, tree in trees.items():
            target = args.out / f"{variant}-{tree.name}"
            if args.only in (side, "both") and not (target / "episodes.jsonl").is_file():
                run(tree, args.out, variant, VARIANTS[variant], args.extra)
            dirs[side] = target
        if args.only != "both":
            continue
        problems = compare(dirs["old"], dirs["new"])
        failed += bool(problems)
        compared = sum(len(row) for row in _metrics(dirs["new"]))
        print(f"{variant}: " + (f"same metrics ({compared} values, time/throughput left out) and episodes.jsonl"
                                if not problems
                                else "DIFFERENT: " + "; ".join(problems)), flush=True)
    return 1 if failed else 0


if __name__ == "__main__":
    raise SystemExit(main())
