"""Strat against stock TRL `GRPOTrainer` on the same work: generated tokens per second of step time, and their ratio.

    bash bench/trl_env.sh              # once: TRL in its own venv, bench/.venv-trl (not a dependency of Strat)
    python bench/trl_compare.py [--config configs/kuhn_poker_tiny.yaml] [--rounds 3] [--steps 3] [--warmup 1]
                                [--trl-threads N] [--trl-venv bench/.venv-trl] [--json FILE] [key=value ...]

The same work on both sides, from the config (with any key=value overrides):
- the model: the config's initial policy (the cached warm start of the tiny Kuhn model by default);
- the prompts: Strat's reasoning prompts (`build_messages` at the config's depth) at one state of every information
  set of the game, exported with their token ids; TRL applies the model's chat template to the same messages and must
  get the same ids (its side checks, and stops when they differ);
- the batch and lengths: TRL generates `groups_per_step` prompts x `group_size` completions per step, at most
  `reasoning.max_new_tokens` each, at the config's temperature and top_p; Strat plays its own step's games
  (`groups_per_step` groups of `group_size` games, every decision of the policy one completion);
- learning: the config's lr, grad_clip and clip range, `minibatches` optimizer steps per batch of at most
  `micro_batch` completions per pass, float32, beta = `algorithm.kl_coef` (0: no reference model), TRL's token-mean
  loss (`dapo`), group-scaled rewards; its reward is 1 for a well-formed response naming a legal move (Strat's parser)
  and the format penalty otherwise.

Strat's figure is `strat bench`'s end-to-end training run (figure 7's `training_run`: `Trainer` on the config, eval
and checkpoints off) on the config as it is, i.e. its real step (rollout, comparison, advantages, learner update,
weight sync, and the overlap of the next rollout with the update when `schedule.max_staleness` > 0), counted as the
policy's generated tokens over the step's seconds. TRL's is one generation batch (generate, reward, advantages, its
`minibatches` updates) over its seconds. Both use the whole machine: Strat with its defaults (one thread in each
actor; the engine and the learner are separate processes), TRL with `--trl-threads` torch threads (default: every
core). Per round the two run one after the other, Strat first in odd rounds and TRL first in even ones; each round
counts `--steps` steps after `--warmup` steps (and, with overlap, runs one more Strat step at the end, whose update has
no rollout under it, and does not count it). The figures are each side's median over the rounds and the ratio of the
medians, with every round's figures. The goal of issue 23 is Strat >= 2x TRL.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path

import ray

from strat.process_env import apply_defaults

apply_defaults()  # one OpenMP thread and quiet logs, before torch or vLLM is imported (`import strat` sets nothing)

from strat.algorithm.reasoning import build_messages  # noqa: E402
from strat.benchmarks.figures import BenchContext, BenchSizes, machine_info, training_run  # noqa: E402
from strat.benchmarks.monitor import LoadMonitor  # noqa: E402
from strat.config import ExperimentConfig  # noqa: E402
from strat.config_loading import load_config  # noqa: E402
from strat.engines.base import chat_messages, chat_prompt_ids  # noqa: E402
from strat.eval.exploitability import decision_states, env_at  # noqa: E402
from strat.train.ray_node import start_ray  # noqa: E402
from strat.train.settings import base_model_path  # noqa: E402
from strat.train.trainer import Trainer  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parent))  # bench/ is no package: trl_side holds the shared records
from trl_side import ExportedPrompt, StepWork, Work, trl_batching  # noqa: E402

HERE = Path(__file__).resolve().parent.parent
DEFAULT_VENV = HERE / "bench" / ".venv-trl"
GOAL = 2.0
"""Issue 23's goal: Strat's generated tokens per second of step time at least twice TRL's."""


