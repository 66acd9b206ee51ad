"""The model card (README.md) of an exported policy: base model, game, method settings, prompt format with one
example, steps, and the evaluation table as `metrics.jsonl` logged it."""

from __future__ import annotations

import ast
import random
import re
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import games
from strat.algorithm.reasoning import DEPTH_SECTIONS, build_messages, format_prompt
from strat.config import ExperimentConfig, OpponentConfig

if TYPE_CHECKING:
    from strat.train.resume import ResumeOverrides

EVAL_ROWS: tuple[tuple[str, str, str | None], ...] = (
    ("return vs random", "eval/return_vs_random", "eval/return_vs_random_ci"),
    ("win rate vs random", "eval/win_rate_vs_random", None),
    ("exploitability", "eval/exploitability", "eval/exploitability_ci"),
)
"""The card's evaluation rows: (label, metrics.jsonl key, key of its 95% interval or None)."""

_EPISODE = re.compile(r"^## (\S+) \(seed (\d+),")
_FIRST_TURN = re.compile(r"^### turn 0: (\S+) plays ")
_ITEM = re.compile(r"^- ([a-z_ ]+): (.*)$")
_CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f]")


@dataclass(frozen=True)
class Example:
    """One prompt as the model sees it (chat template applied) and a response to it, with where it came from."""

    prompt: str
    response: str
    source: str


@dataclass(frozen=True)
class _SampledTurn:
    seed: int
    agent: str
    response: str
    source: str


def example(run_dir: Path, config: ExperimentConfig, step: int, tokenizer: Any) -> Example:
    """The first turn of a game sampled in training (the latest `samples/step_K.md` with K <= step), its prompt rebuilt
    from the game's seed; without transcripts, a fresh deal and a templated response in the trained format."""
    depth = config.reasoning.depth
    env = games.make(config.game.name, **config.game.options)
    sampled = _sampled_turn(run_dir, step, depth)
    if sampled is not None:
        env.reset(seed=sampled.seed)
        if env.agent_selection == sampled.agent:
            prompt = format_prompt(tokenizer, build_messages(env, sampled.agent, depth))
            return Example(prompt, sampled.response, sampled.source)
    # Deferred: the warm start's templates pull in torch's training stack, needed only here.
    from strat.train.warmstart import templated_response

    env.reset(seed=config.run.seed)
    agent = env.agent_selection
    action = env.legal_actions(agent)[0]
    response = templated_response(env, agent, action, depth, random.Random(config.run.seed),
                                  config.warm_start.enabled and config.warm_start.name_legal_moves)
    prompt = format_prompt(tokenizer, build_messages(env, agent, depth))
    return Example(prompt, response, "a templated response in the trained format (the run kept no transcripts)")


def _sampled_turn(run_dir: Path, step: int, depth: int) -> _SampledTurn | None:
    """The first turn 0 with a policy response in the latest transcript file at or before `step`."""
    files = sorted(
        (int(path.stem[len("step_"):]), path) for path in (run_dir / "samples").glob("step_*.md")
        if path.stem[len("step_"):].isdigit() and int(path.stem[len("step_"):]) <= step
    )
    if not files:
        return None
    sampled_at, path = files[-1]
    lines = path.read_text().splitlines()
    episode, seed = "", None
    for index, line in enumerate(lines):
        if match := _EPISODE.match(line):
            episode, seed = match.group(1), int(match.group(2))
        elif seed is not None and (match := _FIRST_TURN.match(line)):
            response = _response(lines[index + 1:], depth)
            if response is not None:
                source = f"sampled in training at step {sampled_at} (samples/{path.name}, episode {episode})"
                return _SampledTurn(seed, match.group(1), response, source)
    return None


def _response(lines: list[str], depth: int) -> str | None:
    """A turn's response from its transcript items: the raw text when shown, else its sections in the depth's order."""
    items: dict[str, str] = {}
    last = None
    for line in lines:
        if not line.strip():
            break
        if match := _ITEM.match(line):
            last = match.group(1)
            items[last] = match.group(2)
        elif last is not None:
            items[last] += "\n" + line
    if "raw response" in items:
        try:
            raw = ast.literal_eval(items["raw response"])
        except (ValueError, SyntaxError):
            return None
        return raw if isinstance(raw, str) else None
    present = [name for name in DEPTH_SECTIONS[depth] if name in items]
    return "\n".join(f"<{name}>{items[name]}</{name}>" for name in present) if present else None


