"""Policies co-trained beside the first (`policies` entries with `train: true`), the driver's side.

Each co-trained policy plays its seats (`{kind: policy, name}` opponents) on an agent of its own, as a fixed policy
does, and trains on its own turns of the step's games with a learner of its own (its own optimizer state): the
step's episodes are viewed from its seats (`seated_view`), scored by the same central comparator against what the
other players really did and thought, given group-relative advantages over its own groups, and used for its update.
Its weights reach its agent at the first policy's sync points (written to `<sync root>/policies/<name>/step_<n>`),
so that every rollout runs on weights of one age for every policy. Its checkpoints are
`<run>/policies/<name>/checkpoints/step_<n>`, written with the run's; a resumed run restores them, and its metrics are
`<name>/...`.
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from strat.algorithm.advantage import RoleBaseline, compute_advantages
from strat.algorithm.records import Episode, ScoredEpisode
from strat.config import ExperimentConfig, cotrained_policy_names, policy_config, save_resolved
from strat.errors import RunAborted
from strat.model import checkpoint
from strat.play.rollout import policy_seat
from strat.play.settings import rollout_settings
from strat.sync.weights import POLICIES_DIR, policy_sync_dir
from strat.train.fixed_policies import FixedPolicy
from strat.train.settings import advantage_config
from strat.train.step_metrics import advantage_metrics, episode_metrics

if TYPE_CHECKING:
    from strat.train.fleet import Fleet  # imports Ray; only the trainer builds one

log = logging.getLogger(__name__)


def resolve_cotrained_policies(config: ExperimentConfig,
                               initial_model: Callable[[ExperimentConfig], Path]) -> tuple[FixedPolicy, ...]:
    """Every co-trained policy with the model it starts from (`initial_model` of its own model config: built, rules
    pretrained and warm-started as the run's are, each stage cached), in the run's reasoning format."""
    settings = rollout_settings(config)
    out = []
    for name in cotrained_policy_names(config):
        model_dir = initial_model(policy_config(config, name))
        model = next(p.model for p in config.policies if p.name == name)
        out.append(FixedPolicy(name, model_dir, settings, f"co-trained from {model} ({model_dir})"))
    return tuple(out)


def save_policy_configs(config: ExperimentConfig, run_dir: Path) -> None:
    """Each co-trained policy's folder as a run directory of its own: `config.yaml` (the run's, with its model), so
    that `strat eval --policy <run>/policies/<name>` (or `--policy <run> --policy-name <name>`) plays its latest
    checkpoint in the run's format."""
    for name in cotrained_policy_names(config):
        save_resolved(policy_config(config, name), run_dir / POLICIES_DIR / name)


def seated_view(episode: Episode, name: str) -> Episode | None:
    """`episode` with the seats policy `name` played as its learning seats; None where it did not play."""
    seat = policy_seat(name)
    ego = tuple(agent for agent in episode.agents if episode.seats.get(agent) == seat)
    return dataclasses.replace(episode, ego_agents=ego) if ego else None


def prefixed(name: str, record: dict[str, Any]) -> dict[str, Any]:
    """A co-trained policy's figures under `<name>/`."""
    return {f"{name}/{key}": value for key, value in record.items()}


class CoTrainedPolicies:
    """The run's co-trained policies: each step's update of each, its weights to its agent, its checkpoints."""

    def __init__(self, config: ExperimentConfig, run_dir: Path, fleet: Fleet) -> None:
        self.config, self.run_dir, self.fleet = config, run_dir, fleet
        self.names = cotrained_policy_names(config)
        self.configs = {name: policy_config(config, name) for name in self.names}
        """Each policy's config as it trains (its own algorithm settings)."""
        self.baselines = {name: RoleBaseline(self.configs[name].algorithm.ema_decay) for name in self.names}

    def __bool__(self) -> bool:
        return bool(self.names)

    # --- each step -------------------------------------------------------------------------

    def train(self, episodes: list[Episode], score: Callable[[list[Episode]], list[ScoredEpisode]]) -> dict[str, Any]:
        """Each co-trained policy's update on its own turns of `episodes`, scored by `score` (the comparator) from
        its seats; its figures under `<name>/`."""
        record: dict[str, Any] = {}
        for name in self.names:
            views = [view for view in (seated_view(e, name) for e in episodes) if view is not None]
            if not views:
                record[f"{name}/learn/samples"] = 0.0
                continue
            scored = score(views)
            own = self.configs[name]
            baseline = self.baselines[name] if own.algorithm.baseline == "ema" else None
            samples, stats = compute_advantages(scored, advantage_config(own), baseline)
            learn = self.fleet.policy_learner_get(name, self.fleet.policy_learners[name].update(samples))
            figures = {**episode_metrics(scored), **advantage_metrics(stats), **learn}
            figures.pop("gen/tokens", None)
            record.update(prefixed(name, figures))
        return record

    def push(self, version: int) -> None:
        """Each co-trained policy's current weights to its agent (written to its sync folder, older versions
        removed)."""
        for name in self.names:
            path = policy_sync_dir(self.config, self.run_dir, name) / f"step_{version}"
            written = self.fleet.policy_learner_get(
                name, self.fleet.policy_learners[name].export_weights_dir(str(path), True))
            self.fleet.call_agents(f"sync of policy {name}",
                                   lambda name=name, written=written: self.fleet.fixed[name].load_weights_dir.remote(
                                       written, version))
            self.fleet.policy_weights[name] = written

    def refresh_anchor(self) -> None:
        """At a snapshot step: the KL anchor of each co-trained policy with `kl_reference: snapshot` (its own or the
        run's) moves to its current weights."""
        for name in self.names:
            if self.configs[name].algorithm.kl_reference == "snapshot":
                self.fleet.policy_learner_get(name, self.fleet.policy_learners[name].refresh_anchor())

    # --- checkpoints -----------------------------------------------------------------------

    def root(self, name: str) -> Path:
        """Where policy `name`'s checkpoints go (`<root>/checkpoints/step_<n>`)."""
        return self.run_dir / POLICIES_DIR / name

    def save(self, step: int) -> None:
        """Each co-trained policy's checkpoint of step `step` (weights, optimizer, its advantage baseline)."""
        for name in self.names:
            state = {"baseline": self.baselines[name].state_dict()}
            self.fleet.policy_learner_get(name, self.fleet.policy_learners[name].save(
                str(self.root(name)), step, state, self.config.schedule.keep_checkpoints))

    def restore(self, step: int) -> None:
        """Each co-trained policy as its checkpoint of step `step` holds it, its weights pushed to its agent."""
        for name in self.names:
            path = checkpoint.checkpoint_dir(self.root(name), step)
            if step not in {found.step for found in checkpoint.complete_checkpoints(self.root(name))}:
                raise RunAborted(f"policy {name} has no complete checkpoint of step {step} at {path} (the run's"
                                 " checkpoint of that step has one per co-trained policy); resume from an earlier"
                                 " step, or start a new run")
            checkpoint.require_verified(checkpoint.Checkpoint(path, step))  # a damaged one: refused in one line
            state = self.fleet.policy_learner_get(name, self.fleet.policy_learners[name].load(str(path), step))
            self.baselines[name].load_state_dict(state.get("baseline", {}))
        self.push(step)
        log.info("co-trained policies restored at step %d: %s", step, ", ".join(self.names))
