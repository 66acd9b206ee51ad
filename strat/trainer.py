"""The driver: places the actors and runs rollout -> compare -> advantage -> learn -> sync ->
(eval, checkpoint) for `schedule.steps`."""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from strat import checkpoint
from strat.advantage import AdvantageConfig, AdvantageStats, RoleBaseline, compute_advantages
from strat.comparison import ComparisonWeights
from strat.config import ConfigError, ExperimentConfig, load_config, save_resolved
from strat.evaluate import EXPLOITABLE_GAMES, mean_interval
from strat.learner import LearnerSettings
from strat.losses import LossConfig
from strat.metrics import MetricsLog
from strat.records import Episode, ScoredEpisode
from strat.rollout import OpponentChoice, RolloutSettings, derive_seed, plan_groups

log = logging.getLogger("strat.train")


def rollout_settings(config: ExperimentConfig) -> RolloutSettings:
    return RolloutSettings(
        game=config.game.name,
        game_options=dict(config.game.options),
        depth=config.reasoning.depth,
        format_penalty=config.algorithm.format_penalty,
        penalize_malformed=config.algorithm.penalize_malformed,
        group_size=config.algorithm.group_size,
        max_tokens=config.reasoning.max_new_tokens,
        temperature=config.reasoning.temperature,
        top_p=config.reasoning.top_p,
        opponents=tuple(OpponentChoice(o.kind, o.name, o.weight) for o in config.game.opponents),
    )


def learner_settings(config: ExperimentConfig) -> LearnerSettings:
    algo = config.algorithm
    return LearnerSettings(
        lr=algo.lr,
        epochs=algo.epochs,
        micro_batch=algo.micro_batch,
        grad_clip=algo.grad_clip,
        temperature=config.reasoning.temperature,
        loss=LossConfig(
            clip_eps_low=algo.clip_eps_low,
            clip_eps_high=algo.clip_eps_high,
            loss_agg=algo.loss_agg,
            kl_type=algo.kl_type,
            kl_coef=algo.kl_coef,
            dph_divergence=algo.dph_divergence,
            dph_eta=algo.dph_eta,
            fiberpo=algo.fiberpo,
            fiberpo_delta=algo.fiberpo_delta,
            fiberpo_eps=algo.fiberpo_eps,
            is_cap=algo.is_cap,
        ),
        stale=config.schedule.max_staleness > 0,
        seed=config.run.seed,
    )


def warm_start_settings(config: ExperimentConfig):  # -> strat.warmstart.WarmStartSettings
    from strat.warmstart import WarmStartSettings

    warm = config.warm_start
    return WarmStartSettings(
        episodes=warm.episodes, epochs=warm.epochs, lr=warm.lr, batch_size=warm.batch_size,
        max_seconds=warm.max_seconds, seed=warm.seed, depth=config.reasoning.depth, player=warm.player,
    )


def advantage_config(config: ExperimentConfig) -> AdvantageConfig:
    algo = config.algorithm
    return AdvantageConfig(
        mode=algo.advantage_mode,
        lam=algo.lam,
        baseline=algo.baseline,
        ema_decay=algo.ema_decay,
        drop_zero_signal=algo.zero_spread == "drop",
    )


def episode_metrics(scored: list[ScoredEpisode]) -> dict[str, float]:
    """Reward, format validity and CoT figures of a step's ego turns."""
    ego_returns, valid, llm_turns, tokens = [], 0, 0, 0
    scores, predicts, beliefs = [], [], []
    for item in scored:
        episode = item.episode
        ego_returns.extend(episode.outcome(agent) for agent in episode.ego_agents)
        for turn in episode.turns:
            if turn.agent in episode.ego_agents and turn.response is not None:
                llm_turns += 1
                valid += int(turn.valid and turn.response.format_valid)
                tokens += len(turn.response_token_ids)
        for score in item.scores:
            if score.comparable:
                scores.append(score.score)
            if score.predict is not None:
                predicts.append(score.predict)
            if score.belief is not None:
                beliefs.append(score.belief)

    def mean(values: list[float]) -> float | None:
        return sum(values) / len(values) if values else None

    return {
        "episodes/count": float(len(scored)),
        "reward/mean": mean(ego_returns),
        "format/valid_rate": valid / llm_turns if llm_turns else None,
        "cot/score_mean": mean(scores),
        "cot/predict_acc": mean(predicts),
        "cot/belief_acc": mean(beliefs),
        "gen/tokens": float(tokens),
    }


