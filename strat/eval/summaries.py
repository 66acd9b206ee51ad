# Over 500 lines: the summary format and both generated sections of docs/results.md (games, ablation) read one record.
"""Committed run summaries and the results tables made from them.

A finished run is summarised into a small JSON file under `docs/results/<section>/` (the command that trained it,
the commit, the seed, its first and last evaluation with 95% intervals, format validity, tokens per step), and
`docs/results.md`'s generated sections are rewritten from those files, between markers, so hand-written text and
other sections are left as they are. `strat results summarize` and `strat results table` are the commands.
"""

from __future__ import annotations

import dataclasses
import json
import math
import re
import shlex
import subprocess
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

import games
from games.opponents import make_opponent
from strat.errors import UserError
from strat.eval.stats import wilson_interval

SUMMARY_VERSION = 1
ABLATION = "ablation"
"""The results section of experiments/which_parts_of_strat_reasoner_help/ablation.py's runs, one per arm and seed."""
ABLATION_REFERENCE = "hybrid"
"""The arm the ablation table pairs every other arm with: Strat-Reasoner as configured, with the hybrid advantage."""
NO_RUNS = "No run summarised yet.\n"
"""A generated section's text while no summary belongs to it."""
PROVENANCE = "provenance.json"
"""Written into a run directory by `strat train` when the run ends: the command line, the commit, the wall time."""


@dataclass(frozen=True)
class Figure:
    """A measured value with its 95% interval (None where the run did not measure one)."""

    value: float
    low: float | None = None
    high: float | None = None

    def text(self, percent: bool = False, signed: bool = False) -> str:
        scale, sign = (100.0 if percent else 1.0), ("+" if signed else "")

        def number(x: float) -> str:
            return f"{scale * x:{sign}.1f}" if percent else f"{x:{sign}.3f}"

        if self.low is None or self.high is None:
            return number(self.value)
        return f"{number(self.value)} [{number(self.low)}, {number(self.high)}]"


@dataclass(frozen=True)
class Evaluation:
    """One policy's figures: `return_vs`, `win_rate_vs` and `draw_rate_vs` by opponent, exploitability, format
    validity."""

    step: int
    return_vs: dict[str, Figure] = field(default_factory=dict)
    win_rate_vs: dict[str, Figure] = field(default_factory=dict)
    exploitability: Figure | None = None
    format_validity: float | None = None
    draw_rate_vs: dict[str, Figure] = field(default_factory=dict)
    """Zero-sum games only (the evaluation records no draws in general-sum ones); empty in older summaries."""
    evaluated_apart: dict[str, int] = field(default_factory=dict)
    """The opponents whose figures a separate `strat eval` report replaced (`--matches-before/--matches-after`),
    with the games it played against each; the others' come from the run's own evaluation (`eval.games`)."""


@dataclass(frozen=True)
class RunSummary:
    """What one finished training run measured, with how to reproduce it."""

    section: str
    """The results section it belongs to, e.g. `games`."""
    config: str
    """The config file, as given on the command line."""
    game: str
    game_options: dict[str, Any]
    seed: int
    command: str
    commit: str
    date: str
    steps: int
    before: Evaluation
    """The first evaluation (step 0: the warm-started policy)."""
    after: Evaluation
    """The last evaluation (the trained policy)."""
    wall_s: float | None = None
    tokens_per_step: float | None = None
    version: int = SUMMARY_VERSION
    arm: str | None = None
    """The ablation arm the run trained (section `ablation`, e.g. `outcome`); None in other sections and in older
    summaries."""


# --- provenance ---------------------------------------------------------------------------------------------------


