"""Ablation of Strat-Reasoner's parts: each arm trains the config with one part changed, on paired seeds and an
equal budget, and each finished run is summarised into docs/results/ablation/ for `strat results table`.

    python experiments/which_parts_of_strat_reasoner_help/ablation.py
        [--arms advantage|depth|loss|dph|all|ARM[,...]] [--config configs/kuhn_poker_tiny.yaml] [--seeds 0,1,2]
        [--steps 30] [--out runs/ablation] [--results docs/results/ablation] [key=value ...]
    strat results table        # docs/results.md's ablation section from the summaries

Arms (ARMS below): `hybrid`, the reference every other arm is paired with (the config's own settings, with the hybrid
advantage); `outcome`, `process`, `hybrid-lam0.25` and `skip-forced` (advantage; the last is hybrid with no process
score for a turn that predicts a forced move, `comparison.skip_forced`); `targets` (scoring: the hybrid scored on the
opponents' estimated policy and the posterior, `comparison.prediction_target=policy`, `belief_target=posterior`);
`targets-segment` (that, with credit by segment, `algorithm.credit=segment`); `targets-state` and
`targets-segment-state` (those two with the process score compared at the same information state,
`algorithm.process_baseline=state`); `outcome-history` and `hybrid-history` (outcome-only and the hybrid with the
outcome term's baseline the mean return at the same history, `algorithm.baseline=history`); `outcome-unscaled`
(outcome-only with the outcome term not divided by its group's std, `algorithm.outcome_scale=none`; group `scale`,
paired with `outcome`); `depth0`, `depth1`,
`depth2` (reasoning depth; at depth 0 no section can be compared, so the process term is 0 and the hybrid advantage is the outcome's);
`clipped` and `fiberpo` (policy loss); `dph-js` and `dph-fkl` (DPH-RL's divergence to the initial policy);
`as-configured` (the config's own settings, whatever its advantage), `league-uniform` and `league-pfsp` (the default
Kuhn mix with its snapshot opponent replaced by a league of the last 4 snapshots, drawn uniformly or by PFSP; group
`league`, paired with `as-configured`, not with `hybrid`); `hf` and `constrain-action` (the config's own settings on
the hf engine, and that with the move decoded among the legal moves only, `reasoning.constrain_action`; group
`constrain`, paired with each other). Each other group also runs `hybrid`. An arm with the same
resolved config as one listed before it (on the default config `depth1` and `clipped` are `hybrid`, `as-configured`
is `outcome`) shares that arm's runs instead of training them again. The committed table was measured on
depth 2, the default before 2026-12-02's move to depth 1: `reasoning.depth=2` among the overrides extends it alike.

Seeds are paired: seed s of every arm is `run.seed=s` (the same cached warm start, deals and evaluation games).
`hybrid`, `outcome` and the `targets` arms run seeds 0-4, the other arms 0-2; `--seeds` sets them for every arm.
`--steps` sets `schedule.steps` for every run (the trainer always evaluates the last step). `key=value` overrides
apply to every run, before the arm's own.

Resumable: a run goes to `<out>/<arm>-seed<s>` and, once all its steps are done, gets `provenance.json` (its exact
`strat train` command and the commit) and a summary `<results>/<config stem>-<arm>-seed<s>.json`. Runs whose summary
exists are skipped, so the script can be stopped and started again. A run directory without provenance.json is an
interrupted run: it is deleted and the run trained again from the start (a fresh run cannot reuse a directory with
checkpoints or metrics), which loses at most one run's work. Run one ablation per `--out` at a time.
"""

from __future__ import annotations

import argparse
import shutil
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

import yaml

from strat.process_env import apply_defaults

apply_defaults()  # one OpenMP thread and quiet logs, before torch or vLLM is imported (`import strat` sets nothing)

