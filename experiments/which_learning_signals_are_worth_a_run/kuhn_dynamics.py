"""A tabular surrogate of the training loop's learning dynamics on 2-player Kuhn poker, to screen learning-signal
options in seconds before spending a 10-minute LLM run on them.

    python experiments/which_learning_signals_are_worth_a_run/kuhn_dynamics.py
        [--init contrarian|timid|station|random] [--kl 0.2] [--snapshot-every 5] [--no-scale] [--state-baseline]
        [--split-shared] [--br-estimated [--br-decay 0.5]]
        [--move-entropy 0.5] [--lr 0.5] [--shared 1 --specific 0.2] [--steps 30]
        [--seeds 5] [--group-size 8] [--groups 8] [--mix 0.6 0.2 0.2 [0.0]]
        [--fixed timid|station|contrarian|random|P1 ... P12] [--table]

The policy is one Bernoulli "bet" logit per information set (12), optionally plus a logit shared by all of them
(`--shared`): the LLM's habit of moving every card's "bet" together, with `--specific` the card-specific learning
speed relative to the shared one. The loop is the service's: groups of `--group-size` episodes with the same deal and
opponent kind (self-play with both seats learning, the snapshot taken every 5 steps, the uniform random player, and
optionally the exact best response to the policy, the `{kind: exploiter}` opponent; weights `--mix`), group-relative
advantages per seat ((R - mean) / std, 0 for a flat group), REINFORCE on each of the seat's moves, an optional bonus
on the entropy of each move (`--move-entropy`, the analogue of `algorithm.move_entropy_coef`), optionally the forward
KL to the snapshot (`--kl`, the analogue of `algorithm.kl_coef` with `kl_reference: snapshot`), Adam. `--no-scale`
leaves the std out of the advantage, and `--state-baseline` compares each move's return with the group's at the same
information state; `--split-shared` gives the shared logit one half for the states before any bet and one for those
facing a bet (as if a call and a bet had different names). `--br-estimated` has the best response answer the last
step's move frequencies of the learning policy, as the service's exploiter does, keeping `--br-decay` of the earlier
counts (its default 0 keeps none); without it, the exact policy. `--init` is the warm start's player (contrarian,
timid, station) or uniform (random). It prints the exact exploitability (`strat.eval.exploitability`) every 5 steps
for each seed, and the mean.

`--fixed` trains against a fixed policy alone (a scripted player's table, or 12 bet probabilities in `infoset`'s
order), the learner's seat alternating by group as in the service's `{kind: policy}` runs against a fixed checkpoint
(issue 42): it then prints, instead of the exploitability, the learner's exact return against the fixed policy,
seat-averaged, as a share of the best response's (the fixed policy's exploitability): the capture of issue 42's bar.
`--table` then prints the learned P(bet or call) at each information state, the mean over the seeds at the end.

It leaves out the text: reasoning tokens, the process term, PPO clipping, format failures. It reproduced what the
LLM runs showed (the drift to betting with every card, exploitability ~0.33 at step 30 from the contrarian warm start)
and predicts more than the LLM delivers for the fixes it favours: treat its answers as hypotheses.
"""

from __future__ import annotations

import argparse

from strat.process_env import apply_defaults

apply_defaults()  # one OpenMP thread and quiet logs, before torch or vLLM is imported (`import strat` sets nothing)

import numpy as np  # noqa: E402

from strat.eval.exploitability import exploitability_of_table  # noqa: E402

HISTORIES = ("", "p", "b", "pb")
"""The decision points of 2-player Kuhn: first to act, after a check, facing a bet, facing a bet after checking."""
CARDS = 3


def infoset(card: int, history: str) -> int:
    """Index of (card, history) in a 12-entry policy: the probability of betting (or calling)."""
    return card * len(HISTORIES) + HISTORIES.index(history)


def _terminal(history: str, cards: tuple[int, int]) -> float | None:
    """Player 0's return at a terminal history, None elsewhere."""
    showdown = 1.0 if cards[0] > cards[1] else -1.0
    return {"pp": showdown, "bp": 1.0, "pbp": -1.0, "bb": 2 * showdown, "pbb": 2 * showdown}.get(history)


def exploitability(policy: np.ndarray) -> float:
    """Exact exploitability (OpenSpiel's definition) of the 12 bet probabilities, by the project's evaluator."""
    table = {
        f"{card}{history}": {0: 1.0 - float(policy[infoset(card, history)]), 1: float(policy[infoset(card, history)])}
        for card in range(CARDS)
        for history in HISTORIES
    }
    return exploitability_of_table("kuhn_poker", table)


