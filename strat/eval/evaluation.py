"""A policy's evaluation: against scripted opponents in every seat (returns, win rates, exploitability, format
validity, reasoning accuracy), or several policies head to head (payoff matrix, Elo)."""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

import games
from games.base import TextGameEnv
from strat.algorithm.comparison import ComparisonWeights, score_episodes
from strat.algorithm.records import Episode, ScoredEpisode
from strat.errors import ConfigError
from strat.eval.exploitability import estimate_exploitability, exact_estimate, exploitable, remembered, seat_sampler
from strat.eval.policies import Policy, ScriptedPolicy, play_tables, seat_rotations
from strat.eval.report import EvalReport, JointProfile
from strat.eval.stats import cot_result, head_to_head_result, match_result, truncation, validity
from strat.play.rollout import derive_seed

TRUNCATION_NOTE = 0.1
"""The share of the policy's responses cut off at the token limit from which the report says so."""


def truncation_note(share: float, max_new_tokens: int | None) -> str:
    """What the report says when many responses stopped at the token limit: a cut-off response has no
    `<action>`, so it plays the fallback, and the figures are the fallback's rather than the model's."""
    limit = f"the limit of {max_new_tokens} new tokens" if max_new_tokens is not None else "the token limit"
    return (f"{share:.0%} of the policy's responses stopped at {limit} before they ended; a cut-off response "
            "names no action and plays the fallback, so these figures are partly the fallback's: raise "
            "--max-new-tokens (a bare model directory gets reasoning.max_new_tokens' default)")


def evaluate_policy(
    policy: Policy,
    opponents: Sequence[str],
    num_games: int,
    seed: int = 0,
    samples_per_infoset: int = 16,
    bootstrap: int = 200,
    transcripts: int = 4,
) -> tuple[EvalReport, list[ScoredEpisode]]:
    """`policy` against each scripted opponent (`num_games` each, seats rotated over the same deals), plus
    its exploitability on poker games; returns the report and a few scored games per opponent to show."""

    game, options = policy.game, policy.game_options
    num_players = games.spec(game, **options).num_players
    players: list[Policy] = [policy, *(ScriptedPolicy(name, game, options) for name in opponents)]
    tables = [
        table
        for index, name in enumerate(opponents, start=1)
        for table in seat_rotations(f"{policy.name} vs {name}", 0, index, num_players, num_games, seed)
    ]
    episodes = play_tables(game, options, players, tables, derive_seed(seed, "play"))
    by_opponent = {name: [e for e in episodes if e.group_id == f"{policy.name} vs {name}"] for name in opponents}
    scored = score_episodes(episodes, ComparisonWeights()) if policy.is_llm else []
    notes = []
    exploitability = None
    computable = exploitable(game, options)
    if computable and (not policy.is_llm or samples_per_infoset > 0):
        exploitability = policy.exploitability(samples_per_infoset, derive_seed(seed, "exploitability"), bootstrap)
    elif computable:
        notes.append("exploitability skipped: --samples-per-infoset 0")
    truncated = truncation(episodes)
    if truncated is not None and truncated.value >= TRUNCATION_NOTE:
        notes.append(truncation_note(truncated.value, policy.info.max_new_tokens))
    report = EvalReport(
        game=game,
        game_options=dict(options),
        seed=seed,
        policies=(policy.info,),
        matches=tuple(match_result(name, by_opponent[name]) for name in opponents),
        exploitability=exploitability,
        validity=validity(episodes),
        truncated=truncated,
        cot=cot_result(scored),
        notes=tuple(notes),
    )
    shown = scored or [ScoredEpisode(e) for e in episodes]
    return report, _first_per_group(shown, transcripts)


