# Over 500 lines: the step's phases, resume, pre-emption and evaluation share the loop's state (actors: fleet.py).
"""The driver: places the actors and runs rollout -> compare -> advantage -> learn -> sync ->
(eval, checkpoint) for `schedule.steps`."""

from __future__ import annotations

import dataclasses
import json
import logging
import shutil
import signal
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import ray
from ray.exceptions import RayTaskError

import games
from games.posterior import supports_posterior
from strat.algorithm.advantage import (
    RoleBaseline,
    compute_advantages,
    replace_zero_spread_groups,
    zero_spread_group_ids,
)
from strat.algorithm.records import Episode, ScoredEpisode, TrainSample
from strat.config import (
    ExperimentConfig,
    OpponentConfig,
    held_out_opponents,
    league_opponent,
    policy_agent_names,
    save_resolved,
)
from strat.config_loading import load_config
from strat.errors import ConfigError, RunAborted
from strat.eval.exploitability import VALIDITY_FLOOR, ExploitabilityEstimate, exploitable
from strat.eval.stats import mean_interval
from strat.faults import injected_steps
from strat.metrics import EpisodeLedger, MetricsLog, PhaseTimer, truncate_after
from strat.model import checkpoint
from strat.play.exploiter import LOOP_STATE_KEY as EXPLOITER_STATE_KEY
from strat.play.exploiter import MoveTable
from strat.play.rollout import POLICY_SEAT, derive_seed, plan_groups, policy_seat
from strat.play.settings import new_exploiter, rollout_settings, target_settings
from strat.sync.fingerprint import WeightsTag
from strat.train import stages
from strat.train.context_check import check_context, context_summary
from strat.train.cotrained import CoTrainedPolicies, resolve_cotrained_policies, save_policy_configs
from strat.train.fixed_policies import FixedPolicy, resolve_fixed_policies
from strat.train.fleet import Fleet, Share, actor_died
from strat.train.league_opponent import LOOP_STATE_KEY, LeagueOpponent
from strat.train.ray_node import start_ray
from strat.train.rehearsal import REHEARSAL_ROUNDS, episode_samples, load_rehearsal, save_rehearsal
from strat.train.resume import read_overrides, resume_with_overrides
from strat.train.rollout_record import Rollout, rollout_from_json, rollout_to_json
from strat.train.settings import advantage_config
from strat.train.step_metrics import advantage_metrics, episode_metrics
from strat.train.tracking import open_tracker
from strat.train.transcripts import render_transcripts

log = logging.getLogger("strat.train")

STEP_PHASES = ("rollout", "compare", "advantage", "learn", "sync", "snapshot", "eval", "checkpoint")
"""The phases of a training step, in order; each is timed as `time/<phase>_s`."""


LOGPROB_GAP_WARNING = 0.01
"""The `logprob/engine_learner_gap` (mean |learner - engine| log-prob per response token, first epoch) above which the
run warns, once. In float32 the two agree to 1e-6..1e-3 (the tests' runs on CPU); one update's drift under
`max_staleness: 1` adds ~4e-3 in the tests' runs; bf16 autocast against float32 on the tiny model measures 9e-4 at
its own logit scale, 3.6e-3 with 4x and 1.8e-2 with 16x sharper logits (on CPU); a trained model's peaked logits in
bf16, with the engine's kernels against the learner's on a GPU, are expected above it (not measured here). Above it,
about a percent of every token's importance weight is numerics rather than policy."""


LISTED_STATES = 10
"""Information states below the validity floor named in the evaluation's warning, lowest first."""
INFOSET_MOVES = "infoset_moves.jsonl"
"""Each evaluation's moves per information state (where the exploitability is sampled), one line per step."""


GAP_KEY = "logprob/engine_learner_gap"
"""The engine-learner gap's figure; a co-trained policy's is `<name>/` + it."""


def logprob_gap_warning(gap: float, step: int, staleness: int, key: str = GAP_KEY) -> str:
    """The one line the run logs when a policy's engine-learner gap (`key`: the first policy's, or a co-trained one's
    `<name>/logprob/engine_learner_gap`) first exceeds `LOGPROB_GAP_WARNING`."""
    drift = (f"; with max_staleness {staleness} it also holds the policy's drift over {staleness} update(s)"
             if staleness else "")
    return (f"step {step}: {key} {gap:.3g} > {LOGPROB_GAP_WARNING:g}: the engine's log-probs of"
            f" the sampled tokens differ from the learner's by {gap:.3g} nats per token on average{drift}. Expected in"
            " bf16 (other kernels, other rounding); the truncated weight proximal/behaviour (algorithm.is_cap) corrects"
            " each token for it. In float32 it points at a mismatch (temperature, top_p, weights not synced). Logged"
            " once per run")


def _due(step: int, every: int) -> bool:
    """Whether something done every `every` steps (0: never) is due at `step`."""
    return bool(every) and step % every == 0


