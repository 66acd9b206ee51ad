"""`strat check`, `strat config-reference`, `strat init-model`, `strat pretrain`, `strat sft`, `strat train`: a
config and its reference, a model, its rules pretraining and warm start, and a run.

torch, transformers, Ray and the trainer are imported inside the verbs that need them: they cost seconds, and
`strat --help` registers every verb."""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path
from typing import Annotated, Any

import typer

import games
from strat.cli.app import ConfigArg, OverridesArg, game_options, load
from strat.cli.cluster import CLUSTER_HELP, plan_cluster
from strat.cluster.memory import format_memory, memory_plan_for
from strat.cluster.placement import needs_placement
from strat.config import policy_actors_config, to_yaml
from strat.config_reference import reference_markdown
from strat.errors import UserError
from strat.eval.summaries import record_provenance
from strat.model import tiny as tiny_model

StageOutArg = Annotated[
    Path | None, typer.Option(help="Output directory (default: the shared cache, reused by train).")
]


def check(
    config: ConfigArg,
    overrides: OverridesArg = None,
    cluster: Annotated[str | None, typer.Option(help=f"Also plan on this cluster: {CLUSTER_HELP}")] = None,
) -> None:
    """Validate a config, check that the game's longest prompt fits the context (in each policy's own tokenizer) and
    that each fixed policy's checkpoint is there, and print the resolved result (every default filled in); the
    context figures, the other policies and, for a run on GPUs, the memory estimate go to stderr."""
    # Deferred for start-up cost (transformers; see the module docstring).
    from strat.train.context_check import check_context, context_summary
    from strat.train.fixed_policies import resolve_fixed_policies

    resolved = load(config, overrides)
    fixed = resolve_fixed_policies(resolved)
    found = check_context(resolved, fixed)
    memory = None
    if cluster is not None:
        memory = plan_cluster(config, list(overrides or []), resolved, (), cluster)
    elif needs_placement(resolved):  # a run on GPUs
        memory = format_memory(memory_plan_for(resolved, resolved.model.path, None))
    typer.echo(to_yaml(resolved), nl=False)
    typer.echo(context_summary(found, resolved), err=True)
    for policy in fixed:
        typer.echo(f"fixed policy {policy.name}: {policy.source}", err=True)
    for policy in resolved.policies:
        if policy.train:
            own = {**policy.algorithm.model_dump(exclude_none=True), **({"lr": policy.lr} if policy.lr else {})}
            settings = ", ".join(f"{key} {value}" for key, value in own.items()) or "the run's algorithm settings"
            ranks = policy_actors_config(resolved, policy.name).resources.learner_world_size
            typer.echo(f"co-trained policy {policy.name}: from {policy.model}, through the run's stages (rules"
                       f" pretraining, warm start) where enabled, with a learner of its own ({settings}"
                       f"{f'; {ranks} ranks' if ranks > 1 else ''})", err=True)
    if memory is not None:
        typer.echo(memory, err=True)


def init_model(
    game: Annotated[str, typer.Option(help="Game whose text the tokenizer is trained on.")] = "kuhn_poker",
    out: Annotated[Path, typer.Option(help="Output directory (Hugging Face format, safetensors).")] = Path(
        "models/tiny_kuhn_poker"
    ),
    seed: Annotated[int, typer.Option(help="Seed of the random weights.")] = 0,
    game_option: Annotated[
        list[str] | None,
        typer.Option(help="A text option of the game as key=value, e.g. move_names=situational (repeat): the "
                          "tokenizer is trained on the text it makes, as a config's `tiny:<game>` model is."),
    ] = None,
) -> None:
    """Build a tiny Qwen2-architecture model offline: tokenizer from the game's text, random weights."""
    if game not in games.names():
        raise UserError(f"unknown game {game!r} (allowed: {', '.join(games.names())})")
    options = game_options(game_option)
    text = games.text_options(game)
    other = sorted(set(options) - set(text))
    if other:
        raise UserError(f"--game-option {other[0]}: not a text option of {game} (its text options: "
                        f"{', '.join(text) or 'none'}); the tiny model's tokenizer depends on those only")
    try:
        games.make(game, **options)  # type: ignore[arg-type]
    except (TypeError, ValueError) as err:
        raise UserError(f"--game-option: {err}") from None
    path = tiny_model.build(game, out, seed=seed, text_options=tuple(sorted(options.items())))  # type: ignore[arg-type]
    described = "".join(f", {key}={value}" for key, value in sorted(options.items()))
    typer.echo(f"tiny model for {game} (seed {seed}{described}) written to {path}")