def contrarian() -> np.ndarray:
    """The warm start's contrarian player: lean to bet/call with the Jack, to check/fold the Queen and King (3/4)."""
    return np.array([0.75 if card == 0 else 0.25 for card in range(CARDS) for _ in HISTORIES])


TIMID_BETS = (0.1, 0.25, 0.5)
"""The timid player's P(bet or call) with the Jack, the Queen and the King (`games.heuristics.kuhn_poker_timid`)."""


def timid() -> np.ndarray:
    """The default warm start's timid player: bet or call the Jack 1/10, the Queen 1/4, the King 1/2, whatever the
    betting."""
    return np.array([TIMID_BETS[card] for card in range(CARDS) for _ in HISTORIES])


def station() -> np.ndarray:
    """The calling station: bets as the timid player does, calls any bet half the time."""
    return np.array([0.5 if "b" in h else TIMID_BETS[card] for card in range(CARDS) for h in HISTORIES])


INITS = {"contrarian": contrarian, "timid": timid, "station": station,
         "random": lambda: np.full(CARDS * len(HISTORIES), 0.5)}


def best_response(opponent: np.ndarray, seat: int) -> np.ndarray:
    """The exact best response of `seat` to the opponent's 12 bet probabilities (ties to checking/folding): a
    12-entry table whose entries at `seat`'s information sets are 0 or 1 (the others are left at 0)."""
    bets = np.zeros(CARDS * len(HISTORIES))
    own = [h for h in HISTORIES if len(h) % 2 == seat]

    def value(history: str, cards: tuple[int, int]) -> float:
        if (end := _terminal(history, cards)) is not None:
            return end if seat == 0 else -end
        mover = len(history) % 2
        p = (bets if mover == seat else opponent)[infoset(cards[mover], history)]
        return p * value(history + "b", cards) + (1 - p) * value(history + "p", cards)

    def reach(history: str, card: int) -> float:  # the opponent's own probability of its moves in `history`
        out = 1.0
        for i, move in enumerate(history):
            if i % 2 != seat:
                p = opponent[infoset(card, history[:i])]
                out *= p if move == "b" else 1 - p
        return out

    for history in sorted(own, key=len, reverse=True):  # the deeper decisions first
        for card in range(CARDS):
            others = [o for o in range(CARDS) if o != card]
            deal = (lambda o: (card, o)) if seat == 0 else (lambda o: (o, card))
            q = [sum(reach(history, o) * value(history + move, deal(o)) for o in others) for move in "pb"]
            bets[infoset(card, history)] = float(q[1] > q[0] + 1e-12)
    return bets


def value(first: np.ndarray, second: np.ndarray) -> float:
    """Player 0's exact expected return when `first` plays seat 0 and `second` seat 1 (12 bet probabilities each)."""
    total = 0.0
    for cards in ((a, b) for a in range(CARDS) for b in range(CARDS) if a != b):
        def walk(history: str, cards: tuple[int, int] = cards) -> float:
            if (end := _terminal(history, cards)) is not None:
                return end
            seat = len(history) % 2
            p = (first, second)[seat][infoset(cards[seat], history)]
            return p * walk(history + "b") + (1 - p) * walk(history + "p")
        total += walk("") / (CARDS * (CARDS - 1))
    return total


def return_against(policy: np.ndarray, fixed: np.ndarray) -> float:
    """`policy`'s exact return against `fixed`, averaged over the two seats; at most `exploitability(fixed)`, which
    the best response reaches."""
    return (value(policy, fixed) - value(fixed, policy)) / 2


def _play(cards: tuple[int, int], policies: tuple[np.ndarray, np.ndarray], rng: np.random.Generator):
    history, moves = "", []
    while (end := _terminal(history, cards)) is None:
        seat = len(history) % 2
        index = infoset(cards[seat], history)
        bet = int(rng.random() < policies[seat][index])
        moves.append((seat, index, bet))
        history += "pb"[bet]
    return (end, -end), moves


