"""How fast the configured learner teaches the policy a card-dependent move on Kuhn poker, given perfect advantages.

    python experiments/can_the_learner_learn_the_card/card_learning.py
        [--config configs/kuhn_poker_tiny.yaml] [--steps 12] [--samples 8] [--target card|bet|pass] [--openings]
        [key=value ...]

RL on the tiny model from the `contrarian` warm start drifts to betting with every card (final exploitability ~0.33,
the floor of any policy whose bet rate does not depend on the card). This separates the learner from the learning
signal: it starts from the config's initial policy (the cached warm start), samples `--samples` responses at each of
Kuhn poker's 12 information sets (hf engine, the config's reasoning depth, temperature and token budget), and gives
each response an oracle return instead of playing it out: +1 when its move is the target's, -1 when not, the format
penalty when it is invalid. `card` (the default) is a card-only target: bet or call with the King, check or fold
with the Jack and the Queen. Advantages are group-relative per information set (the loop's same-deal groups), and
each step is one `PolicyLearner.update` with the config's loss, learning rate and optimizer, the weights then loaded
into the engine.

Per step it prints the validity, the fraction of target moves and each card's bet rate; at the end, how far the
bet log-odds moved from step 0 (the baseline, measured in the same run) to the last `--pool` steps pooled, in the
direction shared by every card and in the card-specific direction the target asks for (King against the mean of Jack and Queen). With perfect
advantages a learner that can learn the game moves the card-specific log-odds; one that moves mostly the shared
one cannot get below 0.333 whatever the signal. Each figure comes with its 95% half-width from sampling alone
(8 samples x 4 information sets per card and step give about ± 1.4 on the card-specific figure at the defaults):
two variants whose figures lie within it of each other are not told apart by one run. `--samples` narrows it, but it
is also the batch each update learns from (at `--samples 32` the default moved the card-specific figure by
+1.72 ± 0.66, at 8 by -0.59 ± 1.43, from the `contrarian` warm start with one step per update, the defaults then):
compare variants at the same value.
"""

from __future__ import annotations

import argparse
import dataclasses
import math
import random
import time
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

from strat.process_env import apply_defaults

apply_defaults()  # one OpenMP thread and quiet logs, before torch or vLLM is imported (`import strat` sets nothing)

import torch  # noqa: E402

from games.kuhn_poker import BET  # noqa: E402
from strat.algorithm.advantage import AdvantageConfig, normalise  # noqa: E402
from strat.algorithm.reasoning import build_messages, decide, parse_response  # noqa: E402
from strat.algorithm.records import TrainSample  # noqa: E402
from strat.config_loading import load_config  # noqa: E402
from strat.engines import Engine, Generation, SamplingParams, build_engine  # noqa: E402
from strat.eval.exploitability import decision_states, env_at  # noqa: E402
from strat.train.learner import PolicyLearner  # noqa: E402
from strat.train.settings import learner_settings  # noqa: E402
from strat.train.trainer import Trainer  # noqa: E402

if TYPE_CHECKING:
    from games import TextGameEnv

GAME = "kuhn_poker"
KING = 2


def target_bets(card: int, target: str) -> bool:
    """The oracle's move: bet (True) or pass."""
    if target == "card":
        return card == KING
    return target == "bet"


def log_odds(bets: int, total: int) -> float:
    """Log-odds of a bet rate, with half a count added on each side so that 0 and 1 stay finite."""
    return math.log((bets + 0.5) / (total - bets + 0.5))


def log_odds_variance(bets: int, total: int) -> float:
    """Sampling variance of `log_odds(bets, total)`: 1/(b + 1/2) + 1/(n - b + 1/2) (the delta method, with the
    same half counts)."""
    return 1.0 / (bets + 0.5) + 1.0 / (total - bets + 0.5)


@dataclasses.dataclass(frozen=True)
class Movement:
    """How far the bet log-odds moved between two steps, each figure with its 95% half-width from sampling alone."""

    per_card: tuple[float, ...]
    per_card_ci: tuple[float, ...]
    shared: float
    shared_ci: float
    specific: float
    """The King's change against the mean of the Jack's and the Queen's."""
    specific_ci: float


