# Over 500 lines: one function per `strat bench` figure, with the actor set-up they share.
"""The figures of `strat bench`, one function each, and `run_bench`, which measures them all in
one run on the same config, prompts and token counts.

The driver starts one local Ray node for the whole bench (with the trainer's environment) and
runs, in order: three short training runs through `Trainer` (the default config with memory
sampled, the same with max_staleness=0, the hf backend with overlap), the rollout path of both
backends against their bare engines, rollout scaling, then the in-process learner and GRPO
baselines."""

from __future__ import annotations

import contextlib
import dataclasses
import os
import platform
import sys
import tempfile
import time
from collections.abc import Callable, Collection, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import psutil
import ray
import torch
from safetensors import safe_open
from transformers import AutoTokenizer

from strat.algorithm.advantage import RoleBaseline, compute_advantages
from strat.algorithm.comparison import ComparisonWeights, agreement_scorer, score_episodes
from strat.algorithm.records import TrainBatch
from strat.benchmarks.agent import RecordingAgent
from strat.benchmarks.baselines import (
    GRPOSettings,
    ReplayPolicy,
    chat_encoder,
    load_model,
    plain_grpo,
    plain_update,
    reference_generate_tok_s,
)
from strat.benchmarks.monitor import LoadMonitor, MemorySampler
from strat.benchmarks.results import (
    BenchReport,
    EndToEnd,
    GRPOBaseline,
    LearnerEfficiency,
    Memory,
    PipelineOverlap,
    RolloutEfficiency,
    Scaling,
    ScalingRow,
    StepTimes,
    WeightSync,
    chunks,
    mean,
    padding_fraction,
    steady_steps,
    step_record,
)
from strat.config import ExperimentConfig, OpponentConfig
from strat.config_loading import load_config
from strat.engines import EngineSettings, SamplingParams
from strat.model import tiny as tiny_model
from strat.model.tiny import TinyModelSettings
from strat.play.rollout import RolloutRunner, derive_seed, plan_groups
from strat.play.settings import engine_settings as trainer_engine_settings
from strat.play.settings import rollout_settings
from strat.train.learner import PolicyLearner
from strat.train.ray_node import start_ray
from strat.train.rollout_actor import RolloutWorker
from strat.train.settings import advantage_config, base_model_path, learner_settings
from strat.train.trainer import Trainer

FIGURES = ("rollout", "learner", "sync", "overlap", "scaling", "memory", "e2e")
DEFAULT_CONFIG = "configs/kuhn_poker_tiny.yaml"

MEDIUM_MODEL = TinyModelSettings(hidden_size=512, intermediate_size=1536, num_layers=16, num_heads=8,
                                 num_kv_heads=2, head_dim=64)
"""~50 M parameters: the tiny model's tokenizer, Qwen2 architecture, random weights."""
MEDIUM_KV_CACHE_BYTES = 256 * 2**20
ACTOR_CPUS = 0.05
"""Ray CPU of each bench actor: placement only (threads come from OMP_NUM_THREADS), kept small so
that all the actors of a measurement fit next to the ones still alive."""
READY_TIMEOUT_S = 600.0


@dataclass(frozen=True)
class BenchSizes:
    """How much work each measurement does; `QUICK` shrinks all of them."""

    train_steps: int = 4
    """Steps of each short training run (the first and, with overlap, the last are not steady)."""
    groups_per_step: int | None = None
    """None: the config's. Applies to the training runs, the rollout path and the GRPO baseline."""
    rollout_repeats: int = 2
    """Rollout path and bare-engine replays, interleaved; the best of each counts."""
    learner_repeats: int = 2
    """Timed updates of the learner and the plain loop, interleaved; the best of each counts."""
    scaling_groups: int = 1
    """Groups (of group_size games, self-play) of the vLLM-against-hf rollouts."""
    scaling_max_tokens: int = 32
    """Token budget per decision there (the random models rarely stop earlier)."""
    medium_model: bool = True
    baseline_steps: int = 3
    reference_prompts: int = 64
    reference_tokens: int = 32