from strat.config import ExperimentConfig, to_yaml  # noqa: E402
from strat.config_loading import load_config  # noqa: E402
from strat.errors import ConfigError, RunAborted, UserError  # noqa: E402
from strat.eval.summaries import (  # noqa: E402
    ABLATION,
    ABLATION_REFERENCE,
    NO_RUNS,
    PROVENANCE,
    ablation_section,
    load_summaries,
    record_provenance,
    summarize_run,
    write_summary,
)


@dataclass(frozen=True)
class Arm:
    """One variant of Strat-Reasoner: a name and the overrides it puts on top of the config."""

    name: str
    overrides: tuple[str, ...]
    """`key=value` overrides, applied after the command line's."""
    seeds: tuple[int, ...] = (0, 1, 2)
    """The seeds it runs unless `--seeds` says otherwise."""


HYBRID = "algorithm.advantage_mode=hybrid"
TARGETS = ("comparison.prediction_target=policy", "comparison.belief_target=posterior")
STATE = "algorithm.process_baseline=state"


def _league_mix(sampling: str) -> str:
    """The default Kuhn mix (self 0.6, snapshot 0.2, random 0.2) with its snapshot replaced by a league of the last
    4 snapshots drawn by `sampling`."""
    return ("game.opponents=[{kind: self, weight: 0.6}, {kind: league, size: 4, sampling: " + sampling
            + ", weight: 0.2}, {kind: scripted, name: random, weight: 0.2}]")


ARMS: tuple[Arm, ...] = (
    Arm(ABLATION_REFERENCE, (HYBRID,), seeds=(0, 1, 2, 3, 4)),
    Arm("outcome", ("algorithm.advantage_mode=outcome",), seeds=(0, 1, 2, 3, 4)),
    Arm("process", ("algorithm.advantage_mode=process",)),
    Arm("hybrid-lam0.25", (HYBRID, "algorithm.lam=0.25")),
    Arm("skip-forced", (HYBRID, "comparison.skip_forced=true")),
    Arm("targets", (HYBRID, *TARGETS), seeds=(0, 1, 2, 3, 4)),
    Arm("targets-segment", (HYBRID, *TARGETS, "algorithm.credit=segment"), seeds=(0, 1, 2, 3, 4)),
    Arm("targets-state", (HYBRID, *TARGETS, STATE), seeds=(0, 1, 2, 3, 4)),
    Arm("targets-segment-state", (HYBRID, *TARGETS, "algorithm.credit=segment", STATE), seeds=(0, 1, 2, 3, 4)),
    Arm("outcome-history", ("algorithm.advantage_mode=outcome", "algorithm.baseline=history"), seeds=(0, 1, 2, 3, 4)),
    Arm("hybrid-history", (HYBRID, "algorithm.baseline=history"), seeds=(0, 1, 2, 3, 4)),
    Arm("outcome-unscaled", ("algorithm.advantage_mode=outcome", "algorithm.outcome_scale=none"),
        seeds=(0, 1, 2, 3, 4)),
    Arm("depth0", (HYBRID, "reasoning.depth=0")),
    Arm("depth1", (HYBRID, "reasoning.depth=1")),
    Arm("depth2", (HYBRID, "reasoning.depth=2")),
    Arm("clipped", (HYBRID, "algorithm.policy_loss=clipped")),
    Arm("fiberpo", (HYBRID, "algorithm.policy_loss=fiberpo")),
    Arm("dph-js", (HYBRID, "algorithm.dph_divergence=js")),
    Arm("dph-fkl", (HYBRID, "algorithm.dph_divergence=forward_kl")),
    Arm("as-configured", ()),
    Arm("league-uniform", (_league_mix("uniform"),)),
    Arm("league-pfsp", (_league_mix("pfsp"),)),
    Arm("hf", ("engine.backend=hf",)),
    Arm("constrain-action", ("engine.backend=hf", "reasoning.constrain_action=true")),
)
GROUPS: dict[str, tuple[str, ...]] = {
    "advantage": (ABLATION_REFERENCE, "outcome", "process", "hybrid-lam0.25", "skip-forced"),
    "scoring": (ABLATION_REFERENCE, "outcome", "targets", "targets-segment"),
    "state": (ABLATION_REFERENCE, "outcome", "targets-state", "targets-segment-state"),
    "history": (ABLATION_REFERENCE, "outcome", "outcome-history", "hybrid-history"),
    "scale": ("outcome", "outcome-unscaled"),
    "depth": (ABLATION_REFERENCE, "depth0", "depth1", "depth2"),
    "loss": (ABLATION_REFERENCE, "clipped", "fiberpo"),
    "dph": (ABLATION_REFERENCE, "dph-js", "dph-fkl"),
    "league": ("as-configured", "league-uniform", "league-pfsp"),
    "constrain": ("hf", "constrain-action"),
    "all": tuple(arm.name for arm in ARMS),
}