def checkpoint_bytes(config: ExperimentConfig, model_dir: Path) -> int:
    """About how much disk the run's kept checkpoints take: float32 weights and two AdamW moments,
    the snapshot opponent's weights when there is one, and one more checkpoint being written; and a league's members
    (kept once, beside the checkpoints)."""
    weights = sum(f.stat().st_size for f in model_dir.glob("*.safetensors"))
    snapshot = any(o.kind == "snapshot" for o in config.game.opponents)
    per_checkpoint = weights * (3 + int(snapshot))
    league = league_opponent(config)
    members = weights * league.league_size if league is not None else 0
    return per_checkpoint * (config.schedule.keep_checkpoints + 1) + members


def checkpoint_failure(step: int, run_dir: Path, cause: OSError, resume_hint: str) -> str:
    """The line a failed checkpoint write (a full disk) stops the run with: why, the free space, where to resume."""
    try:
        free = f"{shutil.disk_usage(run_dir).free / 2**20:.0f} MiB free there"
    except OSError:
        free = "free space unknown"
    return (f"checkpoint of step {step} could not be written to {run_dir} ({cause.strerror or cause}; {free}); its"
            f" staging folder was removed and no earlier checkpoint was touched; {resume_hint}")


class Trainer:
    """One training run: actors, loop state, outputs. `run()` is the whole lifecycle."""

    def __init__(self, config: ExperimentConfig, run_dir: Path, address: str | None = None, resume: bool = False,
                 resume_point: checkpoint.ResumePoint | None = None, strict: bool = False,
                 fixed_policies: tuple[FixedPolicy, ...] | None = None) -> None:
        self.config = config
        self.run_dir = run_dir
        self.address = address
        self.resume = resume or resume_point is not None
        self.resume_point = resume_point
        self.fixed_policies = fixed_policies
        """The fixed LLM opponents, resolved (when None, as the run starts)."""
        """On resume, the checkpoint to start from (chosen by `checkpoint.resume_point` when not given)."""
        self.strict = strict
        """On resume, refuse a damaged newest checkpoint instead of falling back to an older one."""
        self.step = 0
        self._in_progress: int | None = None
        """The step being trained, from its rollout until it is logged (None between steps)."""
        self.baseline = RoleBaseline(config.algorithm.ema_decay)
        self.fleet: Fleet | None = None
        """The run's actors, once started."""
        self.league: LeagueOpponent | None = None
        """The league opponent (`{kind: league}`), once the actors are started."""
        self.cotrained: CoTrainedPolicies | None = None
        """The policies co-trained beside the first (`policies` with `train: true`), once the actors are started."""
        self.exploiter = new_exploiter(config)
        """The exploiter's count of the policy's moves (`{kind: exploiter}`): observed from every worker's games of a
        step, sent with the next rollout, checkpointed with the loop state."""
        self._pending: tuple[int, list[Share], float] | None = None
        """The rollout in flight: (its step, each worker's share, when it was launched)."""
        self._ready: Rollout | None = None
        """With overlap, the next step's rollout collected early: before an evaluation or a checkpoint, or read
        from the checkpoint resumed from."""
        self._unsynced: int | None = None
        """With overlap, the step whose update has not reached the agents yet."""
        self._nonfinite_in_row = 0
        self._gap_warned: set[str] = set()
        """The gap figures (`GAP_KEY`, `<name>/` + it) warned about so far (each once per run)."""
        self._checkpointed_step: int | None = None
        self.stop_signal: str | None = None
        """The signal that asked the run to stop early (SIGTERM), if any."""
        self._inject_nonfinite = injected_steps("nonfinite")

    # --- lifecycle -------------------------------------------------------------------------

    def run(self, on_step: Callable[[dict[str, Any]], None] | None = None) -> list[dict[str, Any]]:
        """Train for `schedule.steps` steps (from the last checkpoint when resuming).

        SIGTERM (a scheduler's pre-emption) finishes the current step, writes a checkpoint and
        returns early (`stop_signal` says so); a second SIGTERM aborts at once."""
        self._prepare_run_dir()
        stored = self._stored_rehearsal()
        log.info("run directory: %s", self.run_dir)
        # Before any model is built: a fixed opponent whose checkpoint is missing or damaged is refused in one line.
        if self.fixed_policies is None:
            self.fixed_policies = resolve_fixed_policies(self.config)
        self.model_path = str(self.initial_model_path(self.config))
        log.info("policy starts from %s", self.model_path)
        self._add_cotrained_players()
        self._check_free_space()
        self._start_ray()
        # After ray.init, whose core worker installs a C++ SIGTERM handler that aborts the process.
        previous = self._install_signal_handler()
        try:
            self._start_actors()
            resume_step = self._restore() if self.resume else None
            if self.league is not None and not self.resume:
                self.league.start()
            self._prepare_rehearsal(stored)
            self.metrics = MetricsLog(self.run_dir, self.config.logging.tensorboard, resume_step,
                                      open_tracker(self.config, self.run_dir))
            self.ledger = EpisodeLedger(self.run_dir, resume_step)
            records = []
            if self.step == 0 and self.config.schedule.eval_every > 0 and self.stop_signal is None:
                records.append(self._log({"step": 0, **self._evaluate(held_out=True)}, on_step))
            while self.step < self.config.schedule.steps and self.stop_signal is None:
                record = self._train_step()
                records.append(self._log(record, on_step))
                self._in_progress = None
                self._check_nonfinite(record)
                self._check_logprob_gap(record)
            if self.stop_signal is not None:
                self._stop_early()
            if self.league is not None:
                self.league.finish()
            self.metrics.close()
            return records
        finally:
            if getattr(self, "metrics", None) is not None:
                self.metrics.close(complete=False)  # after a failure; closed already when the run finished
            self._stop_actors()
            self._stop_ray()
            self._restore_signal_handler(previous)

    def _install_signal_handler(self) -> Any:
        if threading.current_thread() is not threading.main_thread():
            return None

        def on_sigterm(signum: int, frame: Any) -> None:
            if self.stop_signal is not None:
                raise RunAborted(f"second {signal.Signals(signum).name}: stopped at once, without a checkpoint")
            self.stop_signal = signal.Signals(signum).name
            log.warning("%s received: finishing the current step, then a checkpoint and exit "
                        "(send it again to stop at once)", self.stop_signal)

        return signal.signal(signal.SIGTERM, on_sigterm)

    @staticmethod
    def _restore_signal_handler(previous: Any) -> None:
        if threading.current_thread() is threading.main_thread():
            # A handler installed outside Python (Ray's) reads as None: fall back to the default.
            signal.signal(signal.SIGTERM, previous if previous is not None else signal.SIG_DFL)

    def _stop_early(self) -> None:
        if self.step > 0 and self._checkpointed_step != self.step:
            self._checkpoint(self.step)
        where = f"checkpoint step_{self.step} written" if self.step > 0 else "no step finished, nothing to save"
        log.warning("stopped by %s after step %d of %d (%s); continue with: strat train --resume %s",
                    self.stop_signal, self.step, self.config.schedule.steps, where, self.run_dir)

    def _prepare_run_dir(self) -> None:
        if self.resume:
            self._choose_resume_point()
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
            save_policy_configs(self.config, self.run_dir)

    def _choose_resume_point(self) -> None:
        """The newest checkpoint that verifies; damaged newer ones are named in one line and moved aside, so that
        the steps after the chosen one are trained (and logged) again, once."""
        point = self.resume_point or checkpoint.resume_point(self.run_dir, self.strict)
        checkpoint.check_format(point.checkpoint)
        if point.damaged:
            log.warning(point.fallback_line(checkpoint.set_aside(point.damaged)))
        if not point.verified:
            log.warning(checkpoint.unverifiable_note(point.checkpoint))
        # Now, before any actor starts: an unreadable record is refused here, and the steps after the checkpoint,
        # which the run trains again, leave the records (MetricsLog and EpisodeLedger find nothing more to drop).
        for name in ("metrics.jsonl", "episodes.jsonl", INFOSET_MOVES):
            truncate_after(self.run_dir / name, point.checkpoint.step)
        read_overrides(self.run_dir)
        self.resume_point = point

    def _check_free_space(self) -> None:
        """Refuse a run whose checkpoints cannot fit on the run directory's disk."""
        needed = checkpoint_bytes(self.config, Path(self.model_path))
        free = shutil.disk_usage(self.run_dir).free
        if free < needed:
            raise ConfigError(
                f"run directory {self.run_dir} has {free / 2**20:.0f} MiB free but "
                f"{self.config.schedule.keep_checkpoints} checkpoint(s) of this model need about "
                f"{needed / 2**20:.0f} MiB (free space, lower schedule.keep_checkpoints or pick another run.output_dir)"
            )

    def _start_ray(self) -> None:
        self._owns_ray = start_ray(self.address)

    def _add_cotrained_players(self) -> None:
        """The co-trained policies' players beside the fixed ones, in `policies` order (each starts from its own
        model, through the run's stages)."""
        cotrained = {p.name: p for p in resolve_cotrained_policies(self.config, self.initial_model_path)}
        fixed = {p.name: p for p in self.fixed_policies or ()}
        for policy in cotrained.values():
            log.info("co-trained policy %s starts from %s", policy.name, policy.model_dir)
        self.fixed_policies = tuple({**fixed, **cotrained}[p.name] for p in self.config.policies)

    def _start_actors(self) -> None:
        self._note_targets()
        self.fleet = Fleet(self.config, self.run_dir, self.model_path, lambda: self._in_progress or self.step + 1,
                           self.fixed_policies)
        self.fleet.start()
        if league_opponent(self.config) is not None:
            self.league = LeagueOpponent(self.config, self.run_dir, self.fleet)
        self.cotrained = CoTrainedPolicies(self.config, self.run_dir, self.fleet)

    def _note_targets(self) -> None:
        """One log line where `comparison.belief_target: posterior` cannot be had for the game: beliefs are then
        scored against the truth."""
        config = self.config
        if config.comparison.belief_target == "posterior" and not supports_posterior(
                games.make(config.game.name, **config.game.options)):
            log.warning("comparison.belief_target=posterior: %s has no exact posterior (or no belief score);"
                        " beliefs are scored against the true private information", config.game.name)

    def _stop_actors(self) -> None:
        if self.fleet is not None:
            self.fleet.stop()

    def _stop_ray(self) -> None:
        if getattr(self, "_owns_ray", False) and ray.is_initialized():
            ray.shutdown()

    @staticmethod
    def initial_model_path(config: ExperimentConfig) -> Path:
        """The model RL starts from (`strat.train.stages.initial_model_path`): the configured one (a tiny model is
        built), rules-pretrained and warm-started when asked."""
        return stages.initial_model_path(config)

    def _restore(self) -> int:
        latest = self.resume_point.checkpoint
        loop_state = self.fleet.learner_get(self.fleet.learner.load(str(latest.path), latest.step))
        self.step = latest.step
        self._checkpointed_step = latest.step
        self.baseline.load_state_dict(loop_state.get("baseline", {}))
        self.fleet.sync.restore(self.step, int(loop_state.get("snapshot_step", 0)), latest.path,
                                snapshot_agent=self.league is None)
        if self.league is not None:
            self.league.restore(loop_state.get(LOOP_STATE_KEY))
        if self.exploiter is not None:
            self._restore_exploiter(loop_state.get(EXPLOITER_STATE_KEY))
        if self.cotrained:
            self.cotrained.restore(latest.step)
        if checkpoint.NEXT_ROLLOUT in loop_state:
            # The rollout in flight when the checkpoint was written: it ran on weights the checkpoint does not hold.
            self._ready = rollout_from_json(loop_state[checkpoint.NEXT_ROLLOUT])
        log.info("resumed from %s (step %d)", latest.path, latest.step)
        return latest.step

    def _restore_exploiter(self, saved: dict[str, Any] | None) -> None:
        """The exploiter's counts as checkpointed; a checkpoint written before they were saved starts them afresh."""
        assert self.exploiter is not None
        if saved is None:
            log.warning("the checkpoint holds no exploiter counts (written before they were checkpointed): the"
                        " exploiter starts afresh, answering a uniform player until the next rollout")
            return
        self.exploiter.restore(saved)
        log.info("exploiter restored: counts at %d information states", len(self.exploiter.counts))

    def _stored_rehearsal(self) -> list[TrainSample] | None:
        """On resume with DPH-RL, the rehearsal samples stored at the run's start (checked before any actor starts)."""
        if self.resume and self.config.algorithm.dph_divergence != "none":
            return load_rehearsal(self.run_dir)
        return None

    def _prepare_rehearsal(self, stored: list[TrainSample] | None) -> None:
        """DPH-RL's rehearsal samples to the learner: on resume the stored ones, else turns of the initial policy's
        self-play, played now in rounds of `groups_per_step` groups (step 0's seeds, apart from training's), scored
        by the learner at its initial weights and stored in the run directory."""
        algo = self.config.algorithm
        if algo.dph_divergence == "none":
            return
        if stored is not None:
            self.fleet.learner_get(self.fleet.learner.set_rehearsal(stored, False))
            return
        settings = dataclasses.replace(rollout_settings(self.config), opponents=(OpponentConfig(kind="self"),))
        episodes: list[Episode] = []
        for round_index in range(1, REHEARSAL_ROUNDS + 1):
            shares = [
                self.fleet.launch(index, plan_groups(settings, self.config.run.seed, 0, index, count, round_index),
                                  derive_seed(self.config.run.seed, "rehearsal", index, round_index))
                for index, count in enumerate(self.fleet.split(algo.groups_per_step)) if count > 0
            ]
            episodes += self.fleet.gather(shares, "rehearsal rollout")[0]
            if len(episode_samples(episodes, algo.dph_samples)) >= algo.dph_samples:
                break
        samples = episode_samples(episodes, algo.dph_samples)
        scored = self.fleet.learner_get(self.fleet.learner.set_rehearsal(samples, True))
        record = save_rehearsal(self.run_dir, scored)
        log.info("DPH-RL: %d rehearsal samples of the initial policy's self-play stored (sha256 %s)",
                 record.samples, record.sha256[:12])

    def _comparator_get(self, episodes: list[Episode]) -> list[ScoredEpisode]:
        """Scores from the comparator; its death ends the run after a checkpoint of the last step. An agent
        that dies while the policy judges is restarted and the scoring repeated."""
        while True:
            try:
                return ray.get(self.fleet.comparator.score.remote(episodes))
            except Exception as err:  # noqa: BLE001
                if not actor_died(err):
                    raise
                if not (self.fleet.judges() and self.fleet.alive(self.fleet.comparator)):
                    break
                self.fleet.recover("comparison", err)
        if self.step > 0 and self._checkpointed_step != self.step:
            self._checkpoint(self.step)
        raise RunAborted(f"the comparator actor died at step {self.step + 1}; {self.fleet.resume_hint()}")

    def _check_logprob_gap(self, record: dict[str, Any]) -> None:
        """One warning per run and policy (the first, each co-trained one) when its engine's and its learner's
        log-probs differ by more than numerics."""
        for key, gap in record.items():
            if not key.endswith(GAP_KEY) or key in self._gap_warned or gap is None or not gap > LOGPROB_GAP_WARNING:
                continue
            self._gap_warned.add(key)
            log.warning(logprob_gap_warning(gap, record["step"], self.config.schedule.max_staleness, key))

    def _check_nonfinite(self, record: dict[str, Any]) -> None:
        """Count the steps in a row whose update (the first policy's or a co-trained one's, `<name>/learn/...`)
        skipped optimizer steps for a non-finite loss or gradient; stop the run at `schedule.max_nonfinite_updates`."""
        suffix = "learn/skipped_minibatches"
        skipped = sum(int(value) for key, value in record.items() if key.endswith(suffix) and value)
        if not skipped:
            self._nonfinite_in_row = 0
            return
        self._nonfinite_in_row += 1
        limit = self.config.schedule.max_nonfinite_updates
        which = ", ".join(key.removesuffix(suffix).rstrip("/") or "the policy" for key, value in record.items()
                          if key.endswith(suffix) and value)
        log.warning("step %d: non-finite loss or gradient, %d optimizer step(s) of the update skipped (%s; %d update(s)"
                    " in a row, the run stops at %d)", record["step"], skipped, which, self._nonfinite_in_row, limit)
        if self._nonfinite_in_row >= limit:
            raise RunAborted(
                f"{self._nonfinite_in_row} updates in a row had a non-finite loss or gradient (up to step "
                f"{record['step']}; schedule.max_nonfinite_updates={limit}); lower algorithm.lr or check the "
                f"rewards; {self.fleet.resume_hint()}"
            )

    # --- one step --------------------------------------------------------------------------

    def _launch_rollout(self, step: int) -> None:
        """Start step `step`'s rollout on every worker; groups are split over workers."""
        config = self.config
        if self.league is not None:
            self.league.prepare(step)  # the member that plays this step, loaded before any game starts
        per_worker = self.fleet.split(config.algorithm.groups_per_step)
        settings = rollout_settings(config)
        exploited = self._exploited()
        shares = [
            self.fleet.launch(index, plan_groups(settings, config.run.seed, step, index, count),
                               derive_seed(config.run.seed, step, index, "sampling"), exploited)
            for index, count in enumerate(per_worker) if count > 0
        ]
        self._pending = (step, shares, time.perf_counter())

    def _exploited(self) -> MoveTable | None:
        """The policy's counted moves the exploiter answers in the next rollout (None without an exploiter)."""
        return self.exploiter.table() if self.exploiter is not None else None

    def _collect_rollout(self, step: int) -> Rollout:
        """Step `step`'s rollout (launched now if not in flight, or the one collected early).

        A share whose worker or agent died is played again, from its plans and seed, on restarted
        actors; a failed share returns nothing, so no episode is lost or counted twice."""
        if self._ready is not None and self._ready.step == step:
            ready, self._ready = self._ready, None
            return ready
        if self._pending is None or self._pending[0] != step:
            self._launch_rollout(step)
        _, shares, launched = self._pending
        self._pending = None
        episodes, weights = self.fleet.gather(shares, f"step {step} rollout")
        if len(weights) > 1:
            log.warning("step %d: the agents held different weights during the rollout: %s", step, weights)
        return Rollout(step, episodes, time.perf_counter() - launched, weights)

    def _resample_zero_spread(
        self, step: int, episodes: list[Episode]
    ) -> tuple[list[Episode], list[WeightsTag], dict[str, float]]:
        """Replace groups with no outcome spread by freshly dealt ones that have some (DAPO's dynamic
        sampling), in up to `algorithm.resample_rounds` rounds on the current weights; groups still without
        spread after the last round are kept. The replacements take the replaced groups' places. With overlap,
        right after an evaluation step the agents are one update newer than the step's own rollout: the
        replacements carry their own behaviour log-probs, so the staleness correction stays exact."""
        config = self.config
        settings = rollout_settings(config)
        played = replaced = 0
        weights: list[WeightsTag] = []
        started = time.perf_counter()
        for round_index in range(1, config.algorithm.resample_rounds + 1):
            flat = zero_spread_group_ids(episodes, config.algorithm.penalty_scope)
            if not flat:
                break
            exploited = self._exploited()
            shares = [
                self.fleet.launch(index, plan_groups(settings, config.run.seed, step, index, count, round_index),
                                   derive_seed(config.run.seed, step, index, "resample", round_index), exploited)
                for index, count in enumerate(self.fleet.split(len(flat))) if count > 0
            ]
            fresh, round_weights = self.fleet.gather(shares, f"step {step} resampling")
            weights.extend(round_weights)
            played += len(flat)
            episodes, swapped = replace_zero_spread_groups(episodes, fresh, config.algorithm.penalty_scope)
            replaced += swapped
        return episodes, weights, {
            "groups/resampled": float(replaced),
            "groups/resample_played": float(played),
            "time/resample_s": time.perf_counter() - started,
        }

    def _train_step(self) -> dict[str, Any]:
        """One step as named phases, each timed as `time/<phase>_s`: rollout -> compare -> advantage -> learn -> sync
        -> snapshot -> eval -> checkpoint. The rollout phase (waiting for the step's episodes) is logged as
        `time/rollout_wait_s`; `time/rollout_s` is the rollout's own wall time, which overlap hides. With overlap the
        next rollout starts before compare, after the previous update's sync."""
        config, step = self.config, self.step + 1
        self._in_progress = step  # until the step is logged: a loss after its update is still a loss in this step
        timer = PhaseTimer(STEP_PHASES)
        with timer.phase("rollout"):
            rollout, episodes, resampling = self._rollout(step)
        # The step's games against the league count before the next step's member is drawn (with overlap, now).
        league = self.league.record(step, episodes) if self.league is not None else {}
        self._start_next_rollout(step, timer)
        with timer.phase("compare"):
            scored = self._comparator_get(episodes)
        with timer.phase("advantage"):
            samples, stats = self._advantages(step, scored)
        with timer.phase("learn"):
            learn = self.fleet.learner_get(self.fleet.learner.update(samples))
            cotrained = self.cotrained.train(episodes, self._comparator_get) if self.cotrained else {}
        self.step = step
        last = step == config.schedule.steps
        evaluate = config.schedule.eval_every > 0 and (_due(step, config.schedule.eval_every) or last)
        self._publish(step, evaluate, timer)
        record: dict[str, Any] = {
            "step": step, **episode_metrics(scored, target_settings(config)), **advantage_metrics(stats), **resampling, **learn,
            "rollout/weights_version": float(rollout.weights[0].version),
            **league, **cotrained,
        }
        record.setdefault("loss/kl", 0.0)
        if evaluate:
            with timer.phase("eval"):
                record.update(self._evaluate(held_out=last))
        if _due(step, config.logging.samples_every):
            self._write_samples(step, scored[: min(4, len(scored))])
        every = config.schedule.checkpoint_every
        if every and (_due(step, every) or step == config.schedule.steps):
            self._checkpoint(step, timer)
        gen_tokens = record.pop("gen/tokens")
        record.update({
            **timer.record(),
            "time/rollout_wait_s": timer.seconds["rollout"],
            "time/rollout_s": rollout.seconds,
            "throughput/gen_tokens_per_s": gen_tokens / rollout.seconds if rollout.seconds > 0 else 0.0,
            "faults/actor_restarts": float(self.fleet.restarts),
        })
        return record

    # --- the phases ------------------------------------------------------------------------

    def _rollout(self, step: int) -> tuple[Rollout, list[Episode], dict[str, float]]:
        """The step's rollout; its episodes with zero-spread groups resampled when asked, recorded in the ledger with
        the weights every rollout of the step ran on; resampling figures."""
        rollout = self._collect_rollout(step)
        episodes, weights = rollout.episodes, list(rollout.weights)
        resampling: dict[str, float] = {}
        if self.config.algorithm.zero_spread == "resample":
            # Before the next rollout starts and before any weight sync: the extra groups use the same weights.
            episodes, extra, resampling = self._resample_zero_spread(step, episodes)
            weights.extend(extra)
        self.ledger.write(step, episodes, list(dict.fromkeys(weights)))
        if self.exploiter is not None:  # before the next rollout is launched: it plays the updated best response
            self.exploiter.observe(episodes)
        return rollout, episodes, resampling

    def _start_next_rollout(self, step: int, timer: PhaseTimer) -> None:
        """With overlap: the update of step - 1 reaches the agents only now, between two rollouts, so that every
        rollout runs on one set of weights exactly one update old; then the next rollout starts."""
        if self.config.schedule.max_staleness == 0:
            return
        if self._unsynced is not None:
            self._push_weights(self._unsynced, timer)
            self._unsynced = None
        if step < self.config.schedule.steps:
            self._launch_rollout(step + 1)

    def _advantages(self, step: int, scored: list[ScoredEpisode]) -> tuple[list[Any], Any]:
        """The learner's samples with their advantages, and the advantage diagnostics."""
        config = self.config
        samples, stats = compute_advantages(scored, advantage_config(config),
                                            self.baseline if config.algorithm.baseline == "ema" else None)
        if step in self._inject_nonfinite:
            samples = [dataclasses.replace(sample, advantage=float("nan"),
                                           token_advantages=tuple(float("nan") for _ in sample.token_advantages))
                       for sample in samples]
        return samples, stats

    def _publish(self, step: int, evaluate: bool, timer: PhaseTimer) -> None:
        """This step's weights to the agents: now (synchronous, or an evaluation follows), or with overlap after the
        next rollout has been collected."""
        if self.config.schedule.max_staleness == 0:
            self._push_weights(step, timer)
            return
        self._unsynced = step
        if evaluate:
            self._drain(step, timer)  # evaluation must see this step's weights

    def _drain(self, step: int, timer: PhaseTimer) -> None:
        """With overlap, after step `step`: collect the next step's rollout now if it is in flight (it runs on the
        weights before this step's update), then push this step's update to the agents. An evaluation needs this
        step's weights, and a checkpoint stores the collected rollout, whose weights it does not hold. Both happen at
        steps fixed by the schedule, so that a resumed run takes the path of an uninterrupted one."""
        if self._pending is not None and self._pending[0] == step + 1:
            with timer.phase("rollout"):
                self._ready = self._collect_rollout(step + 1)
        if self._unsynced is not None:
            self._push_weights(self._unsynced, timer)
            self._unsynced = None

    def _push_weights(self, version: int, timer: PhaseTimer) -> None:
        """The learner's weights to every agent, and to the snapshot opponent when its refresh is due."""
        with timer.phase("sync"):
            self.fleet.sync.push(version)
            if self.cotrained:
                self.cotrained.push(version)
        with timer.phase("snapshot"):
            self._maybe_snapshot(version)

    def _maybe_snapshot(self, step: int) -> None:
        every = self.config.schedule.snapshot_every
        if not every or step % every:
            return
        if self.league is not None:
            self.league.add(step)  # a new member (and with kl_reference snapshot, the KL anchor)
        elif self.fleet.snapshot is not None:
            self.fleet.sync.refresh_snapshot(step)  # the snapshot opponent, and with it the KL anchor
        elif self.config.algorithm.kl_reference == "snapshot":
            self.fleet.learner_get(self.fleet.learner.refresh_anchor())
        if self.cotrained:
            self.cotrained.refresh_anchor()

    def _checkpoint(self, step: int, timer: PhaseTimer | None = None) -> None:
        """Save the learner and the loop after step `step`; with overlap, after draining the pipeline (`_drain`), with
        the next step's rollout."""
        timer = timer or PhaseTimer(STEP_PHASES)
        self._drain(step, timer)
        loop_state: dict[str, Any] = {"baseline": self.baseline.state_dict(),
                                      "snapshot_step": self.fleet.sync.snapshot_step}
        if self.league is not None:
            loop_state[LOOP_STATE_KEY] = self.league.state()
        if self.exploiter is not None:
            loop_state[EXPLOITER_STATE_KEY] = self.exploiter.to_json()
        if self._ready is not None and self._ready.step == step + 1:
            loop_state[checkpoint.NEXT_ROLLOUT] = rollout_to_json(self._ready)
        try:
            with timer.phase("checkpoint"):
                if self.cotrained:  # first: the run's checkpoint of a step, once complete, implies theirs
                    self.cotrained.save(step)
                ref = self.fleet.learner.save(str(self.run_dir), step, loop_state,
                                              self.config.schedule.keep_checkpoints)
                path = self.fleet.learner_get(ref)
        except RayTaskError as err:
            cause = getattr(err, "cause", None)
            if not isinstance(cause, OSError):
                raise
            raise RunAborted(checkpoint_failure(step, self.run_dir, cause, self.fleet.resume_hint())) from None
        self._checkpointed_step = step
        log.info("checkpoint written: %s", path)

    # --- evaluation ------------------------------------------------------------------------

    def _evaluate(self, held_out: bool) -> dict[str, Any]:
        """Games against random and each fixed policy (`eval/*_vs_policy_<name>`) at every evaluation, against the
        held-out opponents (`held_out_opponents`) at the first and the last (return, win rate, and draw rate in
        zero-sum games), and the exploitability where the game and its player count allow it."""
        config = self.config
        seed = derive_seed(config.run.seed, "eval")
        out: dict[str, Any] = {}
        fixed = [policy_seat(name) for name in policy_agent_names(config)]
        for opponent in ["random", *fixed, *(held_out_opponents(config) if held_out else [])]:
            played = self.fleet.call_agents(
                "evaluation", lambda name=opponent: self.fleet.workers[0].play_vs.remote(name, config.eval.games, seed)
            )
            mean_return, return_ci = mean_interval(played.returns)
            label = opponent.replace(POLICY_SEAT, "policy_")
            out[f"eval/return_vs_{label}"] = mean_return
            out[f"eval/return_vs_{label}_ci"] = return_ci
            out[f"eval/win_rate_vs_{label}"] = sum(played.wins) / len(played.wins) if played.wins else None
            if played.draws:
                out[f"eval/draw_rate_vs_{label}"] = sum(played.draws) / len(played.draws)
        if exploitable(config.game.name, dict(config.game.options)) and config.eval.samples_per_infoset > 0:
            estimate = self.fleet.call_agents("evaluation", lambda: self.fleet.workers[0].exploitability.remote(
                config.eval.samples_per_infoset, seed, config.eval.bootstrap))
            out["eval/exploitability"] = estimate.value
            out["eval/exploitability_ci"] = [estimate.ci_low, estimate.ci_high]
            out.update(self._infoset_validity(estimate))
            self._write_infoset_moves(estimate)
        return out

    def _write_infoset_moves(self, estimate: ExploitabilityEstimate) -> None:
        """One line of `infoset_moves.jsonl` per evaluation: each information state's moves with the policy's
        sampled probability of each, so that what the policy conditions on can be followed over the run."""
        if not estimate.infoset_moves:
            return
        moves = {key: dict(named) for key, named in estimate.infoset_moves}
        with (self.run_dir / INFOSET_MOVES).open("a") as handle:
            handle.write(json.dumps({"step": self.step, "samples_per_infoset": estimate.samples_per_infoset,
                                     "moves": moves}) + "\n")

    def _infoset_validity(self, estimate: ExploitabilityEstimate) -> dict[str, float]:
        """The lowest information state's share of responses with a legal action, and how many states fall below
        `VALIDITY_FLOOR` (listed in the log), from the exploitability's samples."""
        if not estimate.infoset_validity:
            return {}
        low = estimate.low_validity()
        if low:
            listed = ", ".join(f"{key!r} {share:.0%}" for key, share in low[:LISTED_STATES])
            listed += f" and {len(low) - LISTED_STATES} more" if len(low) > LISTED_STATES else ""
            log.warning("step %d: %d of %d information states below %.0f%% valid responses (a legal action named):"
                        " %s", self.step, len(low), len(estimate.infoset_validity), VALIDITY_FLOOR * 100, listed)
        return {"eval/min_infoset_validity": estimate.min_validity, "eval/low_validity_infosets": float(len(low))}

    # --- outputs ---------------------------------------------------------------------------

    def _log(self, record: dict[str, Any], on_step: Callable[[dict[str, Any]], None] | None) -> dict[str, Any]:
        self.metrics.write(record)
        if on_step is not None:
            on_step(record)
        return record

    def _write_samples(self, step: int, scored: list[ScoredEpisode]) -> None:
        folder = self.run_dir / "samples"
        folder.mkdir(exist_ok=True)
        (folder / f"step_{step}.md").write_text(render_transcripts(scored, step))
        if self.metrics.tracker is not None:
            self.metrics.tracker.log_transcripts(step, scored)


