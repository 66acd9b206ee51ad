"""The data-parallel learner group on the CPU: two Ray learner ranks under gloo with FSDP2 take the same
steps as one unsharded learner, export its weights, and write checkpoints a single learner resumes."""

from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path

import pytest
import ray
import torch
from safetensors.torch import load_file

from strat.algorithm.records import TrainSample
from strat.model import checkpoint
from strat.model.build import LoraSettings
from strat.train.learner import LearnerSettings, PolicyLearner
from strat.train.sequences import split_for_ranks

from .sync_helpers import prompts_for, target_response

SETTINGS = LearnerSettings(lr=2e-3, micro_batch=1)
"""One sample per micro-batch, so that the ranks' micro-batch counts differ and padding is exercised. AdamW's
first steps move every weight by about lr whatever its gradient's size, so the float rounding of gradients near
zero (summed in another order over two ranks) shows up as ~lr/1000: a small lr keeps that under the tolerance."""


def _samples(tokenizer) -> list[TrainSample]:
    """Responses of different lengths and advantages of both signs over the test prompts."""
    target = target_response(tokenizer)
    responses = [target, target[:3], tuple(tokenizer.encode("<action>pass</action>")), target[1:]]
    return [
        TrainSample("g", f"e{i}", "player_0", 0, tuple(prompt), response, (0.0,) * len(response), advantage)
        for i, (prompt, response, advantage) in enumerate(
            zip(prompts_for(tokenizer) * 2, responses + responses[:1], [1.0, -0.5, 0.7, 1.0, -1.0], strict=False)
        )
    ]


def test_split_is_balanced_by_tokens_deterministic_and_keeps_order() -> None:
    lengths = [9, 1, 5, 5, 3, 8]
    samples = [TrainSample("g", f"e{i}", "p", 0, (1,) * n, (2,), (0.0,), 1.0) for i, n in enumerate(lengths)]
    parts = split_for_ranks(samples, 2)
    assert parts == split_for_ranks(samples, 2)
    assert sorted(s.episode_id for part in parts for s in part) == sorted(s.episode_id for s in samples)
    loads = [sum(len(s.prompt_token_ids) + 1 for s in part) for part in parts]
    assert abs(loads[0] - loads[1]) <= 1
    assert all(part == sorted(part, key=samples.index) for part in parts)
    assert split_for_ranks(samples, 1) == [samples]
    assert split_for_ranks(samples[:1], 3) == [samples[:1], [], []]
    with pytest.raises(ValueError, match="world_size=0"):
        split_for_ranks(samples, 0)


@pytest.fixture(scope="module")
def local_ray() -> Iterator[None]:
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False, configure_logging=False)
    yield
    ray.shutdown()


def _close(a: dict[str, torch.Tensor], b: dict[str, torch.Tensor], atol: float = 1e-5) -> bool:
    assert set(a) == set(b)
    return all(torch.allclose(a[k], b[k], atol=atol) for k in a)


@pytest.mark.parametrize(("lora", "minibatches", "epochs"), [(None, 2, 1), (LoraSettings(r=4, alpha=8), 1, 2)],
                         ids=["full-2-minibatches", "lora-2-epochs"])
def test_two_ranks_step_export_and_checkpoint_as_one_learner(
    local_ray, tiny_model_dir: Path, tmp_path: Path, lora: LoraSettings | None, minibatches: int, epochs: int
) -> None:
    from strat.train.learner_actor import LearnerGroup

    settings = replace(SETTINGS, lora=lora, minibatches=minibatches, epochs=epochs)
    group = LearnerGroup.start(str(tiny_model_dir), settings, 2, lambda rank: {"num_cpus": 0.5})
    reference = PolicyLearner(tiny_model_dir, settings)
    try:
        group.get(group.ready())
        samples = _samples(reference.tokenizer)
        assert [len(part) for part in split_for_ranks(samples, 2)] == [2, 3]
        # A full batch, then fewer samples than ranks: rank 1 has nothing of its own and trains on a weight-0 copy.
        for batch in (samples, samples[:1]):
            ours = group.get(group.update(batch))
            theirs = reference.update(batch)
            assert ours["learn/skipped_minibatches"] == theirs["learn/skipped_minibatches"] == 0
            for key in ("loss/policy", "learn/grad_norm", "loss/ratio_mean", "logprob/engine_learner_gap"):
                assert ours[key] == pytest.approx(theirs[key], rel=1e-4, abs=1e-6), key
            assert ours["learn/tokens"] == theirs["learn/tokens"]
        expected = reference.state_dict()
        assert not _close(expected, PolicyLearner(tiny_model_dir, settings).state_dict(), atol=1e-4)
        assert _close(group.get(group.state_dict()), expected)
        prompts = [list(s.prompt_token_ids) for s in samples[:2]]
        assert group.get(group.greedy(prompts, 8)) == reference.greedy(prompts, 8)

        exported = Path(group.get(group.export_weights_dir(str(tmp_path / "sync" / "step_2"), True)))
        assert _close(load_file(exported / "model.safetensors"), expected)

        path = group.get(group.save(str(tmp_path / "run"), 2, {"baseline": {}}, 1))
        resumed = PolicyLearner(tiny_model_dir, settings)
        assert resumed.load(checkpoint.Checkpoint(Path(path), 2))["step"] == 2
        assert _close(resumed.state_dict(), expected)
        # The optimizer's moments came along: the next step is the reference's next step.
        for learner in (resumed, reference):
            learner.update(samples)
        assert _close(resumed.state_dict(), reference.state_dict())

        # And the reverse: the group resumes a single learner's checkpoint, optimizer included.
        single = resumed.save(tmp_path / "single", 3, {"baseline": {}}, keep=1)
        assert group.get(group.load(str(single.path), 3))["step"] == 3
        group.get(group.update(samples))
        resumed.update(samples)
        assert _close(group.get(group.state_dict()), resumed.state_dict())
    finally:
        for rank in group.ranks:
            ray.kill(rank)


