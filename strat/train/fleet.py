"""The run's Ray actors: started and placed, called so that a dead agent or rollout worker is restarted (with the
weights the others hold) and its lost work replayed, and a dead learner ends the run naming where to resume."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import ray
from ray.exceptions import GetTimeoutError, RayActorError, RayTaskError

from strat.algorithm.comparison import ComparisonWeights
from strat.algorithm.records import Episode
from strat.cluster.placement import (
    cluster_from_ray,
    cotrained_learner_slots,
    needs_placement,
    reserve,
    role_bundles,
)
from strat.cluster.placement import plan as plan_placement
from strat.cluster.storage import check_shared_storage
from strat.config import (
    ExperimentConfig,
    cotrained_policy_names,
    fixed_policy_names,
    past_policy_agent,
    policy_actors_config,
    policy_config,
)
from strat.errors import ConfigError, PlacementError, RunAborted
from strat.model import checkpoint
from strat.play.exploiter import MoveTable
from strat.play.rollout import GroupPlan
from strat.play.settings import engine_settings, rollout_settings
from strat.sync.fingerprint import WeightsTag
from strat.sync.weights import WeightSync
from strat.train.agent_actor import AgentActor
from strat.train.comparator_actor import CoTComparator
from strat.train.fixed_policies import FixedPolicy, resolve_fixed_policies
from strat.train.learner_actor import LearnerGroup
from strat.train.ray_node import actor_env_vars, actor_threads
from strat.train.rollout_actor import RolloutWorker
from strat.train.settings import agreement_settings, learner_settings

log = logging.getLogger("strat.train")

ACTOR_PING_TIMEOUT_S = 60.0


def required_resources(config: ExperimentConfig) -> dict[str, float]:
    """CPUs and GPUs the run's actors ask for together: the sum of their placement bundles (`role_bundles`: every
    engine, learner rank, worker and the comparator, each other policy's at its own size)."""
    rows = role_bundles(config)
    return {"CPU": sum(bundle.cpus for *_, bundle in rows), "GPU": sum(bundle.gpus for *_, bundle in rows)}


def actor_options(num_cpus: float, num_gpus: float) -> dict[str, Any]:
    """An actor's Ray options: its CPUs and GPUs, and its runtime env (`Fleet.start`'s docstring; a GPU actor gets
    one OpenMP thread per CPU it holds, `actor_threads`)."""
    return {"num_cpus": num_cpus, "num_gpus": num_gpus,
            "runtime_env": {"env_vars": {**actor_env_vars(), **actor_threads(num_cpus, num_gpus)}}}


def check_resources(config: ExperimentConfig, available: dict[str, float]) -> None:
    """Refuse, before any actor starts, a run the cluster cannot hold."""
    for kind, needed in required_resources(config).items():
        have = float(available.get(kind, 0.0))
        if needed > have + 1e-9:
            raise ConfigError(
                f"resources: the actors need {needed:g} {kind} but the Ray cluster has {have:g} "
                "(lower resources.* or add nodes)"
            )


@dataclass
class Share:
    """One worker's part of a rollout: what it plays, with which seed, its future, and the future of the weights its
    agent holds (asked for as it starts: no sync happens while a rollout runs)."""

    worker: int
    plans: list[GroupPlan]
    sampling_seed: int
    future: Any
    weights: Any
    exploited: MoveTable | None = None
    """The policy's counted moves its exploiter answers (`{kind: exploiter}`), kept to play the share again."""

def actor_died(err: BaseException) -> bool:
    """Whether a Ray error means an actor died (also when the death surfaced inside another task)."""
    if isinstance(err, RayActorError):
        return True
    return isinstance(err, RayTaskError) and isinstance(getattr(err, "cause", None), RayActorError)


