"""Reference points for the games table: what simple scripted lines score against the held-out heuristic player and
against random, so a trained policy's figure can be read as "plays like X".

    python experiments/what_do_scripted_lines_score/scripted_check.py
        [--games 4000] [--seed 0] [--game liars_dice|bargaining]

Each line plays `--games` games against each opponent, in one seat and then the other (alternating), on seeded
deals, and prints its mean return with a 95% interval (normal approximation). The lines:

- Liar's dice: `always liar` (calls any bid; opens uniformly), `own-die opening` (opens with one of its own face,
  then calls any bid), `own die` (bids one of its own face whenever that is higher than the last bid, else calls),
  `lowest raise` (blind to its die: opens with one one, answers every bid with the lowest bid above it, calls only
  when no bid is left), and the scripted players `random`, `truthful` and `contrarian` for comparison.
- Bargaining: `accept k` (agrees to any offer that leaves it k points or more, else makes a uniform random offer),
  for k = 0, 3 and 6, and `random`.
"""

from __future__ import annotations

import argparse
import math
import random
from collections.abc import Callable

import games
from games.bargaining import BargainingEnv
from games.base import TextGameEnv
from games.liars_dice import LiarsDiceEnv
from games.opponents import make_opponent

Line = Callable[[TextGameEnv, str, random.Random], int]


def scripted(name: str, game: str) -> Line:
    """A scripted player of `games.opponents` as a line."""
    player = make_opponent(name, game, seed=1)

    def play(env: TextGameEnv, agent: str, rng: random.Random) -> int:
        return player.act(env, agent)

    return play


def always_liar(env: LiarsDiceEnv, agent: str, rng: random.Random) -> int:
    legal = env.legal_actions(agent)
    return env.liar_action if env.liar_action in legal else rng.choice(legal)


def own_die_opening(env: LiarsDiceEnv, agent: str, rng: random.Random) -> int:
    if env.current_bid() is not None:
        return env.liar_action
    return _own_face_bid(env, agent)


def own_die(env: LiarsDiceEnv, agent: str, rng: random.Random) -> int:
    bid = _own_face_bid(env, agent)
    return env.liar_action if bid is None else bid


def lowest_raise(env: LiarsDiceEnv, agent: str, rng: random.Random) -> int:
    bids = [a for a in env.legal_actions(agent) if a != env.liar_action]
    return min(bids) if bids else env.liar_action


def _own_face_bid(env: LiarsDiceEnv, agent: str) -> int | None:
    """The legal bid of one die on its own face, if there is one."""
    face = env.dice(agent)[0]
    return next((a for a in env.legal_actions(agent) if a != env.liar_action and env.bid(a) == (1, face)), None)


def accept(threshold: int) -> Line:
    def play(env: BargainingEnv, agent: str, rng: random.Random) -> int:
        legal, values, pool = env.legal_actions(agent), env.values(agent), env.pool()
        latest = env.last_offer()
        if env.agree_action in legal and latest is not None:
            left = tuple(q - t for q, t in zip(pool, env.offer(latest[1])))
            if sum(q * v for q, v in zip(left, values)) >= threshold:
                return env.agree_action
        return rng.choice([a for a in legal if a != env.agree_action])

    return play


LINES: dict[str, dict[str, Callable[[], Line]]] = {
    "liars_dice": {
        "always liar": lambda: always_liar,
        "own-die opening": lambda: own_die_opening,
        "own die": lambda: own_die,
        "lowest raise": lambda: lowest_raise,
        "random": lambda: scripted("random", "liars_dice"),
        "truthful": lambda: scripted("truthful", "liars_dice"),
        "contrarian": lambda: scripted("contrarian", "liars_dice"),
    },
    "bargaining": {
        "accept 0": lambda: accept(0),
        "accept 3": lambda: accept(3),
        "accept 6": lambda: accept(6),
        "random": lambda: scripted("random", "bargaining"),
    },
}


def mean_return(game: str, line: Line, opponent: str, num_games: int, seed: int) -> tuple[float, float]:
    """Mean return of `line` against `opponent` in every other seat, and its 95% half-width."""
    rng = random.Random(seed)
    returns = []
    for index in range(num_games):
        env = games.make(game)
        env.reset(seed=seed * 1_000_003 + index)
        ego = env.possible_agents[index % len(env.possible_agents)]
        other = make_opponent(opponent, game, seed=seed * 1_000_003 + index)
        for agent in env.turns():
            env.step(line(env, agent, rng) if agent == ego else other.act(env, agent))
        returns.append(env.returns()[ego])
    mean = sum(returns) / len(returns)
    variance = sum((r - mean) ** 2 for r in returns) / (len(returns) - 1)
    return mean, 1.96 * math.sqrt(variance / len(returns))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--games", type=int, default=4000)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--game", choices=sorted(LINES), action="append")
    args = parser.parse_args()
    for game in args.game or sorted(LINES):
        print(f"{game} ({args.games} games per opponent, seats alternating, seed {args.seed})")
        print("| line | vs heuristic | vs random |\n|---|---|---|")
        for name, make in LINES[game].items():
            cells = []
            for opponent in ("heuristic", "random"):
                mean, half = mean_return(game, make(), opponent, args.games, args.seed)
                cells.append(f"{mean:+.3f} [{mean - half:+.3f}, {mean + half:+.3f}]")
            print(f"| {name} | {' | '.join(cells)} |", flush=True)


if __name__ == "__main__":
    main()