def test_two_ranks_anchor_the_kl_on_the_gathered_snapshot(local_ray, tiny_model_dir: Path) -> None:
    # kl_reference=snapshot: only rank 0 holds the gathered snapshot, yet every rank's reference must take it, or
    # the KL of rank 1's samples (and so the summed loss/kl) is measured against the initial weights.
    from strat.train.learner_actor import LearnerGroup

    settings = replace(SETTINGS, lr=2e-2, kl_reference="snapshot", loss=replace(SETTINGS.loss, kl_type="forward",
                                                                                 kl_coef=0.1))
    group = LearnerGroup.start(str(tiny_model_dir), settings, 2, lambda rank: {"num_cpus": 0.5})
    single = PolicyLearner(tiny_model_dir, settings)
    try:
        group.get(group.ready())
        samples = _samples(single.tokenizer)
        for _ in range(2):
            group.get(group.update(samples))
            single.update(samples)
        group.get(group.take_snapshot())
        single.take_snapshot()
        figures = []
        for _ in range(2):  # the first update starts at the anchor (KL 0); the second has moved off it
            figures.append((group.get(group.update(samples))["loss/kl"], single.update(samples)["loss/kl"]))
        assert figures[0] == pytest.approx((0.0, 0.0), abs=1e-7)
        ours, theirs = figures[1]
        assert theirs > 1e-6 and ours == pytest.approx(theirs, rel=1e-3, abs=1e-8)
    finally:
        for rank in group.ranks:
            ray.kill(rank)


@pytest.mark.long
def test_driver_trains_checkpoints_and_resumes_with_two_learner_ranks(
    local_ray, tiny_model_dir: Path, tmp_path: Path
) -> None:
    from strat.config_loading import load_config
    from strat.errors import RunAborted
    from strat.train.trainer import Trainer

    config = load_config(Path(__file__).resolve().parents[2] / "configs" / "kuhn_poker_tiny.yaml", [
        f"model.path={tiny_model_dir}", f"run.output_dir={tmp_path}", "warm_start.enabled=false",
        "engine.backend=hf", "algorithm.groups_per_step=2", "algorithm.group_size=3", "reasoning.max_new_tokens=24",
        "schedule.steps=3", "schedule.checkpoint_every=1", "schedule.eval_every=0", "schedule.max_staleness=0",
        "schedule.snapshot_every=1", "logging.samples_every=0", "logging.tensorboard=false",
        "resources.learner_ranks=2", "resources.cpus_learner=0.25",
    ])
    trainer = Trainer(config, config.run_dir)

    def on_step(record: dict) -> None:
        assert trainer.fleet.learner.ranks and len(trainer.fleet.learner.ranks) == 2
        assert record["learn/skipped_minibatches"] == 0 and record["learn/samples"] > 0
        if record["step"] == 2:
            ray.kill(trainer.fleet.learner.ranks[1], no_restart=True)  # rank 0 is left waiting in a collective

    with pytest.raises(RunAborted, match="learner actor died at step 3; the last complete checkpoint is step 2"):
        trainer.run(on_step)
    records = Trainer(config, config.run_dir, resume=True).run()
    assert [r["step"] for r in records] == [3]
    assert checkpoint.latest(config.run_dir).step == 3