class Fleet:
    """The agents (and the snapshot opponent's agent), rollout workers, comparator and learner ranks of one run, and
    the weight sync between them. `step` says which step a fatal loss happened in (the step the driver is working on)."""

    def __init__(self, config: ExperimentConfig, run_dir: Path, model_path: str, step: Callable[[], int],
                 fixed: tuple[FixedPolicy, ...] | None = None) -> None:
        self.config, self.run_dir, self.model_path = config, run_dir, model_path
        self.fixed_policies = resolve_fixed_policies(config) if fixed is None else fixed
        """The other policies' players, in `policies` order: the fixed LLM opponents (never synced) and the co-trained
        policies (synced from their own learners); each has its own agent in `fixed` (by name)."""
        self.fixed: dict[str, Any] = {}
        self.policy_learners: dict[str, LearnerGroup] = {}
        """Each co-trained policy's learner (one rank unless its resources ask for more), by name."""
        self.policy_weights: dict[str, str] = {}
        """Each co-trained policy's newest weights directory once synced: a restarted agent of it loads them."""
        self._step = step
        self.restarts = 0
        """Actors restarted so far in this run."""
        self.placement = None
        self._handles: list[Any] = []

    # --- start and stop ----------------------------------------------------------------------

    def start(self) -> None:
        """Start and place every actor, and the weight sync; returns once all are ready.

        Each actor's own runtime env carries `ray_node.actor_env_vars()` (one OpenMP thread, quiet logs, the driver's
        offline and cache settings): when `start_ray` initialised Ray the job's runtime env holds the same values
        (Ray merges an actor's env_vars into the job's), but when the caller ran `ray.init` itself nothing else sets
        them before an actor's process imports torch (Ray would set OMP_NUM_THREADS alone, to the actor's num_cpus)."""
        config = self.config
        res = config.resources
        check_resources(config, ray.cluster_resources())
        self._engine_settings = engine_settings(config)
        if needs_placement(config):
            # One placement group per role; a plan that cannot fit is refused here, before any actor.
            self.placement = reserve(plan_placement(config, cluster_from_ray(ray.nodes())), res.actor_start_timeout_s)
        # On more than one node, before any engine starts: every hosting node sees the run's paths.
        check_shared_storage(config, self.run_dir, self.model_path, self.placement,
                             [(policy.name, str(policy.model_dir)) for policy in self.fixed_policies])
        # An agent's engine holds all of its tensor-parallel GPUs.
        self._agent_cls = (AgentActor,
                           actor_options(res.cpus_per_agent, res.gpus_per_agent * config.engine.tensor_parallel_size))
        self._worker_cls = (RolloutWorker, actor_options(res.cpus_per_worker, 0))
        self.agents = [self._new_agent(index=i) for i in range(res.agents)]
        self.snapshot = None
        if past_policy_agent(config):  # the snapshot opponent's, or the league's
            self.snapshot = self._new_agent(role="snapshot")
        for index, policy in enumerate(self.fixed_policies):
            self.fixed[policy.name] = self._new_policy_agent(index, str(policy.model_dir))
            kind = "co-trained" if policy.name in cotrained_policy_names(config) else "fixed"
            log.info("%s policy %s: %s", kind, policy.name, policy.source)
        self.workers = [self._new_worker(i) for i in range(res.rollout_workers)]
        weights = config.comparison.weights
        self.comparator = CoTComparator.options(
            **actor_options(res.cpus_comparator, res.gpus_comparator), **self._placed("comparator")
        ).remote(ComparisonWeights(weights.predict, weights.belief, weights.agreement), agreement_settings(config),
                 self.judges(), config.comparison.skip_forced, config.comparison.prediction_target,
                 config.comparison.belief_target)
        # One handle for all learner ranks (data-parallel FSDP2 when there are several).
        self.learner = LearnerGroup.start(
            self.model_path, learner_settings(config), res.learner_world_size,
            lambda rank: {**actor_options(res.cpus_learner, res.gpus_per_learner_rank),
                          **self._placed("learner", rank)},
            res.actor_start_timeout_s,
        )
        self.sync = WeightSync(config, self.run_dir, self.learner, lambda: self.agents, lambda: self.snapshot,
                               self.learner_get, self.call_agents)
        cotrained = cotrained_policy_names(config)
        slots = cotrained_learner_slots(config)
        for policy in self.fixed_policies:
            if policy.name in cotrained:
                own = policy_config(config, policy.name)
                settings = learner_settings(own)  # its own lr, loss, KL and adapters
                # Its ranks (one unless its resources ask for more), each in its own bundle of the learner group (a
                # GPU of its own on a GPU run).
                first = slots.index((policy.name, 0))
                learner_env = actor_options(own.resources.cpus_learner, own.resources.gpus_per_learner_rank)
                self.policy_learners[policy.name] = LearnerGroup.start(
                    str(policy.model_dir), settings, own.resources.learner_world_size,
                    lambda rank, first=first, le=learner_env: {**le, **self._placed("cotrained_learner", first + rank)},
                    res.actor_start_timeout_s)
        self._collect_handles()
        self._wait_ready(self._handles)
        log.info("actors ready: %d agent(s)%s, %d rollout worker(s), comparator, learner (%d rank(s))%s",
                 len(self.agents), f" and {len(self.fixed)} other policies' agent(s)" if self.fixed else "",
                 len(self.workers), len(self.learner.ranks),
                 f", {len(self.policy_learners)} co-trained policy learner(s)" if self.policy_learners else "")

    def stop(self) -> None:
        """Kill every actor and give the placement groups back."""
        for handle in self._handles:
            ray.kill(handle)
        self._handles = []
        if self.placement is not None:
            self.placement.remove()
            self.placement = None

    def _placed(self, role: str, index: int = 0) -> dict[str, Any]:
        """The actor's bundle in its role's placement group (nothing on a CPU-only run). A restarted
        actor takes the bundle its predecessor freed."""
        return {} if self.placement is None else {"scheduling_strategy": self.placement.strategy(role, index)}

    def _new_agent(self, index: int = 0, role: str = "agent", model_path: str | None = None) -> Any:
        cls, options = self._agent_cls
        return cls.options(**options, **self._placed(role, index)).remote(
            self.config.engine.backend, model_path or self.model_path, self._engine_settings
        )

    def _new_policy_agent(self, index: int, model_path: str) -> Any:
        """The agent of `self.fixed_policies[index]`, in its placement bundle: a fixed policy's (`fixed[i]`, i among
        the fixed ones) or a co-trained one's (`cotrained[i]`, i among the co-trained ones), sized by the policy's
        own resources and tensor-parallel size."""
        name = self.fixed_policies[index].name
        cotrained = cotrained_policy_names(self.config)
        role, position = (("cotrained", cotrained.index(name)) if name in cotrained
                          else ("fixed", fixed_policy_names(self.config).index(name)))
        own = policy_actors_config(self.config, name)
        cls, _ = self._agent_cls
        options = actor_options(own.resources.cpus_per_agent,
                                own.resources.gpus_per_agent * own.engine.tensor_parallel_size)
        return cls.options(**options, **self._placed(role, position)).remote(
            self.config.engine.backend, model_path, engine_settings(own))

    def _new_worker(self, index: int) -> Any:
        agent = self.agents[index % len(self.agents)]
        cls, options = self._worker_cls
        fixed = [(policy, self.fixed[policy.name]) for policy in self.fixed_policies]
        return cls.options(**options, **self._placed("rollout_worker", index)).remote(
            rollout_settings(self.config), self.model_path, agent, self.snapshot, fixed
        )

    def _collect_handles(self) -> None:
        self._handles = [*self.agents, *self.workers, self.comparator, *self.learner.ranks, *self.fixed.values(),
                         *(rank for group in self.policy_learners.values() for rank in group.ranks)]
        if self.snapshot is not None:
            self._handles.append(self.snapshot)

    def _wait_ready(self, handles: list[Any]) -> None:
        ready = [h.ready.remote() for h in handles]
        timeout = self.config.resources.actor_start_timeout_s
        _, pending = ray.wait(ready, num_returns=len(ready), timeout=timeout)
        if pending:
            raise PlacementError(
                f"{len(pending)} of {len(ready)} actors did not start within {timeout:.0f} s "
                f"(resources.actor_start_timeout_s); the cluster has {ray.available_resources()} free"
            )
        ray.get(ready)

    def judges(self) -> list[Any]:
        """The agent actors the comparator judges with: the policy's when comparison.judge_engine=policy."""
        comparison = self.config.comparison
        return list(self.agents) if comparison.agreement == "judge" and comparison.judge_engine == "policy" else []

    # --- calls that survive faults -----------------------------------------------------------

    def call_agents(self, where: str, call: Callable[[], list[Any]]) -> Any:
        """Run calls on agents/workers (made by `call`), restarting dead ones and calling again. Another error counts
        as a death when an agent or worker no longer answers: a collective call fails for its other members (the
        learner's broadcast: connection closed by peer) before Ray has declared a member on a lost node dead."""
        while True:
            try:
                return ray.get(call())
            except Exception as err:  # noqa: BLE001
                if not actor_died(err) and not self._any_lost():
                    raise
                self.recover(where, err)

    def _any_lost(self) -> bool:
        """Whether an agent or rollout worker is dead, pinged all at once (a busy one counts as alive)."""
        handles = [*self.agents, *self.workers, *([self.snapshot] if self.snapshot is not None else []),
                   *self.fixed.values()]
        pings = [handle.ready.remote() for handle in handles]
        answered, _ = ray.wait(pings, num_returns=len(pings), timeout=ACTOR_PING_TIMEOUT_S)
        for ping in answered:
            try:
                ray.get(ping)
            except Exception as err:
                if actor_died(err):
                    return True
                raise
        return False

    def launch(self, worker: int, plans: list[GroupPlan], sampling_seed: int,
               exploited: MoveTable | None = None) -> Share:
        """Start rollout worker `worker` on `plans` (an exploiter among them answering `exploited`)."""
        weights = self.agents[worker % len(self.agents)].weights.remote()
        return Share(worker, plans, sampling_seed, self.workers[worker].run.remote(plans, sampling_seed, exploited),
                     weights, exploited)

    def gather(self, shares: list[Share], where: str) -> tuple[list[Episode], tuple[WeightsTag, ...]]:
        """The episodes of `shares` in worker order, and the distinct weights they ran on; a share whose worker or
        agent died is played again."""
        done: dict[int, tuple[list[Episode], WeightsTag]] = {}
        while shares:
            failed, error = [], None
            for share in shares:
                try:
                    done[share.worker] = (ray.get(share.future), ray.get(share.weights))
                except Exception as err:  # noqa: BLE001
                    if not actor_died(err):
                        raise
                    failed.append(share)
                    error = err
            if not failed:
                break
            self.recover(where, error)
            shares = [self.launch(s.worker, s.plans, s.sampling_seed, s.exploited) for s in failed]
        ordered = [done[worker] for worker in sorted(done)]
        return [episode for episodes, _ in ordered for episode in episodes], tuple(dict.fromkeys(t for _, t in ordered))

    def split(self, count: int) -> list[int]:
        """How many of `count` groups each rollout worker plays."""
        workers = len(self.workers)
        return [count // workers + (index < count % workers) for index in range(workers)]

    def learner_get(self, ref: Any) -> Any:
        """The result of a learner call (once every rank has made it); a rank's death ends the run with where to
        resume from."""
        try:
            return self.learner.get(ref)
        except Exception as err:  # noqa: BLE001
            if actor_died(err):
                raise RunAborted(f"the learner actor died at step {self._step()}; {self.resume_hint()}") from None
            raise

    def policy_learner_get(self, name: str, ref: Any) -> Any:
        """The result of a co-trained policy's learner call; its death ends the run with where to resume from."""
        try:
            return self.policy_learners[name].get(ref)
        except Exception as err:  # noqa: BLE001
            if actor_died(err):
                raise RunAborted(f"the learner actor of policy {name} died at step {self._step()};"
                                 f" {self.resume_hint()}") from None
            raise

    def recover(self, where: str, err: BaseException) -> None:
        """Restart every agent and rollout worker that died, with the weights the others hold."""
        self.restarts += 1
        limit = self.config.schedule.max_actor_restarts
        if self.restarts > limit:
            raise RunAborted(
                f"{where}: an actor died again ({type(err).__name__}) after {limit} restart(s) "
                f"(schedule.max_actor_restarts); {self.resume_hint()}"
            )
        dead_agents = [i for i, handle in enumerate(self.agents) if not self.alive(handle)]
        snapshot_dead = self.snapshot is not None and not self.alive(self.snapshot)
        dead_fixed = [i for i, policy in enumerate(self.fixed_policies) if not self.alive(self.fixed[policy.name])]
        dead_workers = [i for i, handle in enumerate(self.workers) if not self.alive(handle)]
        log.warning("%s: actor died (%s); restarting %d agent(s)%s%s and %d rollout worker(s) "
                    "(restart %d of at most %d), the lost work is replayed",
                    where, type(err).__name__, len(dead_agents), " and the snapshot" if snapshot_dead else "",
                    f", {len(dead_fixed)} fixed polic{'y' if len(dead_fixed) == 1 else 'ies'}" if dead_fixed else "",
                    len(dead_workers), self.restarts, limit)
        # A fixed policy's agent loads its own checkpoint as it starts, a co-trained one its newest synced weights.
        self._start_again(where, [("agent", i) for i in dead_agents] + ([("snapshot", 0)] if snapshot_dead else [])
                          + [("fixed", i) for i in dead_fixed])
        ray.get(self.sync.reload_calls([self.agents[i] for i in dead_agents], snapshot_dead))
        self._start_again(where, [("rollout_worker", i) for i in dead_workers])
        if dead_agents or snapshot_dead:
            ray.get([
                worker.set_agents.remote(self.agents[i % len(self.agents)], self.snapshot)
                for i, worker in enumerate(self.workers) if i not in dead_workers
            ])
        if dead_fixed:
            restarted = {self.fixed_policies[i].name: self.fixed[self.fixed_policies[i].name] for i in dead_fixed}
            ray.get([worker.set_fixed.remote(restarted) for i, worker in enumerate(self.workers)
                     if i not in dead_workers])
        if dead_agents and self.judges():
            ray.get(self.comparator.set_agents.remote(self.judges()))
        self._collect_handles()

    def _start_again(self, where: str, slots: list[tuple[str, int]]) -> None:
        """A new actor for each (role, index) slot, in place of the dead one; returns once all are ready. One that
        dies before it ran was sent where its placement bundle still was, a node that is lost but not yet declared
        dead (the GCS takes seconds to miss its heartbeats); it is started again, once the bundle has moved."""
        timeout = self.config.resources.actor_start_timeout_s
        deadline = time.monotonic() + timeout
        while slots:
            for role, index in slots:
                if role == "agent":
                    self.agents[index] = self._new_agent(index=index)
                elif role == "snapshot":
                    self.snapshot = self._new_agent(role="snapshot")
                elif role == "fixed":
                    policy = self.fixed_policies[index]
                    weights = self.policy_weights.get(policy.name, str(policy.model_dir))
                    self.fixed[policy.name] = self._new_policy_agent(index, weights)
                else:
                    self.workers[index] = self._new_worker(index)
            handles = [self._slot_handle(role, index) for role, index in slots]
            ready = [handle.ready.remote() for handle in handles]
            _, pending = ray.wait(ready, num_returns=len(ready), timeout=max(0.0, deadline - time.monotonic()))
            if pending:
                for handle in handles:
                    ray.kill(handle)
                raise RunAborted(
                    f"{where}: {len(pending)} restarted actor(s) did not start within {timeout:.0f} s "
                    f"(resources.actor_start_timeout_s; the cluster has {ray.available_resources()} free); "
                    f"{self.resume_hint()}"
                )
            died = []
            for slot, ref in zip(slots, ready, strict=True):
                try:
                    ray.get(ref)
                except Exception as err:
                    if not actor_died(err):
                        raise
                    died.append(slot)
            if died:
                log.warning("%s: %d restarted actor(s) died before they started (sent to a lost node); starting them"
                            " again", where, len(died))
            slots = died

    def _slot_handle(self, role: str, index: int) -> Any:
        if role == "snapshot":
            return self.snapshot
        if role == "fixed":
            return self.fixed[self.fixed_policies[index].name]
        return (self.agents if role == "agent" else self.workers)[index]

    @staticmethod
    def alive(handle: Any) -> bool:
        """Whether the actor answers (a busy one counts as alive)."""
        try:
            ray.get(handle.ready.remote(), timeout=ACTOR_PING_TIMEOUT_S)
        except GetTimeoutError:
            return True  # busy, not dead
        except Exception as err:  # noqa: BLE001
            if actor_died(err):
                return False
            raise
        return True

    def resume_hint(self) -> str:
        """Where a stopped run continues from, for the message that stops it."""
        latest = checkpoint.latest(self.run_dir)
        if latest is None:
            return "no checkpoint was written yet, so the run must start again"
        return f"the last complete checkpoint is step {latest.step}: continue with strat train --resume {self.run_dir}"
