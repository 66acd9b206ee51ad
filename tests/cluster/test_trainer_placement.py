"""The trainer places GPU actors through one placement group per role. Ray's GPUs are logical, so a
CPU node that declares two of them exercises the real path (the actors then compute on the CPU)."""

from collections.abc import Iterator
from pathlib import Path

import pytest
import ray

from strat.config_loading import load_config
from strat.model import checkpoint
from strat.sync.weights import POLICIES_DIR
from strat.train.trainer import Trainer

ROOT = Path(__file__).resolve().parents[2]

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def ray_with_logical_gpus() -> Iterator[None]:
    ray.init(num_cpus=4, num_gpus=4, include_dashboard=False, log_to_driver=False, configure_logging=False)
    yield
    ray.shutdown()


# Two learner GPUs: two learner ranks, one bundle each (without a real GPU they run FSDP2 over gloo).
@pytest.mark.parametrize(("gpus_agent", "gpus_learner"), [(1, 1), (0, 2)],
                         ids=["agent-and-learner", "two-learner-ranks"])
def test_gpu_actors_run_in_their_roles_placement_groups(
    ray_with_logical_gpus, tmp_path: Path, tiny_model_dir: Path, gpus_agent: int, gpus_learner: int
) -> None:
    config = load_config(ROOT / "configs" / "kuhn_poker_tiny.yaml", [
        f"model.path={tiny_model_dir}", f"run.output_dir={tmp_path}", "warm_start.enabled=false",
        "engine.backend=hf", f"resources.gpus_per_agent={gpus_agent}", f"resources.gpus_learner={gpus_learner}",
        "game.opponents=[{kind: self, weight: 1}]", "algorithm.groups_per_step=2", "algorithm.group_size=2",
        "reasoning.max_new_tokens=16", "schedule.steps=1", "schedule.eval_every=0", "logging.samples_every=0",
        "logging.tensorboard=false", "schedule.max_staleness=0",
    ])
    seen: dict = {}

    def on_step(record: dict) -> None:
        seen.update({g["name"]: g for g in ray.util.placement_group_table().values() if g["state"] == "CREATED"})

    records = Trainer(config, config.run_dir).run(on_step)
    assert [r["step"] for r in records] == [1]
    assert {"strat-agents", "strat-learner", "strat-rollout_workers", "strat-comparator"} <= set(seen)
    assert [b.get("GPU", 0) for b in seen["strat-agents"]["bundles"].values()] == [float(gpus_agent)]
    assert [b.get("GPU", 0) for b in seen["strat-learner"]["bundles"].values()] == [1.0] * gpus_learner
    # The groups are released with the actors.
    assert not [g for g in ray.util.placement_group_table().values() if g["state"] == "CREATED"]


@pytest.mark.parametrize(("own", "engines", "learners", "resume"), [
    ("{}", [1.0, 1.0], [1.0, 1.0], False),
    ("{gpus_per_agent: 0.5, gpus_learner: 0.5}", [1.0, 0.5], [1.0, 0.5], False),
    # Two ranks, a checkpoint and a resume: ~75 s alone, so under `make test-faults` (and CI), not `make test`.
    pytest.param("{gpus_per_agent: 0, gpus_learner: 2}", [1.0, 0.0], [1.0, 1.0, 1.0], True, marks=pytest.mark.long),
], ids=["the-run-s-sizes", "its-own-sizes", "its-learner-on-two-ranks"])
def test_a_co_trained_policy_s_engine_and_learner_take_gpu_bundles_of_their_own(
    ray_with_logical_gpus, tmp_path: Path, tiny_model_dir: Path, own: str, engines: list, learners: list, resume: bool
) -> None:
    """Two policies on GPUs: the agents group holds the first policy's engine and the co-trained one's, the learner
    group the first learner and the co-trained learner, one GPU each (or the co-trained policy's own share, from its
    `resources`; two GPUs: two FSDP2 ranks of one GPU each, over gloo here), and an actor holds each bundle's GPU
    (an actor asking for more than its bundle holds never starts)."""
    config = load_config(ROOT / "configs" / "kuhn_poker_two_policies_tiny.yaml", [
        f"model.path={tiny_model_dir}", f"run.output_dir={tmp_path}", "warm_start.enabled=false",
        f"policies=[{{name: small, model: {tiny_model_dir}, resources: {own}}}]", "engine.backend=hf",
        "resources.actor_start_timeout_s=180",
        "resources.gpus_per_agent=1", "resources.gpus_learner=1", "resources.cpus_per_agent=0.25",
        "algorithm.groups_per_step=2", "algorithm.group_size=2", "reasoning.max_new_tokens=16", "schedule.steps=1",
        "schedule.eval_every=0", "logging.samples_every=0", "logging.tensorboard=false", "schedule.max_staleness=0",
    ])
    seen: dict = {}
    free: dict = {}

    def on_step(record: dict) -> None:
        seen.update({g["name"]: g for g in ray.util.placement_group_table().values() if g["state"] == "CREATED"})
        free.update(ray.available_resources())

    records = Trainer(config, config.run_dir).run(on_step)
    assert [r["step"] for r in records] == [1] and records[0]["small/learn/samples"] > 0
    for name, gpus in (("strat-agents", engines), ("strat-learner", learners)):
        group = seen[name]
        assert [b.get("GPU", 0) for b in group["bundles"].values()] == gpus, name
        # Ray's per-bundle resource: its GPU is taken by the actor placed there (a free one would still be listed).
        taken = [free.get(f"GPU_group_{index}_{group['placement_group_id']}", 0.0) for index in group["bundles"]]
        assert taken == [0.0] * len(gpus), (name, taken)
    # Its learner (of one rank or several) wrote its checkpoint of the last step; a resume restores it there (the
    # learner of two ranks: a sharded checkpoint read back by both).
    root = config.run_dir / POLICIES_DIR / "small"
    assert [found.step for found in checkpoint.complete_checkpoints(root)] == [1]
    if not resume:
        return
    longer = config.model_copy(update={"schedule": config.schedule.model_copy(update={"steps": 2})})
    resumed = Trainer(longer, config.run_dir, resume=True).run()
    assert [r["step"] for r in resumed] == [2] and resumed[0]["small/learn/samples"] > 0