def source_commit() -> str:
    """The short commit of the Strat checkout that is running, `+dirty` when tracked files differ from it, or
    `unknown` outside a git checkout."""
    root = Path(__file__).resolve().parents[2]
    try:
        head = subprocess.run(["git", "-C", str(root), "rev-parse", "--short", "HEAD"], capture_output=True,
                              text=True, check=True, timeout=10).stdout.strip()
        dirty = subprocess.run(["git", "-C", str(root), "status", "--porcelain", "--untracked-files=no"],
                               capture_output=True, text=True, check=True, timeout=10).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return "unknown"
    return head + ("+dirty" if dirty else "")


def record_provenance(run_dir: Path, argv: Sequence[str], config: str | None, started: float) -> Path:
    """Write (or, for a resumed run, extend) `<run_dir>/provenance.json`: the command that trained the run, its
    config file, the commit, the date and the wall time; a resume is added to `resumed`."""
    path = Path(run_dir) / PROVENANCE
    now = time.time()
    entry = {"command": shlex.join(["strat", *argv]), "commit": source_commit(),
             "date": time.strftime("%Y-%m-%d", time.gmtime(now)), "wall_s": round(now - started, 1)}
    if path.is_file():
        data = json.loads(path.read_text())
        data.setdefault("resumed", []).append(entry)
        data["wall_s"] = round(float(data.get("wall_s") or 0.0) + entry["wall_s"], 1)
    else:
        data = {**entry, "config": config}
    path.write_text(json.dumps(data, indent=2) + "\n")
    return path


# --- reading a run ----------------------------------------------------------------------------------------------


def _interval(value: Any) -> tuple[float | None, float | None]:
    """An interval as metrics.jsonl stores it: [low, high], or a half-width around the mean (None: absent)."""
    if isinstance(value, list) and len(value) == 2:
        return float(value[0]), float(value[1])
    return None, None


def _evaluation(record: dict[str, Any], num_games: int, validity: float | None,
                exploitability: Figure | None) -> Evaluation:
    returns, wins, draws = {}, {}, {}
    for key, value in record.items():
        match = re.fullmatch(r"eval/return_vs_(\w+)", key)
        if match is None or value is None or key.endswith("_ci"):
            continue
        name = match.group(1)
        ci = record.get(f"eval/return_vs_{name}_ci")
        low, high = _interval(ci)
        if low is None and isinstance(ci, (int, float)):
            low, high = value - ci, value + ci
        returns[name] = Figure(float(value), low, high)
        rate = record.get(f"eval/win_rate_vs_{name}")
        if rate is not None:
            wins[name] = Figure(float(rate), *wilson_interval(rate * num_games, num_games))
        rate = record.get(f"eval/draw_rate_vs_{name}")
        if rate is not None:
            draws[name] = Figure(float(rate), *wilson_interval(rate * num_games, num_games))
    if exploitability is None and record.get("eval/exploitability") is not None:
        exploitability = Figure(float(record["eval/exploitability"]), *_interval(record.get("eval/exploitability_ci")))
    return Evaluation(int(record["step"]), returns, wins, exploitability, validity, draws)


def exploitability_from_eval(path: Path) -> Figure:
    """The exploitability of a `strat eval` eval.json, with its interval."""
    try:
        data = json.loads(Path(path).read_text())["exploitability"]
        return Figure(float(data["value"]), float(data["ci_low"]), float(data["ci_high"]))
    except (OSError, KeyError, TypeError, ValueError) as err:
        raise UserError(f"{path}: no exploitability in it ({err})") from None


@dataclass(frozen=True)
class MatchFigures:
    """One opponent's figures in a `strat eval` report: the policy's return, win and draw rates, games played."""

    mean_return: Figure
    win: Figure
    draw: Figure
    games: int


SAMPLING_KEYS = ("depth", "temperature", "top_p", "max_new_tokens")
"""The reasoning settings a `strat eval` report must share with the run whose figures it replaces."""