def advantage_metrics(stats: AdvantageStats) -> dict[str, float]:
    return {
        "groups/count": float(stats.groups),
        "groups/zero_spread_frac": stats.zero_spread_groups / stats.groups if stats.groups else 0.0,
        "groups/zero_signal_frac": stats.zero_signal_groups / stats.groups if stats.groups else 0.0,
        "groups/dropped": float(stats.dropped_groups),
    }


ACTOR_START_TIMEOUT_S = 600.0


def required_resources(config: ExperimentConfig) -> dict[str, float]:
    """CPUs and GPUs the run's actors ask for together."""
    res = config.resources
    snapshot = any(o.kind == "snapshot" for o in config.game.opponents)
    agents = res.agents + int(snapshot)
    return {
        "CPU": agents * res.cpus_per_agent + res.rollout_workers * res.cpus_per_worker + res.cpus_learner
        + res.cpus_comparator,
        "GPU": agents * res.gpus_per_agent + res.gpus_learner + res.gpus_comparator,
    }


def check_resources(config: ExperimentConfig, available: dict[str, float]) -> None:
    """Refuse, before any actor starts, a run the cluster cannot hold."""
    for kind, needed in required_resources(config).items():
        have = float(available.get(kind, 0.0))
        if needed > have + 1e-9:
            raise ConfigError(
                f"resources: the actors need {needed:g} {kind} but the Ray cluster has {have:g} "
                "(lower resources.* or add nodes)"
            )