def sft(
    config: ConfigArg,
    overrides: OverridesArg = None,
    out: StageOutArg = None,
) -> None:
    """Warm start: fine-tune the config's model (rules-pretrained first when `pretrain.enabled`) on
    templated-reasoning transcripts of weak scripted play."""
    # Deferred for start-up cost (torch, transformers; see the module docstring).
    from strat.train.settings import warm_start_settings
    from strat.train.stages import warm_start_base
    from strat.train.warmstart import ensure_warm, warm_start

    resolved = load(config, overrides)
    _run_stage("warm-started model", warm_start_base(resolved), out, resolved.game.name,
               warm_start_settings(resolved), ensure_warm, warm_start)


def pretrain(
    config: ConfigArg,
    overrides: OverridesArg = None,
    out: StageOutArg = None,
) -> None:
    """Rules pretraining: fine-tune the config's model on questions and answers its game's engine writes (legal
    moves, what an agent sees after a move, its own private information, posteriors), perception, not strategy.
    `strat train` runs it first when `pretrain.enabled` is true; the result is cached either way."""
    # Deferred for start-up cost (torch, transformers; see the module docstring).
    from strat.train.pretrain import ensure_pretrained
    from strat.train.pretrain import pretrain as run_pretrain
    from strat.train.settings import base_model_path, pretrain_settings

    resolved = load(config, overrides)
    _run_stage("rules-pretrained model", base_model_path(resolved), out, resolved.game.name,
               pretrain_settings(resolved), ensure_pretrained, run_pretrain)


def _run_stage(label: str, base: Path, out: Path | None, game: str, settings: object,
               ensure: Callable[[Path, str, Any], Path], run: Callable[[Path, Path, str, Any], dict[str, float]]
               ) -> None:
    """A supervised stage before RL: into the shared cache (`ensure`, reused by train) or into `out` (`run`), its
    progress logged to stderr."""
    from strat.cli.progress import stage_logs

    if out is None:
        with stage_logs():
            built = ensure(base, game, settings)
        typer.echo(f"{label}: {built}")
    else:
        with stage_logs():
            figures = run(base, out, game, settings)
        typer.echo(f"{label} written to {out}: " + ", ".join(f"{k}={v:.4g}" for k, v in figures.items()))


def train(
    config: Annotated[Path | None, typer.Argument(help="Experiment YAML file (omit with --resume).")] = None,
    overrides: OverridesArg = None,
    address: Annotated[str | None, typer.Option(help="Join a running Ray cluster (default: start a local one).")] = None,
    resume: Annotated[
        Path | None,
        typer.Option(help="Continue a run directory from its newest checkpoint that verifies against its manifest "
                     "(newer damaged ones are named and moved aside)."),
    ] = None,
    strict: Annotated[
        bool, typer.Option(help="With --resume: refuse a damaged newest checkpoint instead of falling back.")
    ] = False,
) -> None:
    """Run Strat-Reasoner training: rollout, comparison, advantage, update, weight sync, eval, checkpoints."""
    # Deferred for start-up cost (Ray, torch, transformers; see the module docstring).
    from strat.cli.progress import TrainProgress
    from strat.train.trainer import train as run_training

    extra = list(overrides or [])
    if resume is not None and config is not None:
        if "=" not in str(config):
            raise UserError("give either a CONFIG file or --resume RUN_DIR (a resumed run uses its saved config)")
        extra.insert(0, str(config))
        config = None
    if config is None and resume is None:
        raise UserError("train needs a CONFIG file or --resume RUN_DIR")
    if strict and resume is None:
        raise UserError("--strict applies to --resume RUN_DIR only")
    started = time.time()
    with TrainProgress() as progress:
        progress.show_logs()
        run_dir, records = run_training(
            str(config) if config is not None else None,
            extra,
            address=address,
            resume=str(resume) if resume is not None else None,
            on_start=progress.start,
            on_step=progress.update,
            strict=strict,
        )
    progress.summary(run_dir, records)
    argv = ["train", str(config)] if config is not None else ["train", "--resume", str(resume)]
    record_provenance(run_dir, [*argv, *(overrides or [])], str(config) if config is not None else None, started)


def config_reference(
    out: Annotated[Path | None, typer.Option(help="Write the reference to this file instead of printing it.")] = None,
) -> None:
    """Print the configuration reference (docs/configuration.md): every key, its type, default and description."""
    text = reference_markdown()
    if out is None:
        typer.echo(text)
        return
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(text + "\n")
    typer.echo(f"configuration reference written to {out}")