def matches_from_eval(path: Path, game: str, options: dict[str, Any], step: int | None,
                      run_dir: Path, reasoning: dict[str, Any] | None = None) -> dict[str, MatchFigures]:
    """Each opponent's return, win rate and draw rate (95% intervals) and games from a `strat eval` eval.json of
    one policy. The report must be of the run's game, played with the run's `reasoning` settings (`SAMPLING_KEYS`,
    where both name them); where it names a checkpoint of a run (`run_dir`, `step`), it must be this run's at `step`
    (the last evaluation's), or for step None (the warm start) not this run's."""
    try:
        data = json.loads(Path(path).read_text())
        policies, matches = data["policies"], data["matches"]
        evaluated = policies[0]
        figures = {
            m["opponent"]: MatchFigures(*(Figure(float(m[k]["value"]), m[k]["low"], m[k]["high"])
                                          for k in ("mean_return", "win", "draw")), games=int(m["games"]))
            for m in matches
        }
    except (OSError, KeyError, IndexError, TypeError, ValueError) as err:
        raise UserError(f"{path}: not a `strat eval` report of one policy against opponents ({err!r})") from None
    if len(policies) != 1 or not figures:
        raise UserError(f"{path}: a head-to-head report or one without opponents; evaluate the one policy with "
                        "`strat eval --policy ... --opponents heuristic`")
    if (data.get("game"), dict(data.get("game_options") or {})) != (game, options):
        raise UserError(f"{path}: evaluates {data.get('game')} {data.get('game_options')}, the run plays {game} "
                        f"{options}")
    run_settings = reasoning or {}
    differing = [f"{key} {evaluated[key]} (the run: {run_settings[key]})" for key in SAMPLING_KEYS
                 if evaluated.get(key) is not None and run_settings.get(key) is not None
                 and evaluated[key] != run_settings[key]]
    if differing:
        raise UserError(f"{path}: played with {', '.join(differing)}; evaluate with the run's reasoning settings "
                        "(--depth, --temperature, --max-new-tokens)")
    checkpoint_run = evaluated.get("run_dir")
    same_run = checkpoint_run is not None and Path(checkpoint_run).resolve() == Path(run_dir).resolve()
    if step is not None and not (same_run and evaluated.get("step") == step):
        raise UserError(f"{path}: evaluates {evaluated.get('checkpoint')} (step {evaluated.get('step')}), not "
                        f"{run_dir}'s checkpoint of step {step}")
    if step is None and same_run:
        raise UserError(f"{path}: evaluates a checkpoint of {run_dir} (step {evaluated.get('step')}), not the "
                        "warm start it began from")
    return figures


def _with_matches(evaluation: Evaluation, figures: dict[str, MatchFigures]) -> Evaluation:
    """`evaluation` with each opponent's figures replaced by a separate evaluation's (`matches_from_eval`)."""
    returns, wins, draws = dict(evaluation.return_vs), dict(evaluation.win_rate_vs), dict(evaluation.draw_rate_vs)
    for opponent, match in figures.items():
        returns[opponent], wins[opponent] = match.mean_return, match.win
        if opponent in draws or match.draw.value > 0:
            draws[opponent] = match.draw
    apart = {**evaluation.evaluated_apart, **{opponent: match.games for opponent, match in figures.items()}}
    return dataclasses.replace(evaluation, return_vs=returns, win_rate_vs=wins, draw_rate_vs=draws,
                               evaluated_apart=apart)