class Trainer:
    """One training run: actors, loop state, outputs. `run()` is the whole lifecycle."""

    def __init__(self, config: ExperimentConfig, run_dir: Path, address: str | None = None, resume: bool = False) -> None:
        self.config = config
        self.run_dir = run_dir
        self.address = address
        self.resume = resume
        self.step = 0
        self.baseline = RoleBaseline(config.algorithm.ema_decay)
        self._snapshot_step = 0
        self._handles: list[Any] = []
        self._pending: tuple[int, list[Any], float] | None = None
        """The rollout in flight: (its step, its futures, when it was launched)."""
        self._ready: tuple[int, list[Episode], float] | None = None
        """A rollout collected early (before an evaluation): (its step, episodes, seconds)."""
        self._unsynced: int | None = None
        """With overlap, the step whose update has not reached the agents yet."""

    # --- lifecycle -------------------------------------------------------------------------

    def run(self, on_step: Callable[[dict[str, Any]], None] | None = None) -> list[dict[str, Any]]:
        """Train for `schedule.steps` steps (from the last checkpoint when resuming)."""
        self._prepare_run_dir()
        log.info("run directory: %s", self.run_dir)
        self.model_path = str(self.initial_model_path(self.config))
        log.info("policy starts from %s", self.model_path)
        self._start_ray()
        try:
            self._start_actors()
            resume_step = self._restore() if self.resume else None
            self.metrics = MetricsLog(self.run_dir, self.config.logging.tensorboard, resume_step)
            records = []
            if self.step == 0 and self.config.schedule.eval_every > 0:
                records.append(self._log({"step": 0, **self._evaluate()}, on_step))
            while self.step < self.config.schedule.steps:
                record = self._train_step()
                records.append(self._log(record, on_step))
            self.metrics.close()
            return records
        finally:
            self._stop_actors()
            self._stop_ray()

    def _prepare_run_dir(self) -> None:
        if not self.resume and checkpoint.complete_checkpoints(self.run_dir):
            raise ConfigError(
                f"run directory {self.run_dir} already holds checkpoints; resume it with --resume or pick another run.name"
            )
        try:
            self.run_dir.mkdir(parents=True, exist_ok=True)
            probe = self.run_dir / ".write_test"
            probe.write_text("ok")
            probe.unlink()
        except OSError as err:
            raise ConfigError(f"run directory {self.run_dir} is not writable: {err.strerror}") from None
        if not self.resume:
            save_resolved(self.config, self.run_dir)

    def _start_ray(self) -> None:
        import ray

        self._owns_ray = not ray.is_initialized()
        if not self._owns_ray:
            return
        env_vars = {key: os.environ[key] for key in ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE", "OMP_NUM_THREADS",
                                                     "TOKENIZERS_PARALLELISM", "STRAT_CACHE_DIR") if key in os.environ}
        env_vars["VLLM_ENABLE_V1_MULTIPROCESSING"] = "0"
        address = self.address or ("auto" if os.environ.get("RAY_ADDRESS") else None)
        if address:
            ray.init(address=address, runtime_env={"env_vars": env_vars}, log_to_driver=False)
        else:
            ray.init(
                num_cpus=max(2, os.cpu_count() or 2),
                include_dashboard=False,
                dashboard_host="127.0.0.1",
                runtime_env={"env_vars": env_vars},
                log_to_driver=False,
                configure_logging=False,
            )

    def _stop_actors(self) -> None:
        import ray

        for handle in self._handles:
            ray.kill(handle)
        self._handles = []

    def _stop_ray(self) -> None:
        import ray

        if getattr(self, "_owns_ray", False) and ray.is_initialized():
            ray.shutdown()

    def _start_actors(self) -> None:
        import ray

        from strat.actors.agent import AgentActor
        from strat.actors.comparator import CoTComparator
        from strat.actors.learner import Learner
        from strat.actors.rollout import RolloutWorker
        config = self.config
        res = config.resources
        check_resources(config, ray.cluster_resources())
        engine_kwargs = {
            "dtype": config.engine.dtype,
            "max_model_len": config.engine.max_model_len,
            "kv_cache_bytes": config.engine.kv_cache_bytes,
            "max_num_seqs": config.engine.max_num_seqs,
            "tensor_parallel_size": config.engine.tensor_parallel_size,
            "gpu_memory_utilization": config.engine.gpu_memory_utilization,
            "seed": config.run.seed,
            "trust_remote_code": config.model.trust_remote_code,
        }
        agent_cls = AgentActor.options(num_cpus=res.cpus_per_agent, num_gpus=res.gpus_per_agent)
        self.agents = [agent_cls.remote(config.engine.backend, self.model_path, engine_kwargs) for _ in range(res.agents)]
        self.snapshot = None
        if any(o.kind == "snapshot" for o in config.game.opponents):
            self.snapshot = agent_cls.remote(config.engine.backend, self.model_path, engine_kwargs)
        settings = rollout_settings(config)
        worker_cls = RolloutWorker.options(num_cpus=res.cpus_per_worker)
        self.workers = [
            worker_cls.remote(settings, self.model_path, self.agents[i % len(self.agents)], self.snapshot)
            for i in range(res.rollout_workers)
        ]
        weights = config.comparison.weights
        self.comparator = CoTComparator.options(num_cpus=res.cpus_comparator, num_gpus=res.gpus_comparator).remote(
            ComparisonWeights(weights.predict, weights.belief, weights.agreement), config.comparison.agreement
        )
        self.learner = Learner.options(num_cpus=res.cpus_learner, num_gpus=res.gpus_learner).remote(
            self.model_path, learner_settings(config)
        )
        self._handles = [*self.agents, *self.workers, self.comparator, self.learner]
        if self.snapshot is not None:
            self._handles.append(self.snapshot)
        ready = [h.ready.remote() for h in self._handles]
        _, pending = ray.wait(ready, num_returns=len(ready), timeout=ACTOR_START_TIMEOUT_S)
        if pending:
            raise RuntimeError(
                f"{len(pending)} of {len(ready)} actors did not start within {ACTOR_START_TIMEOUT_S:.0f} s; "
                f"the cluster has {ray.available_resources()} free"
            )
        ray.get(ready)
        log.info("actors ready: %d agent(s), %d rollout worker(s), comparator, learner", len(self.agents), len(self.workers))

    @staticmethod
    def initial_model_path(config: ExperimentConfig) -> Path:
        """The model RL starts from: the configured one (a tiny model is built), warm-started when asked."""
        from strat.tiny_model import resolve_model_path
        from strat.warmstart import ensure_warm

        if config.model.tiny_game is not None:
            log.info("tiny model for %s: built on first use, then cached", config.model.tiny_game)
        base = resolve_model_path(config.model.path)
        if not config.warm_start.enabled:
            return base
        log.info("warm start (format, not strategy): cached after the first run, which takes a minute or two")
        return ensure_warm(base, config.game.name, warm_start_settings(config))

    def _restore(self) -> int:
        import ray

        latest = checkpoint.latest(self.run_dir)
        if latest is None:
            raise ConfigError(f"no complete checkpoint in {self.run_dir} to resume from")
        loop_state = ray.get(self.learner.load.remote(str(latest.path), latest.step))
        self.step = latest.step
        self.baseline.load_state_dict(loop_state.get("baseline", {}))
        self._sync(version=self.step)
        if self.snapshot is not None and (latest.path / "snapshot").is_dir():
            ray.get(self.snapshot.load_weights_dir.remote(str(latest.path / "snapshot"), int(loop_state["snapshot_step"])))
        self._snapshot_step = int(loop_state.get("snapshot_step", 0))
        return latest.step

    # --- one step --------------------------------------------------------------------------

    def _launch_rollout(self, step: int) -> None:
        """Start step `step`'s rollout on every worker; groups are split over workers."""
        config = self.config
        num_workers = len(self.workers)
        per_worker = [config.algorithm.groups_per_step // num_workers + (i < config.algorithm.groups_per_step % num_workers)
                      for i in range(num_workers)]
        settings = rollout_settings(config)
        futures = [
            worker.run.remote(
                plan_groups(settings, config.run.seed, step, index, count),
                derive_seed(config.run.seed, step, index, "sampling"),
            )
            for index, (worker, count) in enumerate(zip(self.workers, per_worker, strict=True)) if count > 0
        ]
        self._pending = (step, futures, time.perf_counter())

    def _collect_rollout(self, step: int) -> tuple[list[Episode], float]:
        """Step `step`'s episodes (launched now if not in flight) and the rollout's wall time."""
        import ray

        if self._ready is not None and self._ready[0] == step:
            _, episodes, rollout_s = self._ready
            self._ready = None
            return episodes, rollout_s
        if self._pending is None or self._pending[0] != step:
            self._launch_rollout(step)
        _, futures, launched = self._pending
        self._pending = None
        episodes = [e for batch in ray.get(futures) for e in batch]
        return episodes, time.perf_counter() - launched

    def _push_weights(self, version: int) -> float:
        """Sync the learner's weights to every agent (and refresh the snapshot when due); seconds taken."""
        started = time.perf_counter()
        self._sync(version=version)
        self._maybe_snapshot(version)
        return time.perf_counter() - started

    def _train_step(self) -> dict[str, Any]:
        import ray

        config = self.config
        step = self.step + 1
        started = time.perf_counter()
        overlap = config.schedule.max_staleness > 0
        episodes, rollout_s = self._collect_rollout(step)
        rollout_wait_s = time.perf_counter() - started
        sync_s = 0.0
        if overlap:
            # The update of step - 1 reaches the agents only now, between two rollouts, so that every
            # rollout runs on one set of weights exactly one update old.
            if self._unsynced is not None:
                sync_s += self._push_weights(self._unsynced)
                self._unsynced = None
            if step < config.schedule.steps:
                self._launch_rollout(step + 1)

        scored: list[ScoredEpisode] = ray.get(self.comparator.score.remote(episodes))
        samples, stats = compute_advantages(scored, advantage_config(config),
                                            self.baseline if config.algorithm.baseline == "ema" else None)
        learn_started = time.perf_counter()
        learn = ray.get(self.learner.update.remote(samples))
        learn_s = time.perf_counter() - learn_started
        self.step = step

        evaluate = bool(config.schedule.eval_every) and step % config.schedule.eval_every == 0
        if not overlap:
            sync_s += self._push_weights(step)
        elif evaluate and self._pending is not None:
            # Evaluation must see this step's weights: let the next rollout finish first, then sync.
            next_step = self._pending[0]
            self._ready = (next_step, *self._collect_rollout(next_step))
            sync_s += self._push_weights(step)
        elif evaluate:
            sync_s += self._push_weights(step)
        else:
            self._unsynced = step

        record: dict[str, Any] = {"step": step, **episode_metrics(scored), **advantage_metrics(stats), **learn}
        record.setdefault("loss/kl", 0.0)
        if evaluate:
            record.update(self._evaluate())
        if config.logging.samples_every and step % config.logging.samples_every == 0:
            self._write_samples(step, scored[: min(4, len(scored))])
        if config.schedule.checkpoint_every and (step % config.schedule.checkpoint_every == 0 or step == config.schedule.steps):
            self._checkpoint(step)
        step_s = time.perf_counter() - started
        record.update({
            "time/rollout_s": rollout_s,
            "time/rollout_wait_s": rollout_wait_s,
            "time/learn_s": learn_s,
            "time/sync_s": sync_s,
            "time/step_s": step_s,
            "throughput/gen_tokens_per_s": record.pop("gen/tokens") / rollout_s if rollout_s > 0 else 0.0,
        })
        return record

    def _sync(self, version: int) -> None:
        import ray

        state = self.learner.state_dict.remote()
        ray.get([agent.load_state_dict.remote(state, version) for agent in self.agents])

    def _maybe_snapshot(self, step: int) -> None:
        import ray

        every = self.config.schedule.snapshot_every
        if self.snapshot is not None and every and step % every == 0:
            ray.get(self.snapshot.load_state_dict.remote(self.learner.take_snapshot.remote(), step))
            self._snapshot_step = step

    def _checkpoint(self, step: int) -> None:
        import ray

        loop_state = {"baseline": self.baseline.state_dict(), "snapshot_step": self._snapshot_step}
        path = ray.get(self.learner.save.remote(str(self.run_dir), step, loop_state, self.config.schedule.keep_checkpoints))
        log.info("checkpoint written: %s", path)

    # --- evaluation ------------------------------------------------------------------------

    def _evaluate(self) -> dict[str, Any]:
        import ray

        config = self.config
        seed = derive_seed(config.run.seed, "eval")
        worker = self.workers[0]
        returns, wins = ray.get(worker.play_vs.remote("random", config.eval.games, seed))
        mean_return, return_ci = mean_interval(returns)
        out: dict[str, Any] = {
            "eval/return_vs_random": mean_return,
            "eval/return_vs_random_ci": return_ci,
            "eval/win_rate_vs_random": sum(wins) / len(wins) if wins else None,
        }
        if config.game.name in EXPLOITABLE_GAMES and config.eval.samples_per_infoset > 0:
            estimate = ray.get(worker.exploitability.remote(config.eval.samples_per_infoset, seed, config.eval.bootstrap))
            out["eval/exploitability"] = estimate.value
            out["eval/exploitability_ci"] = [estimate.ci_low, estimate.ci_high]
        return out

    # --- outputs ---------------------------------------------------------------------------

    def _log(self, record: dict[str, Any], on_step: Callable[[dict[str, Any]], None] | None) -> dict[str, Any]:
        self.metrics.write(record)
        if on_step is not None:
            on_step(record)
        return record

    def _write_samples(self, step: int, scored: list[ScoredEpisode]) -> None:
        from strat.transcripts import render_transcripts

        folder = self.run_dir / "samples"
        folder.mkdir(exist_ok=True)
        (folder / f"step_{step}.md").write_text(render_transcripts(scored, step))


def train(config_path: str | None, overrides: list[str], address: str | None = None, resume: str | None = None,
          on_start: Callable[[int], None] | None = None,
          on_step: Callable[[dict[str, Any]], None] | None = None) -> tuple[Path, list[dict[str, Any]]]:
    """`strat train`: load (or, on resume, reload) the config, then run. Returns the run dir and records."""
    if resume is not None:
        run_dir = Path(resume)
        saved = run_dir / "config.yaml"
        if not saved.is_file():
            raise ConfigError(f"--resume {run_dir}: no config.yaml there (not a run directory)")
        config = load_config(saved, overrides)
    else:
        config = load_config(config_path, overrides)
        run_dir = config.run_dir
    trainer = Trainer(config, run_dir, address=address, resume=resume is not None)
    if on_start is not None:
        on_start(config.schedule.steps)
    return run_dir, trainer.run(on_step)