@dataclass(frozen=True)
class PlannedRun:
    """One arm on one seed: the `strat train` overrides that train it and where its summary goes."""

    arm: str
    seed: int
    overrides: tuple[str, ...]
    """Everything after the config on its `strat train` command line."""
    config: ExperimentConfig
    """The resolved config those overrides give; its run directory may be another arm's (the same config)."""
    summary: Path


TrainRun = Callable[[str, Sequence[str]], int]
"""Trains `strat train CONFIG OVERRIDES...` and returns the last step it reached."""


def select_arms(names: Sequence[str]) -> list[Arm]:
    """The arms named, or those of the groups named, in the order of ARMS."""
    wanted: set[str] = set()
    for name in names:
        if name not in GROUPS and name not in {arm.name for arm in ARMS}:
            raise UserError(f"--arms {name}: no such group or arm (groups: {', '.join(GROUPS)};"
                            f" arms: {', '.join(arm.name for arm in ARMS)})")
        wanted.update(GROUPS.get(name, (name,)))
    return [arm for arm in ARMS if arm.name in wanted]


def plan_runs(config: str, arms: Sequence[Arm], out: Path, results: Path, seeds: Sequence[int] | None = None,
              steps: int | None = None, overrides: Sequence[str] = ()) -> list[PlannedRun]:
    """Every (seed, arm) run, seed by seed so that each seed's arms are paired early."""
    common = [*overrides, *([f"schedule.steps={steps}"] if steps is not None else [])]
    resolved: dict[str, str] = {}
    for arm in ARMS:
        try:
            resolved[arm.name] = to_yaml(load_config(config, [*common, *arm.overrides]))
        except ConfigError as err:
            raise ConfigError(f"arm {arm.name}: {err}") from None
    # The arm that trains each config: the first of ARMS with it, so that identical arms share one run.
    trainer = {arm.name: next(a for a in ARMS if resolved[a.name] == resolved[arm.name]) for arm in ARMS}
    seeds_of = {arm.name: tuple(seeds) if seeds is not None else arm.seeds for arm in arms}
    runs = []
    for seed in sorted({s for arm_seeds in seeds_of.values() for s in arm_seeds}):
        for arm in (a for a in arms if seed in seeds_of[a.name]):
            owner = trainer[arm.name]
            run_overrides = (*common, *owner.overrides, f"run.seed={seed}", f"run.name={owner.name}-seed{seed}",
                             f"run.output_dir={out}")
            runs.append(PlannedRun(arm.name, seed, run_overrides, load_config(config, run_overrides),
                                   results / f"{Path(config).stem}-{arm.name}-seed{seed}.json"))
    return runs


def train_with_strat(config: str, overrides: Sequence[str]) -> int:
    """`strat train CONFIG OVERRIDES...` in this process, with its progress bar and log lines."""
    # Deferred for start-up cost (Ray, torch, transformers), as in strat.cli.train.
    from strat.cli.progress import TrainProgress
    from strat.train.trainer import train

    with TrainProgress() as progress:
        progress.show_logs()
        run_dir, records = train(config, list(overrides), on_start=progress.start, on_step=progress.update)
    progress.summary(run_dir, records)
    return max((int(record["step"]) for record in records), default=0)