def evaluations(records: list[dict[str, Any]], step: int) -> tuple[dict[str, Any] | None, dict[str, Any] | None]:
    """(before training: the step-0 evaluation, final: the last evaluation at or before `step`), each None if absent."""
    logged = [r for r in records if "eval/return_vs_random" in r and int(r["step"]) <= step]
    before = next((r for r in logged if int(r["step"]) == 0), None)
    final = logged[-1] if logged and int(logged[-1]["step"]) > 0 else None
    return before, final


def figure(record: dict[str, Any], key: str, ci: str | None) -> str:
    """A logged value with its 95% interval as the card prints it: `m ± h` (a half-width), `m [lo, hi]` (bounds)."""
    value = record.get(key)
    if value is None:
        return "-"
    interval = record.get(ci) if ci is not None else None
    if isinstance(interval, list):
        return f"{value:.4f} [{interval[0]:.4f}, {interval[1]:.4f}]"
    if isinstance(interval, (int, float)):
        return f"{value:.4f} ± {interval:.4f}"
    return f"{value:.4f}"


def _hub_id(base: str) -> str | None:
    """`org/name` of a Hub model named as `org/name` or `org/name@revision`; None for a local directory or tiny model."""
    name = base.split("@", 1)[0]
    if base.startswith("tiny:") or Path(name).expanduser().exists():
        return None
    return name if re.fullmatch(r"[\w.-]+/[\w.-]+", name) else None


def _base_lines(config: ExperimentConfig, base: str) -> list[str]:
    name, _, revision = base.partition("@")
    if base.startswith("tiny:"):
        tiny = config.model.tiny
        lines = [(f"- base model: `{base}`, a tiny Qwen2-architecture model Strat builds offline ({tiny.num_layers} layers,"
                 f" width {tiny.hidden_size}, vocabulary {tiny.vocab_size}; random weights)")]
    else:
        lines = [f"- base model: `{name}`" + (f" at revision `{revision}`" if revision else "")]
    if config.warm_start.enabled:
        warm = config.warm_start
        lines.append(f"- warm start before RL: {warm.epochs} epochs on {warm.episodes} templated games of the"
                     f" `{warm.player}` scripted player (teaches the format, not a strategy)")
    lora = config.learner.lora
    if lora.enabled:
        lines.append(f"- fine-tuning: LoRA (r={lora.r}, alpha={lora.alpha:g}, targets {', '.join(lora.target_modules)}),"
                     " merged into these weights")
    else:
        lines.append(f"- fine-tuning: all weights ({config.learner.dtype})")
    return lines


def _method_rows(config: ExperimentConfig) -> list[tuple[str, str]]:
    algo, reasoning = config.algorithm, config.reasoning
    if algo.policy_loss == "clipped":
        loss = f"clipped surrogate, ratio in [{1 - algo.clip_eps_low:g}, {1 + algo.clip_eps_high:g}], {algo.loss_agg}"
    elif algo.policy_loss == "fiberpo":
        loss = f"FiberPO (delta {algo.fiberpo_delta:g}, eps {algo.fiberpo_eps:g}), {algo.loss_agg}"
    else:
        loss = f"policy loss {algo.policy_loss!r}, {algo.loss_agg}"
    if algo.kl_type != "none":
        loss += f", {_kl_penalty(config)}"
    if algo.entropy_coef:
        loss += f", entropy bonus x {algo.entropy_coef:g}"
    if algo.move_entropy_coef:
        loss += f", move entropy bonus x {algo.move_entropy_coef:g}"
    weights = config.comparison.weights
    return [
        ("reasoning depth", f"{reasoning.depth} (sections: {', '.join(DEPTH_SECTIONS[reasoning.depth])})"),
        ("advantage mode", algo.advantage_mode),
        ("lam (process weight)", f"unused ({algo.advantage_mode} advantage)"
         if algo.advantage_mode in ("outcome", "process") else f"{algo.lam:g}"),
        ("baseline", algo.baseline if algo.outcome_scale == "std" or algo.baseline == "ema"
         else f"{algo.baseline}, the outcome not divided by its group's std"),
        ("group shape", f"{algo.group_size} episodes per group x {algo.groups_per_step} groups per step"),
        ("zero-spread groups", algo.zero_spread),
        ("CoT comparison", (f"{config.comparison.agreement} agreement; weights predict {weights.predict:g},"
                           f" belief {weights.belief:g}, agreement {weights.agreement:g}")),
        ("loss", loss),
        ("learning rate", f"{algo.lr:g} (AdamW, {algo.epochs} epoch(s) x {algo.minibatches} minibatch(es) per step)"),
        ("format penalty", f"{algo.format_penalty:g}"),
        ("sampling in rollouts", (f"temperature {reasoning.temperature:g}, top_p {reasoning.top_p:g},"
                                 f" at most {reasoning.max_new_tokens} new tokens")),
        ("seed", str(config.run.seed)),
    ]


