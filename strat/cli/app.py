"""The `strat` Typer app, the arguments the verbs share, and the entry point that turns user errors into one
line and an exit status. The verbs live in the modules beside this one and are registered in `strat.cli`."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Annotated

import click
import typer
from typer.exceptions import TyperException

from strat.config import ExperimentConfig, parse_override
from strat.config_loading import load_config
from strat.errors import ConfigError, JobError, RunAborted, UserError
from strat.process_env import apply_defaults

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


def game_options(values: Sequence[str] | None) -> dict[str, object]:
    """`--game-option key=value` pairs, each value read as YAML (players=3 is the number 3)."""
    options: dict[str, object] = {}
    for text in values or ():
        try:
            parts, value = parse_override(text)
        except ConfigError:
            raise ConfigError(f"--game-option {text!r}: expected key=value, e.g. players=3") from None
        if len(parts) != 1 or isinstance(value, (dict, list)) or value is None:
            raise ConfigError(f"--game-option {text!r}: expected key=value with a plain value, e.g. players=3")
        options[parts[0]] = value
    return options


def load(config: Path, overrides: list[str] | None) -> ExperimentConfig:
    """The config file with the command line's overrides applied, validated."""
    return load_config(config, overrides or [])


def usage_line(err: Exception) -> str:
    """A usage error (an unknown option, an extra argument) in one line, with where the verb's help is."""
    message = err.format_message() if hasattr(err, "format_message") else str(err)
    ctx = getattr(err, "ctx", None)
    where = f" (see {ctx.command_path} --help)" if ctx is not None else ""
    return " ".join(message.split()) + where


def main(argv: list[str] | None = None) -> int:
    """Entry point of the `strat` console script (and of `python -m strat.cli`); user errors exit 2 with one line on
    stderr. The process's environment defaults (`strat.process_env`) come first: nothing `strat.cli` imports loads
    torch or vLLM, the verbs import them when they run."""
    apply_defaults()
    try:
        # Outside standalone mode click returns a verb's `typer.Exit(code)` (e.g. `submit --follow`'s job status)
        # instead of exiting, and otherwise the verb's own return value.
        result = app(args=argv, standalone_mode=False)
    except (ConfigError, UserError, JobError) as err:
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
    except (click.ClickException, TyperException) as err:  # usage errors; typer carries its own copy of click's
        typer.echo(f"strat: error: {usage_line(err)}", err=True)
        return int(getattr(err, "exit_code", 2))
    return result if isinstance(result, int) and not isinstance(result, bool) else 0
