"""The `strat` command line: one verb per job."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Annotated

import typer

from strat.config import ConfigError, ExperimentConfig, load_config, to_yaml
from strat.errors import RunAborted

app = typer.Typer(
    name="strat",
    help="Strat: train LLM agents to reason strategically in multi-agent games (Strat-Reasoner on Ray).",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    add_completion=False,
)

ConfigArg = Annotated[Path, typer.Argument(help="Experiment YAML file, e.g. configs/kuhn_poker_tiny.yaml.")]
OverridesArg = Annotated[
    list[str] | None, typer.Argument(help="Overrides as key.sub=value, e.g. algorithm.group_size=4.")
]


class UserError(Exception):
    """An error whose one-line message is for the user; printed without a traceback."""


def _load(config: Path, overrides: list[str] | None) -> ExperimentConfig:
    return load_config(config, overrides or [])


@app.command()
def check(config: ConfigArg, overrides: OverridesArg = None) -> None:
    """Validate a config and print the resolved result (every default filled in)."""
    resolved = _load(config, overrides)
    typer.echo(to_yaml(resolved), nl=False)


@app.command("init-model")
def init_model(
    game: Annotated[str, typer.Option(help="Game whose text the tokenizer is trained on.")] = "kuhn_poker",
    out: Annotated[Path, typer.Option(help="Output directory (Hugging Face format, safetensors).")] = Path(
        "models/tiny_kuhn_poker"
    ),
    seed: Annotated[int, typer.Option(help="Seed of the random weights.")] = 0,
) -> None:
    """Build a tiny Qwen2-architecture model offline: tokenizer from the game's text, random weights."""
    import games
    from strat import tiny_model

    if game not in games.names():
        raise UserError(f"unknown game {game!r} (allowed: {', '.join(games.names())})")
    path = tiny_model.build(game, out, seed=seed)
    typer.echo(f"tiny model for {game} (seed {seed}) written to {path}")


@app.command()
def play(
    game: Annotated[str, typer.Option(help="Game to play.")] = "kuhn_poker",
    opponent: Annotated[
        str, typer.Option(help="Scripted opponent (random, heuristic, equilibrium, minimax), or a checkpoint or run dir.")
    ] = "random",
    seat: Annotated[int, typer.Option(help="Your seat (0 moves first).")] = 0,
    seed: Annotated[int | None, typer.Option(help="Seed of the deal and the opponent.")] = None,
    show_reasoning: Annotated[bool, typer.Option(help="Show a trained opponent's reasoning after each move.")] = False,
) -> None:
    """Play a game in the terminal against an opponent, seeing the text the model sees."""
    import games
    from games.opponents import opponent_names
    from games.play import play as play_game

    if game not in games.names():
        raise UserError(f"unknown game {game!r} (allowed: {', '.join(games.names())})")
    if opponent in opponent_names(game):
        play_game(game, opponent=opponent, seed=seed, human_seat=seat)
        return
    if not Path(opponent).exists():
        raise UserError(
            f"opponent {opponent!r} is neither a scripted opponent for {game} "
            f"({', '.join(opponent_names(game))}) nor a checkpoint or run directory"
        )
    from strat.policies import load_policy

    policy = load_policy(opponent, game)
    play_game(game, opponent=opponent, seed=seed, human_seat=seat, bot=_PolicyOpponent(policy, seed, show_reasoning))


@app.command()
def sft(
    config: ConfigArg,
    overrides: OverridesArg = None,
    out: Annotated[Path | None, typer.Option(help="Output directory (default: the shared cache, reused by train).")] = None,
) -> None:
    """Warm start: fine-tune the config's model on templated-reasoning transcripts of weak scripted play."""
    from strat.trainer import base_model_path, warm_start_settings
    from strat.warmstart import ensure_warm, warm_start

    resolved = _load(config, overrides)
    base = base_model_path(resolved)
    settings = warm_start_settings(resolved)
    if out is None:
        path = ensure_warm(base, resolved.game.name, settings)
        typer.echo(f"warm-started model: {path}")
    else:
        figures = warm_start(base, out, resolved.game.name, settings)
        typer.echo(f"warm-started model written to {out}: " + ", ".join(f"{k}={v:.4g}" for k, v in figures.items()))