def summarize_run(run_dir: Path, section: str, exploitability_before: Path | None = None,
                  exploitability_after: Path | None = None, arm: str | None = None,
                  matches_before: Path | None = None, matches_after: Path | None = None) -> RunSummary:
    """The summary of a finished run from its config.yaml, metrics.jsonl and provenance.json; exploitability
    measured apart by `strat eval` (eval.json files) replaces the run's own where given, and so do the returns,
    win and draw rates against each opponent of `matches_before` (the warm start's report) and `matches_after`
    (the last checkpoint's): more games, on the same deals for both. A run of the `ablation` section needs its
    `arm`."""
    from strat.metrics import read as read_metrics  # deferred for start-up cost (it imports TensorBoard)

    if section == ABLATION and not arm:
        raise UserError(f"{run_dir}: a summary of section {ABLATION!r} needs the arm the run trained (e.g. outcome)")
    run_dir = Path(run_dir)
    provenance_file = run_dir / PROVENANCE
    if not (run_dir / "config.yaml").is_file() or not provenance_file.is_file():
        raise UserError(f"{run_dir}: not a finished run directory (config.yaml and {PROVENANCE} are needed)")
    config = yaml.safe_load((run_dir / "config.yaml").read_text())
    provenance = json.loads(provenance_file.read_text())
    records = read_metrics(run_dir)
    evals = [r for r in records if "eval/return_vs_random" in r]
    steps = [r for r in records if r.get("step", 0) > 0]
    if len(evals) < 2 or not steps:
        raise UserError(f"{run_dir}: needs a first and a last evaluation and a training step in metrics.jsonl")
    planned, last = int(config["schedule"]["steps"]), int(steps[-1]["step"])
    if last != planned:  # stopped early (SIGTERM writes provenance too, so that a resume can extend it)
        raise UserError(f"{run_dir}: stopped at step {last} of {planned}; finish it first with "
                        f"strat train --resume {run_dir}")
    num_games = int(config["eval"]["games"])
    tokens = [r["throughput/gen_tokens_per_s"] * r["time/rollout_s"] for r in steps
              if "throughput/gen_tokens_per_s" in r and "time/rollout_s" in r]
    game, options = config["game"]["name"], dict(config["game"].get("options") or {})
    before = _evaluation(evals[0], num_games, steps[0].get("format/valid_rate"),
                         exploitability_from_eval(exploitability_before) if exploitability_before else None)
    after = _evaluation(evals[-1], num_games, steps[-1].get("format/valid_rate"),
                        exploitability_from_eval(exploitability_after) if exploitability_after else None)
    reasoning = config.get("reasoning") or {}
    if matches_before is not None:
        before = _with_matches(before, matches_from_eval(matches_before, game, options, None, run_dir, reasoning))
    if matches_after is not None:
        after = _with_matches(after, matches_from_eval(matches_after, game, options, last, run_dir, reasoning))
    return RunSummary(
        section=section,
        config=str(provenance.get("config") or ""),
        game=game,
        game_options=options,
        seed=int(config["run"]["seed"]),
        command=provenance["command"],
        commit=provenance["commit"],
        date=provenance["date"],
        steps=int(steps[-1]["step"]),
        before=before,
        after=after,
        wall_s=provenance.get("wall_s"),
        tokens_per_step=sum(tokens) / len(tokens) if tokens else None,
        arm=arm,
    )


# --- storing ------------------------------------------------------------------------------------------------------


def write_summary(summary: RunSummary, path: Path) -> Path:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(dataclasses.asdict(summary), indent=2, sort_keys=True) + "\n")
    return path


def _figure(data: dict[str, Any] | None) -> Figure | None:
    return None if data is None else Figure(**data)


def _load_evaluation(data: dict[str, Any]) -> Evaluation:
    return Evaluation(
        step=data["step"],
        return_vs={k: Figure(**v) for k, v in data["return_vs"].items()},
        win_rate_vs={k: Figure(**v) for k, v in data["win_rate_vs"].items()},
        exploitability=_figure(data.get("exploitability")),
        format_validity=data.get("format_validity"),
        draw_rate_vs={k: Figure(**v) for k, v in data.get("draw_rate_vs", {}).items()},
        evaluated_apart={k: int(v) for k, v in data.get("evaluated_apart", {}).items()},
    )


def load_summary(path: Path) -> RunSummary:
    data = json.loads(Path(path).read_text())
    if data.get("version") != SUMMARY_VERSION:
        raise UserError(f"{path}: summary version {data.get('version')!r}, this Strat reads {SUMMARY_VERSION}")
    data["before"], data["after"] = _load_evaluation(data["before"]), _load_evaluation(data["after"])
    return RunSummary(**data)