def movement(first: Sequence[tuple[int, int]], last: Sequence[tuple[int, int]]) -> Movement:
    """The change of each card's bet log-odds from `first` to `last` ((bets, valid moves) per card, Jack to King),
    its mean over the cards (shared) and the King's against the others' (card-specific), with 95% half-widths:
    the two steps' samples are independent, so their variances add."""
    moved = [log_odds(*b) - log_odds(*a) for a, b in zip(first, last, strict=True)]
    var = [log_odds_variance(*a) + log_odds_variance(*b) for a, b in zip(first, last, strict=True)]
    z = 1.96
    return Movement(
        per_card=tuple(moved),
        per_card_ci=tuple(z * math.sqrt(v) for v in var),
        shared=sum(moved) / 3,
        shared_ci=z * math.sqrt(sum(var)) / 3,
        specific=moved[KING] - (moved[0] + moved[1]) / 2,
        specific_ci=z * math.sqrt(var[KING] + (var[0] + var[1]) / 4),
    )


def pooled(counts: Sequence[Sequence[tuple[int, int]]]) -> list[tuple[int, int]]:
    """Several steps' (bets, valid moves) per card summed card by card: the bet rate of the policies of that stretch,
    on all their samples (one step's 32 samples per card give a half-width of about ± 0.7 on a card's log-odds, so one
    late step can read low or high by chance)."""
    return [(sum(step[card][0] for step in counts), sum(step[card][1] for step in counts)) for card in range(3)]


@dataclasses.dataclass
class OracleStats:
    """What one step's responses did: valid ones, those with the target's move, bets and valid moves per card."""

    valid: int = 0
    hits: int = 0
    bets: list[int] = dataclasses.field(default_factory=lambda: [0, 0, 0])
    counted: list[int] = dataclasses.field(default_factory=lambda: [0, 0, 0])


def oracle_samples(
    envs: Sequence[TextGameEnv],
    generations: Sequence[Generation],
    per_infoset: int,
    depth: int,
    target: str,
    penalty: float,
    rng: random.Random,
    tag: str = "",
) -> tuple[list[TrainSample], OracleStats]:
    """Learner samples for `per_infoset` consecutive generations at each env's decision: return +1 for the target's
    move, -1 for the other, `penalty` for an invalid response; advantages (R - mean) / std within each information
    set (0 when all are equal; `strat.algorithm.advantage.normalise`, as the loop's same-deal groups)."""
    stats, samples = OracleStats(), []
    for index, env in enumerate(envs):
        agent = env.agent_selection
        card = env.card(agent)
        chunk = generations[index * per_infoset : (index + 1) * per_infoset]
        returns = []
        for generation in chunk:
            decision = decide(parse_response(generation.text, depth), env, agent, rng, penalty)
            if not decision.valid:
                returns.append(penalty)
                continue
            bet = decision.action == BET
            hit = bet == target_bets(card, target)
            stats.valid += 1
            stats.hits += hit
            stats.bets[card] += bet
            stats.counted[card] += 1
            returns.append(1.0 if hit else -1.0)
        advantages = normalise(torch.tensor(returns, dtype=torch.float64), AdvantageConfig().eps).tolist()
        for j, (generation, advantage) in enumerate(zip(chunk, advantages, strict=True)):
            samples.append(
                TrainSample(
                    f"{tag}i{index}",
                    f"{tag}i{index}-{j}",
                    agent,
                    0,
                    tuple(generation.prompt_token_ids),
                    tuple(generation.token_ids),
                    tuple(generation.logprobs),
                    advantage,
                )
            )
    return samples, stats


def probe_envs(openings: bool) -> list[TextGameEnv]:
    """One env at each of Kuhn poker's 12 information sets, or only at player 0's opening decision (one per card)."""
    states = [state for _, _, state in decision_states(GAME, ())]
    if openings:
        states = [state for state in states if len(state.history()) == 2]  # the two deals, no move yet
    return [env_at(GAME, {}, state)[0] for state in states]


