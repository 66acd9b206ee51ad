"""Games per second with random agents: each env's AEC loop next to raw pyspiel stepping.

Each loop seeds its RNGs once, then plays game after game. Run:
    python bench/bench_games.py [--seconds 2]
"""

from __future__ import annotations

import argparse
import random
import time

import numpy as np
import pyspiel

import games
from games.opponents import make_opponent

CONFIGS: list[tuple[str, dict]] = [(name, {}) for name in games.names()]
CONFIGS.append(("kuhn_poker", {"players": 3}))


def opponent_games_per_second(name: str, options: dict, seconds: float) -> float:
    """The `random` opponent playing every seat, as Strat's rollouts drive the env."""
    env = games.make(name, **options)
    env.reset(seed=0)
    player = make_opponent("random", name, seed=0)
    played, start = 0, time.perf_counter()
    while time.perf_counter() - start < seconds:
        env.reset()
        for agent in env.turns():
            env.step(player.act(env, agent))
        played += 1
    return played / (time.perf_counter() - start)


def observing_games_per_second(name: str, options: dict, seconds: float) -> float:
    """Random agents that read env.last() and pick from the action mask, as in PettingZoo's docs."""
    env = games.make(name, **options)
    env.reset(seed=0)
    rng = random.Random(0)
    played, start = 0, time.perf_counter()
    while time.perf_counter() - start < seconds:
        env.reset()
        for _ in env.turns():
            observation = env.last()[0]
            env.step(rng.choice(np.flatnonzero(observation["action_mask"])))
        played += 1
    return played / (time.perf_counter() - start)


def sample(outcomes: list[tuple[int, float]], rng: random.Random) -> int:
    """An outcome drawn by its probability, the way the env draws chance outcomes."""
    threshold = rng.random()
    for action, probability in outcomes:
        threshold -= probability
        if threshold < 0:
            return action
    return outcomes[-1][0]


def pyspiel_games_per_second(name: str, options: dict, seconds: float) -> float:
    """Random play on pyspiel states directly, sampling chance outcomes by their probabilities."""
    game = pyspiel.load_game(name, options)
    rng = random.Random(0)
    played, start = 0, time.perf_counter()
    while time.perf_counter() - start < seconds:
        state = game.new_initial_state()
        while not state.is_terminal():
            if state.is_chance_node():
                state.apply_action(sample(state.chance_outcomes(), rng))
            else:
                state.apply_action(rng.choice(state.legal_actions()))
        state.returns()
        played += 1
    return played / (time.perf_counter() - start)


MEASURES = (opponent_games_per_second, observing_games_per_second, pyspiel_games_per_second)


def best_rates(name: str, options: dict, seconds: float, repeats: int = 5) -> list[float]:
    """Each measure's best of `repeats` interleaved runs: other load only ever slows a run down."""
    rates = [
        [measure(name, options, seconds / repeats) for measure in MEASURES] for _ in range(repeats)
    ]
    return [max(column) for column in zip(*rates)]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--seconds", type=float, default=2.0, help="per game and loop, over 5 interleaved runs"
    )
    args = parser.parse_args()
    print("games/s with random agents: env driven by the random opponent, env with observe()")
    print("(tensor + mask each turn), and raw pyspiel; ratios are env / pyspiel")
    header = ["game", "env", "env+observe", "pyspiel", "ratio", "ratio+obs"]
    print(f"{header[0]:<24}" + "".join(f"{h:>12}" for h in header[1:]))
    for name, options in CONFIGS:
        label = name + "".join(f" {k}={v}" for k, v in options.items())
        env_rate, observing_rate, raw_rate = best_rates(name, options, args.seconds)
        print(
            f"{label:<24}{env_rate:>12.0f}{observing_rate:>12.0f}{raw_rate:>12.0f}"
            f"{env_rate / raw_rate:>12.2f}{observing_rate / raw_rate:>12.2f}"
        )


if __name__ == "__main__":
    main()
