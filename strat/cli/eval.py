"""`strat eval`: a policy against scripted opponents in both seats, or several policies head to head
(`strat.eval.evaluation`). Writes eval.json, eval.md, plots and an offline transcript viewer."""

from __future__ import annotations

import re
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from games.opponents import opponent_names, reference_opponents
from strat.cli.app import game_options
from strat.errors import ConfigError

if TYPE_CHECKING:
    from strat.eval.policies import Policy, ReasoningOverrides


def _split(values: Sequence[str] | None) -> list[str]:
    return [part.strip() for value in values or () for part in value.split(",") if part.strip()]


def _default_out(policy: Policy, game: str, head: bool) -> Path:
    info = policy.info
    if not head and info.run_dir is not None:
        name = f"step_{info.step}" if info.step is not None else Path(info.checkpoint).name
        return Path(info.run_dir) / "eval" / name
    # One folder per policy: a Hub name's `/` and `@` (org/name@<commit>) become `--`, as in the Hub cache's folders.
    return Path("eval") / game / ("head_to_head" if head else re.sub(r"[^\w.-]+", "--", policy.name))


def cotrained_policy_dirs(run: str) -> list[tuple[str, str]]:
    """(name, folder) of each co-trained policy of the run at `run` that has checkpoints (RUN/policies/NAME), by
    name; none for anything else (a checkpoint, a Hub name, a scripted player)."""
    root = Path(run) / "policies"
    return [(p.name, str(p)) for p in sorted(root.iterdir()) if (p / "checkpoints").is_dir()] if root.is_dir() else []


def cotrained_policy_dir(run: str | None, name: str) -> str:
    """`--policy RUN --policy-name NAME`: the co-trained policy's own folder in the run (a run directory of its own:
    config.yaml and checkpoints/); a missing one is refused naming the run's co-trained policies."""
    if run is None:
        raise ConfigError(f"--policy-name={name}: give the run with --policy RUN")
    found = dict(cotrained_policy_dirs(run))
    if name not in found:
        raise ConfigError(f"--policy-name={name}: {run} has no co-trained policy of that name"
                          f" ({', '.join(found) if found else 'it has none'})")
    return found[name]