_KL_PENALTIES = {
    "forward": "forward KL(anchor || policy) penalty (k3 estimator)",
    "reverse": "reverse KL(policy || anchor) penalty (k2 estimator)",
}


def _kl_penalty(config: ExperimentConfig) -> str:
    """The KL penalty: which divergence its gradient follows, its weight, and what it is anchored to."""
    algo = config.algorithm
    if algo.kl_reference == "snapshot":
        kinds = {o.kind for o in config.game.opponents}
        held = ("the league's newest member" if "league" in kinds else
                "the snapshot opponent's weights" if "snapshot" in kinds else "a snapshot of the policy")
        anchor = f"{held}, moved every {config.schedule.snapshot_every} steps"
    else:
        anchor = "the initial policy (the weights RL started from)"
    return f"{_KL_PENALTIES[algo.kl_type]} x {algo.kl_coef:g}, anchored to {anchor}"


def _opponents(config: ExperimentConfig) -> str:
    total = sum(o.weight for o in config.game.opponents)
    parts = [f"{o.kind}{f' ({o.name})' if o.name else ''}{_league(o) if o.kind == 'league' else ''}"
             f" {o.weight / total:.0%}" for o in config.game.opponents]
    return ", ".join(parts)


def _league(opponent: OpponentConfig) -> str:
    decay = f", record decay {opponent.league_decay:g}" if opponent.league_decay < 1 else ""
    return f" (last {opponent.league_size} snapshots, {opponent.league_sampling}{decay})"


def _fence(text: str) -> list[str]:
    shown = _CONTROL.sub(lambda m: f"\\x{ord(m.group()):02x}", text)
    return ["````text", shown, "````"]


def _eval_lines(records: list[dict[str, Any]], step: int, config: ExperimentConfig) -> list[str]:
    before, final = evaluations(records, step)
    if final is None and before is None:
        return ["No evaluation was logged up to this step (`schedule.eval_every`)."]
    shown = [(f"before training (step {r['step']})" if r is before else f"step {r['step']}", r)
             for r in (before, final) if r is not None]
    lines = [
        (f"Against a uniformly random opponent over {config.eval.games} games (seats alternate), the policy sampling as"
        f" in training; exploitability from {config.eval.samples_per_infoset} samples per information set. Figures as"
        " logged in"
        " `metrics.jsonl`; intervals are 95%: `±` the normal half-width of the mean return, `[lo, hi]` a bootstrap"
        f" interval ({config.eval.bootstrap} replicates)."),
        "",
        "| measure | " + " | ".join(label for label, _ in shown) + " |",
        "|---|" + "---|" * len(shown),
    ]
    for label, key, ci in EVAL_ROWS:
        if any(key in r for _, r in shown):
            lines.append(f"| {label} | " + " | ".join(figure(r, key, ci) for _, r in shown) + " |")
    if final is not None and int(final["step"]) != step:
        lines += ["", f"The last evaluation was at step {final['step']}; these weights are from step {step}."]
    return lines


