# Over 500 lines: one record type per `strat bench` figure, and the table rows they make.
"""What `strat bench` reports: one typed dataclass per figure, the flat rows of the table (each
figure next to the baseline it is divided by and its target), and the pure helpers the figures
are computed with. No torch, Ray or vLLM here, so that the report shape is cheap to test."""

from __future__ import annotations

import dataclasses
import json
import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

GIB = 2**30


# --- the rows of the table ----------------------------------------------------------------------


@dataclass(frozen=True)
class Target:
    """A bound a figure should meet: `value >= bound` or `value <= bound`."""

    op: Literal[">=", "<="]
    bound: float

    def met(self, value: float | None) -> bool | None:
        if value is None or not math.isfinite(value):
            return None
        return value >= self.bound if self.op == ">=" else value <= self.bound

    def __str__(self) -> str:
        return f"{self.op} {self.bound:g}"


@dataclass(frozen=True)
class Figure:
    """One row of the table: a measured value, what it was divided by (when it is a ratio), the target."""

    key: str
    """Stable dotted name, e.g. `rollout_efficiency.hf`."""
    title: str
    value: float | None
    unit: str
    numerator: float | None = None
    """For a ratio: the measured rate (or time) that was divided."""
    baseline: float | None = None
    """For a ratio: the baseline rate (or time) it was divided by."""
    baseline_label: str = ""
    rate_unit: str = ""
    """Unit of `numerator` and `baseline`."""
    target: Target | None = None
    note: str = ""

    @property
    def met(self) -> bool | None:
        return self.target.met(self.value) if self.target is not None else None

    def to_json(self) -> dict[str, Any]:
        return {
            "key": self.key,
            "title": self.title,
            "value": _finite(self.value),
            "unit": self.unit,
            "numerator": _finite(self.numerator),
            "baseline": _finite(self.baseline),
            "baseline_label": self.baseline_label,
            "rate_unit": self.rate_unit,
            "target": str(self.target) if self.target is not None else None,
            "met": self.met,
            "note": self.note,
        }


# --- one dataclass per figure -------------------------------------------------------------------


@dataclass(frozen=True)
class RolloutEfficiency:
    """Figure 1: the full rollout path (Ray worker: games, prompts, batching, parsing, opponents;
    agent actors) against the bare engine replaying the identical calls (same prompts, sampling
    params and seeds, hence the same output lengths)."""

    backend: str
    games: int
    engine_calls: int
    generated_tokens: int
    rollout_s: float
    """Wall time of the rollout through the rollout worker, driver to driver."""
    engine_in_path_s: float
    """Seconds spent inside `engine.generate` during that rollout."""
    replay_s: float
    """Seconds of the bare engine replaying the same calls, back to back, in the same actor."""
    replay_tokens: int
    replay_same_lengths: float
    """Fraction of completions whose replayed length equals the original one."""
    worker_cpu_s: float
    """Games, prompt building, parsing and scripted opponents alone: the same rollout replayed
    in-process against the recorded generations (no engine, no Ray)."""
    repeats: int = 1
    """Rollouts and replays measured (interleaved); the times are the best of each."""

    @property
    def path_tok_s(self) -> float:
        return _rate(self.generated_tokens, self.rollout_s)

    @property
    def engine_tok_s(self) -> float:
        return _rate(self.replay_tokens, self.replay_s)

    @property
    def efficiency(self) -> float | None:
        return _ratio(self.path_tok_s, self.engine_tok_s)

    @property
    def in_run_efficiency(self) -> float | None:
        """Engine seconds / rollout seconds of the same rollout: the path's overhead alone, free of
        the run-to-run noise that other jobs on the machine put between a rollout and its replay."""
        return _ratio(self.engine_in_path_s, self.rollout_s)

    @property
    def transport_s(self) -> float:
        """What is left: Ray calls, (de)serialisation, scheduling, waiting for a core."""
        return max(0.0, self.rollout_s - self.engine_in_path_s - self.worker_cpu_s)


@dataclass(frozen=True)
class LearnerEfficiency:
    """Figure 2: `PolicyLearner.update` against a plain transformers forward/backward/AdamW loop
    (cross-entropy on the response tokens, same logits_to_keep) on the same padded micro-batches."""

    samples: int
    tokens: int
    """Real (unpadded) prompt + response tokens per update."""
    response_tokens: int
    micro_batches: int
    micro_batch: int
    padding_fraction: float
    """Padded positions / all positions of the learner's micro-batches (length-bucketed)."""
    padding_fraction_unsorted: float
    """The same for micro-batches cut in arrival order, for comparison."""
    repeats: int
    learner_s: float
    """Best seconds per update of `repeats` (after one warm-up update), interleaved with the plain loop's."""
    plain_s: float

    @property
    def learner_tok_s(self) -> float:
        return _rate(self.tokens, self.learner_s)

    @property
    def plain_tok_s(self) -> float:
        return _rate(self.tokens, self.plain_s)

    @property
    def efficiency(self) -> float | None:
        return _ratio(self.learner_tok_s, self.plain_tok_s)


