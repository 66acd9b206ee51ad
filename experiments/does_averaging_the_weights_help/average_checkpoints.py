"""Is the average of a run's last weights less exploitable than its last weights? Self-play policy gradient circles
the equilibrium rather than settling on it; in self-play the average of the policies, not the last, is what
converges. This script averages the weights of a run's last K checkpoints (parameter by parameter, uniformly) into a
run folder of its own that `strat eval` reads as any run, for each K asked, and evaluates each with `strat eval`
(exploitability at the given samples per information set, return against the random player), K=1 being the last
checkpoint itself, evaluated the same way.

    strat train configs/kuhn_poker_tiny.yaml schedule.checkpoint_every=1 schedule.keep_checkpoints=40 ...
    python experiments/does_averaging_the_weights_help/average_checkpoints.py --run runs/<run> --last 1,3,5,10 \
        --out /tmp/avg [--samples 256] [--games 400] [--seed 0]

Prints one line per K (exploitability with its interval, return against random) and writes `averages.json` in
`--out`. Needs the run's checkpoints every step (`schedule.checkpoint_every=1`) and enough of them kept.
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
from pathlib import Path

import torch
from safetensors.torch import load_file, save_file

from strat.model import manifest

WEIGHTS = "model.safetensors"


def checkpoints(run: Path) -> list[tuple[int, Path]]:
    """The run's complete checkpoints, oldest first."""
    found = [(int(path.name.removeprefix("step_")), path) for path in (run / "checkpoints").glob("step_*")
             if (path / "COMPLETE").is_file() and (path / WEIGHTS).is_file()]
    return sorted(found)


def average(paths: list[Path]) -> dict[str, torch.Tensor]:
    """The parameter-wise mean of the checkpoints' weights (float32 accumulation, the first's dtypes kept)."""
    first = load_file(paths[0] / WEIGHTS)
    total = {name: tensor.to(torch.float32).clone() for name, tensor in first.items()}
    for path in paths[1:]:
        for name, tensor in load_file(path / WEIGHTS).items():
            total[name] += tensor.to(torch.float32)
    return {name: (tensor / len(paths)).to(first[name].dtype).contiguous() for name, tensor in total.items()}


def write_average(run: Path, last: int, out: Path) -> Path:
    """A run folder `out` (the run's config.yaml, one checkpoint: the mean of the last `last` checkpoints, numbered
    as the newest, with its manifest) for `strat eval --policy out`."""
    found = checkpoints(run)
    if len(found) < last:
        raise SystemExit(f"{run}: {len(found)} complete checkpoints, fewer than --last {last}"
                         " (train with schedule.checkpoint_every=1 and a larger schedule.keep_checkpoints)")
    chosen = found[-last:]
    steps = [step for step, _ in chosen]
    if steps != list(range(steps[0], steps[0] + last)):
        raise SystemExit(f"{run}: the last {last} checkpoints are not consecutive steps ({steps})")
    step, newest = chosen[-1]
    target = out / "checkpoints" / f"step_{step}"
    if out.exists():
        shutil.rmtree(out)
    target.mkdir(parents=True)
    shutil.copy(run / "config.yaml", out / "config.yaml")
    for item in newest.iterdir():
        if item.is_file() and item.name not in (WEIGHTS, "optimizer.pt", "COMPLETE"):
            shutil.copy(item, target / item.name)
    save_file(average([path for _, path in chosen]), str(target / WEIGHTS))
    manifest.write(target, step)  # last, as a run writes its checkpoints: the averaged files can be verified
    return out


def evaluate(run: Path, samples: int, games: int, seed: int, backend: str) -> dict:
    """`strat eval` of the run folder against the random player; its eval.json."""
    out = run / "eval_report"
    subprocess.run([sys.executable, "-m", "strat.cli", "eval", "--policy", str(run), "--opponents", "random",
                    "--games", str(games), "--samples-per-infoset", str(samples), "--seed", str(seed),
                    "--backend", backend, "--out", str(out)], check=True, stdout=subprocess.DEVNULL)
    return json.loads((out / "eval.json").read_text())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--run", type=Path, required=True, help="a run directory with a checkpoint every step")
    parser.add_argument("--last", default="1,3,5,10", help="how many of the last checkpoints to average, each")
    parser.add_argument("--out", type=Path, required=True, help="where the averaged run folders go")
    parser.add_argument("--samples", type=int, default=256, help="policy samples per information set")
    parser.add_argument("--games", type=int, default=400, help="games against the random player")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--backend", default="vllm", choices=("vllm", "hf"))
    args = parser.parse_args()
    rows = []
    for last in (int(part) for part in args.last.split(",")):
        folder = write_average(args.run, last, args.out / f"last{last}")
        data = evaluate(folder, args.samples, args.games, args.seed, args.backend)
        e = data["exploitability"]
        match = data["matches"][0]
        row = {"last": last, "exploitability": e["value"], "ci": [e["ci_low"], e["ci_high"]],
               "return_vs_random": match["mean_return"]["value"], "validity": data["validity"]["value"]}
        rows.append(row)
        print(f"last {last:3d}: exploitability {e['value']:.3f} [{e['ci_low']:.3f}, {e['ci_high']:.3f}], "
              f"return vs random {row['return_vs_random']:+.3f}, validity {row['validity']:.3f}", flush=True)
    (args.out / "averages.json").write_text(json.dumps({"run": str(args.run), "samples": args.samples,
                                                         "games": args.games, "seed": args.seed, "rows": rows},
                                                        indent=1))


if __name__ == "__main__":
    main()
