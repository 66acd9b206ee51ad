"""How long one learner update takes on the configured model, at a fixed batch; optionally against another checkout.

    python bench/learner_update.py [--config configs/kuhn_poker_tiny.yaml] [--samples 110] [--prompt 450]
                                   [--response 145] [--updates 3] [--share-prefix | --no-share-prefix]
                                   [--baseline DIR | --compare-prefix] [--rounds 3] [key=value ...]

The batch is made up, at the sizes of a default training step (about 110 samples of a ~450-token prompt and up
to ~145 response tokens; the lengths vary per sample, seeded), so that only the learner is measured: each update
is one `PolicyLearner.update` with the config's learner settings on the config's model before any warm start
(the weights do not change the work). One warm-up update is left out; the figures are the medians over `--updates`
of the wall time, the process's CPU time (less sensitive to other jobs on a shared machine), the number of
forward calls on the model and the token positions that reach it (its embedding layer's inputs).

`--share-prefix` / `--no-share-prefix` set `learner.share_prefix` (default: the config's). Every made-up prompt
starts with the same two thirds (a stand-in system prompt), so sharing runs those ~300 tokens once per
micro-batch.

With `--baseline DIR` (another checkout of this repository, e.g. `git worktree add /tmp/base main`) the two
codes are measured in turns, each in its own process, `--rounds` times (baseline, this, baseline, this, ...), and
the medians and their ratio are printed: on a shared machine the interleaving spreads the noise over both.
`--compare-prefix` does the same with this checkout alone, without prefix sharing against with it.

With `algorithm.dph_divergence=js` (or forward_kl) the rehearsal set is the batch itself, scored at the start, and
the time of the DPH-RL term (`time/dph_s`) is printed apart: its cost, which the speed figures leave out.
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

from strat.process_env import apply_defaults

apply_defaults()  # one OpenMP thread and quiet logs, before torch or vLLM is imported (`import strat` sets nothing)

from strat.algorithm.records import TrainSample  # noqa: E402
from strat.config_loading import load_config  # noqa: E402
from strat.train.learner import PolicyLearner  # noqa: E402
from strat.train.settings import base_model_path, learner_settings  # noqa: E402

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
    """Median wall and CPU seconds per update of this checkout's learner, and its model forwards per update."""
    overrides = list(args.overrides)
    if args.share_prefix is not None:
        overrides.append(f"learner.share_prefix={str(args.share_prefix).lower()}")
    config = load_config(args.config, overrides)
    learner = PolicyLearner(base_model_path(config), learner_settings(config))
    samples = made_up_samples(args.samples, args.prompt, args.response, len(learner.tokenizer), config.run.seed)
    if config.algorithm.dph_divergence != "none":  # rehearsal on the batch itself: only its cost is measured
        learner.set_rehearsal(samples[: config.algorithm.dph_samples], score=True)
    forwards, positions = [], []
    learner.model.register_forward_hook(lambda module, inputs, output: forwards.append(1))
    learner.model.get_input_embeddings().register_forward_hook(
        lambda module, inputs, output: positions.append(inputs[0].numel()))
    wall, cpu, calls, seen, dph = [], [], [], [], []
    for _ in range(args.updates + 1):
        forwards.clear()
        positions.clear()
        started, started_cpu = time.perf_counter(), time.process_time()
        metrics = learner.update(samples)
        wall.append(time.perf_counter() - started)
        cpu.append(time.process_time() - started_cpu)
        calls.append(len(forwards))
        seen.append(sum(positions))
        dph.append(metrics.get("time/dph_s", 0.0))
    return {"update_s": statistics.median(wall[1:]), "update_cpu_s": statistics.median(cpu[1:]),
            "forwards": float(statistics.median(calls[1:])), "positions": float(statistics.median(seen[1:])),
            "dph_s": statistics.median(dph[1:]), "samples": float(len(samples)),
            "tokens": float(sum(len(s.prompt_token_ids) + len(s.response_token_ids) for s in samples))}


