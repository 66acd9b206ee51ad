"""Actors killed mid-run (Ray's own kill, from the test): rollout workers and agents are restarted
and their share replayed, with no episode lost or counted twice; a dead comparator or learner ends
the run with a clear message and a resumable checkpoint."""

import collections
import threading
from pathlib import Path

import pytest
import ray

from strat import metrics
from strat.errors import RunAborted
from strat.model import checkpoint
from strat.play.rollout import plan_groups
from strat.play.settings import rollout_settings
from strat.train.trainer import Trainer

from .conftest import small_config

pytestmark = pytest.mark.faults


def _expected_episodes(config, step: int) -> collections.Counter:
    """(group id, seed) of every episode step `step` must train on, from the plan alone."""
    settings = rollout_settings(config)
    workers = config.resources.rollout_workers
    groups = config.algorithm.groups_per_step
    expected = collections.Counter()
    for worker in range(workers):
        count = groups // workers + (worker < groups % workers)
        for plan in plan_groups(settings, config.run.seed, step, worker, count):
            expected[(plan.group_id, plan.seed)] += config.algorithm.group_size
    return expected


def _check_ledger(config) -> None:
    ledger = metrics.read_ledger(config.run_dir)
    assert [line["step"] for line in ledger] == list(range(1, config.schedule.steps + 1))
    for line in ledger:
        used = collections.Counter((group, seed) for group, seed, _ in line["episodes"])
        assert used == _expected_episodes(config, line["step"]), f"step {line['step']}"
        ids = [episode_id for _, _, episode_id in line["episodes"]]
        assert len(ids) == len(set(ids)), f"step {line['step']} counts an episode twice"


def _comparable(records: list[dict]) -> list[dict]:
    return [{k: v for k, v in r.items() if not k.startswith(("time/", "throughput/", "faults/"))} for r in records]


@pytest.fixture(scope="module")
def reference(local_ray, tmp_path_factory, tiny_model_dir: Path):
    """An uninterrupted run of the config the fault tests use."""
    config = small_config(tmp_path_factory.mktemp("reference"), tiny_model_dir, "schedule.steps=3",
                          "resources.rollout_workers=2", "schedule.checkpoint_every=0")
    Trainer(config, config.run_dir).run()
    return config.run_dir


def _kill_during_step(trainer: Trainer, pick, after_step: int, delay_s: float, killed: list) -> callable:
    """An on_step hook: once `after_step` is logged, kill the actor `pick(trainer)` after `delay_s`
    (while the next step runs)."""

    def on_step(record: dict) -> None:
        if record["step"] == after_step:
            def kill() -> None:
                handle = pick(trainer)
                killed.append(handle)
                ray.kill(handle, no_restart=True)

            threading.Timer(delay_s, kill).start()

    return on_step


@pytest.mark.parametrize("role", ["worker", "agent"])
def test_dead_worker_or_agent_is_restarted_and_nothing_is_lost(
    local_ray, tmp_path: Path, tiny_model_dir: Path, reference, role: str
) -> None:
    config = small_config(tmp_path, tiny_model_dir, "schedule.steps=3", "resources.rollout_workers=2",
                          "schedule.checkpoint_every=0")
    trainer = Trainer(config, config.run_dir)
    killed: list = []
    pick = (lambda t: t.fleet.workers[0]) if role == "worker" else (lambda t: t.fleet.agents[0])
    records = trainer.run(_kill_during_step(trainer, pick, after_step=1, delay_s=0.3, killed=killed))
    assert killed, "the kill did not happen"
    assert trainer.fleet.restarts >= 1
    assert [r["step"] for r in records] == [1, 2, 3]
    _check_ledger(config)
    # The replayed share ran on restarted actors holding the same weights (synchronous: step s on the update of
    # step s - 1, one version per step, the same fingerprints): the run is the uninterrupted one, number for number.
    weights = [line["weights"] for line in metrics.read_ledger(config.run_dir)]
    assert [[version for version, _ in step] for step in weights] == [[0], [1], [2]]
    assert weights == [line["weights"] for line in metrics.read_ledger(reference)]
    assert _comparable(metrics.read(config.run_dir)) == _comparable(metrics.read(reference))


def test_dead_fixed_policy_is_restarted_and_the_run_is_the_uninterrupted_one(
    local_ray, tmp_path: Path, tiny_model_dir: Path, other_model_dir: Path
) -> None:
    """A fixed LLM opponent's agent killed mid-run is started again from its own checkpoint (no weights to reload): the
    lost share is replayed and the run equals an uninterrupted one, number for number."""
    extra = [f"policies=[{{name: rival, model: {other_model_dir}, train: false}}]",
             "game.opponents=[{kind: self}, {kind: policy, name: rival}]", "schedule.steps=3",
             "schedule.checkpoint_every=0", "resources.rollout_workers=2"]
    uninterrupted = small_config(tmp_path / "reference", tiny_model_dir, *extra)
    Trainer(uninterrupted, uninterrupted.run_dir).run()
    config = small_config(tmp_path / "killed", tiny_model_dir, *extra)
    trainer = Trainer(config, config.run_dir)
    killed: list = []
    records = trainer.run(_kill_during_step(trainer, lambda t: t.fleet.fixed["rival"], after_step=1, delay_s=0.3,
                                            killed=killed))
    assert killed, "the kill did not happen"
    assert trainer.fleet.restarts >= 1 and trainer.fleet.fixed["rival"] is not killed[0]
    assert [r["step"] for r in records] == [1, 2, 3]
    _check_ledger(config)
    assert _comparable(metrics.read(config.run_dir)) == _comparable(metrics.read(uninterrupted.run_dir))


def test_dead_comparator_ends_the_run_with_a_resumable_checkpoint(local_ray, tmp_path: Path, tiny_model_dir: Path) -> None:
    config = small_config(tmp_path, tiny_model_dir, "schedule.steps=3", "schedule.checkpoint_every=0")
    trainer = Trainer(config, config.run_dir)

    def on_step(record: dict) -> None:
        if record["step"] == 2:
            ray.kill(trainer.fleet.comparator, no_restart=True)

    with pytest.raises(RunAborted, match=r"comparator actor died at step 3; the last complete checkpoint is step 2"):
        trainer.run(on_step)
    assert checkpoint.latest(config.run_dir).step == 2
    resumed = Trainer(config, config.run_dir, resume=True)
    records = resumed.run()
    assert [r["step"] for r in records] == [3]
    assert [r["step"] for r in metrics.read(config.run_dir)] == [1, 2, 3]


def test_dead_learner_ends_the_run_naming_the_last_checkpoint(local_ray, tmp_path: Path, tiny_model_dir: Path) -> None:
    config = small_config(tmp_path, tiny_model_dir, "schedule.steps=4", "schedule.checkpoint_every=1")
    trainer = Trainer(config, config.run_dir)

    def on_step(record: dict) -> None:
        if record["step"] == 2:
            ray.kill(trainer.fleet.learner.ranks[0], no_restart=True)

    with pytest.raises(RunAborted, match=r"learner actor died at step 3; the last complete checkpoint is step 2: "
                                         r"continue with strat train --resume"):
        trainer.run(on_step)
    assert checkpoint.latest(config.run_dir).step == 2
