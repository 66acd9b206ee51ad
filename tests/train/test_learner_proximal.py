"""The learner's proximal log-probs with several minibatches: only the later minibatches' samples get an extra
forward pass, and the update equals one whose proximal log-probs all come from a pass over the whole batch."""

import random
from pathlib import Path

import pytest
import torch

from strat.algorithm.losses import LossConfig, policy_loss
from strat.algorithm.records import TrainBatch, TrainSample
from strat.train.learner import LearnerSettings, PolicyLearner
from strat.train.sequences import sequence_logprobs


def _samples(count: int, seed: int = 0) -> list[TrainSample]:
    """Samples of varied lengths with made-up behaviour log-probs and advantages of both signs."""
    rng = random.Random(seed)
    samples = []
    for i in range(count):
        prompt = tuple(rng.randrange(5, 200) for _ in range(rng.randint(4, 9)))
        response = tuple(rng.randrange(5, 200) for _ in range(rng.randint(2, 6)))
        behaviour = tuple(-rng.uniform(3.0, 7.0) for _ in response)
        samples.append(TrainSample(f"g{i // 2}", f"e{i}", "player_0", 0, prompt, response, behaviour,
                                   rng.choice([-1.5, -0.5, 0.7, 1.2])))
    return samples


def _reference_update(learner: PolicyLearner, samples: list[TrainSample]) -> tuple[list[list[torch.Tensor]], float]:
    """The update written out independently: proximal log-probs of every sample from one no-grad pass over all
    the steps' micro-batches first (the same padding as in training), then the minibatch steps. Returns each
    step's gradients and the mean policy loss."""
    settings = learner.settings
    model = learner.model
    steps = [(part, epoch) for epoch in range(settings.epochs) for part in learner.minibatches(samples, epoch)]
    model.eval()
    proximal = {}
    with torch.no_grad():
        for part, epoch in steps:
            for chunk in learner.micro_batches(part, epoch):
                logprobs = sequence_logprobs(model, TrainBatch.collate(chunk, learner.pad_id), settings.temperature)
                for row, sample in enumerate(chunk):
                    proximal.setdefault(id(sample), logprobs[row, : len(sample.response_token_ids)])
    model.train()
    gradients, loss_sum = [], 0.0
    for part, epoch in steps:
        learner.optimizer.zero_grad(set_to_none=True)
        tokens = sum(len(s.response_token_ids) for s in part)
        for chunk in learner.micro_batches(part, epoch):
            batch = TrainBatch.collate(chunk, learner.pad_id)
            logprobs = sequence_logprobs(model, batch, settings.temperature)
            old = torch.zeros_like(logprobs)
            for row, sample in enumerate(chunk):
                old[row, : len(sample.response_token_ids)] = proximal[id(sample)]
            # The truncated proximal/behaviour weight applies at every staleness.
            out = policy_loss(settings.loss, logprobs, old, batch.advantages, batch.response_mask,
                              behaviour_logprobs=batch.behaviour_logprobs)
            share = int(batch.response_mask.sum()) / tokens
            (out.loss * share).backward()
            loss_sum += float(out.loss.detach()) * share / len(steps)
        torch.nn.utils.clip_grad_norm_(learner._trainable(), settings.grad_clip)
        gradients.append([p.grad.detach().clone() for p in learner._trainable()])
        learner.optimizer.step()
    learner.updates += 1
    return gradients, loss_sum


def _step_gradients(learner: PolicyLearner) -> list[list[torch.Tensor]]:
    """Records the gradients each optimizer step applies."""
    seen: list[list[torch.Tensor]] = []
    learner.optimizer.register_step_pre_hook(
        lambda optimizer, args, kwargs: seen.append([p.grad.detach().clone() for p in learner._trainable()])
    )
    return seen


@pytest.mark.parametrize(("minibatches", "epochs"), [(2, 1), (3, 2)])
def test_update_equals_a_full_proximal_pass(tiny_model_dir: Path, minibatches: int, epochs: int) -> None:
    # lr large enough that a later step's proximal log-probs taken after the first step would change its ratio.
    settings = LearnerSettings(lr=5e-2, micro_batch=2, minibatches=minibatches, epochs=epochs, seed=3,
                               loss=LossConfig(clip_eps_low=0.05, clip_eps_high=0.05))
    samples = _samples(9)
    ours = PolicyLearner(tiny_model_dir, settings)
    reference = PolicyLearner(tiny_model_dir, settings)
    applied = _step_gradients(ours)
    metrics = ours.update(samples)
    expected, loss = _reference_update(reference, samples)
    assert len(applied) == len(expected) == minibatches * epochs
    for step, (got, want) in enumerate(zip(applied, expected, strict=True)):
        for a, b in zip(got, want, strict=True):
            assert torch.allclose(a, b, rtol=1e-5, atol=1e-7), f"step {step}"
    assert metrics["loss/policy"] == pytest.approx(loss, rel=1e-6)
    for (name, a), b in zip(ours.model.named_parameters(), reference.model.parameters(), strict=True):
        assert torch.allclose(a, b, rtol=1e-5, atol=1e-7), name
    # The later steps saw a moved policy: their ratios are not all 1 (else the test could not tell the paths apart).
    assert metrics["loss/clip_frac"] > 0


def test_proximal_pass_covers_only_the_later_minibatches(tiny_model_dir: Path) -> None:
    samples = _samples(8)
    calls = []

    def forwards(minibatches: int, epochs: int) -> int:
        learner = PolicyLearner(tiny_model_dir, LearnerSettings(micro_batch=2, minibatches=minibatches, epochs=epochs))
        handle = learner.model.register_forward_hook(lambda module, args, output: calls.append(1))
        calls.clear()
        learner.update(samples)
        handle.remove()
        return len(calls)

    # 8 samples in micro-batches of 2: 4 training forwards per epoch. Two minibatches of 4: the second one's
    # 2 micro-batches need a proximal pass (a pass over the whole batch would be 4).
    assert forwards(minibatches=2, epochs=1) == 4 + 2
    assert forwards(minibatches=4, epochs=1) == 4 + 3
    assert forwards(minibatches=2, epochs=2) == 8 + 2  # later epochs reuse the first epoch's proximal log-probs
    assert forwards(minibatches=1, epochs=2) == 8