def load_summaries(folder: Path) -> list[RunSummary]:
    """Every summary under `folder`, ordered by section, config and seed. JSON files that are not run summaries (no
    `section`: a `strat eval` report kept beside them, such as docs/results/two_policies/*/eval.json) are passed
    over; a summary of another version is refused."""
    paths = [p for p in sorted(Path(folder).rglob("*.json")) if _is_summary(p)]
    return sorted((load_summary(p) for p in paths), key=lambda s: (s.section, s.config, s.seed, s.date))


def _is_summary(path: Path) -> bool:
    try:
        data = json.loads(path.read_text())
    except json.JSONDecodeError as err:
        raise UserError(f"{path}: not JSON ({err})") from None
    return isinstance(data, dict) and "section" in data


# --- tables ---------------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Reference:
    """Mean returns of scripted players against one opponent, the ends of the normalised-return scale."""

    opponent: str
    random: float
    """The uniform random player's mean return against `opponent`."""
    heuristic: float
    """The heuristic player's mean return against `opponent`."""


def normalised_return(value: float, reference: Reference) -> float | None:
    """(R - R_random) / (R_heuristic - R_random): 0 plays like random, 1 like the heuristic player."""
    span = reference.heuristic - reference.random
    return None if abs(span) < 1e-12 else (value - reference.random) / span


def game_label(summary: RunSummary) -> str:
    """The game and its options, e.g. `kuhn_poker (players=3)`: a results table per label."""
    options = ", ".join(f"{k}={v}" for k, v in sorted(summary.game_options.items()))
    return summary.game + (f" ({options})" if options else "")


def _cell(figure: Figure | None, percent: bool = False, signed: bool = False) -> str:
    return "n/a" if figure is None else figure.text(percent=percent, signed=signed)


_T975 = {1: 12.706, 2: 4.303, 3: 3.182, 4: 2.776, 5: 2.571, 6: 2.447, 7: 2.365, 8: 2.306, 9: 2.262, 10: 2.228,
         11: 2.201, 12: 2.179, 13: 2.160, 14: 2.145, 15: 2.131, 16: 2.120, 17: 2.110, 18: 2.101, 19: 2.093, 20: 2.086,
         21: 2.080, 22: 2.074, 23: 2.069, 24: 2.064, 25: 2.060, 26: 2.056, 27: 2.052, 28: 2.048, 29: 2.045}
"""Student's t 97.5% quantile by degrees of freedom (two-sided 95%)."""


def seed_interval(values: Sequence[float]) -> Figure:
    """Mean over seeds with a t-based 95% interval (normal beyond 30 values)."""
    n = len(values)
    mean = sum(values) / n
    if n < 2:
        return Figure(mean)
    sd = math.sqrt(sum((v - mean) ** 2 for v in values) / (n - 1))
    t = _T975.get(n - 1, 1.96)
    half = t * sd / math.sqrt(n)
    return Figure(mean, mean - half, mean + half)


