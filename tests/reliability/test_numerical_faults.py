"""A non-finite loss or gradient skips the update and the run goes on; too many in a row stop it."""

import math
from pathlib import Path

import pytest
import torch

from strat.algorithm.records import TrainSample
from strat.errors import RunAborted
from strat.train import metrics
from strat.train.faults import injected_steps
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
    assert out["learn/skipped"] == 1.0
    after = learner.model.state_dict()
    assert all(torch.equal(before[k], after[k]) for k in before)
    assert not learner.optimizer.state, "a skipped update must not touch the optimizer's moments"
    good = learner.update(_samples(1.0))
    assert good["learn/skipped"] == 0.0 and math.isfinite(good["loss/policy"])
    assert any(not torch.equal(before[k], v) for k, v in learner.model.state_dict().items())


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
    # learn/skipped counts optimizer steps: the default config takes two per update (algorithm.minibatches=2)
    assert config.algorithm.minibatches == 2
    assert [r["learn/skipped"] for r in logged] == [0.0, 2.0, 0.0, 2.0, 2.0]
