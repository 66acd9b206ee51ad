"""The truncated importance weight in the learner's update, end to end: with behaviour != proximal log-probs (an
older policy's samples under `schedule.max_staleness: 1`, or at staleness 0 the engine's numerics against the
learner's), every optimizer step's gradient is that of the surrogate with each token weighted by
min(proximal / behaviour, is_cap), worked out by hand from the chosen weights and an independent forward pass. The
learner applies it at every staleness (it has no switch); the check fails when the weight is dropped or when the
learner does not hand it the behaviour log-probs."""

from __future__ import annotations

import math
import random
from pathlib import Path

import pytest
import torch

from strat.algorithm import losses
from strat.algorithm.losses import LossConfig
from strat.algorithm.records import TrainSample
from strat.train import learner as learner_module
from strat.train.learner import LearnerSettings, PolicyLearner

LOSS = LossConfig(clip_eps_low=0.2, clip_eps_high=0.28, is_cap=2.0)
# log(proximal / behaviour) per token, cycled over the batch's tokens: 3 (truncated at the cap), 1/2, 3/2, 1/4, 1.
LOG_WEIGHTS = [math.log(3.0), math.log(0.5), math.log(1.5), math.log(0.25), 0.0]


def _tokens(count: int, rng: random.Random) -> tuple[int, ...]:
    return tuple(rng.randrange(5, 200) for _ in range(count))


def _logprobs(model: torch.nn.Module, sample: TrainSample, temperature: float) -> torch.Tensor:
    """The response tokens' log-probs under the temperature-scaled model, one unpadded sequence, with gradient."""
    ids = torch.tensor([sample.prompt_token_ids + sample.response_token_ids])
    start = len(sample.prompt_token_ids)
    logits = model(input_ids=ids).logits[0, start - 1 : -1].double() / temperature
    return torch.log_softmax(logits, dim=-1).gather(-1, torch.tensor(sample.response_token_ids)[:, None])[:, 0]


def _samples(model: torch.nn.Module, temperature: float) -> tuple[list[TrainSample], list[list[float]]]:
    """Six samples whose behaviour log-probs are the model's own minus LOG_WEIGHTS, and each token's weight
    worked out by hand: min(exp(log weight), is_cap)."""
    rng = random.Random(4)
    samples, weights, index = [], [], 0
    for i in range(6):
        sample = TrainSample(f"g{i}", f"e{i}", "player_0", 0, _tokens(rng.randint(4, 8), rng),
                             _tokens(rng.randint(2, 5), rng), (), [1.2, -0.8, 0.5][i % 3])
        with torch.no_grad():
            proximal = _logprobs(model, sample, temperature).tolist()
        logs = [LOG_WEIGHTS[(index + t) % len(LOG_WEIGHTS)] for t in range(len(proximal))]
        index += len(proximal)
        behaviour = tuple(p - w for p, w in zip(proximal, logs, strict=True))
        samples.append(TrainSample(sample.group_id, sample.episode_id, sample.agent, 0, sample.prompt_token_ids,
                                   sample.response_token_ids, behaviour, sample.advantage))
        weights.append([min(math.exp(w), LOSS.is_cap) for w in logs])
    return samples, weights


def _step_gradients(learner: PolicyLearner, samples: list[TrainSample], weights: list[list[float]]
                    ) -> tuple[list[float], list[list[float]]]:
    """Runs one update of two epochs (one optimizer step each) and returns, per step, the largest gradient error
    against the hand-worked gradient relative to its largest entry, and the step's ratios current/proximal.

    The hand-worked gradient at the step's weights: the token-mean surrogate's derivative in each token's
    log-prob is -A w r / N (0 where the clip holds: r > 1 + eps_high with A > 0, r < 1 - eps_low with A < 0), with
    w the hand-worked weight and r = exp(current - proximal), proximal being the weights at the update's start;
    the gradient in the parameters is then sum_t c_t d(log-prob_t) of an independent unpadded forward."""
    temperature = learner.settings.temperature
    params = learner._trainable()
    with torch.no_grad():
        proximal = [_logprobs(learner.model, s, temperature) for s in samples]
    tokens = sum(len(s.response_token_ids) for s in samples)
    errors, scales, ratios = [], [], []

    def check(optimizer, args, kwargs) -> None:
        current = [_logprobs(learner.model, s, temperature) for s in samples]
        surrogate = torch.zeros((), dtype=torch.float64)
        step_ratios = []
        for sample, logprobs, old, weight in zip(samples, current, proximal, weights, strict=True):
            advantage = sample.advantage
            for t in range(len(weight)):
                ratio = math.exp(float(logprobs[t].detach() - old[t]))
                step_ratios.append(ratio)
                clipped = (advantage > 0 and ratio > 1 + LOSS.clip_eps_high) or (
                    advantage < 0 and ratio < 1 - LOSS.clip_eps_low)
                coefficient = 0.0 if clipped else -advantage * weight[t] * ratio / tokens
                surrogate = surrogate + coefficient * logprobs[t]
        expected = torch.autograd.grad(surrogate, params)
        scale = max(float(e.abs().max()) for e in expected)
        errors.append(max(float((p.grad.double() - e).abs().max()) for p, e in zip(params, expected, strict=True)))
        scales.append(scale)
        ratios.append(step_ratios)

    learner.optimizer.register_step_pre_hook(check)
    learner.update(samples)
    return [e / max(s, 1e-30) for e, s in zip(errors, scales, strict=True)], ratios


def _learner(model_dir: Path) -> PolicyLearner:
    # No gradient clipping (the check compares the raw gradient); an lr at which the second epoch's ratios move
    # off 1 (0.37 to 3.0 here), some past the clip and some not.
    settings = LearnerSettings(lr=4e-4, epochs=2, micro_batch=4, grad_clip=1e9, temperature=0.9, loss=LOSS,
                               seed=1)
    return PolicyLearner(model_dir, settings)


def test_every_step_follows_the_hand_worked_weighted_gradient(tiny_model_dir: Path) -> None:
    learner = _learner(tiny_model_dir)
    samples, weights = _samples(learner.model, learner.settings.temperature)
    relative, ratios = _step_gradients(learner, samples, weights)
    assert len(relative) == 2
    assert max(relative) < 1e-4, relative
    # The first step is at the proximal weights (ratio 1); the second has moved: ratios off 1, some clipped.
    assert ratios[0] == pytest.approx([1.0] * len(ratios[0]), abs=1e-4)
    assert max(abs(r - 1) for r in ratios[1]) > 0.05
    clipped = [r for r in ratios[1] if r > 1 + LOSS.clip_eps_high or r < 1 - LOSS.clip_eps_low]
    assert 0 < len(clipped) < len(ratios[1])


@pytest.mark.parametrize("broken", ["weight dropped", "behaviour not passed"])
def test_without_the_weight_the_check_fails(tiny_model_dir: Path, monkeypatch: pytest.MonkeyPatch, broken: str) -> None:
    if broken == "weight dropped":
        monkeypatch.setattr(losses, "truncated_is_weight", lambda prox, behaviour, mask, cap: torch.ones_like(prox))
    else:
        def without_behaviour(*args, **kwargs):
            return losses.policy_loss(*args, **{**kwargs, "behaviour_logprobs": None})

        monkeypatch.setattr(learner_module, "policy_loss", without_behaviour)
    learner = _learner(tiny_model_dir)
    samples, weights = _samples(learner.model, learner.settings.temperature)
    relative, _ = _step_gradients(learner, samples, weights)
    # The first step is taken at the same weights as in the test above.
    assert relative[0] > 0.05, relative