def eval_command(
    policy: Annotated[
        str | None,
        typer.Option(
            help="Checkpoint directory, run directory (its latest checkpoint), Hugging Face Hub name "
            "(org/name or org/name@revision, from the cache or downloaded) or scripted policy name."
        ),
    ] = None,
    policy_name: Annotated[
        str | None,
        typer.Option(help="With --policy RUN of a run with co-trained policies: evaluate only the one of this name"
                     " (RUN/policies/NAME, its latest checkpoint); without it every policy of the run is evaluated,"
                     " the first, then each co-trained one (each report in its own folder)."),
    ] = None,
    game: Annotated[str | None, typer.Option(help="Game (default: the checkpoint's run's game).")] = None,
    opponents: Annotated[
        list[str] | None,
        typer.Option(help="Scripted opponents, repeated or comma-separated (default: random and the game's references:"
                     " heuristic, equilibrium, minimax, where it has them; the weak players a warm start imitates"
                     " are played when named)."),
    ] = None,
    games_per_opponent: Annotated[
        int, typer.Option("--games", min=1, help="Games per opponent (or pair), rounded up to whole seat rotations.")
    ] = 200,
    out: Annotated[
        Path | None,
        typer.Option(help="Output directory (default: RUN/eval/step_N, or eval/GAME/NAME, where a Hub name "
                     "org/name@rev is org--name--rev; for a run with co-trained policies, OUT/policy and OUT/NAME)."),
    ] = None,
    samples_per_infoset: Annotated[
        int | None,
        typer.Option(
            min=0,
            help="LLM moves sampled per information set for exploitability, and head to head for every joint "
            "profile's NashConv (0: skip; default: the run's eval.samples_per_infoset, else 16).",
        ),
    ] = None,
    bootstrap: Annotated[int, typer.Option(min=0, help="Bootstrap replicates for intervals.")] = 200,
    seed: Annotated[int, typer.Option(min=0, help="Seed of deals, sampling and bootstrap.")] = 0,
    backend: Annotated[
        str | None, typer.Option(help="Inference engine for checkpoints: vllm or hf (default: vllm where installed).")
    ] = None,
    transcripts: Annotated[int, typer.Option(min=0, help="Games per matchup shown in transcripts.html.")] = 4,
    head_to_head_policies: Annotated[
        list[str] | None,
        typer.Option("--head-to-head", help="Play these policies against each other (repeat, or comma-separate)."),
    ] = None,
    depth: Annotated[
        int | None, typer.Option(min=0, max=2, help="Reasoning depth of an LLM's prompts (default: its run's, else 2).")
    ] = None,
    game_option: Annotated[
        list[str] | None,
        typer.Option(help="Game option as key=value, e.g. players=3 (repeat; default: the run's options)."),
    ] = None,
    max_new_tokens: Annotated[
        int | None, typer.Option(min=1, help="Most tokens of an LLM's response (default: its run's, else 128).")
    ] = None,
    temperature: Annotated[
        float | None, typer.Option(help="Sampling temperature of an LLM, above 0 (default: its run's, else 1.0).")
    ] = None,
) -> Path:
    """Evaluate a policy against scripted opponents, or several policies head to head."""
    # Deferred: torch and the engines cost seconds to import, and `strat --help` registers this command.
    from strat.engines import default_backend
    from strat.eval.policies import ReasoningOverrides

    backend = backend or default_backend()
    if backend not in ("hf", "vllm"):
        raise ConfigError(f"--backend={backend!r}: unknown inference engine (allowed: hf, vllm)")
    contenders = _split(head_to_head_policies)
    if policy_name is not None:
        policy = cotrained_policy_dir(policy, policy_name)
    if policy is None and not contenders:
        raise ConfigError("eval needs --policy P, or --head-to-head P1,P2,... with at least two policies")
    if policy is not None and contenders:
        raise ConfigError("give either --policy or --head-to-head, not both")
    if contenders and len(contenders) < 2:
        raise ConfigError(f"--head-to-head needs at least two policies, got {contenders}")
    options = game_options(game_option)
    overrides = ReasoningOverrides(depth=depth, max_new_tokens=max_new_tokens, temperature=temperature)
    if contenders:
        evaluations = [(contenders, out)]
    else:
        # A run with co-trained policies: each of its policies in turn (the first, then each by name).
        assert policy is not None  # checked above
        others = cotrained_policy_dirs(policy) if policy_name is None else []
        evaluations = [([policy], out / "policy" if out is not None and others else out)]
        evaluations += [([folder], out / name if out is not None else None) for name, folder in others]
    targets = []
    for specs, target in evaluations:
        targets.append(_evaluate(specs, bool(contenders), target, game, options, backend, overrides,
                                 _split(opponents), games_per_opponent, samples_per_infoset, bootstrap, seed,
                                 transcripts))
        typer.echo((targets[-1] / "eval.md").read_text(), nl=False)
        typer.echo(f"\nwritten to {targets[-1]}")
    return targets[0]


def _evaluate(specs: list[str], head: bool, out: Path | None, game: str | None, options: dict[str, object],
              backend: str, overrides: ReasoningOverrides, opponents: list[str], games_per_opponent: int,
              samples_per_infoset: int | None, bootstrap: int, seed: int, transcripts: int) -> Path:
    """One evaluation (`specs`: one policy against the scripted players, or several head to head); its folder."""
    from strat.eval.evaluation import evaluate_policy, head_to_head
    from strat.eval.policies import load_policy
    from strat.eval.report import write_report

    loaded: list[Policy] = []
    try:
        for spec in specs:
            chosen_game = game or (loaded[0].game if loaded else None)
            loaded.append(load_policy(spec, chosen_game, options, backend=backend, overrides=overrides))
        first = loaded[0]
        samples = first.samples_per_infoset if samples_per_infoset is None else samples_per_infoset
        if head:
            report, shown = head_to_head(loaded, games_per_opponent, seed, bootstrap, transcripts, samples)
        else:
            allowed = opponent_names(first.game, **first.game_options)
            chosen = opponents or reference_opponents(first.game, **first.game_options)
            unknown = [name for name in chosen if name not in allowed]
            if unknown:
                raise ConfigError(
                    f"--opponents: {', '.join(unknown)} not available for {first.game} (allowed: {', '.join(allowed)})"
                )
            report, shown = evaluate_policy(first, chosen, games_per_opponent, seed, samples, bootstrap, transcripts)
        target = out or _default_out(first, first.game, head)
        run_dir = Path(first.info.run_dir) if not head and first.info.run_dir is not None else None
        write_report(report, target, shown, run_dir)
    finally:
        for item in loaded:
            item.close()
    return target
