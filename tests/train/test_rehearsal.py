"""DPH-RL rehearsal in the learner: the term pulls the initial policy's samples back after the policy drifted, its
logged value is the paper's divergence by hand, and the stored samples come back unchanged or are refused."""

import math
import random
from dataclasses import replace
from pathlib import Path

import pytest
import torch

from strat.algorithm.losses import LossConfig
from strat.algorithm.records import Episode, TrainBatch, TrainSample, Turn
from strat.errors import ConfigError
from strat.train import rehearsal
from strat.train.learner import LearnerSettings, PolicyLearner
from strat.train.sequences import sequence_logprobs


def _samples(count: int, seed: int, advantage: float = 0.0) -> list[TrainSample]:
    rng = random.Random(seed)
    samples = []
    for i in range(count):
        prompt = tuple(rng.randrange(5, 200) for _ in range(rng.randint(4, 8)))
        response = tuple(rng.randrange(5, 200) for _ in range(rng.randint(2, 5)))
        samples.append(TrainSample(f"g{i}", f"e{seed}-{i}", "player_0", 0, prompt, response,
                                   (-5.0,) * len(response), advantage))
    return samples


def _logprobs(learner: PolicyLearner, samples: list[TrainSample]) -> torch.Tensor:
    """Each sample's summed response log-prob under the learner's weights, one sample at a time."""
    learner.model.eval()
    with torch.no_grad():
        out = torch.stack([sequence_logprobs(learner.model, TrainBatch.collate([s], learner.pad_id), 1.0).sum()
                           for s in samples])
    learner.model.train()
    return out


@pytest.fixture(scope="module")
def drifted(tiny_model_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, list[TrainSample]]:
    """Rehearsal samples scored by the initial model, and a model that has since pushed them down."""
    initial = PolicyLearner(tiny_model_dir, LearnerSettings(lr=1e-2, micro_batch=4))
    stored = initial.set_rehearsal(_samples(6, seed=1), score=True)
    for _ in range(3):
        initial.update([replace(s, advantage=-1.0) for s in stored])
    path = tmp_path_factory.mktemp("drifted")
    initial.export_weights_dir(path)
    initial.tokenizer.save_pretrained(path)
    return path, stored


@pytest.mark.parametrize("divergence", ["forward_kl", "js", "none"])
def test_rehearsal_pulls_the_drifted_policy_back(drifted: tuple[Path, list[TrainSample]], divergence: str) -> None:
    path, stored = drifted
    settings = LearnerSettings(lr=1e-2, micro_batch=4, rehearsal_batch=6,
                               loss=LossConfig(dph_divergence=divergence, dph_eta=1.0))
    learner = PolicyLearner(path, settings)
    initial = torch.tensor([sum(s.behaviour_logprobs) for s in stored])
    before = _logprobs(learner, stored)
    assert torch.all(before < initial - 0.5)  # the policy drifted away from the stored samples
    if divergence != "none":
        learner.set_rehearsal(stored, score=False)
    metrics = learner.update(_samples(4, seed=2, advantage=0.0))  # no reward signal at all
    after = _logprobs(learner, stored)
    if divergence == "none":
        assert "loss/dph" not in metrics
        assert torch.all((after - before).abs() < 0.01)  # only AdamW's weight decay moves the weights
    else:
        assert metrics["loss/dph"] > 0 and metrics["time/dph_s"] > 0
        assert torch.all(after > before + 0.1), (before, after)