def games_section(summaries: Sequence[RunSummary], references: dict[str, Reference]) -> str:
    """The games section: per run, warm start and trained policy against each opponent; per game, a summary row.

    `references` maps a game label to the scripted reference returns against its heuristic opponent."""
    lines: list[str] = []
    by_game: dict[str, list[RunSummary]] = {}
    for summary in summaries:
        by_game.setdefault(game_label(summary), []).append(summary)
    for label, runs in by_game.items():
        opponents = sorted({o for s in runs for o in (*s.before.return_vs, *s.after.return_vs)},
                           key=lambda o: (o != "random", o != "heuristic", o))
        lines += [f"### {label}", ""]
        # A draw column only for games whose runs drew at all (board games, split pots), not for those that cannot.
        draws = any(rate.value > 0 for s in runs for ev in (s.before, s.after) for rate in ev.draw_rate_vs.values())
        drawn = opponents if draws else []
        header = ["seed", "policy", *(f"return vs {o}" for o in opponents), *(f"win % vs {o}" for o in opponents),
                  *(f"draw % vs {o}" for o in drawn), "exploitability", "format valid"]
        lines += ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
        for run in runs:
            for name, ev in (("warm start (step 0)", run.before), (f"trained (step {run.after.step})", run.after)):
                row = [str(run.seed), name, *(_cell(ev.return_vs.get(o), signed=True) for o in opponents),
                       *(_cell(ev.win_rate_vs.get(o), percent=True) for o in opponents),
                       *(_cell(ev.draw_rate_vs.get(o), percent=True) for o in drawn), _cell(ev.exploitability),
                       "n/a" if ev.format_validity is None else f"{ev.format_validity:.3f}"]
                lines.append("| " + " | ".join(row) + " |")
        lines.append("")
        lines += _game_summary(label, runs, references.get(label))
        lines += ["Commands (each run's summary is in `docs/results/`):", ""]
        for run in runs:
            lines.append(f"- seed {run.seed}: `{run.command}` (commit {run.commit}, {run.date}"
                         + (f", {run.wall_s / 60:.1f} min" if run.wall_s else "")
                         + (f", {run.tokens_per_step:.0f} generated tokens per step" if run.tokens_per_step else "")
                         + ")" + _apart_note(run))
        lines.append("")
    lines += _across_games(by_game, references)
    return "\n".join(lines).rstrip() + "\n"


def _apart_note(run: RunSummary) -> str:
    """Where a separate `strat eval` replaced the run's own figures: which opponents, and over how many games."""
    parts = [f"{label} vs {', '.join(f'{o} ({n:,} games)' for o, n in sorted(ev.evaluated_apart.items()))}"
             for label, ev in (("warm start", run.before), ("trained", run.after)) if ev.evaluated_apart]
    return f"; by `strat eval` apart: {'; '.join(parts)}" if parts else ""


def _normalised_gains(runs: Sequence[RunSummary], reference: Reference | None) -> list[float] | None:
    """Per run, the trained policy's normalised return against the heuristic player minus the warm start's; None
    where a run lacks the figure or the game has no reference."""
    if reference is None:
        return None
    gains = []
    for run in runs:
        before, after = run.before.return_vs.get("heuristic"), run.after.return_vs.get("heuristic")
        if before is None or after is None:
            return None
        low, high = normalised_return(before.value, reference), normalised_return(after.value, reference)
        if low is None or high is None:
            return None
        gains.append(high - low)
    return gains


def _across_games(by_game: dict[str, list[RunSummary]], references: dict[str, Reference]) -> list[str]:
    """The average over games (each game weighs the same, whatever its seeds) of the gain in normalised return
    against the heuristic player: Strat's counterpart of the paper's average gain over the base model."""
    per_game = {label: _normalised_gains(runs, references.get(label)) for label, runs in by_game.items()}
    counted = {label: gains for label, gains in per_game.items() if gains}
    if not counted:
        return []
    lines = ["### All games", "",
             "| game | seeds | normalised return gain vs heuristic (trained - warm start) |", "|---|---|---|"]
    figures = {label: seed_interval(gains) for label, gains in counted.items()}
    for label, figure in figures.items():
        lines.append(f"| {label} | {len(counted[label])} | {figure.text(signed=True)} |")
    n = len(figures)
    average = sum(figure.value for figure in figures.values()) / n
    if any(figure.high is None for figure in figures.values()):
        overall, why = Figure(average), " (no interval: a game with one seed has none)"
    else:
        # Games are independent runs: the half-widths of their means add in quadrature, divided by the game count.
        half = math.sqrt(sum((f.high - f.value) ** 2 for f in figures.values() if f.high is not None)) / n
        overall, why = Figure(average, average - half, average + half), ""
    seeds = sum(len(gains) for gains in counted.values())
    lines.append(f"| **average over {n} game{'s' if n > 1 else ''}** | {seeds} | **{overall.text(signed=True)}**{why} |")
    left_out = sorted(set(per_game) - set(counted))
    lines += ["", "A gain of +0.10 is a tenth of the way from random play to the heuristic player's own against it."
              + (f" Left out (no heuristic reference or evaluation): {', '.join(left_out)}." if left_out else ""), ""]
    return lines