@dataclass(frozen=True)
class StepTimes:
    """The trainer's own per-step timings of one short run (from its returned records)."""

    label: str
    backend: str
    max_staleness: int
    steps: list[dict[str, float]]
    """Per step: step, rollout_s, rollout_wait_s, learn_s, sync_s, step_s, gen_tokens, learn_tokens, reward."""
    startup_s: float
    """Wall time of the run before its first step (actors, engines) and after its last."""
    actor_restarts: int = 0
    """Actors the trainer had to restart (a crash would distort the timings)."""
    other_jobs_cores: float | None = None
    """Mean cores busy with processes outside the bench during the run (the machine may be shared)."""


@dataclass(frozen=True)
class WeightSync:
    """Figure 3: learner -> agents weight sync on the default config."""

    syncs: int
    seconds_per_sync: float | None
    step_s: float | None
    """Mean step time of the steps that synced."""

    @property
    def share(self) -> float | None:
        return _ratio(self.seconds_per_sync, self.step_s)


@dataclass(frozen=True)
class PipelineOverlap:
    """Figure 4: with max_staleness=1, steady step time against max(rollout, learn) measured alone
    (in a synchronous run of the same config)."""

    steady_steps: list[int]
    overlap_step_s: float | None
    sync_rollout_s: float | None
    sync_learn_s: float | None
    sync_step_s: float | None
    overlap_rollout_s: float | None
    """The same run's own figures: rollout and learn slow down when they share the cores."""
    overlap_learn_s: float | None
    serial_s: float | None
    """Per steady overlapped step: time neither rolling out nor learning (comparator, advantages,
    sync, driver), which cannot overlap."""
    rewards: list[float | None]
    """reward/mean of each step of the overlapped run."""
    other_jobs_cores: float | None = None
    """Mean cores other jobs on the machine used during the two runs."""

    @property
    def rollout_slowdown(self) -> float | None:
        """Overlapped rollout time / rollout time alone: what sharing the cores with the update costs."""
        return _ratio(self.overlap_rollout_s, self.sync_rollout_s)

    @property
    def learn_slowdown(self) -> float | None:
        return _ratio(self.overlap_learn_s, self.sync_learn_s)

    @property
    def ratio(self) -> float | None:
        if self.sync_rollout_s is None or self.sync_learn_s is None:
            return None
        return _ratio(self.overlap_step_s, max(self.sync_rollout_s, self.sync_learn_s))

    @property
    def speedup(self) -> float | None:
        return _ratio(self.sync_step_s, self.overlap_step_s)


@dataclass(frozen=True)
class ScalingRow:
    """One rollout-throughput measurement."""

    label: str
    model: str
    params_m: float
    backend: str
    workers: int
    agents: int
    generated_tokens: int
    wall_s: float
    engine_tok_s: float | None = None
    """The bare engine on the same calls (replayed), when measured."""

    @property
    def tok_s(self) -> float:
        return _rate(self.generated_tokens, self.wall_s)


@dataclass(frozen=True)
class Scaling:
    """Figure 5: rollout throughput with more workers/agents, and vLLM against hf by model size."""

    workers: list[ScalingRow]
    backends: list[ScalingRow]

    def speedup(self, workers: int, agents: int) -> float | None:
        base = _find(self.workers, 1, 1)
        row = _find(self.workers, workers, agents)
        return _ratio(row.tok_s, base.tok_s) if row is not None and base is not None else None

    def vllm_over_hf(self, model: str) -> float | None:
        rows = {r.backend: r for r in self.backends if r.model == model}
        if "vllm" not in rows or "hf" not in rows:
            return None
        return _ratio(rows["vllm"].tok_s, rows["hf"].tok_s)


@dataclass(frozen=True)
class ProcessMemory:
    """Peak memory of one process of the run."""

    label: str
    kind: Literal["driver", "ray", "actor"]
    pid: int
    peak_rss: int
    peak_pss: int


