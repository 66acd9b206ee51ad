"""What does the best response to a fixed two-player Kuhn policy play, where does its value lie, and what did
policies trained against that policy learn at those states? Samples the fixed policy's moves at every information
state (an LLM checkpoint, a run, or a scripted player's exact table), computes its exact best response, and prints
each state's best move with what playing it at that state alone gains (seat-averaged, the fixed policy's moves
elsewhere), then each trained policy's P(bet or call) there and its exact gain against the fixed policy's table.

    python experiments/what_do_the_policies_read/best_response.py --fixed <checkpoint> [--trained <ckpt> ...] \
        [--samples 512] [--trained-samples 256] [--depth 1] [--max-new-tokens 160]

(Each state's moves are also in `strat eval`'s eval.md and eval.json, `exploitability.infoset_moves`.)
"""

from __future__ import annotations

import argparse

import numpy as np

from strat.eval import exploitability as ex
from strat.eval.policies import ReasoningOverrides, load_policy

GAME = "kuhn_poker"


def _form():
    return ex._sequence_form(GAME, ())


def bet_table(spec: str, samples: int, overrides: ReasoningOverrides) -> dict[str, float]:
    """P(bet or call) at every information state: sampled for an LLM, exact for a scripted player."""
    policy = load_policy(spec, GAME, backend="vllm", overrides=overrides)
    try:
        if policy.is_llm:
            estimate = policy.exploitability(samples, seed=0, bootstrap=0)
        else:
            estimate = ex.exact_estimate(GAME, policy.action_probs)
    finally:
        policy.close()
    return {key: moves[1][1] for key, moves in estimate.infoset_moves}  # action 1: bet, or call facing a bet


def as_array(bets: dict[str, float]) -> np.ndarray:
    form = _form()
    array = np.zeros((len(form.keys), form.num_actions))
    for key, row in form.index.items():
        array[row] = (1.0 - bets[key], bets[key])
    return array


def seat_of(key: str) -> int:
    """Two-player Kuhn: player 0 acts at '<card>' and '<card>pb', player 1 at '<card>b' and '<card>p'."""
    return (len(key) - 1) % 2


def gain(policy: np.ndarray, fixed: np.ndarray) -> float:
    """Seat-averaged: what `policy` in one seat, against `fixed` in the other, wins beyond `fixed` itself."""
    form = _form()
    own = ex._expected_values(form, fixed[None], fixed[None])[0]
    values = []
    for seat in (0, 1):
        mixed = fixed.copy()
        rows = [row for key, row in form.index.items() if seat_of(key) == seat]
        mixed[rows] = policy[rows]
        values.append(ex._expected_values(form, mixed[None], fixed[None])[0][seat] - own[seat])
    return float(np.mean(values))


def best_response(fixed: np.ndarray) -> np.ndarray:
    """The exact best response to `fixed` in each seat, as one pure table."""
    return ex._best_responses(_form(), fixed[None])[1][0]


def gains_alone(fixed: np.ndarray) -> dict[str, float]:
    """For each state, the gain of playing the best response's move there alone."""
    response, index = best_response(fixed), _form().index
    out = {}
    for key, row in index.items():
        one = fixed.copy()
        one[row] = response[row]
        out[key] = gain(one, fixed)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--fixed", required=True, help="a checkpoint, run directory or scripted player's name")
    parser.add_argument("--trained", nargs="*", default=[])
    parser.add_argument("--samples", type=int, default=512)
    parser.add_argument("--trained-samples", type=int, default=256)
    parser.add_argument("--depth", type=int, default=1)
    parser.add_argument("--max-new-tokens", type=int, default=160)
    args = parser.parse_args()
    overrides = ReasoningOverrides(depth=args.depth, max_new_tokens=args.max_new_tokens)
    fixed = as_array(bet_table(args.fixed, args.samples, overrides))
    response, alone = best_response(fixed), gains_alone(fixed)
    index = _form().index
    trained = {spec: as_array(bet_table(spec, args.trained_samples, overrides)) for spec in args.trained}
    print(f"best-response value against {args.fixed}: {gain(response, fixed):.4f} (seat-averaged)")
    print("| state | fixed P(bet) | best response | gain alone | " + " | ".join(trained) + " |")
    for key in sorted(index, key=lambda k: -alone[k]):
        row = index[key]
        move = "bet/call" if response[row, 1] == 1 else "pass/fold"
        cells = " | ".join(f"{table[row, 1]:.2f}" for table in trained.values())
        print(f"| {key} | {fixed[row, 1]:.2f} | {move} | {alone[key]:+.4f} | {cells} |")
    for spec, table in trained.items():
        print(f"{spec}: exact gain against the fixed table {gain(table, fixed):+.4f}")


if __name__ == "__main__":
    main()
