"""A non-finite loss or gradient skips its own optimizer step (one minibatch) and the run goes on; the loss figures
are those of the steps taken; too many updates in a row with a skipped step stop the run."""

import math
from pathlib import Path

import pytest
import torch

from strat import metrics
from strat.algorithm.records import TrainBatch, TrainSample
from strat.errors import RunAborted
from strat.faults import injected_steps
from strat.train.learner import LearnerSettings, PolicyLearner
from strat.train.trainer import Trainer

from .conftest import small_config


def _samples(advantage: float) -> list[TrainSample]:
    return [
        TrainSample("g", f"e{i}", "player_0", 0, (1, 2, 3, 4), (5 + i, 6, 7), (-1.0, -1.2, -0.7), advantage)
        for i in range(4)
    ]


def test_fault_spec_parsing() -> None:
    assert injected_steps("nonfinite", "nonfinite:2,3;other:1") == {2, 3}
    assert injected_steps("nonfinite", "") == frozenset()


@pytest.mark.parametrize("bad", [float("nan"), float("inf")])
def test_learner_skips_a_non_finite_update_and_keeps_its_weights(tiny_model_dir: Path, bad: float) -> None:
    learner = PolicyLearner(tiny_model_dir, LearnerSettings(lr=0.05))
    before = {k: v.clone() for k, v in learner.model.state_dict().items()}
    out = learner.update(_samples(bad))
    assert out["learn/skipped_minibatches"] == 1.0
    after = learner.model.state_dict()
    assert all(torch.equal(before[k], after[k]) for k in before)
    assert not learner.optimizer.state, "a skipped update must not touch the optimizer's moments"
    good = learner.update(_samples(1.0))
    assert good["learn/skipped_minibatches"] == 0.0 and math.isfinite(good["loss/policy"])
    assert any(not torch.equal(before[k], v) for k, v in learner.model.state_dict().items())


def _own_samples(learner: PolicyLearner, advantages: list[float]) -> list[TrainSample]:
    """Samples of 3 response tokens whose behaviour log-probs are the learner's own (importance weight 1), so that at
    the update's start (ratio 1) a step's token-mean policy loss is minus the mean advantage over its tokens."""
    samples = [TrainSample("g", f"e{i}", "player_0", 0, (1, 2, 3, 4), (5 + i, 6, 7), (0.0, 0.0, 0.0), advantage)
               for i, advantage in enumerate(advantages)]
    own = learner._frozen_logprobs(learner.model, TrainBatch.collate(samples, learner.pad_id))
    return [TrainSample(s.group_id, s.episode_id, s.agent, 0, s.prompt_token_ids, s.response_token_ids,
                        tuple(own[row, :3].tolist()), s.advantage) for row, s in enumerate(samples)]


@pytest.mark.parametrize("bad_step", [0, 1])
def test_a_non_finite_minibatch_skips_itself_alone(tiny_model_dir: Path, bad_step: int) -> None:
    # Two minibatches of two samples; the bad one's advantages are inf. The other minibatch steps, at the update's
    # start weights either way (a skipped step leaves them): its ratio is 1 and its weight 1, so its policy loss is
    # -(a + b) / 2 by hand, and the update's figures are that step's alone.
    learner = PolicyLearner(tiny_model_dir, LearnerSettings(lr=0.05, minibatches=2, grad_clip=1e9))
    samples = _own_samples(learner, [1.0, 0.5, -0.25, 2.0])
    parts = learner.minibatches(samples, 0)
    assert [len(p) for p in parts] == [2, 2]
    bad = {s.episode_id for s in parts[bad_step]}
    samples = [TrainSample(s.group_id, s.episode_id, s.agent, 0, s.prompt_token_ids, s.response_token_ids,
                           s.behaviour_logprobs, math.inf if s.episode_id in bad else s.advantage) for s in samples]
    good = [s for s in samples if s.episode_id not in bad]
    before = {k: v.clone() for k, v in learner.model.state_dict().items()}
    out = learner.update(samples)
    assert out["learn/skipped_minibatches"] == 1.0
    assert out["loss/policy"] == pytest.approx(-(good[0].advantage + good[1].advantage) / 2, rel=1e-5)
    assert out["loss/clip_frac"] == 0.0
    assert out["loss/ratio_mean"] == pytest.approx(1.0, abs=1e-5)
    assert math.isfinite(out["learn/grad_norm"])
    # The good minibatch stepped: the weights moved, and AdamW took one step.
    assert any(not torch.equal(before[k], v) for k, v in learner.model.state_dict().items())
    assert {int(state["step"]) for state in learner.optimizer.state.values()} == {1}


def test_an_update_with_every_minibatch_skipped_reports_no_loss(tiny_model_dir: Path) -> None:
    learner = PolicyLearner(tiny_model_dir, LearnerSettings(lr=0.05, minibatches=2))
    out = learner.update(_samples(float("nan")))
    assert out["learn/skipped_minibatches"] == 2.0
    assert math.isnan(out["loss/policy"])  # a mean over no step: written as null in metrics.jsonl
    assert "learn/grad_norm" not in out


@pytest.mark.slow
def test_run_skips_and_continues_then_stops_after_too_many(
    local_ray, tmp_path: Path, tiny_model_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # One run (each run costs an actor start-up): step 2's update is skipped and the run goes on, steps 4 and 5 in a
    # row stop it.
    monkeypatch.setenv("STRAT_INJECT_FAULTS", "nonfinite:2,4,5")
    config = small_config(tmp_path, tiny_model_dir, "schedule.steps=6", "schedule.checkpoint_every=1",
                          "schedule.max_nonfinite_updates=2", "algorithm.groups_per_step=2")
    with pytest.raises(RunAborted, match=r"2 updates in a row had a non-finite loss or gradient \(up to step 5"):
        Trainer(config, config.run_dir).run()
    logged = metrics.read(config.run_dir)
    assert [r["step"] for r in logged] == [1, 2, 3, 4, 5], "the skipped steps are still logged"
    # learn/skipped_minibatches counts optimizer steps: the default config takes two per update (algorithm.minibatches=2)
    assert config.algorithm.minibatches == 2
    assert [r["learn/skipped_minibatches"] for r in logged] == [0.0, 2.0, 0.0, 2.0, 2.0]
