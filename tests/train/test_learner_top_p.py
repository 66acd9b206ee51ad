"""Log-probs with top_p < 1: the learner scores sampled tokens under the nucleus-truncated distribution the engine
sampled them from, so that its log-probs equal the hf engine's; top_p = 1 is the plain temperature-scaled softmax."""

from __future__ import annotations

import math
from pathlib import Path

import pytest
import torch

import games
from strat.algorithm.losses import token_logprobs
from strat.algorithm.reasoning import build_messages
from strat.algorithm.records import TrainBatch, TrainSample
from strat.config_loading import load_config
from strat.engines import SamplingParams, build_engine
from strat.engines.sampling import sampled_token_logprobs, sampling_logprobs
from strat.train.learner import LearnerSettings, PolicyLearner
from strat.train.sequences import sequence_logprobs
from strat.train.settings import learner_settings

TEMPERATURE, TOP_P = 0.8, 0.7


def test_sampled_token_logprobs_by_hand() -> None:
    # Probabilities 0.5, 0.3, 0.15, 0.05: the nucleus of mass 0.75 is the first two tokens (0.15 + 0.05 <= 0.25
    # is dropped), renormalised over 0.8.
    logits = torch.log(torch.tensor([0.5, 0.3, 0.15, 0.05], dtype=torch.float64)).expand(1, 3, 4)
    ids = torch.tensor([[0, 1, 2]])
    values = sampled_token_logprobs(logits, ids, temperature=1.0, top_p=0.75)
    # A token outside the nucleus (2) is scored with itself added to it: 0.15 / 0.95, finite.
    assert values[0].tolist() == pytest.approx([math.log(0.5 / 0.8), math.log(0.3 / 0.8), math.log(0.15 / 0.95)])
    # The engine's distribution agrees on the nucleus' tokens and drops the others.
    engine = sampling_logprobs(logits[0, :1], temperature=1.0, top_p=0.75)[0]
    assert engine[:2].tolist() == pytest.approx(values[0, :2].tolist())
    assert engine[2:].tolist() == [-math.inf, -math.inf]
    # At temperature 2 the scaled probabilities are proportional to sqrt(p): the nucleus of 0.75 keeps three.
    roots = [math.sqrt(p) for p in (0.5, 0.3, 0.15, 0.05)]
    assert sum(roots[2:]) / sum(roots) > 0.25 > roots[3] / sum(roots)
    at_two = sampled_token_logprobs(logits, ids, temperature=2.0, top_p=0.75)
    assert at_two[0].tolist() == pytest.approx([math.log(r / sum(roots[:3])) for r in roots[:3]])


def test_gradient_flows_to_the_nucleus_only() -> None:
    logits = torch.log(torch.tensor([[[0.5, 0.3, 0.15, 0.05]]])).requires_grad_(True)
    sampled_token_logprobs(logits, torch.tensor([[1]]), temperature=1.0, top_p=0.75).sum().backward()
    # d log(p_1 / (p_0 + p_1)) / d logit = (onehot_1 - p_nucleus) on the nucleus, 0 elsewhere.
    assert logits.grad[0, 0].tolist() == pytest.approx([-0.5 / 0.8, 1 - 0.3 / 0.8, 0.0, 0.0])


@pytest.fixture(scope="module")
def samples(tiny_model_dir: Path) -> dict[float, list[TrainSample]]:
    """hf engine samples from Kuhn poker prompts (the random-weight tiny model: a broad distribution, which
    top_p truncates hard) at top_p 0.7 and 1, with the engine's log-probs as behaviour log-probs."""
    engine = build_engine("hf", tiny_model_dir)
    env = games.make("kuhn_poker")
    prompts = []
    for seed in range(3):
        env.reset(seed=seed)
        prompts.append(engine.encode_chat(build_messages(env, env.agent_selection, 2)))
    out = {}
    for top_p in (TOP_P, 1.0):
        params = SamplingParams(max_tokens=12, temperature=TEMPERATURE, top_p=top_p, seed=5)
        generations = engine.generate([p for p in prompts for _ in range(2)], params)
        out[top_p] = [TrainSample(f"g{i}", f"e{i}", "player_0", 0, g.prompt_token_ids, g.token_ids, g.logprobs, 1.0)
                      for i, g in enumerate(generations)]
    engine.close()
    return out


def _learner_logprobs(learner: PolicyLearner, samples: list[TrainSample], top_p: float
                      ) -> tuple[torch.Tensor, TrainBatch]:
    batch = TrainBatch.collate(samples, learner.pad_id)
    with torch.no_grad():
        return sequence_logprobs(learner.model.eval(), batch, TEMPERATURE, top_p=top_p), batch


def test_learner_logprobs_equal_the_engines_with_top_p(tiny_model_dir: Path, samples) -> None:
    learner = PolicyLearner(tiny_model_dir, LearnerSettings(temperature=TEMPERATURE, top_p=TOP_P))
    ours, batch = _learner_logprobs(learner, samples[TOP_P], TOP_P)
    mask = batch.response_mask
    assert (ours - batch.behaviour_logprobs)[mask].abs().max().item() < 1e-4
    # Not vacuous: renormalising over the nucleus raises every log-prob by -log(its mass), about -log 0.7 = 0.36 on
    # this near-uniform model; the untruncated ones are that much lower.
    plain, _ = _learner_logprobs(learner, samples[TOP_P], 1.0)
    assert (batch.behaviour_logprobs - plain)[mask].min().item() > 0.3
    # The update itself: its proximal log-probs (the training forward's) against the engine's.
    figures = learner.update(samples[TOP_P])
    assert figures["logprob/engine_learner_gap"] < 1e-5
    untruncated = PolicyLearner(tiny_model_dir, LearnerSettings(temperature=TEMPERATURE))
    assert untruncated.update(samples[TOP_P])["logprob/engine_learner_gap"] > 0.3


def test_top_p_one_is_the_plain_softmax_and_the_engines(tiny_model_dir: Path, samples) -> None:
    learner = PolicyLearner(tiny_model_dir, LearnerSettings(temperature=TEMPERATURE))
    ours, batch = _learner_logprobs(learner, samples[1.0], 1.0)
    mask = batch.response_mask
    assert (ours - batch.behaviour_logprobs)[mask].abs().max().item() < 1e-4
    with torch.no_grad():
        logits = learner.model(input_ids=batch.input_ids, attention_mask=batch.attention_mask.long(),
                               position_ids=(batch.attention_mask.long().cumsum(-1) - 1).clamp(min=0)).logits
    width = batch.response_ids.shape[1]
    plain = token_logprobs(logits[:, -width - 1 : -1], batch.response_ids, TEMPERATURE)
    assert torch.equal(ours[mask], plain[mask])


def test_the_config_hands_top_p_to_the_learner() -> None:
    assert learner_settings(load_config(None, ["reasoning.top_p=0.9"])).top_p == 0.9
    assert learner_settings(load_config(None, [])).top_p == 1.0