FULL = BenchSizes()
QUICK = BenchSizes(train_steps=3, groups_per_step=2, rollout_repeats=1, learner_repeats=1, scaling_groups=1, scaling_max_tokens=16,
                   medium_model=False, baseline_steps=1)


@dataclass
class BenchContext:
    """What every figure needs: the config, the model directories and where to write."""

    config: ExperimentConfig
    config_path: str
    sizes: BenchSizes
    model_path: str
    """The policy RL starts from (warm-started when the config says so)."""
    base_model_path: str
    """The config's model before the warm start (random weights for `tiny:`)."""
    workdir: Path
    log: Callable[[str], None]

    @property
    def groups(self) -> int:
        return self.sizes.groups_per_step or self.config.algorithm.groups_per_step


def engine_settings(config: ExperimentConfig, **changes: Any) -> EngineSettings:
    """The engine settings the trainer gives its agent actors, with `changes` applied."""
    return dataclasses.replace(trainer_engine_settings(config), **changes)


def machine_info() -> dict[str, Any]:
    info: dict[str, Any] = {
        "machine": platform.machine(),
        "cpus": os.cpu_count(),
        "memory_gib": round(psutil.virtual_memory().total / 2**30, 1),
        "python": platform.python_version(),
        "gpu": False,
        "load_average_start": [round(x, 2) for x in os.getloadavg()],
    }
    try:
        info["torch"] = torch.__version__
        info["gpu"] = bool(torch.cuda.is_available())
        info["torch_threads"] = torch.get_num_threads()
    except ImportError:  # pragma: no cover
        pass
    for module in ("vllm", "ray", "transformers"):
        try:
            info[module] = __import__(module).__version__
        except Exception:  # noqa: BLE001  (a missing optional backend is reported, not fatal)
            info[module] = None
    return info


# --- training runs (figures 3, 4, 6, 7) ---------------------------------------------------------


def training_run(ctx: BenchContext, label: str, overrides: Sequence[str], sample_memory: bool = False,
                 steps: int | None = None) -> tuple[StepTimes, Memory | None]:
    """A short `Trainer` run of the config (eval and checkpoints off) and its per-step timings."""
    changes = [f"schedule.steps={steps or ctx.sizes.train_steps}", "schedule.eval_every=0", "schedule.checkpoint_every=0",
               f"run.output_dir={ctx.workdir / 'runs'}", f"run.name={label}", *overrides]
    if ctx.sizes.groups_per_step is not None:
        changes.append(f"algorithm.groups_per_step={ctx.sizes.groups_per_step}")
    config = load_config(ctx.config_path, changes)
    ctx.log(f"training run {label}: {config.engine.backend}, max_staleness={config.schedule.max_staleness}, "
            f"{config.schedule.steps} steps")
    sampler = MemorySampler() if sample_memory else contextlib.nullcontext()
    started = time.perf_counter()
    with LoadMonitor(interval_s=1.0) as load, sampler:
        records = Trainer(config, config.run_dir).run()
    wall = time.perf_counter() - started
    timed = [r for r in records if "time/step_s" in r]
    rows = [step_record(r) for r in timed]
    for row, record in zip(rows, timed, strict=True):
        row["learn_samples"] = float(record.get("learn/samples", 0.0))
    times = StepTimes(label=label, backend=config.engine.backend, max_staleness=config.schedule.max_staleness,
                      steps=rows, startup_s=wall - sum(s["step_s"] for s in rows),
                      actor_restarts=int(max((r.get("faults/actor_restarts", 0) for r in records), default=0)),
                      other_jobs_cores=load.summary().get("other_jobs_cores_mean"))
    ctx.log("  " + ", ".join(f"step {s['step']}: {s['step_s']:.1f}s" for s in rows)
            + f" (other jobs on the machine: {times.other_jobs_cores} cores)")
    return times, (sampler.result() if isinstance(sampler, MemorySampler) else None)