@dataclass(frozen=True)
class SideRound:
    """One side's counted steps in one round, and the cores other jobs used meanwhile."""

    side: str
    round: int
    steps: list[StepWork]
    other_jobs_cores: float | None

    @property
    def generated_tokens(self) -> int:
        return sum(s.generated_tokens for s in self.steps)

    @property
    def seconds(self) -> float:
        return sum(s.seconds for s in self.steps)

    @property
    def tok_s(self) -> float:
        """Generated tokens per second of step time."""
        return self.generated_tokens / self.seconds if self.seconds > 0 else 0.0

    @property
    def completions_per_step(self) -> float:
        return sum(s.completions for s in self.steps) / len(self.steps)

    @property
    def tokens_per_completion(self) -> float:
        completions = sum(s.completions for s in self.steps)
        return self.generated_tokens / completions if completions else 0.0


@dataclass(frozen=True)
class Comparison:
    """Both sides over the rounds: medians of the per-round figures and their ratio."""

    strat: list[SideRound]
    trl: list[SideRound]

    @property
    def strat_tok_s(self) -> float:
        return statistics.median(r.tok_s for r in self.strat)

    @property
    def trl_tok_s(self) -> float:
        return statistics.median(r.tok_s for r in self.trl)

    @property
    def ratio(self) -> float | None:
        """Strat's median over TRL's."""
        return self.strat_tok_s / self.trl_tok_s if self.trl_tok_s > 0 else None

    @property
    def round_ratios(self) -> list[float | None]:
        return [s.tok_s / t.tok_s if t.tok_s > 0 else None for s, t in zip(self.strat, self.trl, strict=True)]

    @property
    def met(self) -> bool:
        return self.ratio is not None and self.ratio >= GOAL


def counted(steps: Sequence[StepWork], warmup: int, count: int) -> list[StepWork]:
    """Steps `warmup + 1` to `warmup + count` (numbered from 1): the steps a round counts."""
    kept = [s for s in steps if warmup < s.step <= warmup + count]
    if len(kept) != count:
        raise RuntimeError(f"expected steps {warmup + 1}..{warmup + count}, got {[s.step for s in steps]}")
    return kept


def side_order(round_: int) -> tuple[str, str]:
    """Which side runs first in round `round_` (from 1): Strat in odd rounds, TRL in even ones."""
    return ("strat", "trl") if round_ % 2 else ("trl", "strat")


# --- the same work ------------------------------------------------------------------------------


def export_prompts(tokenizer, game: str, options: dict[str, object], depth: int) -> list[ExportedPrompt]:
    """Strat's prompt at one state of every information set of `game`, with Strat's token ids."""
    prompts = []
    for key, _, state in decision_states(game, tuple(sorted(options.items()))):
        env, agent = env_at(game, options, state)
        messages = build_messages(env, agent, depth)
        prompts.append(ExportedPrompt(key, chat_messages(tokenizer, messages), chat_prompt_ids(tokenizer, messages),
                                      list(env.legal_action_names(agent))))
    return prompts


def make_work(config: ExperimentConfig, model: str, prompts: list[ExportedPrompt], args: argparse.Namespace) -> Work:
    """The TRL side's work from the config: the same model, prompts, batch, lengths and learning settings."""
    algo, reasoning = config.algorithm, config.reasoning
    work = Work(
        model=model, prompts=prompts, depth=reasoning.depth, group_size=algo.group_size, groups=algo.groups_per_step,
        max_new_tokens=reasoning.max_new_tokens, temperature=reasoning.temperature, top_p=reasoning.top_p, lr=algo.lr,
        minibatches=algo.minibatches, micro_batch=algo.micro_batch, grad_clip=algo.grad_clip,
        clip_eps_low=algo.clip_eps_low, clip_eps_high=algo.clip_eps_high, kl_coef=algo.kl_coef,
        format_penalty=algo.format_penalty, warmup=args.warmup, steps=args.steps, threads=args.trl_threads,
        seed=config.run.seed,
    )
    trl_batching(work)  # fails here, before anything runs, on a batch TRL cannot split
    return work


# --- the two sides ------------------------------------------------------------------------------