def run_ablation(config: str, runs: Sequence[PlannedRun], train: TrainRun = train_with_strat) -> None:
    """Train and summarise every planned run that has no summary yet."""
    for run in runs:
        label, run_dir = f"{run.arm} seed {run.seed}", run.config.run_dir
        if run.summary.is_file():
            print(f"{label}: skipped, summarised in {run.summary}", flush=True)
            continue
        if (run_dir / PROVENANCE).is_file():
            _check_same_config(run_dir, run.config)
            print(f"{label}: finished already in {run_dir}", flush=True)
        else:
            _clear_interrupted(run_dir)
            print(f"{label}: training in {run_dir}", flush=True)
            started = time.time()
            reached = train(config, run.overrides)
            if reached != run.config.schedule.steps:
                raise RunAborted(f"{run_dir}: stopped at step {reached} of {run.config.schedule.steps}; run the"
                                " ablation again to train it afresh")
            record_provenance(run_dir, ["train", config, *run.overrides], config, started)
        summary = summarize_run(run_dir, ABLATION, arm=run.arm)
        write_summary(summary, run.summary)
        print(f"{label}: summarised in {run.summary}", flush=True)


def _check_same_config(run_dir: Path, config: ExperimentConfig) -> None:
    """A finished run is reused only when it trained exactly this config (not another config's or step count's)."""
    saved_file = run_dir / "config.yaml"
    saved = yaml.safe_load(saved_file.read_text()) if saved_file.is_file() else None
    if saved != config.model_dump(mode="json"):
        raise UserError(f"{run_dir}: a finished run of another config (or --steps) than this ablation's;"
                        " pick another --out, or move it away")


def _clear_interrupted(run_dir: Path) -> None:
    """Delete an interrupted run's directory (one its trainer started: it holds config.yaml)."""
    if not run_dir.exists():
        return
    if not (run_dir / "config.yaml").is_file() and any(run_dir.iterdir()):
        raise UserError(f"{run_dir}: not a run directory (no config.yaml), not deleted; pick another --out")
    print(f"{run_dir}: interrupted (no {PROVENANCE}), deleted to train it again", flush=True)
    shutil.rmtree(run_dir)


# Comma-separated, so that the key=value overrides after them are not taken for arms or seeds.
def _names(text: str) -> list[str]:
    return [name for name in text.split(",") if name]


def _seeds(text: str) -> list[int]:
    return [int(seed) for seed in text.split(",") if seed]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--arms", type=_names, default=["advantage"],
                        help=f"groups ({', '.join(GROUPS)}) or arm names, comma-separated (default: advantage)")
    parser.add_argument("--config", default="configs/kuhn_poker_tiny.yaml")
    parser.add_argument("--seeds", type=_seeds, default=None,
                        help="seeds of every arm, comma-separated (default: per arm)")
    parser.add_argument("--steps", type=int, default=None, help="schedule.steps of every run (default: the config's)")
    parser.add_argument("--out", type=Path, default=Path("runs/ablation"), help="parent folder of the runs")
    parser.add_argument("--results", type=Path, default=Path("docs/results/ablation"), help="folder of summaries")
    parser.add_argument("overrides", nargs="*", help="key=value overrides applied to every run")
    args = parser.parse_args()
    try:
        runs = plan_runs(args.config, select_arms(args.arms), args.out, args.results, args.seeds, args.steps,
                         args.overrides)
        run_ablation(args.config, runs)
    except (ConfigError, UserError) as err:
        parser.exit(2, f"error: {err}\n")
    except RunAborted as err:
        parser.exit(1, f"error: {err}\n")
    done = [s for s in load_summaries(args.results) if s.section == ABLATION and s.config == args.config]
    print("\n" + (ablation_section(done) if done else NO_RUNS))
    print("docs/results.md's ablation section: strat results table")


if __name__ == "__main__":
    main()