def head_to_head(
    policies: Sequence[Policy], num_games: int, seed: int = 0, bootstrap: int = 200, transcripts: int = 2,
    samples_per_infoset: int = 0,
) -> tuple[EvalReport, list[ScoredEpisode]]:
    """Every pair of `policies` over the same deals in both seats: payoff matrix and Elo ratings; with
    `samples_per_infoset` > 0 in Kuhn and Leduc poker, the NashConv of every joint profile (`joint_profiles`)."""

    game, options = policies[0].game, policies[0].game_options
    for other in policies[1:]:
        if (other.game, other.game_options) != (game, options):
            raise ConfigError(
                f"head to head: {other.name} plays {other.game} {other.game_options}, {policies[0].name} plays "
                f"{game} {options}"
            )
    num_players = games.spec(game, **options).num_players
    if num_players != 2:
        raise ConfigError(f"head to head needs a two-player game; {game} with {options} has {num_players} players")
    names = _unique_names([p.name for p in policies])
    pairs = [(i, j) for i in range(len(policies)) for j in range(i + 1, len(policies))]
    tables = [
        table
        for i, j in pairs
        for table in seat_rotations(f"{names[i]} vs {names[j]}", i, j, num_players, num_games, seed)
    ]
    episodes = play_tables(game, options, policies, tables, derive_seed(seed, "play"))
    grouped: dict[tuple[int, int], list[Episode]] = {pair: [] for pair in pairs}
    labels = {f"{names[i]} vs {names[j]}": (i, j) for i, j in pairs}
    for episode in episodes:
        grouped[labels[episode.group_id]].append(episode)
    # Transcripts score the reasoning of whichever seats an LLM plays.
    seats = {table.episode_id: table.seats for table in tables}
    llm_episodes = [
        dataclasses.replace(e, ego_agents=tuple(a for a, s in zip(e.agents, seats[e.episode_id]) if policies[s].is_llm))
        for e in episodes
        if any(policies[s].is_llm for s in seats[e.episode_id])
    ]
    scored = score_episodes(llm_episodes, ComparisonWeights()) if llm_episodes else []
    report = EvalReport(
        game=game,
        game_options=dict(options),
        seed=seed,
        policies=tuple(p.info for p in policies),
        head_to_head=head_to_head_result(names, grouped, seed=seed, bootstrap=bootstrap),
        joint=joint_profiles(policies, names, samples_per_infoset, derive_seed(seed, "joint"), bootstrap)
        if samples_per_infoset > 0 and exploitable(game, options) else (),
    )
    shown = scored or [ScoredEpisode(e) for e in episodes]
    return report, _first_per_group(shown, transcripts)


def joint_profiles(policies: Sequence[Policy], names: Sequence[str], samples_per_infoset: int, seed: int,
                   bootstrap: int) -> tuple[JointProfile, ...]:
    """Every joint profile of a two-player game, policy i as player 0 and policy j as player 1 (i = j: the policy in
    both seats, its own exploitability), with its exploitability estimated from `samples_per_infoset` moves of each
    policy at each information state of its seat. Each policy is sampled once per state, all profiles score the same
    samples. A profile of two scripted policies is exact."""
    game, options = policies[0].game, policies[0].game_options
    samplers = [remembered(policy.sampler(derive_seed(seed, index))) for index, policy in enumerate(policies)]
    out = []
    for i, first in enumerate(names):
        for j, second in enumerate(names):
            pair = (policies[i], policies[j])
            if all(isinstance(policy, ScriptedPolicy) for policy in pair):
                def probs(env: TextGameEnv, agent: str, pair: tuple[Policy, ...] = pair) -> dict[int, float]:
                    return pair[env.possible_agents.index(agent)].action_probs(env, agent)

                estimate = exact_estimate(game, probs, options)
            else:
                estimate = estimate_exploitability(game, seat_sampler([samplers[i], samplers[j]]), samples_per_infoset,
                                                   seed=derive_seed(seed, i, j), bootstrap=bootstrap, options=options)
            out.append(JointProfile((first, second), estimate))
    return tuple(out)


def _unique_names(names: list[str]) -> list[str]:
    seen: dict[str, int] = {}
    out = []
    for name in names:
        seen[name] = seen.get(name, 0) + 1
        out.append(name if seen[name] == 1 else f"{name}#{seen[name]}")
    return out


def _first_per_group(scored: Sequence[ScoredEpisode], count: int) -> list[ScoredEpisode]:
    kept: dict[str, list[ScoredEpisode]] = {}
    for item in scored:
        group = kept.setdefault(item.episode.group_id, [])
        if len(group) < count:
            group.append(item)
    return [item for group in kept.values() for item in group]