def strat_round(ctx: BenchContext, overrides: Sequence[str], round_: int, warmup: int, steps: int) -> SideRound:
    """One `Trainer` run through `strat bench`'s end-to-end measurement, on a local Ray node of its own (as `strat
    bench` measures this machine, whatever `$RAY_ADDRESS` says; shut down before TRL runs); its counted steps."""
    trailing = 1 if ctx.config.schedule.max_staleness > 0 else 0  # the last step has no rollout under its update
    owns_ray = start_ray(local=True)
    try:
        times, _ = training_run(ctx, f"strat-round{round_}", overrides, steps=warmup + steps + trailing)
    finally:
        if owns_ray:
            ray.shutdown()
    done = [StepWork(int(r["step"]), int(r["gen_tokens"]), int(r["learn_samples"]), r["step_s"]) for r in times.steps]
    return SideRound("strat", round_, counted(done, warmup, steps), times.other_jobs_cores)


def trl_command(python: Path, work_file: Path) -> list[str]:
    return [str(python), str(HERE / "bench" / "trl_side.py"), str(work_file)]


def trl_round(python: Path, work_file: Path, work: Work, round_: int) -> tuple[SideRound, dict[str, object]]:
    """One TRL run in its own venv and process, with `work.threads` threads; its counted steps and what it reported."""
    threads = str(work.threads)
    env = {**os.environ, "OMP_NUM_THREADS": threads, "MKL_NUM_THREADS": threads, "PYTHONPATH": ""}
    with LoadMonitor(interval_s=1.0) as load:
        done = subprocess.run(trl_command(python, work_file), env=env, cwd=HERE, capture_output=True, text=True,
                              check=False)
    if done.returncode != 0:
        raise RuntimeError(f"the TRL side failed (exit {done.returncode}):\n{done.stderr[-4000:]}")
    report = json.loads(done.stdout.strip().splitlines()[-1])
    steps = [StepWork(**s) for s in report.pop("steps")]
    return SideRound("trl", round_, counted(steps, work.warmup, work.steps),
                     load.summary().get("other_jobs_cores_mean")), report


# --- reporting ----------------------------------------------------------------------------------


def describe(side: SideRound) -> str:
    load = "" if side.other_jobs_cores is None else f"; other jobs {side.other_jobs_cores:.2f} cores"
    return (f"{side.tok_s:,.0f} gen tok/s ({side.generated_tokens:,} tokens in {side.seconds:.1f} s, "
            f"{side.completions_per_step:.0f} completions/step of {side.tokens_per_completion:.0f} tokens{load})")


def summary_lines(comparison: Comparison) -> list[str]:
    ratio = comparison.ratio
    verdict = "-" if ratio is None else f"{ratio:.2f} (goal >= {GOAL:g}: {'met' if comparison.met else 'not met'})"
    rounds = ", ".join("-" if r is None else f"{r:.2f}" for r in comparison.round_ratios)
    return [
        (f"median over {len(comparison.strat)} round(s), generated tokens per second of step time: "
         f"Strat {comparison.strat_tok_s:,.0f}, TRL {comparison.trl_tok_s:,.0f}"),
        f"Strat / TRL = {verdict}; per round: {rounds}",
    ]


def report_json(comparison: Comparison, work: Work, config_path: str, overrides: Sequence[str],
                trl_reports: Sequence[dict[str, object]], machine: dict[str, object]) -> dict[str, object]:
    settings = {k: v for k, v in asdict(work).items() if k != "prompts"}
    prompt_tokens = [len(p.prompt_token_ids) for p in work.prompts]

    def side(rounds: Sequence[SideRound]) -> list[dict[str, object]]:
        return [{"round": r.round, "tok_s": r.tok_s, "generated_tokens": r.generated_tokens, "seconds": r.seconds,
                 "completions_per_step": r.completions_per_step, "other_jobs_cores": r.other_jobs_cores,
                 "steps": [asdict(s) for s in r.steps]} for r in rounds]

    return {
        "config": config_path, "overrides": list(overrides), "work": settings,
        "prompts": {"count": len(prompt_tokens), "tokens_min": min(prompt_tokens), "tokens_max": max(prompt_tokens),
                    "tokens_mean": sum(prompt_tokens) / len(prompt_tokens)},
        "strat_tok_s_median": comparison.strat_tok_s, "trl_tok_s_median": comparison.trl_tok_s,
        "ratio": comparison.ratio, "round_ratios": comparison.round_ratios, "goal": GOAL, "met": comparison.met,
        "strat": side(comparison.strat), "trl": side(comparison.trl), "trl_reports": list(trl_reports),
        "machine": machine,
    }


