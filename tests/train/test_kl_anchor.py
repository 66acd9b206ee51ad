"""The KL penalty's moving anchor (`algorithm.kl_reference: snapshot`): the reference takes the snapshot opponent's
weights at each refresh and after a resume (with or without a snapshot opponent), the `initial` reference never
moves, and an anchor without a KL penalty is refused."""

from __future__ import annotations

import random
from pathlib import Path

import pytest
import torch

from strat.algorithm.losses import LossConfig
from strat.algorithm.records import TrainBatch, TrainSample
from strat.config_loading import load_config
from strat.errors import ConfigError
from strat.model.build import LoraSettings
from strat.train.learner import LearnerSettings, PolicyLearner
from strat.train.sequences import sequence_logprobs
from strat.train.trainer import Trainer

KUHN = "configs/kuhn_poker_tiny.yaml"


def _samples() -> list[TrainSample]:
    rng = random.Random(1)
    return [TrainSample(f"g{i}", f"e{i}", "player_0", 0, tuple(rng.randrange(5, 200) for _ in range(6)),
                        tuple(rng.randrange(5, 200) for _ in range(4)), (-1.0,) * 4, [2.0, -2.0][i % 2])
            for i in range(4)]


def _learner(model_dir: Path, reference: str, lora: LoraSettings | None = None) -> PolicyLearner:
    return PolicyLearner(model_dir, LearnerSettings(lr=5e-2, kl_reference=reference, lora=lora,
                                                    loss=LossConfig(kl_type="forward", kl_coef=0.1)))


def _logprobs(model: torch.nn.Module, batch: TrainBatch) -> torch.Tensor:
    with torch.no_grad():
        return sequence_logprobs(model, batch, 1.0)


def test_the_snapshot_anchor_moves_with_the_snapshot_and_the_initial_one_stays(tiny_model_dir: Path) -> None:
    batch = TrainBatch.collate(_samples(), 0)
    for reference in ("initial", "snapshot"):
        learner = _learner(tiny_model_dir, reference)
        start = _logprobs(learner.model, batch)
        for _ in range(3):
            learner.update(_samples())
        drifted = _logprobs(learner.model, batch)
        assert (drifted - start).abs().max() > 1e-2, "the policy moved"
        torch.testing.assert_close(learner._reference_logprobs(batch), start)  # before any snapshot: the start
        learner.take_snapshot()
        expected = drifted if reference == "snapshot" else start
        torch.testing.assert_close(learner._reference_logprobs(batch), expected, atol=1e-5, rtol=1e-5)
        if reference == "snapshot":  # right after the refresh the penalty is 0 on the first optimizer step
            assert learner.update(_samples())["loss/kl"] == pytest.approx(0.0, abs=1e-6)


def test_with_lora_the_anchor_is_the_merged_snapshot(tiny_model_dir: Path) -> None:
    # With LoRA and kl_reference=initial the reference is the base model, adapters off; with snapshot a full copy
    # that takes the merged weights at each refresh.
    batch = TrainBatch.collate(_samples(), 0)
    learner = _learner(tiny_model_dir, "snapshot", LoraSettings(r=4, alpha=8))
    assert learner.reference is not None
    start = _logprobs(learner.model, batch)
    for _ in range(3):
        learner.update(_samples())
    assert (_logprobs(learner.model, batch) - start).abs().max() > 1e-2, "the adapters moved the policy"
    learner.take_snapshot()
    torch.testing.assert_close(learner._reference_logprobs(batch), _logprobs(learner.model, batch), atol=1e-5,
                               rtol=1e-5)


def test_a_resumed_learner_anchors_on_the_saved_snapshot(tiny_model_dir: Path, tmp_path: Path) -> None:
    batch = TrainBatch.collate(_samples(), 0)
    first = _learner(tiny_model_dir, "snapshot")
    for _ in range(2):
        first.update(_samples())
    first.take_snapshot()
    anchored = _logprobs(first.model, batch)
    first.update(_samples())  # the policy moves on past its snapshot before the checkpoint
    ckpt = first.save(tmp_path, 3, {}, keep=1)
    resumed = _learner(tiny_model_dir, "snapshot")
    resumed.load(ckpt)
    torch.testing.assert_close(resumed._reference_logprobs(batch), anchored, atol=1e-5, rtol=1e-5)


def test_an_anchor_without_a_kl_penalty_is_refused() -> None:
    with pytest.raises(ConfigError, match="kl_reference='snapshot' needs kl_type forward or reverse"):
        load_config(KUHN, ["algorithm.kl_type=none", "algorithm.kl_coef=0", "algorithm.kl_reference=snapshot"])
    # The default config's own anchor, and one on a mix with no snapshot opponent, load.
    assert load_config(KUHN).algorithm.kl_reference == "snapshot"
    load_config(KUHN, ["game.opponents=[{kind: self, weight: 0.8}, {kind: scripted, name: random, weight: 0.2}]"])


class _LearnerGroup:
    """The `LearnerGroup` call `_maybe_snapshot` makes; the "ref" it returns is the call's name."""

    def __init__(self, calls: list[str]) -> None:
        self.calls = calls

    def refresh_anchor(self) -> str:
        self.calls.append("anchor")
        return "anchor"


class _Fleet:
    """What `Trainer._maybe_snapshot` touches: the snapshot agent (or none), the sync and the learner."""

    def __init__(self, snapshot: bool) -> None:
        self.calls: list[str] = []
        self.snapshot = object() if snapshot else None
        self.sync = type("Sync", (), {"refresh_snapshot": lambda _, step: self.calls.append(f"snapshot@{step}")})()
        self.learner = _LearnerGroup(self.calls)

    def learner_get(self, ref: str) -> str:
        return ref


@pytest.mark.parametrize(("overrides", "snapshot", "expected"), [
    # No snapshot opponent: the anchor alone moves, every snapshot_every steps.
    (["algorithm.kl_type=forward", "algorithm.kl_coef=0.1", "algorithm.kl_reference=snapshot"], False,
     ["anchor", "anchor"]),
    # With one, the snapshot refresh moves both (take_snapshot), and nothing else is called.
    (["algorithm.kl_type=forward", "algorithm.kl_coef=0.1", "algorithm.kl_reference=snapshot"], True,
     ["snapshot@5", "snapshot@10"]),
    # An anchor on the initial weights never moves.
    (["algorithm.kl_type=reverse", "algorithm.kl_coef=0.1", "algorithm.kl_reference=initial"], False, []),
])
def test_the_trainer_moves_the_anchor_every_snapshot_interval(overrides: list[str], snapshot: bool,
                                                             expected: list[str], tmp_path: Path) -> None:
    config = load_config(KUHN, [*overrides, "schedule.snapshot_every=5", f"run.output_dir={tmp_path}"])
    trainer = Trainer(config, config.run_dir)
    trainer.fleet = _Fleet(snapshot)
    for step in range(1, 12):
        trainer._maybe_snapshot(step)
    assert trainer.fleet.calls == expected