def weight_sync(run: StepTimes) -> WeightSync:
    """Figure 3: mean seconds per sync, against the mean step time of the steps that synced."""
    synced = [s for s in run.steps if s["sync_s"] > 0]
    return WeightSync(syncs=len(synced), seconds_per_sync=mean(s["sync_s"] for s in synced),
                      step_s=mean(s["step_s"] for s in synced))


def pipeline_overlap(overlapped: StepTimes, synchronous: StepTimes) -> PipelineOverlap:
    """Figure 4: steady overlapped step time against max(rollout, learn) of the synchronous run."""
    steady = steady_steps(overlapped.steps, overlapped=True)
    alone = steady_steps(synchronous.steps, overlapped=False)
    serial = [s["step_s"] - s["rollout_wait_s"] - s["learn_s"] - s["sync_s"] for s in steady]
    return PipelineOverlap(
        steady_steps=[int(s["step"]) for s in steady],
        overlap_step_s=mean(s["step_s"] for s in steady),
        sync_rollout_s=mean(s["rollout_s"] for s in alone),
        sync_learn_s=mean(s["learn_s"] for s in alone),
        sync_step_s=mean(s["step_s"] for s in alone),
        overlap_rollout_s=mean(s["rollout_s"] for s in steady),
        overlap_learn_s=mean(s["learn_s"] for s in steady),
        serial_s=mean(serial),
        rewards=[s["reward"] for s in overlapped.steps],
        other_jobs_cores=mean([overlapped.other_jobs_cores, synchronous.other_jobs_cores]),
    )


def end_to_end(strat_run: StepTimes, baseline: GRPOBaseline) -> EndToEnd:
    """Figure 7: generated tokens per second of steady step time, against the GRPO baseline."""
    steady = steady_steps(strat_run.steps, overlapped=strat_run.max_staleness > 0)
    samples = sum(s.get("learn_samples", 0.0) for s in steady)
    return EndToEnd(
        strat_steps=[int(s["step"]) for s in steady],
        strat_generated_tokens=int(sum(s["gen_tokens"] for s in steady)),
        strat_step_s=sum(s["step_s"] for s in steady),
        strat_mean_response_tokens=sum(s["learn_tokens"] for s in steady) / samples if samples else None,
        baseline=baseline,
    )


# --- the rollout path (figures 1 and 5) ---------------------------------------------------------


@dataclass
class _RolloutSetup:
    """Agent actors and rollout workers of one backend and model, kept alive between measurements."""

    backend: str
    model_path: str
    settings: Any
    agents: list[Any]
    snapshot: Any | None
    workers: list[Any]

    def engines(self) -> list[Any]:
        extra = [self.snapshot] if self.snapshot is not None and all(self.snapshot is not a for a in self.agents) else []
        return [*self.agents, *extra]

    def handles(self) -> list[Any]:
        return [*self.engines(), *self.workers]


def _new_agent(backend: str, model_path: str, settings: EngineSettings) -> Any:
    return RecordingAgent.options(num_cpus=ACTOR_CPUS).remote(backend, model_path, settings)


def _new_worker(settings, model_path: str, agent: Any, snapshot: Any | None) -> Any:
    return RolloutWorker.options(num_cpus=ACTOR_CPUS).remote(settings, model_path, agent, snapshot)


def _start_rollout(backend: str, model_path: str, settings, engine: EngineSettings, snapshot: bool) -> _RolloutSetup:
    """One agent and one rollout worker, as the trainer places them. The snapshot opponent, when the
    plans need one, is served by the same agent: both hold the same weights here, and a worker
    sends its policy and snapshot batches one after the other anyway, so one engine does the same
    work as two (and starts once)."""
    agent = _new_agent(backend, model_path, engine)
    frozen = agent if snapshot else None
    setup = _RolloutSetup(backend, model_path, settings, [agent], frozen, [_new_worker(settings, model_path, agent, frozen)])
    try:
        _ready(setup.handles())
    except BaseException:
        _stop(setup.handles())
        raise
    return setup