def simulate(
    init: str = "contrarian",
    steps: int = 30,
    group_size: int = 8,
    groups: int = 8,
    lr: float = 0.5,
    move_entropy: float = 0.0,
    shared: float = 0.0,
    specific: float = 1.0,
    mix: tuple[float, ...] = (0.6, 0.2, 0.2),
    snapshot_every: int = 5,
    kl: float = 0.0,
    scale: bool = True,
    state_baseline: bool = False,
    split_shared: bool = False,
    br_estimated: bool = False,
    br_decay: float = 0.0,
    seed: int = 0,
    fixed: np.ndarray | None = None,
    final: list[np.ndarray] | None = None,
) -> list[tuple[int, float]]:
    """(step, exploitability) every 5 steps and at the end, for one seed; with `fixed` (12 bet probabilities) every
    game is against that policy alone and the figure is the learner's `return_against` it. The learned policy's 12
    bet probabilities at the end are appended to `final` where one is given."""
    rng = np.random.default_rng(seed)
    start = INITS[init]()
    theta, bias = np.log(start / (1 - start)), np.zeros(2)
    # The shared logit's two halves: states before any bet (bet or check) and states facing a bet (call or fold);
    # tied unless `split_shared`, as when both moves are named "bet" whatever the betting.
    facing = np.array([int("b" in history) for _ in range(CARDS) for history in HISTORIES])
    snapshot = (theta.copy(), bias)
    moment, second = np.zeros(theta.size + 2), np.zeros(theta.size + 2)
    uniform = np.full(theta.size, 0.5)

    def policy(logits: np.ndarray, b: np.ndarray) -> np.ndarray:
        return 1 / (1 + np.exp(-(logits + shared * b[facing])))

    out = []
    seen = np.zeros((theta.size, 2))  # the last step's moves of the learning policy, per state: (checks, bets)
    for step in range(1, steps + 1):
        current, frozen = policy(theta, bias), policy(*snapshot)
        # the exploiter's target: the exact policy, or (`br_estimated`) the last step's move frequencies
        estimate = np.where(seen.sum(1) > 0, seen[:, 1] / np.maximum(seen.sum(1), 1), 0.5)
        target = estimate if br_estimated else current
        seen = br_decay * seen
        grad, count = np.zeros(theta.size), 0
        for g in range(groups):
            cards = tuple(int(c) for c in rng.permutation(CARDS)[:2])
            kind = rng.choice(len(mix), p=np.asarray(mix) / sum(mix)) if fixed is None else 4
            ego = g % 2
            other = (current, frozen, uniform, best_response(target, 1 - ego) if kind == 3 else None, fixed)[kind]
            seats = (current, other) if ego == 0 else (other, current)
            episodes = [_play(cards, seats, rng) for _ in range(group_size)]
            for _, moves in episodes:
                for mover, index, bet in moves:
                    if kind == 0 or mover == ego:
                        seen[index, bet] += 1
            for seat in ((0, 1) if kind == 0 else (ego,)):
                returns = np.array([r[seat] for r, _ in episodes])
                flat = np.all(returns == returns[0])
                spread = (returns.std() + 1e-6) if scale else 1.0
                advantages = np.zeros_like(returns) if flat else (returns - returns.mean()) / spread
                if state_baseline:  # each move against the group's moves at the same information state
                    at: dict[int, list[float]] = {}
                    for (r, moves) in episodes:
                        for mover, index, _ in moves:
                            if mover == seat:
                                at.setdefault(index, []).append(r[seat])
                    means = {index: float(np.mean(rs)) for index, rs in at.items()}
                for (r, moves), advantage in zip(episodes, advantages):
                    for mover, index, bet in moves:
                        if mover != seat:
                            continue
                        if state_baseline:
                            advantage = 0.0 if flat else (r[seat] - means[index]) / spread
                        p = current[index]
                        grad[index] += advantage * (bet - p) + move_entropy * (-p * (1 - p) * np.log(p / (1 - p)))
                        grad[index] -= kl * (p - frozen[index])  # the gradient of KL(snapshot || pi)
                        count += 1
        grad /= max(count, 1)
        halves = [grad[facing == 0].sum(), grad[facing == 1].sum()] if split_shared else [grad.sum()] * 2
        full = np.concatenate([grad, shared * np.asarray(halves)])
        moment = 0.9 * moment + 0.1 * full
        second = 0.999 * second + 0.001 * full**2
        update = lr * (moment / (1 - 0.9**step)) / (np.sqrt(second / (1 - 0.999**step)) + 1e-8)
        theta += specific * update[:-2]
        bias = bias + update[-2:]
        if step % snapshot_every == 0:
            snapshot = (theta.copy(), bias)
        if step % 5 == 0 or step == steps:
            learned = policy(theta, bias)
            out.append((step, exploitability(learned) if fixed is None else return_against(learned, fixed)))
    if final is not None:
        final.append(policy(theta, bias))
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--init", choices=tuple(INITS), default="contrarian")
    parser.add_argument("--steps", type=int, default=30)
    parser.add_argument("--seeds", type=int, default=5)
    parser.add_argument("--group-size", type=int, default=8)
    parser.add_argument("--groups", type=int, default=8)
    parser.add_argument("--lr", type=float, default=0.5)
    parser.add_argument("--move-entropy", type=float, default=0.0)
    parser.add_argument("--shared", type=float, default=0.0, help="weight of the logit shared by every card (0: none)")
    parser.add_argument("--specific", type=float, default=1.0, help="card-specific step size relative to the shared")
    parser.add_argument("--kl", type=float, default=0.0, help="forward KL to the snapshot (algorithm.kl_coef)")
    parser.add_argument("--snapshot-every", type=int, default=5)
    parser.add_argument("--state-baseline", action="store_true",
                        help="each move's return less the group's mean return at the same information state")
    parser.add_argument("--split-shared", action="store_true",
                        help="one shared logit for the states before any bet, another for those facing a bet")
    parser.add_argument("--br-decay", type=float, default=0.0,
                        help="with --br-estimated: the weight each step keeps of the earlier steps' move counts")
    parser.add_argument("--br-estimated", action="store_true",
                        help="the best response (the fourth --mix weight) answers the last step's move frequencies "
                             "of the learning policy, not its exact policy")
    parser.add_argument("--no-scale", action="store_true", help="advantage R - group mean, not divided by the std")
    parser.add_argument("--mix", type=float, nargs="+", default=(0.6, 0.2, 0.2),
                        help="weights of self-play, the snapshot, the random player and (a fourth, optional) the "
                             "exact best response to the current policy")
    parser.add_argument("--fixed", nargs="+", help="train against this fixed policy alone: a scripted player"
                        f" ({', '.join(INITS)}) or 12 bet probabilities in infoset order (card, then '', p, b, pb);"
                        " prints the capture of its best-response value")
    parser.add_argument("--table", action="store_true",
                        help="print the learned P(bet or call) per information state at the end, mean over the seeds")
    args = parser.parse_args()
    fixed = None
    if args.fixed:
        try:
            fixed = INITS[args.fixed[0]]() if len(args.fixed) == 1 else np.array([float(p) for p in args.fixed])
        except (KeyError, ValueError):
            parser.error(f"--fixed: a scripted player ({', '.join(INITS)}) or 12 probabilities, got {args.fixed}")
        if fixed.shape != (CARDS * len(HISTORIES),) or not np.all((fixed >= 0) & (fixed <= 1)):
            parser.error(f"--fixed: 12 probabilities in [0, 1], got {args.fixed}")
        print(f"fixed policy: exploitability (its best response's return) {exploitability(fixed):.3f}; the figures"
              " are the learner's capture of it (its return against the fixed policy / that)")
    final: list[np.ndarray] = []
    runs = [
        simulate(args.init, args.steps, args.group_size, args.groups, args.lr, args.move_entropy, args.shared,
                 args.specific, tuple(args.mix), args.snapshot_every, args.kl, not args.no_scale, args.state_baseline,
                 args.split_shared, args.br_estimated, args.br_decay, seed=seed, fixed=fixed, final=final)
        for seed in range(args.seeds)
    ]
    if fixed is not None:
        runs = [[(step, figure / exploitability(fixed)) for step, figure in run] for run in runs]
    steps = [step for step, _ in runs[0]]
    print("seed | " + " | ".join(f"step {s}" for s in steps))
    for seed, run in enumerate(runs):
        print(f"{seed} | " + " | ".join(f"{e:.3f}" for _, e in run))
    means = np.mean([[e for _, e in run] for run in runs], axis=0)
    print("mean | " + " | ".join(f"{m:.3f}" for m in means))
    if args.table:
        learned = np.mean(final, axis=0)
        names = [f"{card}{history}" for card in range(CARDS) for history in HISTORIES]
        print("state | " + " | ".join(names))
        print(f"P(bet or call) at step {steps[-1]} | " + " | ".join(f"{p:.2f}" for p in learned))


if __name__ == "__main__":
    main()
