"""The policy update's learning-rate schedule (`algorithm.lr_schedule`): the factor by hand, the rate each of the
learner's updates really uses, and a resumed run that continues the curve and takes a changed `algorithm.lr`."""

from __future__ import annotations

import math
import random
from pathlib import Path

import pytest

from strat.algorithm.records import TrainSample
from strat.config_loading import load_config
from strat.train.learner import LearnerSettings, PolicyLearner
from strat.train.lr_schedule import lr_factor
from strat.train.settings import learner_settings


def test_factors_by_hand() -> None:
    assert [lr_factor("constant", u, 5, 0.1) for u in range(5)] == [1.0] * 5
    # linear over 5 updates to 0.2: steps of 0.2 from 1.0
    assert [round(lr_factor("linear", u, 5, 0.2), 12) for u in range(5)] == [1.0, 0.8, 0.6, 0.4, 0.2]
    # cosine to 0: 1, (1 + cos(pi/4)) / 2, 1/2, (1 - cos(pi/4)) / 2, 0
    half = math.cos(math.pi / 4)
    assert [lr_factor("cosine", u, 5, 0.0) for u in range(5)] == pytest.approx([1.0, (1 + half) / 2, 0.5,
                                                                               (1 - half) / 2, 0.0], abs=1e-12)
    # past the last update it stays at the final fraction; a one-update run is its first update
    assert lr_factor("linear", 9, 5, 0.2) == pytest.approx(0.2)
    assert lr_factor("cosine", 0, 1, 0.0) == 1.0


@pytest.mark.parametrize(("args", "message"), [
    (("step", 0, 5, 0.1), "unknown learning-rate schedule"),
    (("linear", -1, 5, 0.1), "update must be >= 0"),
    (("linear", 0, 0, 0.1), "total >= 1"),
    (("linear", 0, 5, 1.5), "final must lie in"),
])
def test_bad_arguments_are_refused(args: tuple, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        lr_factor(*args)


def test_config_carries_the_schedule_to_the_learner() -> None:
    config = load_config("configs/kuhn_poker_tiny.yaml", ["algorithm.lr_schedule=cosine", "algorithm.lr_final=0.25",
                                                          "schedule.steps=40"])
    settings = learner_settings(config)
    assert (settings.lr_schedule, settings.lr_final, settings.total_updates) == ("cosine", 0.25, 40)
    with pytest.raises(Exception, match="lr_schedule"):
        load_config("configs/kuhn_poker_tiny.yaml", ["algorithm.lr_schedule=step"])


def _samples() -> list[TrainSample]:
    rng = random.Random(0)
    return [TrainSample(f"g{i}", f"e{i}", "player_0", 0, tuple(rng.randrange(5, 200) for _ in range(6)),
                        tuple(rng.randrange(5, 200) for _ in range(3)), (-1.0, -1.0, -1.0),
                        [1.0, -1.0][i % 2]) for i in range(4)]


def _rates(learner: PolicyLearner, updates: int) -> list[float]:
    rates = []
    for _ in range(updates):
        figures = learner.update(_samples())
        rates.append(figures["learn/lr"])
        assert {group["lr"] for group in learner.optimizer.param_groups} == {figures["learn/lr"]}
    return rates


def test_each_update_uses_the_scheduled_rate(tiny_model_dir: Path) -> None:
    learner = PolicyLearner(tiny_model_dir, LearnerSettings(lr=1e-3, lr_schedule="linear", lr_final=0.0,
                                                            total_updates=3))
    assert _rates(learner, 4) == pytest.approx([1e-3, 5e-4, 0.0, 0.0])
    constant = PolicyLearner(tiny_model_dir, LearnerSettings(lr=1e-3))
    assert _rates(constant, 2) == [1e-3, 1e-3]


def test_a_resumed_learner_continues_the_curve_at_its_own_lr(tiny_model_dir: Path, tmp_path: Path) -> None:
    settings = LearnerSettings(lr=1e-3, lr_schedule="linear", lr_final=0.0, total_updates=5)
    first = PolicyLearner(tiny_model_dir, settings)
    assert _rates(first, 2) == pytest.approx([1e-3, 7.5e-4])
    ckpt = first.save(tmp_path, 2, {}, keep=1)
    # The optimizer state saved its last rate (7.5e-4); the resumed run was given algorithm.lr=2e-3 and
    # continues at update 2 of 5: 2e-3 * (1 - 2/4).
    resumed = PolicyLearner(tiny_model_dir, LearnerSettings(lr=2e-3, lr_schedule="linear", lr_final=0.0,
                                                            total_updates=5))
    resumed.load(ckpt)
    assert _rates(resumed, 1) == pytest.approx([1e-3])