def _ready(handles: Sequence[Any]) -> None:
    ray.get([h.ready.remote() for h in handles], timeout=READY_TIMEOUT_S)


def _stop(handles: Sequence[Any]) -> None:
    for handle in handles:
        ray.kill(handle)


def _plans(ctx: BenchContext, settings, groups: int) -> list[Any]:
    """Step 1's plans of worker 0, as the trainer draws them (deals, opponents, ego seats)."""
    return plan_groups(settings, ctx.config.run.seed, 1, 0, groups)


def _run_rollout(ctx: BenchContext, setup: _RolloutSetup, plans: Sequence[Any], step: int = 1
                 ) -> tuple[list[Any], float]:
    """Play `plans` split over the setup's workers in contiguous shares; (episodes, wall seconds)."""
    n = len(setup.workers)
    counts = [len(plans) // n + (i < len(plans) % n) for i in range(n)]
    shares, start = [], 0
    for count in counts:
        shares.append(list(plans[start:start + count]))
        start += count
    seed = ctx.config.run.seed
    started = time.perf_counter()
    futures = [worker.run.remote(share, derive_seed(seed, step, index, "sampling"))
               for index, (worker, share) in enumerate(zip(setup.workers, shares, strict=True)) if share]
    episodes = [e for batch in ray.get(futures) for e in batch]
    return episodes, time.perf_counter() - started


def _clear(setup: _RolloutSetup) -> None:
    ray.get([a.clear.remote() for a in setup.engines()])


def _generated(episodes: Sequence[Any]) -> int:
    return sum(len(t.response_token_ids) for e in episodes for t in e.turns)


def _needs_snapshot(plans: Sequence[Any]) -> bool:
    return any(plan.opponent.kind == "snapshot" for plan in plans)


def rollout_efficiency(ctx: BenchContext, backend: str) -> tuple[RolloutEfficiency, list[Any], _RolloutSetup]:
    """Figure 1 for one backend: the rollout path through a rollout worker and agent actors (as
    the trainer runs it), against the bare engine replaying the identical calls in the same actor
    (prefix cache cleared before each, as before the rollout). Best of `rollout_repeats`, each
    interleaved with its replay, so that other load on the machine hits both alike.
    Returns the figure, the episodes (for the learner figure) and the live setup (for scaling)."""
    settings = rollout_settings(ctx.config)
    plans = _plans(ctx, settings, ctx.groups)
    setup = _start_rollout(backend, ctx.model_path, settings, engine_settings(ctx.config), _needs_snapshot(plans))
    try:
        _run_rollout(ctx, setup, plans[:1])  # warm-up: engine, tokenizer, first-call costs
        best: tuple[float, float, list[Any], list[Any]] | None = None
        replay_s: list[float] = []
        for _ in range(ctx.sizes.rollout_repeats):
            _clear(setup)
            episodes, rollout_s = _run_rollout(ctx, setup, plans)
            served = ray.get([a.summary.remote() for a in setup.engines()])
            replays = [ray.get(a.replay.remote()) for a in setup.engines()]
            replay_s.append(sum(r.engine_s for r in replays))
            if best is None or rollout_s < best[0]:
                best = (rollout_s, sum(s.engine_s for s in served), episodes, served)
        calls = [ray.get(a.calls.remote()) for a in setup.engines()]
    except BaseException:
        _stop(setup.handles())
        raise
    rollout_s, engine_in_path_s, episodes, served = best

    # The worker's own CPU work: the same rollout in-process, every generation answered from the log.
    encode = chat_encoder(AutoTokenizer.from_pretrained(ctx.model_path))
    worker_cpu_s = float("inf")
    for _ in range(ctx.sizes.rollout_repeats):
        # One agent served the policy and the snapshot: its log interleaves them in the order the worker asked.
        shared = ReplayPolicy([call for log in calls for call in log])
        runner = RolloutRunner(settings, encode, shared, shared if setup.snapshot is not None else None)
        started = time.perf_counter()
        runner.run(plans, derive_seed(ctx.config.run.seed, 1, 0, "sampling"))
        worker_cpu_s = min(worker_cpu_s, time.perf_counter() - started)

    figure = RolloutEfficiency(
        backend=backend,
        games=len(episodes),
        engine_calls=sum(s.calls for s in served),
        generated_tokens=sum(s.generated_tokens for s in served),
        rollout_s=rollout_s,
        engine_in_path_s=engine_in_path_s,
        replay_s=min(replay_s),
        replay_tokens=sum(r.generated_tokens for r in replays),
        replay_same_lengths=sum(r.same_lengths for r in replays) / max(1, sum(r.completions for r in replays)),
        worker_cpu_s=worker_cpu_s,
        repeats=ctx.sizes.rollout_repeats,
    )
    ctx.log(f"  rollout ({backend}): {figure.path_tok_s:.0f} tok/s through the path, {figure.engine_tok_s:.0f} tok/s "
            f"bare engine -> {figure.efficiency:.3f}")
    return figure, episodes, setup


def worker_scaling(ctx: BenchContext, setup: _RolloutSetup) -> list[ScalingRow]:
    """Figure 5a: figure 1's rollout with 1 worker on 1 agent, 2 workers on 1 agent and 2 workers
    on 2 agents; the same plans, split between the workers, each from a cold prefix cache."""
    engine = engine_settings(ctx.config)
    params = _params_m(ctx.model_path)
    plans = _plans(ctx, setup.settings, ctx.groups)
    rows = []
    for workers, agents in ((1, 1), (2, 1), (2, 2)):
        _stop(setup.workers[1:])
        setup.workers = setup.workers[:1]
        if len(setup.agents) < agents:
            setup.agents.append(_new_agent(setup.backend, setup.model_path, engine))
        if workers > 1:
            setup.workers.append(_new_worker(setup.settings, setup.model_path, setup.agents[-1], setup.snapshot))
            _ready(setup.handles())
            _run_rollout(ctx, setup, plans[:workers])  # warm-up of the new actors
        _clear(setup)
        episodes, wall = _run_rollout(ctx, setup, plans)
        rows.append(ScalingRow(f"{workers} worker(s), {agents} agent(s)", "tiny (warm)", params, setup.backend,
                               workers, agents, _generated(episodes), wall))
        ctx.log(f"  {rows[-1].label}: {rows[-1].tok_s:.0f} tok/s")
    _stop([*setup.workers[1:], *setup.agents[1:]])
    setup.workers, setup.agents = setup.workers[:1], setup.agents[:1]
    return rows


def backend_scaling(ctx: BenchContext, agents: dict[str, Any]) -> list[ScalingRow]:
    """Figure 5b: vLLM against hf through the rollout path (self-play, a short fixed budget per
    decision) on the warm tiny model, reusing `agents` (backend -> live agent on that model), and
    on a ~50 M-parameter model (the tiny tokenizer, random weights). Each row also gives the
    engine's own rate inside the rollout."""
    settings = dataclasses.replace(rollout_settings(ctx.config), opponents=(OpponentConfig(kind="self"),),
                                   max_tokens=ctx.sizes.scaling_max_tokens)
    plans = _plans(ctx, settings, ctx.sizes.scaling_groups)
    models: list[tuple[str, str, dict[str, Any], dict[str, Any]]] = [("tiny", ctx.model_path, {}, agents)]
    if ctx.sizes.medium_model:
        ctx.log("  ~50M model: built on first use, then cached")
        medium = tiny_model.ensure(ctx.config.game.name, seed=0, settings=MEDIUM_MODEL)
        models.append(("50M", str(medium),
                       {"kv_cache_bytes": max(MEDIUM_KV_CACHE_BYTES, ctx.config.engine.kv_cache_bytes)}, {}))
    rows = []
    for name, path, changes, live in models:
        params = _params_m(path)
        for backend in ("hf", "vllm"):
            started: list[Any] = []
            try:
                agent = live.get(backend)
                if agent is None:
                    agent = _new_agent(backend, path, engine_settings(ctx.config, **changes))
                    started.append(agent)
                worker = _new_worker(settings, path, agent, None)
                started.append(worker)
                setup = _RolloutSetup(backend, path, settings, [agent], None, [worker])
                _ready(setup.handles())
                # Warm-up: a short call (a whole rollout would double the slow rows' time).
                ray.get(agent.generate.remote([[1, 2, 3, 4]], SamplingParams(max_tokens=4, seed=0)))
                _clear(setup)
                episodes, wall = _run_rollout(ctx, setup, plans)
                served = ray.get(agent.summary.remote())
            finally:
                _stop(started)
            rows.append(ScalingRow(f"{name} {backend}", name, params, backend, 1, 1, _generated(episodes), wall,
                                   served.generated_tokens / served.engine_s if served.engine_s > 0 else None))
            ctx.log(f"  {name} ({params:.1f}M) {backend}: {rows[-1].tok_s:.0f} tok/s through the path "
                    f"({rows[-1].engine_tok_s or 0:.0f} tok/s inside the engine)")
    return rows


def _params_m(model_path: str | Path) -> float:
    """Parameters (millions) of a safetensors model directory, read from the file headers."""
    total = 0
    for file in Path(model_path).glob("*.safetensors"):
        with safe_open(str(file), framework="pt") as handle:
            for name in handle.keys():
                shape = handle.get_slice(name).get_shape()
                count = 1
                for dim in shape:
                    count *= int(dim)
                total += count
    return total / 1e6


# --- in-process figures (2 and 7's baseline) ----------------------------------------------------


def learner_efficiency(ctx: BenchContext, episodes: Sequence[Any]) -> LearnerEfficiency:
    """Figure 2: `PolicyLearner.update` on the rollout's samples against a plain loop on the same micro-batches."""
    config = ctx.config
    weights = config.comparison.weights
    # The advantages only feed the learner's timing: token-F1 agreement stands in for a judge or an embedding
    # model, which this in-process figure does not start.
    scored = score_episodes(list(episodes), ComparisonWeights(weights.predict, weights.belief, weights.agreement),
                            agreement_scorer("token_f1"), config.comparison.skip_forced)
    baseline = RoleBaseline(config.algorithm.ema_decay) if config.algorithm.baseline == "ema" else None
    samples, _ = compute_advantages(scored, advantage_config(config), baseline)
    samples = [s for s in samples if s.response_token_ids]
    if not samples:
        raise RuntimeError("the rollout produced no training samples")
    settings = learner_settings(config)
    learner = PolicyLearner(ctx.model_path, settings)
    micro = _learner_micro_batches(learner, samples)
    batches = [TrainBatch.collate(chunk, learner.pad_id) for chunk in micro]
    plain_model = load_model(ctx.model_path, train=True)
    plain_optimizer = torch.optim.AdamW(plain_model.parameters(), lr=settings.lr)

    learner.update(samples)  # warm-up: optimizer state, first-call costs
    plain_update(plain_model, plain_optimizer, batches, settings.grad_clip)
    ours, plain = [], []
    for _ in range(ctx.sizes.learner_repeats):  # interleaved, so that other load hits both alike
        started = time.perf_counter()
        learner.update(samples)
        ours.append(time.perf_counter() - started)
        started = time.perf_counter()
        plain_update(plain_model, plain_optimizer, batches, settings.grad_clip)
        plain.append(time.perf_counter() - started)
    lengths = [[(len(s.prompt_token_ids), len(s.response_token_ids)) for s in chunk] for chunk in micro]
    arrival = chunks([(len(s.prompt_token_ids), len(s.response_token_ids)) for s in samples], settings.micro_batch)
    figure = LearnerEfficiency(
        samples=len(samples),
        tokens=sum(len(s.prompt_token_ids) + len(s.response_token_ids) for s in samples),
        response_tokens=sum(len(s.response_token_ids) for s in samples),
        micro_batches=len(micro),
        micro_batch=settings.micro_batch,
        padding_fraction=padding_fraction(lengths),
        padding_fraction_unsorted=padding_fraction(arrival),
        repeats=len(ours),
        learner_s=min(ours),
        plain_s=min(plain),
    )
    ctx.log(f"  learner: {figure.learner_tok_s:.0f} tok/s, plain loop {figure.plain_tok_s:.0f} tok/s -> "
            f"{figure.efficiency:.3f}; padding {figure.padding_fraction:.1%}")
    return figure


def _learner_micro_batches(learner, samples: Sequence[Any]) -> list[list[Any]]:
    """The micro-batches the learner cuts for its first epoch (its length bucketing)."""
    cut = getattr(learner, "micro_batches", None)
    if cut is None:
        return chunks(list(samples), learner.settings.micro_batch)
    return [list(batch) for batch in cut(samples, 0)]


def grpo_baseline(ctx: BenchContext) -> GRPOBaseline:
    """Figure 7's baseline: the minimal single-process GRPO loop on the same model, group size,
    groups per step and output budget, plus the 64 x 32 generate reference of docs/performance.md."""
    config = ctx.config
    reference = reference_generate_tok_s(ctx.base_model_path, ctx.sizes.reference_prompts, ctx.sizes.reference_tokens)
    settings = GRPOSettings(
        game=config.game.name, depth=config.reasoning.depth, group_size=config.algorithm.group_size, groups=ctx.groups,
        max_new_tokens=config.reasoning.max_new_tokens, temperature=config.reasoning.temperature,
        top_p=config.reasoning.top_p, lr=config.algorithm.lr, micro_batch=config.algorithm.micro_batch,
        grad_clip=config.algorithm.grad_clip, format_penalty=config.algorithm.format_penalty, seed=config.run.seed,
    )
    result = plain_grpo(ctx.model_path, settings, learner_settings(config).loss, ctx.sizes.baseline_steps, reference)
    ctx.log(f"  GRPO baseline: {result.tokens_per_step_s:.0f} gen tok/step-s (generate {result.generate_tok_s:.0f} "
            f"tok/s; 64x32 reference {reference:.0f} tok/s)")
    return result


# --- the whole bench ----------------------------------------------------------------------------


def _stderr(message: str) -> None:
    print(f"[bench {time.strftime('%H:%M:%S')}] {message}", file=sys.stderr, flush=True)


def run_bench(config_path: str | None = None, quick: bool = False, only: Collection[str] | None = None,
              log: Callable[[str], None] = _stderr, sizes: BenchSizes | None = None) -> BenchReport:
    """Measure the figures in `only` (default: all of FIGURES) on `config_path` (default: the local default config)."""
    wanted = set(only or FIGURES)
    unknown = wanted - set(FIGURES)
    if unknown:
        raise ValueError(f"unknown figures {sorted(unknown)} (allowed: {', '.join(FIGURES)})")
    config_path = str(config_path or DEFAULT_CONFIG)
    config = load_config(config_path, [])
    started = time.perf_counter()
    report = BenchReport(config=config_path, quick=quick, machine=machine_info())
    with tempfile.TemporaryDirectory(prefix="strat-bench-") as tmp, LoadMonitor() as load:
        log("models: building or loading the cached tiny model and its warm start")
        ctx = BenchContext(config=config, config_path=config_path, sizes=sizes or (QUICK if quick else FULL),
                           model_path=str(Trainer.initial_model_path(config)),
                           base_model_path=str(base_model_path(config)), workdir=Path(tmp), log=log)

        def attempt(name: str, measure: Callable[[], Any]) -> Any:
            try:
                return measure()
            except Exception as err:  # noqa: BLE001  (one figure failing must not lose the others)
                report.errors[name] = f"{type(err).__name__}: {err}"
                log(f"  {name} failed: {report.errors[name]}")
                return None

        owns_ray = start_ray(local=True)  # a local node with the trainer's environment, shared by every measurement
        try:
            runs: dict[str, StepTimes] = {}
            if wanted & {"sync", "overlap", "memory"}:
                measured = attempt("training_default", lambda: training_run(ctx, "default", [], sample_memory=True))
                if measured is not None:
                    runs["default"], report.memory = measured
            if "overlap" in wanted:
                if config.schedule.max_staleness != 1:
                    measured = attempt("training_overlap",
                                       lambda: training_run(ctx, "overlap", ["schedule.max_staleness=1"]))
                    if measured is not None:
                        runs["overlap"] = measured[0]
                else:
                    runs["overlap"] = runs.get("default")
                measured = attempt("training_sync", lambda: training_run(
                    ctx, "sync", ["schedule.max_staleness=0"], steps=max(2, ctx.sizes.train_steps - 1)))
                if measured is not None:
                    runs["sync"] = measured[0]
            if "e2e" in wanted:
                measured = attempt("training_hf", lambda: training_run(
                    ctx, "hf_overlap", ["engine.backend=hf", "schedule.max_staleness=1"]))
                if measured is not None:
                    runs["hf_overlap"] = measured[0]
            report.runs = [run for run in runs.values() if run is not None]
            report.runs = list({id(r): r for r in report.runs}.values())
            if "sync" in wanted and runs.get("default"):
                report.sync = weight_sync(runs["default"])
            if "overlap" in wanted and runs.get("overlap") and runs.get("sync"):
                report.overlap = pipeline_overlap(runs["overlap"], runs["sync"])

            episodes: list[Any] = []
            setups: dict[str, Any] = {}
            try:
                if wanted & {"rollout", "learner", "scaling"}:
                    backends = ["hf", "vllm"] if wanted & {"rollout", "scaling"} else [config.engine.backend]
                    for backend in backends:
                        log(f"rollout path vs bare engine: {backend}")
                        measured = attempt(f"rollout_{backend}", lambda b=backend: rollout_efficiency(ctx, b))
                        if measured is None:
                            continue
                        figure, got, setups[backend] = measured
                        if "rollout" in wanted:
                            report.rollout.append(figure)
                        if backend == config.engine.backend:
                            episodes = got
                if "scaling" in wanted:
                    worker_rows: list[ScalingRow] = []
                    main = setups.get(config.engine.backend)
                    if main is not None:
                        log("rollout scaling: workers and agents")
                        worker_rows = attempt("scaling_workers", lambda: worker_scaling(ctx, main)) or []
                    log("rollout scaling: vLLM against hf by model size")
                    live = {backend: setup.agents[0] for backend, setup in setups.items()}
                    backend_rows = attempt("scaling_backends", lambda: backend_scaling(ctx, live)) or []
                    report.scaling = Scaling(workers=worker_rows, backends=backend_rows)
            finally:
                for setup in setups.values():
                    _stop(setup.handles())
        finally:
            if owns_ray:
                ray.shutdown()

        if "learner" in wanted and episodes:
            log("learner vs plain forward/backward/AdamW loop")
            report.learner = attempt("learner", lambda: learner_efficiency(ctx, episodes))
        if "e2e" in wanted and runs.get("hf_overlap"):
            log("plain single-process GRPO loop")
            baseline = attempt("grpo_baseline", lambda: grpo_baseline(ctx))
            if baseline is not None:
                report.end_to_end = end_to_end(runs["hf_overlap"], baseline)
    report.machine.update(load.summary())
    report.machine["load_average_end"] = [round(x, 2) for x in os.getloadavg()]
    report.wall_s = time.perf_counter() - started
    return report