@dataclass(frozen=True)
class Memory:
    """Figure 6: peak memory of the whole local run (driver, Ray's processes, every actor)."""

    peak_pss: int
    """Peak of the summed proportional set size: shared pages split between the processes mapping
    them, so the sum is what the run really holds."""
    peak_rss: int
    """Peak of the summed resident set size: shared pages (libraries, Ray's object store) counted
    once per process, an upper bound."""
    samples: int
    processes: list[ProcessMemory]

    def by_label(self) -> dict[str, int]:
        """Peak PSS per process label (several processes of one label are summed)."""
        out: dict[str, int] = {}
        for proc in self.processes:
            out[proc.label] = out.get(proc.label, 0) + proc.peak_pss
        return out


@dataclass(frozen=True)
class GRPOBaseline:
    """The minimal single-process GRPO loop of figure 7 (transformers generate + the same loss)."""

    steps: int
    groups: int
    group_size: int
    max_new_tokens: int
    threads: int
    generated_tokens: int
    step_s: float
    generate_s: float
    learn_s: float
    mean_response_tokens: float
    reference_tok_s: float
    """transformers generate, 64 prompts x 32 tokens (forced length), the reference measurement of docs/performance.md."""

    @property
    def tokens_per_step_s(self) -> float:
        return _rate(self.generated_tokens, self.step_s)

    @property
    def generate_tok_s(self) -> float:
        return _rate(self.generated_tokens, self.generate_s)


@dataclass(frozen=True)
class EndToEnd:
    """Figure 7: generated tokens per second of step time, Strat (hf backend, overlap on) against
    the plain single-process GRPO loop."""

    strat_steps: list[int]
    strat_generated_tokens: int
    strat_step_s: float
    strat_mean_response_tokens: float | None
    baseline: GRPOBaseline

    @property
    def strat_tok_s(self) -> float:
        return _rate(self.strat_generated_tokens, self.strat_step_s)

    @property
    def ratio(self) -> float | None:
        return _ratio(self.strat_tok_s, self.baseline.tokens_per_step_s)


PLATFORM_HF_GENERATE_TOK_S = 9000.0
"""The reference of docs/performance.md: plain transformers generate, 1 thread, tiny model, 64 prompts x 32 tokens."""


@dataclass
class BenchReport:
    """Everything one `strat bench` run measured."""

    config: str
    quick: bool
    machine: dict[str, Any]
    wall_s: float = 0.0
    rollout: list[RolloutEfficiency] = field(default_factory=list)
    learner: LearnerEfficiency | None = None
    runs: list[StepTimes] = field(default_factory=list)
    sync: WeightSync | None = None
    overlap: PipelineOverlap | None = None
    scaling: Scaling | None = None
    memory: Memory | None = None
    end_to_end: EndToEnd | None = None
    errors: dict[str, str] = field(default_factory=dict)
    """Figures that could not be measured, with why."""

    def figures(self) -> list[Figure]:
        return list(_figures(self))

    def to_json(self) -> dict[str, Any]:
        sections: dict[str, Any] = {}
        for name in ("rollout", "learner", "runs", "sync", "overlap", "scaling", "memory", "end_to_end"):
            value = getattr(self, name)
            if value is not None and value != []:
                sections[name] = _with_properties(value)
        return {
            "config": self.config,
            "quick": self.quick,
            "machine": self.machine,
            "wall_s": round(self.wall_s, 1),
            "figures": [f.to_json() for f in self.figures()],
            "sections": sections,
            "errors": self.errors,
            "table": self.table(),
        }

    def dumps(self) -> str:
        return json.dumps(self.to_json(), indent=2, allow_nan=False)

    def table(self) -> str:
        return render_table(self.figures())


