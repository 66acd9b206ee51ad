"""`strat eval`: a policy against scripted opponents in both seats, its exploitability, format validity and
reasoning accuracy; or several policies head to head (payoff matrix, Elo). Writes eval.json, eval.md,
plots and an offline transcript viewer."""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from strat.config import ConfigError

if TYPE_CHECKING:
    from strat.policies import Policy
    from strat.records import ScoredEpisode
    from strat.report import EvalReport

# Games, torch and the engines are imported where they are used, so that registering this command
# keeps `strat --help` fast.


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
    import games
    from strat.comparison import ComparisonWeights, score_episodes
    from strat.evaluate import EXPLOITABLE_GAMES, cot_result, match_result, validity
    from strat.policies import ScriptedPolicy, play_games, seat_rotations
    from strat.records import ScoredEpisode
    from strat.report import EvalReport
    from strat.rollout import derive_seed

    game, options = policy.game, policy.game_options
    num_players = games.spec(game, **options).num_players
    players: list[Policy] = [policy, *(ScriptedPolicy(name, game, options) for name in opponents)]
    tables = [
        table
        for index, name in enumerate(opponents, start=1)
        for table in seat_rotations(f"{policy.name} vs {name}", 0, index, num_players, num_games, seed)
    ]
    episodes = play_games(game, options, players, tables, derive_seed(seed, "play"))
    by_opponent = {name: [e for e in episodes if e.group_id == f"{policy.name} vs {name}"] for name in opponents}
    scored = score_episodes(episodes, ComparisonWeights()) if policy.is_llm else []
    notes = []
    exploitability = None
    if game in EXPLOITABLE_GAMES and (not policy.is_llm or samples_per_infoset > 0):
        exploitability = policy.exploitability(samples_per_infoset, derive_seed(seed, "exploitability"), bootstrap)
    elif game in EXPLOITABLE_GAMES:
        notes.append("exploitability skipped: --samples-per-infoset 0")
    report = EvalReport(
        game=game,
        game_options=dict(options),
        seed=seed,
        policies=(policy.info,),
        matches=tuple(match_result(name, by_opponent[name]) for name in opponents),
        exploitability=exploitability,
        validity=validity(episodes),
        cot=cot_result(scored),
        notes=tuple(notes),
    )
    shown = scored or [ScoredEpisode(e) for e in episodes]
    return report, _first_per_group(shown, transcripts)


def head_to_head(
    policies: Sequence[Policy], num_games: int, seed: int = 0, bootstrap: int = 200, transcripts: int = 2
) -> tuple[EvalReport, list[ScoredEpisode]]:
    """Every pair of `policies` over the same deals in both seats: payoff matrix and Elo ratings."""
    import games
    from strat.comparison import ComparisonWeights, score_episodes
    from strat.evaluate import head_to_head_result
    from strat.policies import play_games, seat_rotations
    from strat.records import Episode, ScoredEpisode
    from strat.report import EvalReport
    from strat.rollout import derive_seed

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
    episodes = play_games(game, options, policies, tables, derive_seed(seed, "play"))
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
    )
    shown = scored or [ScoredEpisode(e) for e in episodes]
    return report, _first_per_group(shown, transcripts)


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


def _split(values: Sequence[str] | None) -> list[str]:
    return [part.strip() for value in values or () for part in value.split(",") if part.strip()]


def _default_out(policy: Policy, game: str, head: bool) -> Path:
    info = policy.info
    if not head and info.run_dir is not None:
        name = f"step_{info.step}" if info.step is not None else Path(info.checkpoint).name
        return Path(info.run_dir) / "eval" / name
    return Path("eval") / game / ("head_to_head" if head else policy.name)


def eval_command(
    policy: Annotated[
        str | None,
        typer.Option(help="Checkpoint directory, run directory (its latest checkpoint) or scripted policy name."),
    ] = None,
    game: Annotated[str | None, typer.Option(help="Game (default: the checkpoint's run's game).")] = None,
    opponents: Annotated[
        list[str] | None,
        typer.Option(help="Scripted opponents, repeated or comma-separated (default: all for the game)."),
    ] = None,
    games_per_opponent: Annotated[
        int, typer.Option("--games", min=1, help="Games per opponent (or pair), rounded up to whole seat rotations.")
    ] = 200,
    out: Annotated[
        Path | None, typer.Option(help="Output directory (default: RUN/eval/step_N, or eval/GAME/NAME).")
    ] = None,
    samples_per_infoset: Annotated[
        int, typer.Option(min=0, help="LLM moves sampled per information set for exploitability (0: skip).")
    ] = 16,
    bootstrap: Annotated[int, typer.Option(min=0, help="Bootstrap replicates for intervals.")] = 200,
    seed: Annotated[int, typer.Option(min=0, help="Seed of deals, sampling and bootstrap.")] = 0,
    backend: Annotated[str, typer.Option(help="Inference engine for checkpoints: hf or vllm.")] = "hf",
    transcripts: Annotated[int, typer.Option(min=0, help="Games per matchup shown in transcripts.html.")] = 4,
    head_to_head_policies: Annotated[
        list[str] | None,
        typer.Option("--head-to-head", help="Play these policies against each other (repeat, or comma-separate)."),
    ] = None,
) -> Path:
    """Evaluate a policy against scripted opponents, or several policies head to head."""
    from games.opponents import opponent_names
    from strat.policies import load_policy
    from strat.report import write_report

    if backend not in ("hf", "vllm"):
        raise ConfigError(f"--backend={backend!r}: unknown inference engine (allowed: hf, vllm)")
    contenders = _split(head_to_head_policies)
    if policy is None and not contenders:
        raise ConfigError("eval needs --policy P, or --head-to-head P1,P2,... with at least two policies")
    if policy is not None and contenders:
        raise ConfigError("give either --policy or --head-to-head, not both")
    if contenders and len(contenders) < 2:
        raise ConfigError(f"--head-to-head needs at least two policies, got {contenders}")
    loaded: list[Policy] = []
    try:
        for spec in contenders or [policy]:
            loaded.append(load_policy(spec, game or (loaded[0].game if loaded else None), backend=backend))
        first = loaded[0]
        if contenders:
            report, shown = head_to_head(loaded, games_per_opponent, seed, bootstrap, transcripts)
        else:
            chosen = _split(opponents) or opponent_names(first.game)
            allowed = opponent_names(first.game)
            unknown = [name for name in chosen if name not in allowed]
            if unknown:
                raise ConfigError(
                    f"--opponents: {', '.join(unknown)} not available for {first.game} (allowed: {', '.join(allowed)})"
                )
            report, shown = evaluate_policy(
                first, chosen, games_per_opponent, seed, samples_per_infoset, bootstrap, transcripts
            )
        target = out or _default_out(first, first.game, bool(contenders))
        run_dir = Path(first.info.run_dir) if not contenders and first.info.run_dir is not None else None
        write_report(report, target, shown, run_dir)
    finally:
        for item in loaded:
            item.close()
    typer.echo((target / "eval.md").read_text(), nl=False)
    typer.echo(f"\nwritten to {target}")
    return target