# --- the command --------------------------------------------------------------------------------


def parse_args(argv: Sequence[str] | None) -> tuple[argparse.ArgumentParser, argparse.Namespace]:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--config", default=str(HERE / "configs" / "kuhn_poker_tiny.yaml"))
    parser.add_argument("--rounds", type=int, default=3, help="interleaved rounds of both sides (median over them)")
    parser.add_argument("--steps", type=int, default=3, help="counted steps per side and round")
    parser.add_argument("--warmup", type=int, default=1, help="steps per side and round run first and not counted")
    parser.add_argument("--trl-threads", type=int, default=os.cpu_count() or 1,
                        help="torch threads of the TRL process (default: every core)")
    parser.add_argument("--trl-venv", type=Path, default=DEFAULT_VENV, help="the venv bench/trl_env.sh created")
    parser.add_argument("--json", type=Path, help="also write the report as JSON to this file")
    parser.add_argument("overrides", nargs="*", help="key=value overrides of the config (both sides)")
    args = parser.parse_args(argv)
    for name, least in (("rounds", 1), ("steps", 1), ("warmup", 0), ("trl_threads", 1)):
        if getattr(args, name) < least:
            parser.error(f"--{name.replace('_', '-')} must be >= {least}, got {getattr(args, name)}")
    return parser, args


def _log(message: str) -> None:
    print(f"[trl-compare {time.strftime('%H:%M:%S')}] {message}", file=sys.stderr, flush=True)


def main(argv: Sequence[str] | None = None, log: Callable[[str], None] = _log) -> Comparison:
    parser, args = parse_args(argv)
    python = args.trl_venv / "bin" / "python"
    if not python.is_file():
        parser.exit(2, f"{python} not found: create TRL's venv with `bash bench/trl_env.sh` (or `make bench-trl-env`)\n")
    config = load_config(args.config, list(args.overrides))
    log("model: the config's initial policy (built and warm-started on first use, then cached)")
    model = str(Trainer.initial_model_path(config))
    from transformers import AutoTokenizer

    prompts = export_prompts(AutoTokenizer.from_pretrained(model), config.game.name, dict(config.game.options),
                             config.reasoning.depth)
    work = make_work(config, model, prompts, args)
    machine = machine_info()
    strat_rounds: list[SideRound] = []
    trl_rounds: list[SideRound] = []
    trl_reports: list[dict[str, object]] = []
    with tempfile.TemporaryDirectory(prefix="trl-compare-") as tmp:
        work_file = Path(tmp) / "work.json"
        work_file.write_text(work.to_json())
        ctx = BenchContext(config=config, config_path=args.config, sizes=BenchSizes(), model_path=model,
                           base_model_path=str(base_model_path(config)), workdir=Path(tmp), log=log)
        for round_ in range(1, args.rounds + 1):
            for side in side_order(round_):
                log(f"round {round_}: {side}")
                if side == "strat":
                    strat_rounds.append(strat_round(ctx, args.overrides, round_, args.warmup, args.steps))
                else:
                    measured, reported = trl_round(python, work_file, work, round_)
                    trl_rounds.append(measured)
                    trl_reports.append(reported)
            print(f"round {round_}: Strat {describe(strat_rounds[-1])}; TRL {describe(trl_rounds[-1])}", flush=True)
    comparison = Comparison(strat_rounds, trl_rounds)
    for line in summary_lines(comparison):
        print(line)
    if args.json is not None:
        machine["load_average_end"] = [round(x, 2) for x in os.getloadavg()]
        report = report_json(comparison, work, args.config, args.overrides, trl_reports, machine)
        args.json.write_text(json.dumps(report, indent=2) + "\n")
    return comparison


if __name__ == "__main__":
    main()