def _figures(report: BenchReport) -> Iterable[Figure]:
    for item in report.rollout:
        yield Figure(
            f"rollout_efficiency.{item.backend}", f"Rollout efficiency ({item.backend})", item.efficiency, "ratio",
            numerator=item.path_tok_s, baseline=item.engine_tok_s, rate_unit="tok/s",
            baseline_label=f"bare {item.backend} engine, same calls", target=Target(">=", 0.85),
            note=f"{item.generated_tokens} tokens; of the {item.rollout_s:.1f}s rollout: engine {item.engine_in_path_s:.1f}s, "
                 f"games/prompts/parsing {item.worker_cpu_s:.2f}s, Ray and waiting {item.transport_s:.2f}s "
                 f"(engine share {_fmt(item.in_run_efficiency)})",
        )
    if (learner := report.learner) is not None:
        yield Figure(
            "learner_efficiency", "Learner efficiency", learner.efficiency, "ratio",
            numerator=learner.learner_tok_s, baseline=learner.plain_tok_s, rate_unit="tok/s",
            baseline_label="plain forward/backward/AdamW, same micro-batches", target=Target(">=", 0.9),
            note=f"padding {learner.padding_fraction:.1%} (unsorted batches {learner.padding_fraction_unsorted:.1%})",
        )
        yield Figure("learner_padding", "Learner padding fraction", learner.padding_fraction, "fraction",
                     baseline=learner.padding_fraction_unsorted, baseline_label="micro-batches in arrival order")
    if (sync := report.sync) is not None:
        yield Figure(
            "weight_sync.share", "Weight sync share of step", sync.share, "fraction",
            numerator=sync.seconds_per_sync, baseline=sync.step_s, rate_unit="s",
            baseline_label="step time", target=Target("<=", 0.05),
            note=f"{sync.syncs} syncs",
        )
    if (overlap := report.overlap) is not None:
        denominator = (max(overlap.sync_rollout_s, overlap.sync_learn_s)
                       if overlap.sync_rollout_s is not None and overlap.sync_learn_s is not None else None)
        yield Figure(
            "pipeline_overlap", "Pipeline overlap (max_staleness=1)", overlap.ratio, "ratio",
            numerator=overlap.overlap_step_s, baseline=denominator, rate_unit="s",
            baseline_label="max(rollout, learn), each alone", target=Target("<=", 1.25),
            note=f"synchronous step {_fmt(overlap.sync_step_s)}s; overlapped, rollout x{_fmt(overlap.rollout_slowdown)} "
                 f"and update x{_fmt(overlap.learn_slowdown)} slower; serial part {_fmt(overlap.serial_s)}s; "
                 f"other jobs {_fmt(overlap.other_jobs_cores)} cores",
        )
    if (scaling := report.scaling) is not None:
        base = _find(scaling.workers, 1, 1)
        for row in scaling.workers:
            if row is base:
                continue
            yield Figure(
                f"scaling.workers_{row.workers}_agents_{row.agents}",
                f"Rollout, {row.workers} workers on {row.agents} agent{'s' if row.agents > 1 else ''}",
                scaling.speedup(row.workers, row.agents), "x",
                numerator=row.tok_s, baseline=base.tok_s if base else None, rate_unit="tok/s",
                baseline_label="1 worker / 1 agent",
            )
        for model in dict.fromkeys(r.model for r in scaling.backends):
            rows = {r.backend: r for r in scaling.backends if r.model == model}
            params = next(iter(rows.values())).params_m
            yield Figure(
                f"scaling.vllm_over_hf.{model}", f"vLLM / hf rollout, {model} ({params:.1f}M)",
                scaling.vllm_over_hf(model), "x",
                numerator=rows["vllm"].tok_s if "vllm" in rows else None,
                baseline=rows["hf"].tok_s if "hf" in rows else None, rate_unit="tok/s", baseline_label="hf backend",
            )
    if (memory := report.memory) is not None:
        yield Figure(
            "memory.peak_gib", "Peak memory of the run (PSS)", memory.peak_pss / GIB, "GiB",
            target=Target("<=", 6.0),
            note=f"RSS summed: {memory.peak_rss / GIB:.2f} GiB; "
                 + ", ".join(f"{label} {value / GIB:.2f}" for label, value in _top(memory.by_label(), 4)),
        )
    if (e2e := report.end_to_end) is not None:
        yield Figure(
            "end_to_end", "Strat (hf, overlap) vs plain GRPO loop", e2e.ratio, "ratio",
            numerator=e2e.strat_tok_s, baseline=e2e.baseline.tokens_per_step_s, rate_unit="gen tok/step-s",
            baseline_label="single-process GRPO loop", target=Target(">=", 1.0),
            note=f"baseline generate {e2e.baseline.generate_tok_s:.0f} tok/s; 64x32 reference "
                 f"{e2e.baseline.reference_tok_s:.0f} tok/s (reference ~{PLATFORM_HF_GENERATE_TOK_S:.0f})",
        )


def render_table(figures: Sequence[Figure]) -> str:
    """A short markdown table: figure, value, numerator / baseline, target and whether it is met."""
    lines = ["| figure | value | measured / baseline | target | met |", "|---|---|---|---|---|"]
    for fig in figures:
        value = _fmt(fig.value, 3) + ("" if fig.unit in ("ratio", "x", "fraction") else f" {fig.unit}")
        if fig.numerator is not None or fig.baseline is not None:
            versus = f"{_fmt(fig.numerator)} / {_fmt(fig.baseline)} {fig.rate_unit}".strip()
            if fig.baseline_label:
                versus += f" ({fig.baseline_label})"
        else:
            versus = fig.note
        met = {True: "yes", False: "no", None: "-"}[fig.met]
        lines.append(f"| {fig.title} | {value} | {versus} | {fig.target or '-'} | {met} |")
    return "\n".join(lines)