def _resume_lines(resumes: list[ResumeOverrides], step: int) -> list[str]:
    """The changes made on resume that the weights of `step` trained under."""
    lines = []
    for resume in resumes:
        if resume.step < step:
            changed = ", ".join(f"`{c.key}` {c.before} -> {c.after}" for c in resume.changes)
            lines.append(f"- resumed after step {resume.step} with {changed}")
    return ["", "The settings above are those of `config.yaml` now; the run changed some on resume:", "", *lines] if lines else []


def render(config: ExperimentConfig, base: str, step: int, records: list[dict[str, Any]], sample: Example,
           resumes: list[ResumeOverrides]) -> str:
    """The README.md of an exported policy; `base` is `model.path` as the run recorded it, `resumes` what
    `overrides.jsonl` recorded."""
    game = config.game
    options = ", ".join(f"{k}={v}" for k, v in game.options.items()) or "the defaults"
    hub = _hub_id(base)
    front = ["---", "library_name: transformers", "tags:", "- strat", "- reinforcement-learning",
             f"- {game.name.replace('_', '-')}"]
    front += ([f"base_model: {hub}"] if hub else []) + ["---", ""]
    lines = [
        *front,
        f"# {config.run.name} (step {step})",
        "",
        (f"A policy for {game.name.replace('_', ' ')} trained with Strat (Strat-Reasoner: recursive reasoning, a central"
        " CoT comparison and a hybrid group-relative advantage), exported by `strat export` from checkpoint"
        f" `step_{step}`."),
        "",
        "## Base model",
        "",
        *_base_lines(config, base),
        "",
        "## Game",
        "",
        f"- game: `{game.name}` with options: {options}",
        f"- opponents in training: {_opponents(config)}",
        "",
        "## Method",
        "",
        "| setting | value |",
        "|---|---|",
        *(f"| {name} | {value} |" for name, value in _method_rows(config)),
        "",
        "## Steps",
        "",
        (f"Trained for {step} steps (`schedule.steps` = {config.schedule.steps}), each on"
        f" {config.algorithm.group_size * config.algorithm.groups_per_step} episodes."),
        *_resume_lines(resumes, step),
        "",
        "## Prompt format",
        "",
        ("Each turn the model gets a system message (the rules and the response format) and a user message (its"
        " observation, the history and the legal actions), formatted by the chat template in this directory; it"
        " answers with tagged sections and ends its turn with one of the `eos_token_id`s of `generation_config.json`."
        " Example prompt, as the model sees it:"),
        "",
        *_fence(sample.prompt),
        "",
        f"Example response, {sample.source}:",
        "",
        *_fence(sample.response),
        "",
        "## Evaluation",
        "",
        *_eval_lines(records, step, config),
        "",
        "## Use",
        "",
        "```python",
        "from transformers import AutoModelForCausalLM, AutoTokenizer",
        "tokenizer = AutoTokenizer.from_pretrained(PATH)",
        "model = AutoModelForCausalLM.from_pretrained(PATH)",
        "```",
        "",
        _eval_use(config),
        "",
    ]
    return "\n".join(lines)


def _eval_use(config: ExperimentConfig) -> str:
    """How `strat eval` plays this directory: in the run's format, from `strat.json` and `generation_config.json`."""
    reasoning = config.reasoning
    options = ", ".join(f"{k}={v}" for k, v in config.game.options.items()) or "default options"
    return (f"`strat eval --policy PATH --game {config.game.name}` evaluates it against scripted opponents as the run"
            " evaluated its checkpoints (the same `eval.json` for the same `--seed`): `strat.json` gives the game"
            f" (`{config.game.name}`, {options}), the reasoning depth ({reasoning.depth}), the format penalty"
            f" ({config.algorithm.format_penalty:g}) and the samples per information set"
            f" ({config.eval.samples_per_infoset}); `generation_config.json` the sampling (`max_new_tokens`"
            f" {reasoning.max_new_tokens}, `temperature` {reasoning.temperature:g}, `top_p` {reasoning.top_p:g})."
            " `--depth`, `--game-option`, `--max-new-tokens`, `--temperature` and `--samples-per-infoset` override"
            " them.")