def train(config_path: str | None, overrides: list[str], address: str | None = None, resume: str | None = None,
          on_start: Callable[[int], None] | None = None,
          on_step: Callable[[dict[str, Any]], None] | None = None,
          strict: bool = False) -> tuple[Path, list[dict[str, Any]]]:
    """`strat train`: load (or, on resume, reload) the config, then run. Returns the run dir and records. On resume
    only some overrides are accepted, and those that change something are recorded (`strat.train.resume`); the run
    starts from the newest checkpoint that verifies (`strict`: the newest, or a refusal)."""
    point = None
    if resume is not None:
        run_dir = Path(resume)
        saved = run_dir / "config.yaml"
        if not saved.is_file():
            raise ConfigError(f"--resume {run_dir}: no config.yaml there (not a run directory)")
        point = checkpoint.resume_point(run_dir, strict)
        config = resume_with_overrides(run_dir, overrides, point.checkpoint.step)
    else:
        config = load_config(config_path, overrides)
        run_dir = config.run_dir
    fixed = resolve_fixed_policies(config)
    log.info(context_summary(check_context(config, fixed), config))
    trainer = Trainer(config, run_dir, address=address, resume=resume is not None, resume_point=point, strict=strict,
                      fixed_policies=fixed)
    if on_start is not None:
        on_start(config.schedule.steps)
    return run_dir, trainer.run(on_step)