# --- pure helpers -------------------------------------------------------------------------------


def padding_fraction(batches: Sequence[Sequence[tuple[int, int]]]) -> float:
    """Padded positions / all positions of micro-batches laid out as `TrainBatch.collate` does:
    prompts left-padded to the longest prompt, responses right-padded to the longest response.
    Each batch is a list of (prompt length, response length)."""
    real = total = 0
    for batch in batches:
        if not batch:
            continue
        width = max(p for p, _ in batch) + max(r for _, r in batch)
        total += width * len(batch)
        real += sum(p + r for p, r in batch)
    return 1.0 - real / total if total else 0.0


def chunks(items: Sequence[Any], size: int) -> list[list[Any]]:
    """`items` cut into consecutive lists of at most `size`."""
    if size < 1:
        raise ValueError("size must be >= 1")
    return [list(items[i : i + size]) for i in range(0, len(items), size)]


def step_record(record: Mapping[str, Any]) -> dict[str, float]:
    """The timing fields of one trainer record (generated tokens recovered from throughput x rollout time)."""
    rollout_s = float(record.get("time/rollout_s", 0.0))
    gen = float(record.get("throughput/gen_tokens_per_s", 0.0)) * rollout_s
    reward = record.get("reward/mean")
    return {
        "step": int(record["step"]),
        "rollout_s": rollout_s,
        "rollout_wait_s": float(record.get("time/rollout_wait_s", 0.0)),
        "learn_s": float(record.get("time/learn_s", 0.0)),
        "sync_s": float(record.get("time/sync_s", 0.0)),
        "step_s": float(record.get("time/step_s", 0.0)),
        "gen_tokens": round(gen),
        "learn_tokens": float(record.get("learn/tokens", 0.0)),
        "reward": float(reward) if reward is not None else None,
    }


def steady_steps(steps: Sequence[Mapping[str, float]], overlapped: bool) -> list[Mapping[str, float]]:
    """The steps that show the steady state: not the first (fresh engines; with overlap, nothing to
    overlap yet) and, with overlap, not the last (no next rollout runs under its update). Falls back
    to what there is for very short runs."""
    if not steps:
        return []
    last = max(s["step"] for s in steps)
    keep = [s for s in steps if s["step"] >= 2 and (not overlapped or s["step"] < last)]
    if keep:
        return keep
    keep = [s for s in steps if s["step"] >= 2]
    return keep or list(steps)


def mean(values: Iterable[float | None]) -> float | None:
    kept = [v for v in values if v is not None]
    return sum(kept) / len(kept) if kept else None


def _rate(amount: float, seconds: float) -> float:
    return amount / seconds if seconds > 0 else 0.0


def _ratio(a: float | None, b: float | None) -> float | None:
    if a is None or b is None or b <= 0:
        return None
    return a / b


def _find(rows: Sequence[ScalingRow], workers: int, agents: int) -> ScalingRow | None:
    return next((r for r in rows if r.workers == workers and r.agents == agents), None)


def _top(values: Mapping[str, int], n: int) -> list[tuple[str, int]]:
    return sorted(values.items(), key=lambda kv: -kv[1])[:n]


def _fmt(value: float | None, digits: int = 3) -> str:
    if value is None or not math.isfinite(value):
        return "-"
    if abs(value) >= 100:
        return f"{value:,.0f}"
    return f"{value:.{digits}g}"


def _finite(value: float | None) -> float | None:
    if value is None or not math.isfinite(value):
        return None
    return round(value, 6)


def _with_properties(value: Any) -> Any:
    """asdict() plus the derived figures (properties) of each dataclass, JSON-ready."""
    if isinstance(value, list):
        return [_with_properties(v) for v in value]
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        out = {f.name: _with_properties(getattr(value, f.name)) for f in dataclasses.fields(value)}
        for name in dir(type(value)):
            if isinstance(getattr(type(value), name, None), property):
                out[name] = _with_properties(getattr(value, name))
        return out
    if isinstance(value, dict):
        return {str(k): _with_properties(v) for k, v in value.items()}
    if isinstance(value, float):
        return _finite(value)
    return value