def run_probe(
    engine: Engine,
    learner: PolicyLearner,
    envs: Sequence[TextGameEnv],
    params: SamplingParams,
    depth: int,
    steps: int,
    samples: int,
    target: str,
    penalty: float,
    seed: int,
    report: Callable[[int, OracleStats, int, float], None] | None = None,
) -> list[list[tuple[int, int]]]:
    """`steps` updates on oracle samples, each sampled from the weights of the update before; (bets, valid moves)
    per card (Jack to King) sampled before each update and after the last (steps + 1 entries). `report(step,
    stats, responses, seconds)` is called after each sampling."""
    prompts = [engine.encode_chat(build_messages(env, env.agent_selection, depth)) for env in envs]
    rng = random.Random(seed)
    counts = []
    for step in range(steps + 1):
        started = time.perf_counter()
        batch = [prompt for prompt in prompts for _ in range(samples)]
        generations = engine.generate(batch, dataclasses.replace(params, seed=seed * 1000 + step))
        samples_, stats = oracle_samples(envs, generations, samples, depth, target, penalty, rng, tag=f"s{step}")
        counts.append([(stats.bets[card], stats.counted[card]) for card in range(3)])
        if step < steps:
            learner.update(samples_)
            engine.load_state_dict(learner.state_dict())
        if report is not None:
            report(step, stats, len(batch), time.perf_counter() - started)
    return counts


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--config", default="configs/kuhn_poker_tiny.yaml")
    parser.add_argument("--steps", type=int, default=12)
    parser.add_argument("--samples", type=int, default=8, help="responses per information set and step")
    parser.add_argument("--target", choices=("card", "bet", "pass"), default="card")
    parser.add_argument(
        "--openings", action="store_true", help="only player 0's opening decision (3 information sets, one per card)"
    )
    parser.add_argument(
        "--pool", type=int, default=3, help="compare step 0 with the last POOL steps' samples pooled (1: the last only)"
    )
    parser.add_argument("overrides", nargs="*", help="key=value overrides of the config")
    args = parser.parse_args()
    config = load_config(args.config, list(args.overrides))
    if config.game.name != GAME:
        parser.error(f"the oracle is written for {GAME}, not {config.game.name}")

    model = Trainer.initial_model_path(config)
    engine = build_engine("hf", model, dtype="float32", max_model_len=config.engine.max_model_len)
    learner = PolicyLearner(model, learner_settings(config))
    envs = probe_envs(args.openings)
    params = SamplingParams(
        max_tokens=config.reasoning.max_new_tokens,
        temperature=config.reasoning.temperature,
        top_p=config.reasoning.top_p,
    )
    print(
        f"model {model}; target {args.target}; lr {config.algorithm.lr}; {args.samples} samples x {len(envs)} infosets"
    )
    print("step | valid | target moves | bet rate J | Q | K | seconds")

    def report(step: int, stats: OracleStats, responses: int, seconds: float) -> None:
        rates = " | ".join(f"{stats.bets[c] / max(stats.counted[c], 1):.2f}" for c in range(3))
        print(
            f"{step} | {stats.valid / responses:.2f} | {stats.hits / max(stats.valid, 1):.2f} | {rates} | "
            f"{seconds:.1f}",
            flush=True,
        )

    counts = run_probe(
        engine,
        learner,
        envs,
        params,
        config.reasoning.depth,
        args.steps,
        args.samples,
        args.target,
        config.algorithm.format_penalty,
        config.run.seed,
        report,
    )
    moved = movement(counts[0], pooled(counts[-args.pool :]))
    cards = ", ".join(f"{m:+.2f} ± {ci:.2f}" for m, ci in zip(moved.per_card, moved.per_card_ci, strict=True))
    print(f"\nbet log-odds moved from step 0 to the last {args.pool} steps pooled (J, Q, K; ± 95%): {cards}")
    print(
        f"shared by every card: {moved.shared:+.2f} ± {moved.shared_ci:.2f}; King against Jack and Queen "
        f"(card-specific): {moved.specific:+.2f} ± {moved.specific_ci:.2f}"
    )


if __name__ == "__main__":
    main()
