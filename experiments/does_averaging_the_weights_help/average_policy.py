"""Is the time-average of a run's recent policies less exploitable than each of them? In self-play the average
policy (each information state's moves averaged over the iterates, weighted by how often the player's own moves
reach that state, as fictitious play and NFSP average) is what converges when the iterates circle the equilibrium.
Averaging the weights is not averaging the policies (`average_checkpoints.py`); this script measures the policies'
average itself: it samples each of a two-player Kuhn run's last checkpoints at every information state, averages
the move frequencies with the reach weights, and gives the exact exploitability of the average, beside the mean of
each checkpoint's own. What distilling a run's recent play into one model could at best reach.

    python experiments/does_averaging_the_weights_help/average_policy.py --run runs/<run> --first 11 --last 30 \
        --samples 128 --out /tmp/avgpol.json [--windows 1,3,5,10,20]

Needs a checkpoint at each step from `--first` to `--last` (`schedule.checkpoint_every=1`, enough kept). The tables
sampled so far are kept in `--out` (a rerun continues). Each checkpoint's figure is the plug-in exploitability of
`--samples` moves per state, biased upward by the sampling; the average's rests on the window's samples together,
so its bias is smaller: the difference is the most averaging could gain.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import numpy as np

from strat.eval import exploitability as ex
from strat.eval.policies import load_policy

GAME = "kuhn_poker"


def own_reach_parent(key: str) -> str | None:
    """Two-player Kuhn: the information state whose pass leads the same player to `key` (player 0's `Xpb` after its
    `X`), or None for a player's first decision."""
    return key[0] if key.endswith("pb") else None


def average_policy(tables: list[dict[str, float]]) -> dict[str, float]:
    """The reach-weighted average of per-checkpoint bet probabilities {information state: P(bet)}: at each state,
    each checkpoint's P(bet) weighted by the probability that its own earlier moves lead there."""
    averaged = {}
    for key in tables[0]:
        parent = own_reach_parent(key)
        weights = np.array([1.0 - table[parent] if parent is not None else 1.0 for table in tables])
        bets = np.array([table[key] for table in tables])
        averaged[key] = float((weights * bets).sum() / weights.sum()) if weights.sum() > 0 else float(bets.mean())
    return averaged


def exploitability(bets: dict[str, float]) -> float:
    return ex.exploitability_of_table(GAME, {key: {0: 1.0 - p, 1: p} for key, p in bets.items()})


def sample_table(checkpoint: Path, samples: int, seed: int) -> dict[str, float]:
    """P(bet) at every information state: the share of `samples` sampled moves (an invalid response as its
    fallback move), in the checkpoint's run's reasoning format."""
    policy = load_policy(str(checkpoint), GAME, backend="vllm")
    try:
        estimate = policy.exploitability(samples, seed=seed, bootstrap=0)
    finally:
        policy.close()
    return {key: moves[1][1] for key, moves in estimate.infoset_moves}  # action 1: bet, or call facing a bet


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--run", type=Path, required=True)
    parser.add_argument("--first", type=int, required=True)
    parser.add_argument("--last", type=int, required=True)
    parser.add_argument("--samples", type=int, default=128)
    parser.add_argument("--windows", default="1,3,5,10,15,20")
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args()
    tables = json.loads(args.out.read_text()) if args.out.exists() else {}
    for step in range(args.first, args.last + 1):
        if str(step) not in tables:
            tables[str(step)] = sample_table(args.run / "checkpoints" / f"step_{step}", args.samples, step)
            args.out.write_text(json.dumps(tables))
    for window in (int(w) for w in args.windows.split(",")):
        steps = [str(s) for s in range(args.last - window + 1, args.last + 1)]
        if all(s in tables for s in steps):
            chosen = [tables[s] for s in steps]
            each = np.mean([exploitability(t) for t in chosen])
            print(f"{args.run.name} last {window:2d}: average policy {exploitability(average_policy(chosen)):.4f} "
                  f"(each checkpoint's own, mean {each:.4f})")


if __name__ == "__main__":
    main()