@pytest.mark.parametrize("divergence", ["forward_kl", "js"])
def test_logged_term_is_the_divergence_by_hand(tiny_model_dir: Path, divergence: str) -> None:
    eta = 0.3
    settings = LearnerSettings(micro_batch=2, rehearsal_batch=5, loss=LossConfig(dph_divergence=divergence, dph_eta=eta))
    learner = PolicyLearner(tiny_model_dir, settings)
    rng = random.Random(4)
    stored = [replace(s, behaviour_logprobs=tuple(rng.uniform(-7.0, -3.0) for _ in s.response_token_ids))
              for s in _samples(5, seed=3)]
    learner.set_rehearsal(stored, score=False)
    learner.model.eval()
    with torch.no_grad():
        current = [sequence_logprobs(learner.model, TrainBatch.collate([s], learner.pad_id), 1.0)[0].tolist()
                   for s in stored]
    learner.model.train()
    terms = []
    for sample, row in zip(stored, current, strict=True):
        for initial, now in zip(sample.behaviour_logprobs, row, strict=True):
            u = math.exp(now - initial)
            if divergence == "forward_kl":
                terms.append(u - math.log(u) - 1)
            else:
                terms.append(u * math.log(u) - (u + 1) * math.log((u + 1) / 2))
    expected = eta * sum(terms) / len(terms)  # token_mean over the whole rehearsal batch
    assert all(0 < t < 10 for t in terms)  # inside the generator's clamp: the formula applies as written
    metrics = learner.update(_samples(3, seed=5, advantage=0.0))
    assert metrics["loss/dph"] == pytest.approx(expected, rel=1e-4)


def test_update_refuses_dph_without_rehearsal_samples(tiny_model_dir: Path) -> None:
    learner = PolicyLearner(tiny_model_dir, LearnerSettings(loss=LossConfig(dph_divergence="js")))
    with pytest.raises(ValueError, match="rehearsal samples"):
        learner.update(_samples(2, seed=0))


def test_draws_are_reproducible_and_distinct() -> None:
    samples = _samples(10, seed=0)
    batch = rehearsal.draw_batch(samples, 4, seed=1, update=3, step=0)
    assert batch == rehearsal.draw_batch(samples, 4, seed=1, update=3, step=0)
    assert len({s.episode_id for s in batch}) == 4
    assert batch != rehearsal.draw_batch(samples, 4, seed=1, update=4, step=0)
    assert rehearsal.draw_batch(samples[:3], 4, seed=1, update=0, step=0) != []
    assert len(rehearsal.draw_batch(samples[:3], 4, seed=1, update=0, step=0)) == 3


def test_episode_samples_are_ego_turns_with_a_response() -> None:
    def turn(agent: str, index: int, tokens: tuple[int, ...]) -> Turn:
        return Turn("e", agent, index, 0, "pass", prompt_token_ids=(1, 2), response_token_ids=tokens,
                    behaviour_logprobs=(-1.0,) * len(tokens))

    episode = Episode("e", "g", 0, "kuhn_poker", ("player_0", "player_1"), ("player_0",),
                      (turn("player_0", 0, (5, 6)), turn("player_1", 1, (7,)), turn("player_0", 2, ())),
                      {"player_0": 1.0, "player_1": -1.0})
    samples = rehearsal.episode_samples([episode, episode], count=3)
    assert [(s.agent, s.turn_index, s.response_token_ids, s.advantage) for s in samples] == [
        ("player_0", 0, (5, 6), 0.0), ("player_0", 0, (5, 6), 0.0)]
    assert len(rehearsal.episode_samples([episode, episode], count=1)) == 1


def test_stored_samples_come_back_unchanged_and_a_changed_file_is_refused(tmp_path: Path) -> None:
    rng = random.Random(0)
    samples = [replace(s, behaviour_logprobs=tuple(float(torch.tensor(rng.uniform(-9, 0), dtype=torch.float32))
                                                   for _ in s.response_token_ids))
               for s in _samples(7, seed=6)]
    record = rehearsal.save_rehearsal(tmp_path, samples)
    assert record.samples == 7
    loaded = rehearsal.load_rehearsal(tmp_path)
    assert [(s.prompt_token_ids, s.response_token_ids, s.behaviour_logprobs) for s in loaded] == [
        (s.prompt_token_ids, s.response_token_ids, s.behaviour_logprobs) for s in samples]
    path = tmp_path / rehearsal.SAMPLES_FILE
    data = bytearray(path.read_bytes())
    data[-1] ^= 0x01  # one log-prob's last byte
    path.write_bytes(bytes(data))
    with pytest.raises(ConfigError, match="changed since the run's start"):
        rehearsal.load_rehearsal(tmp_path)
    with pytest.raises(ConfigError, match="no rehearsal samples"):
        rehearsal.load_rehearsal(tmp_path / "elsewhere")