def _game_summary(label: str, runs: Sequence[RunSummary], reference: Reference | None) -> list[str]:
    """Gain against the heuristic player in win-rate points, and the normalised returns, over seeds."""
    if not all("heuristic" in r.before.win_rate_vs and "heuristic" in r.after.win_rate_vs for r in runs):
        return ["No summary row: the heuristic opponent was not played at both evaluations.", ""]
    gains = [r.after.win_rate_vs["heuristic"].value - r.before.win_rate_vs["heuristic"].value for r in runs]
    row = [label, str(len(runs)), seed_interval(gains).text(percent=True, signed=True)]
    if reference is not None:
        for ev in ("before", "after"):
            values = [normalised_return(getattr(r, ev).return_vs["heuristic"].value, reference) for r in runs]
            row.append("n/a" if None in values else seed_interval([v for v in values if v is not None]).text())
        note = (f"Normalised return against the heuristic player: (R - R_random) / (R_heuristic - R_random), with"
                f" R_random = {reference.random:+.3f} and R_heuristic = {reference.heuristic:+.3f} the mean returns of"
                " the uniform random and the heuristic player against it (scripted, 20,000 games, seats alternating).")
    else:
        row += ["n/a", "n/a"]
        note = "No normalised return: the scripted reference returns were not computed."
    header = ("| game | seeds | win-rate gain vs heuristic (points) | normalised return, warm start"
              " | normalised return, trained |")
    return [header, "|---|---|---|---|---|", "| " + " | ".join(row) + " |", "", note,
            "Means over seeds with t-based 95% intervals.", ""]


