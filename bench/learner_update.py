"""How long one learner update takes on the configured model, at a fixed batch; optionally against another checkout.

    python bench/learner_update.py [--config configs/kuhn_poker_tiny.yaml] [--samples 110] [--prompt 450]
                                   [--response 145] [--updates 3] [--baseline DIR] [--rounds 3] [key=value ...]

The batch is made up, at the sizes of a default training step (about 110 samples of a ~450-token prompt and up
to ~145 response tokens; the lengths vary per sample, seeded), so that only the learner is measured: each update
is one `PolicyLearner.update` with the config's learner settings on the config's model before any warm start
(the weights do not change the work). One warm-up update is left out; the figure is the median of `--updates`.

With `--baseline DIR` (another checkout of this repository, e.g. `git worktree add /tmp/base main`) the two
codes are measured in turns, each in its own process, `--rounds` times (baseline, this, baseline, this, ...), and
the medians and their ratio are printed: on a shared machine the interleaving spreads the noise over both.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import statistics
import subprocess
import sys
import time
from pathlib import Path

import strat  # noqa: F401  (thread and offline defaults first)
from strat.algorithm.records import TrainSample
from strat.config import load_config
from strat.train.learner import PolicyLearner
from strat.train.settings import base_model_path, learner_settings

HERE = Path(__file__).resolve().parent.parent


def made_up_samples(count: int, prompt: int, response: int, vocab: int, seed: int) -> list[TrainSample]:
    """`count` samples sharing the first two thirds of their prompt (the system prompt), with prompts of about
    `prompt` tokens and responses of `response` / 2 to `response` tokens, advantages of both signs."""
    rng = random.Random(seed)
    shared = [rng.randrange(5, vocab) for _ in range(prompt * 2 // 3)]
    samples = []
    for i in range(count):
        rest = [rng.randrange(5, vocab) for _ in range(prompt - len(shared) + rng.randint(-20, 20))]
        reply = tuple(rng.randrange(5, vocab) for _ in range(rng.randint(response // 2, response)))
        samples.append(TrainSample(f"g{i // 8}", f"e{i}", "player_0", i % 3, tuple(shared + rest), reply,
                                   tuple(-rng.uniform(1.0, 6.0) for _ in reply), rng.uniform(-1.5, 1.5)))
    return samples


def measure(args: argparse.Namespace) -> dict[str, float]:
    """Median seconds per update of this checkout's learner."""
    config = load_config(args.config, list(args.overrides))
    learner = PolicyLearner(base_model_path(config), learner_settings(config))
    samples = made_up_samples(args.samples, args.prompt, args.response, len(learner.tokenizer), config.run.seed)
    times = []
    for _ in range(args.updates + 1):
        started = time.perf_counter()
        learner.update(samples)
        times.append(time.perf_counter() - started)
    return {"update_s": statistics.median(times[1:]), "samples": float(len(samples)),
            "tokens": float(sum(len(s.prompt_token_ids) + len(s.response_token_ids) for s in samples))}


def run_in(checkout: Path, argv: list[str]) -> float:
    """One measurement in a fresh process importing `checkout`'s code."""
    env = {**os.environ, "PYTHONPATH": str(checkout)}
    out = subprocess.run([sys.executable, str(HERE / "bench" / "learner_update.py"), *argv, "--json"],
                         env=env, cwd=checkout, check=True, capture_output=True, text=True).stdout
    return float(json.loads(out.strip().splitlines()[-1])["update_s"])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--config", default=str(HERE / "configs" / "kuhn_poker_tiny.yaml"))
    parser.add_argument("--samples", type=int, default=110)
    parser.add_argument("--prompt", type=int, default=450)
    parser.add_argument("--response", type=int, default=145)
    parser.add_argument("--updates", type=int, default=3, help="timed updates per process (after one warm-up)")
    parser.add_argument("--baseline", type=Path, help="another checkout to measure in turns with this one")
    parser.add_argument("--rounds", type=int, default=3, help="processes per checkout with --baseline")
    parser.add_argument("--json", action="store_true", help="print one JSON line (used by --baseline)")
    parser.add_argument("overrides", nargs="*", help="key=value overrides of the config")
    args = parser.parse_args()
    if args.baseline is None:
        figures = measure(args)
        if args.json:
            print(json.dumps(figures))
        else:
            print(f"{figures['update_s']:.2f} s per update ({figures['samples']:.0f} samples, "
                  f"{figures['tokens']:.0f} tokens)")
        return
    argv = ["--config", str(Path(args.config).resolve()), "--samples", str(args.samples), "--prompt", str(args.prompt),
            "--response", str(args.response), "--updates", str(args.updates), *args.overrides]
    base, ours = [], []
    for round_ in range(args.rounds):
        base.append(run_in(args.baseline.resolve(), argv))
        ours.append(run_in(HERE, argv))
        print(f"round {round_ + 1}: baseline {base[-1]:.2f} s, this {ours[-1]:.2f} s", flush=True)
    before, after = statistics.median(base), statistics.median(ours)
    print(f"median update: baseline {before:.2f} s, this {after:.2f} s ({(1 - after / before) * 100:+.0f}% less time)")


if __name__ == "__main__":
    main()
