"""Why are a board game's free-running responses invalid? Each of N decisions (after 0-7 random moves, seeded) gets
one response, sampled as in evaluation, and each response one cause:

    python experiments/can_the_model_read_its_game/invalid_moves.py --model DIR [--game tic_tac_toe]
        [--decisions 200] [--depth 2] [--max-new-tokens 192] [--game-option key=value ...]

Causes: a legal move in a well-formed response; a legal move with other sections malformed; a move name that is not
legal now (an occupied cell); no `<action>`; an `<action>` that names no move. Printed with each cause's share, and
the share of legal moves among the responses that name a move beside what a uniform choice among every move name
gives on the same positions (a model that ignores the board).

The pieces are functions over response texts, so tests drive them without a model.
"""

from __future__ import annotations

import argparse
import random
from collections import Counter
from collections.abc import Sequence
from pathlib import Path

from strat.process_env import apply_defaults

apply_defaults()  # one OpenMP thread and quiet logs, before torch or vLLM is imported (`import strat` sets nothing)

import games  # noqa: E402
from games.base import TextGameEnv  # noqa: E402
from strat.algorithm.reasoning import build_messages, parse_response  # noqa: E402

LEGAL, LEGAL_MALFORMED, ILLEGAL, NO_ACTION, NOT_A_MOVE = (
    "legal move, well formed", "legal move, other sections malformed", "a move not legal now", "no <action>",
    "<action> names no move")
CAUSES = (LEGAL, LEGAL_MALFORMED, ILLEGAL, NO_ACTION, NOT_A_MOVE)


def decisions(game: str, count: int, seed: int, options: dict[str, str]) -> list[TextGameEnv]:
    """`count` positions with a player to move, each after 0-7 uniformly random moves from a seeded deal."""
    rng = random.Random(seed)
    found: list[TextGameEnv] = []
    while len(found) < count:
        env = games.make(game, **options)
        env.reset(seed=rng.randrange(10**9))
        for _ in range(rng.randrange(0, 8)):
            if not env.agents or not env.legal_actions(env.agent_selection):
                break
            env.step(rng.choice(env.legal_actions(env.agent_selection)))
        if env.agents and env.legal_actions(env.agent_selection):
            found.append(env)
    return found


def cause(env: TextGameEnv, text: str, depth: int) -> str:
    """The cause of `text` as the response of the player to move in `env`."""
    parsed = parse_response(text, depth)
    action = parsed.sections.action
    agent = env.agent_selection
    if action is None:
        return NO_ACTION
    if env.parse_action(action, agent) is not None:
        return LEGAL if parsed.format_valid else LEGAL_MALFORMED
    names = {env.action_name(a, agent).strip() for a in range(env.action_space(agent).n)}
    return ILLEGAL if action.strip() in names else NOT_A_MOVE


def uniform_legal_share(envs: Sequence[TextGameEnv]) -> float:
    """The mean share of legal moves among all move names: a uniform choice's legal rate on these positions."""
    return sum(len(e.legal_actions(e.agent_selection)) / e.action_space(e.agent_selection).n for e in envs) / len(envs)


def report(envs: Sequence[TextGameEnv], texts: Sequence[str], depth: int) -> str:
    counts = Counter(cause(env, text, depth) for env, text in zip(envs, texts, strict=True))
    lines = [f"{len(texts)} decisions:"]
    lines += [f"  {name}: {counts[name]} ({counts[name] / len(texts):.1%})" for name in CAUSES]
    named = counts[LEGAL] + counts[LEGAL_MALFORMED] + counts[ILLEGAL]
    if named:
        lines.append(f"legal among the {named} responses that name a move: "
                     f"{(counts[LEGAL] + counts[LEGAL_MALFORMED]) / named:.3f} "
                     f"(a uniform choice among all moves: {uniform_legal_share(envs):.3f})")
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", type=Path, required=True)
    parser.add_argument("--game", default="tic_tac_toe")
    parser.add_argument("--game-option", action="append", default=[], metavar="KEY=VALUE")
    parser.add_argument("--decisions", type=int, default=200)
    parser.add_argument("--depth", type=int, default=2)
    parser.add_argument("--max-new-tokens", type=int, default=192)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    from strat.engines import SamplingParams, build_engine

    options = dict(option.split("=", 1) for option in args.game_option)
    envs = decisions(args.game, args.decisions, args.seed, options)
    with build_engine("hf", args.model) as engine:
        prompts = [engine.encode_chat(build_messages(env, env.agent_selection, args.depth)) for env in envs]
        params = SamplingParams(max_tokens=args.max_new_tokens, temperature=1.0, top_p=1.0, seed=args.seed)
        texts = [g.text for g in engine.generate(prompts, params)]
    print(f"{args.game}, depth {args.depth}, model {args.model}")
    print(report(envs, texts, args.depth))


if __name__ == "__main__":
    main()