@app.command()
def train(
    config: Annotated[Path | None, typer.Argument(help="Experiment YAML file (omit with --resume).")] = None,
    overrides: OverridesArg = None,
    address: Annotated[str | None, typer.Option(help="Join a running Ray cluster (default: start a local one).")] = None,
    resume: Annotated[Path | None, typer.Option(help="Continue a run directory from its last complete checkpoint.")] = None,
) -> None:
    """Run Strat-Reasoner training: rollout, comparison, advantage, update, weight sync, eval, checkpoints."""
    from strat.progress import TrainProgress
    from strat.trainer import train as run_training

    extra = list(overrides or [])
    if resume is not None and config is not None:
        if "=" not in str(config):
            raise UserError("give either a CONFIG file or --resume RUN_DIR (a resumed run uses its saved config)")
        extra.insert(0, str(config))
        config = None
    if config is None and resume is None:
        raise UserError("train needs a CONFIG file or --resume RUN_DIR")
    with TrainProgress() as progress:
        progress.show_logs()
        run_dir, records = run_training(
            str(config) if config is not None else None,
            extra,
            address=address,
            resume=str(resume) if resume is not None else None,
            on_start=progress.start,
            on_step=progress.update,
        )
    progress.summary(run_dir, records)


@app.command()
def bench(
    config: Annotated[Path, typer.Option(help="Experiment YAML the figures are measured on.")] = Path(
        "configs/kuhn_poker_tiny.yaml"
    ),
    json_output: Annotated[bool, typer.Option("--json", help="Print every figure as JSON (the table goes to stderr).")] = False,
    quick: Annotated[bool, typer.Option(help="Shrink every measurement (a few minutes; indicative figures).")] = False,
    only: Annotated[
        list[str] | None,
        typer.Option(help="Measure only these figures: rollout, learner, sync, overlap, scaling, memory, e2e."),
    ] = None,
    out: Annotated[Path | None, typer.Option(help="Also write the JSON report to this file.")] = None,
) -> None:
    """Measure rollout and learner efficiency, weight sync, overlap, scaling, memory and end-to-end speed
    against plain baselines, on the same prompts and token counts."""
    from strat.benchmarks import FIGURES, run_bench

    if not config.is_file():
        raise UserError(f"--config {config}: no such file")
    figures = [name.strip() for item in (only or []) for name in item.split(",") if name.strip()]
    unknown = sorted(set(figures) - set(FIGURES))
    if unknown:
        raise UserError(f"--only {','.join(unknown)}: unknown figure (allowed: {', '.join(FIGURES)})")
    report = run_bench(str(config), quick=quick, only=figures or None)
    text = report.dumps()
    if out is not None:
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(text + "\n")
    if json_output:
        typer.echo(report.table(), err=True)
        typer.echo(text)
    else:
        typer.echo(report.table())
        for name, error in report.errors.items():
            typer.echo(f"{name}: not measured ({error})", err=True)


from strat.eval_command import eval_command  # noqa: E402  (heavy imports inside are deferred)

app.command("eval")(eval_command)

from strat.cluster_commands import jobs_command, plan_command, submit_command  # noqa: E402

app.command("plan")(plan_command)
app.command("submit")(submit_command)
app.command("jobs")(jobs_command)


class _PolicyOpponent:
    """A trained policy behind the games' opponent interface, for `strat play`."""

    def __init__(self, policy, seed: int | None, show_reasoning: bool) -> None:
        self.policy = policy
        self.name = policy.info.name
        self.seed = seed if seed is not None else 0
        self.show_reasoning = show_reasoning
        self.moves = 0

    def act(self, env, agent: str) -> int:
        move = self.policy.moves([(env, agent)], self.seed + self.moves)[0]
        self.moves += 1
        if self.show_reasoning and move.response is not None:
            sections = {k: v for k, v in vars(move.response.sections).items() if v is not None}
            typer.echo(f"\n[{agent} reasoning]\n" + "\n".join(f"  {k}: {v}" for k, v in sections.items()))
        if not move.decision.valid:
            typer.echo(f"[{agent} wrote no legal action; it plays {move.decision.action_name} as the fallback]")
        return move.decision.action


def main(argv: list[str] | None = None) -> int:
    """Entry point of the `strat` console script; user errors exit 2 with one line on stderr."""
    try:
        app(args=argv, standalone_mode=False)
    except (ConfigError, UserError) as err:
        typer.echo(f"strat: error: {err}", err=True)
        return 2
    except RunAborted as err:
        typer.echo(f"strat: run stopped: {err}", err=True)
        return 1
    except typer.Abort:
        typer.echo("strat: aborted", err=True)
        return 130
    except KeyboardInterrupt:
        return 130
    except (typer.Exit, SystemExit) as done:
        return int(getattr(done, "exit_code", getattr(done, "code", 0)) or 0)
    except Exception as err:  # click usage errors
        import click

        if isinstance(err, click.ClickException):
            err.show()
            return err.exit_code
        raise
    return 0


if __name__ == "__main__":
    sys.exit(main())