def ablation_section(summaries: Sequence[RunSummary], reference: str = ABLATION_REFERENCE,
                     where: str = "docs/results/ablation/") -> str:
    """The ablation section: a table per config and step count, a row per arm with its final figures over seeds and,
    beside each, the paired difference from the `reference` arm over the seeds both ran; `where` is the folder the
    summaries are kept in, named above the commands."""
    lines: list[str] = []
    by_setting: dict[tuple[str, int], list[RunSummary]] = {}
    for summary in summaries:
        by_setting.setdefault((summary.config, summary.steps), []).append(summary)
    for (config, steps), runs in by_setting.items():
        by_arm: dict[str, dict[int, RunSummary]] = {}
        for run in runs:
            by_arm.setdefault(str(run.arm), {})[run.seed] = run
        paired = by_arm.get(reference, {})
        header = ["arm", "seeds", "exploitability", f"minus {reference}", "return vs random", f"minus {reference}",
                  "format valid", "tokens per step"]
        lines += [f"### {game_label(runs[0])}: `{config}`, {steps} steps", "",
                  "| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
        for arm in sorted(by_arm, key=lambda name: (name != reference, name)):
            seeds = by_arm[arm]
            row = [arm, str(len(seeds))]
            for measure, signed in ((_final_exploitability, False), (_final_return_vs_random, True)):
                row.append(_over_seeds([measure(run) for run in seeds.values()], signed))
                row.append("reference" if arm == reference else _paired_difference(seeds, paired, measure))
            validity = [r.after.format_validity for r in seeds.values() if r.after.format_validity is not None]
            tokens = [r.tokens_per_step for r in seeds.values() if r.tokens_per_step is not None]
            row += ["n/a" if not validity else f"{sum(validity) / len(validity):.3f}",
                    "n/a" if not tokens else f"{sum(tokens) / len(tokens):.0f}"]
            lines.append("| " + " | ".join(row) + " |")
        note = (f"Figures of the last evaluation (step {steps}): means over seeds with t-based 95% intervals (lower"
                f" exploitability is better). `minus {reference}`: the arm's figure minus the {reference} arm's on the"
                " same seed (the same warm start and evaluation deals), averaged over the n seeds both ran, with a"
                " t-based 95% interval. Format valid: the share of well-formed responses with a legal move at the last"
                " training step; tokens per step: generated tokens per training step; both means over seeds.")
        lines += ["", note, "", f"Commands (each run's summary is in `{where}`):", ""]
        for arm in sorted(by_arm, key=lambda name: (name != reference, name)):
            for seed, run in sorted(by_arm[arm].items()):
                lines.append(f"- {arm}, seed {seed}: `{run.command}` (commit {run.commit}, {run.date}"
                             + (f", {run.wall_s / 60:.1f} min" if run.wall_s else "") + ")")
        lines.append("")
    return "\n".join(lines).rstrip() + "\n"


def _final_exploitability(run: RunSummary) -> float | None:
    return None if run.after.exploitability is None else run.after.exploitability.value


def _final_return_vs_random(run: RunSummary) -> float | None:
    figure = run.after.return_vs.get("random")
    return None if figure is None else figure.value


def _over_seeds(values: Sequence[float | None], signed: bool) -> str:
    """Mean with its interval over the seeds that measured the figure, and how many did when not all."""
    present = [v for v in values if v is not None]
    if not present:
        return "n/a"
    text = seed_interval(present).text(signed=signed)
    return text if len(present) == len(values) else f"{text} ({len(present)} of {len(values)} seeds)"


def _paired_difference(arm: dict[int, RunSummary], reference: dict[int, RunSummary],
                       measure: Callable[[RunSummary], float | None]) -> str:
    """The arm's figure minus the reference's, seed by seed, over the seeds where both measured it (paired t)."""
    differences = []
    for seed in sorted(arm.keys() & reference.keys()):
        mine, theirs = measure(arm[seed]), measure(reference[seed])
        if mine is not None and theirs is not None:
            differences.append(mine - theirs)
    if not differences:
        return "n/a"
    return f"{seed_interval(differences).text(signed=True)} (n={len(differences)})"


_MARK = "<!-- results:{section}:{end} -->"


def replace_section(document: str, section: str, body: str) -> str:
    """`document` with the text between the section's start and end markers replaced by `body`; the markers are
    added at the end when absent."""
    start, end = _MARK.format(section=section, end="start"), _MARK.format(section=section, end="end")
    block = f"{start}\n<!-- generated by `strat results table`; edit docs/results/ instead -->\n\n{body}\n{end}"
    if start in document and end in document:
        head, rest = document.split(start, 1)
        _, tail = rest.split(end, 1)
        return head + block + tail
    return document.rstrip("\n") + "\n\n" + block + "\n"


def scripted_reference(game: str, options: dict[str, Any], opponent: str = "heuristic", num_games: int = 20_000,
                       seed: int = 0) -> Reference:
    """The mean returns of the uniform random and of the heuristic player, each in one seat (alternating) with
    `opponent` in every other seat: the ends of the normalised-return scale, by simulation."""
    def mean_return(player: str) -> float:
        total = 0.0
        for index in range(num_games):
            env = games.make(game, **options)
            env.reset(seed=seed * 1_000_003 + index)
            ego = env.possible_agents[index % len(env.possible_agents)]
            players = {agent: make_opponent(player if agent == ego else opponent, game,
                                            seed=(seed * 1_000_003 + index) * 16 + seat, **options)
                       for seat, agent in enumerate(env.possible_agents)}
            for agent in env.turns():
                env.step(players[agent].act(env, agent))
            total += env.returns()[ego]
        return total / num_games

    return Reference(opponent, mean_return("random"), mean_return("heuristic"))
