"""Does the move read the reasoning written before it? In two-player Kuhn poker, at every information state, sample
responses from a model; keep each one's `<past>` section (the last line of which is the belief, "belief: player 1
King"), swap the card the belief names for the other card one does not hold, and let the model write the rest of the
response from each of the two pasts (its plan, prediction and move). If the move reads the belief, it bets (or calls)
more often after "they hold the lower card" than after "they hold the higher card":

    python experiments/does_the_move_read_its_reasoning/belief_swap.py --model <model dir> \
        [--responses 8] [--continuations 4] [--depth 1] [--max-new-tokens 160] [--seed 0] [--backend vllm]

Per information state it prints P(bet or call | belief: the lower card) minus P(bet or call | belief: the higher
card), averaged over the sampled pasts, with a Student-t 95% interval over them, and the same over every state's
pasts. A move that ignores the belief scores 0 (up to sampling); the process signal can only improve play through
the move if this is well away from 0. Pasts whose belief names no card one could face are left out (counted).
"""

from __future__ import annotations

import argparse
import math
import re
import statistics
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from scipy import stats

from strat.algorithm.reasoning import BELIEF_MARKER, build_messages, parse_response
from strat.eval.exploitability import decision_states, env_at

GAME = "kuhn_poker"
RANKS = ("Jack", "Queen", "King")
BET = 1
"""Kuhn's action 1: bet, or call facing a bet."""

Complete = Callable[[list[list[int]], int], list[str]]
"""(prompt token ids, one list per prompt; samples per prompt) -> the sampled continuations, prompt by prompt."""


@dataclass(frozen=True)
class StateEffect:
    """The belief swap at one information state."""

    info_state: str
    effects: tuple[float, ...]
    """Per kept past: P(bet | belief: lower card) - P(bet | belief: higher card) over its continuations."""
    skipped: int
    """Sampled responses with no `<past>` or no belief naming one of the two cards the opponent may hold."""


def swap_belief(past: str, own: str) -> tuple[str, str] | None:
    """`past` with its belief naming the lower and then the higher of the two cards other than `own`; None when the
    belief line names neither of them (exactly one card word is swapped: the belief's last one)."""
    low, high = [rank for rank in RANKS if rank != own]
    start = past.lower().rfind(BELIEF_MARKER)
    if start < 0:
        return None
    head, line = past[:start], past[start:]
    found = list(re.finditer(r"\b(Jack|Queen|King)\b", line, flags=re.IGNORECASE))
    if not found or found[-1].group(1).capitalize() not in (low, high):
        return None
    last = found[-1]
    return tuple(head + line[: last.start()] + card + line[last.end():] for card in (low, high))  # type: ignore[return-value]


def bet_share(prefix: str, continuations: Sequence[str], depth: int) -> float:
    """The share of `continuations` (each written after `prefix`) whose move is "bet": of those that name a legal
    move ("pass" or "bet"); nan if none does."""
    moves = [(parse_response(prefix + text, depth).sections.action or "").strip().lower() for text in continuations]
    named = [move for move in moves if move in ("pass", "bet")]
    return sum(move == "bet" for move in named) / len(named) if named else math.nan


def t_interval(values: Sequence[float]) -> tuple[float, float, float]:
    """Mean and its two-sided 95% Student-t interval (nan without values, infinite for one)."""
    if not values:
        return math.nan, math.nan, math.nan
    mean = statistics.fmean(values)
    if len(values) == 1:
        return mean, -math.inf, math.inf
    half = float(stats.t.ppf(0.975, len(values) - 1)) * statistics.stdev(values) / math.sqrt(len(values))
    return mean, mean - half, mean + half


def belief_effects(encode: Callable[[list[dict[str, str]]], list[int]], tokenize: Callable[[str], list[int]],
                   complete: Complete, responses: int, continuations: int, depth: int) -> list[StateEffect]:
    """The swap at each of Kuhn's information states (module docstring)."""
    results = []
    for key, _, state in decision_states(GAME, ()):
        env, agent = env_at(GAME, {}, state)
        own = env.private_info(agent)
        prompt = encode(build_messages(env, agent, depth))
        pasts, skipped = [], 0
        for text in complete([prompt], responses)[0:responses]:
            past = parse_response(text, depth).sections.past
            swapped = swap_belief(past, own) if past is not None else None
            if swapped is None:
                skipped += 1
            else:
                pasts.append(swapped)
        prefixes = [f"<past>{past}</past>\n" for pair in pasts for past in pair]
        texts = complete([prompt + tokenize(prefix) for prefix in prefixes], continuations) if prefixes else []
        effects = []
        for index in range(len(pasts)):
            low_prefix, high_prefix = prefixes[2 * index], prefixes[2 * index + 1]
            low = bet_share(low_prefix, texts[2 * index * continuations:(2 * index + 1) * continuations], depth)
            high = bet_share(high_prefix, texts[(2 * index + 1) * continuations:(2 * index + 2) * continuations],
                             depth)
            if not (math.isnan(low) or math.isnan(high)):
                effects.append(low - high)
        results.append(StateEffect(key, tuple(effects), skipped))
    return results


def engine_complete(engine, max_tokens: int, seed: int) -> Complete:  # noqa: ANN001
    """A `Complete` over a Strat engine: every prompt repeated `samples` times, seeds fixed per call."""
    from strat.engines.base import SamplingParams

    calls = [0]

    def complete(prompts: list[list[int]], samples: int) -> list[str]:
        calls[0] += 1
        batch = [prompt for prompt in prompts for _ in range(samples)]
        params = SamplingParams(max_tokens=max_tokens, temperature=1.0, seed=seed * 1_000_003 + calls[0])
        return [generation.text for generation in engine.generate(batch, params)]

    return complete


def main() -> None:
    from strat.engines import build_engine
    from strat.process_env import apply_defaults

    apply_defaults()
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", required=True, help="a model directory (a checkpoint's step_N, a warm start)")
    parser.add_argument("--responses", type=int, default=8, help="sampled pasts per information state")
    parser.add_argument("--continuations", type=int, default=4, help="completions after each of the two pasts")
    parser.add_argument("--depth", type=int, default=1)
    parser.add_argument("--max-new-tokens", type=int, default=160)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--backend", default="vllm", choices=("vllm", "hf"))
    args = parser.parse_args()
    engine = build_engine(args.backend, args.model, max_model_len=1024, seed=args.seed)
    try:
        tokenizer = engine.tokenizer
        results = belief_effects(engine.encode_chat, lambda text: tokenizer.encode(text, add_special_tokens=False),
                                 engine_complete(engine, args.max_new_tokens, args.seed), args.responses,
                                 args.continuations, args.depth)
    finally:
        engine.close()
    print(f"{args.model}: P(bet or call | belief: lower card) - P(... | belief: higher card), "
          f"{args.responses} pasts x {args.continuations} continuations each")
    everything = []
    for result in results:
        mean, low, high = t_interval(result.effects)
        everything.extend(result.effects)
        print(f"  {result.info_state:>4}: {mean:+.3f} [{low:+.3f}, {high:+.3f}] over {len(result.effects)} pasts"
              f" ({result.skipped} without a usable belief)")
    mean, low, high = t_interval(everything)
    print(f"all states: {mean:+.3f} [{low:+.3f}, {high:+.3f}] over {len(everything)} pasts")


if __name__ == "__main__":
    main()