def run_in(checkout: Path, argv: list[str]) -> dict[str, float]:
    """One measurement in a fresh process importing `checkout`'s code."""
    env = {**os.environ, "PYTHONPATH": str(checkout)}
    out = subprocess.run([sys.executable, str(HERE / "bench" / "learner_update.py"), *argv, "--json"],
                         env=env, cwd=checkout, check=True, capture_output=True, text=True).stdout
    return json.loads(out.strip().splitlines()[-1])


def _line(figures: dict[str, float]) -> str:
    # A checkout from before prefix sharing does not count token positions.
    positions = f", {figures['positions']:,.0f} token positions" if "positions" in figures else ""
    return f"{figures['update_s']:.2f} s (CPU {figures['update_cpu_s']:.2f} s, {figures['forwards']:.0f} forwards{positions})"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--config", default=str(HERE / "configs" / "kuhn_poker_tiny.yaml"))
    parser.add_argument("--samples", type=int, default=110)
    parser.add_argument("--prompt", type=int, default=450)
    parser.add_argument("--response", type=int, default=145)
    parser.add_argument("--updates", type=int, default=3, help="timed updates per process (after one warm-up)")
    parser.add_argument("--baseline", type=Path, help="another checkout to measure in turns with this one")
    parser.add_argument("--share-prefix", action=argparse.BooleanOptionalAction, default=None,
                        help="set learner.share_prefix (default: the config's)")
    parser.add_argument("--compare-prefix", action="store_true",
                        help="measure this checkout without and with prefix sharing, in turns")
    parser.add_argument("--rounds", type=int, default=3, help="processes per arm with --baseline or --compare-prefix")
    parser.add_argument("--json", action="store_true", help="print one JSON line (used by --baseline)")
    parser.add_argument("overrides", nargs="*", help="key=value overrides of the config")
    args = parser.parse_args()
    if args.baseline is not None and args.compare_prefix:
        parser.error("--baseline and --compare-prefix are two different comparisons: pick one")
    if args.baseline is None and not args.compare_prefix:
        figures = measure(args)
        if args.json:
            print(json.dumps(figures))
        else:
            rehearsal = f"; DPH-RL rehearsal {figures['dph_s']:.2f} s of it" if figures["dph_s"] else ""
            print(f"{_line(figures)} per update ({figures['samples']:.0f} samples, {figures['tokens']:.0f} tokens)"
                  f"{rehearsal}")
        return
    argv = ["--config", str(Path(args.config).resolve()), "--samples", str(args.samples), "--prompt", str(args.prompt),
            "--response", str(args.response), "--updates", str(args.updates), *args.overrides]
    if args.compare_prefix:
        arms = [("no sharing", HERE, [*argv, "--no-share-prefix"]), ("sharing", HERE, [*argv, "--share-prefix"])]
    else:
        sharing = [] if args.share_prefix is None else ["--share-prefix" if args.share_prefix else "--no-share-prefix"]
        arms = [("baseline", args.baseline.resolve(), argv), ("this", HERE, [*argv, *sharing])]
    results: list[list[dict[str, float]]] = [[], []]
    for round_ in range(args.rounds):
        for (name, checkout, arm_argv), figures in zip(arms, results, strict=True):
            figures.append(run_in(checkout, arm_argv))
        print(f"round {round_ + 1}: " + ", ".join(f"{name} {_line(figures[-1])}"
                                                   for (name, *_), figures in zip(arms, results, strict=True)),
              flush=True)
    (first, *_), (second, *_) = arms
    for key, name in (("update_s", "wall"), ("update_cpu_s", "CPU")):
        before = statistics.median(r[key] for r in results[0])
        after = statistics.median(r[key] for r in results[1])
        change = (1 - after / before) * 100
        print(f"median {name} time per update: {first} {before:.2f} s, {second} {after:.2f} s"
              f" ({abs(change):.0f}% {'less' if change >= 0 else 'more'})")

if __name__ == "__main__":
    main()
