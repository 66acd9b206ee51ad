"""Prefix sharing in the learner: the shared prompt prefix runs once per micro-batch, and the log-probs, the
gradients and a whole update are those of whole-sequence forwards; the shared part covers the system prompt,
and fewer token positions reach the model."""

import random
from dataclasses import replace
from pathlib import Path

import pytest
import torch

import games
from strat.algorithm.reasoning import build_messages
from strat.algorithm.records import TrainBatch, TrainSample
from strat.engines.base import chat_prompt_ids
from strat.model.build import LoraSettings
from strat.model.tiny import IM_END
from strat.train.learner import LearnerSettings, PolicyLearner
from strat.train.prefix import shared_prefix_length
from strat.train.sequences import sequence_forward

SYSTEM = 40
"""Tokens of the made-up system prompt that every sample starts with."""


def _samples(count: int, seed: int = 0, system: int = SYSTEM) -> list[TrainSample]:
    """Samples that share a `system`-token prefix, then a few tokens of a group prefix (pairs of samples share
    it), then prompt tails of 1 to 12 tokens (so that prompt lengths differ in a micro-batch), responses of 2 to
    7 tokens, advantages of both signs."""
    rng = random.Random(seed)
    shared = [rng.randrange(5, 200) for _ in range(system)]
    samples = []
    for i in range(count):
        group = random.Random(seed * 1000 + i // 2)
        middle = [group.randrange(5, 200) for _ in range(5)]
        tail = [rng.randrange(5, 200) for _ in range(rng.randint(1, 12))]
        response = tuple(rng.randrange(5, 200) for _ in range(rng.randint(2, 7)))
        samples.append(TrainSample(f"g{i // 2}", f"e{i}", "player_0", 0, tuple(shared + middle + tail), response,
                                   tuple(-rng.uniform(3.0, 7.0) for _ in response),
                                   rng.choice([-1.5, -0.5, 0.7, 1.2])))
    return samples


class _Positions:
    """Counts the token positions that reach the model's embedding layer."""

    def __init__(self, model: torch.nn.Module) -> None:
        self.count = 0
        model.get_input_embeddings().register_forward_hook(self._seen)

    def _seen(self, module: torch.nn.Module, inputs: tuple[torch.Tensor, ...], output: torch.Tensor) -> None:
        self.count += inputs[0].numel()


class _Gradients:
    """Keeps the gradients that each optimizer step applies."""

    def __init__(self, optimizer: torch.optim.Optimizer) -> None:
        self.seen: list[list[torch.Tensor]] = []
        optimizer.register_step_pre_hook(self._step)

    def _step(self, optimizer: torch.optim.Optimizer, args: tuple, kwargs: dict) -> None:
        self.seen.append([p.grad.clone() for group in optimizer.param_groups for p in group["params"]])


def _forward_and_grads(learner: PolicyLearner, batch: TrainBatch, share: bool) -> tuple[torch.Tensor, list[torch.Tensor]]:
    """Log-probs [B, R] and the gradients of a weighted sum of them (weights differ per token and row)."""
    learner.optimizer.zero_grad(set_to_none=True)
    logprobs, entropy, _ = sequence_forward(learner.model, batch, 1.0, entropy=True, share_prefix=share)
    weights = torch.linspace(-1.0, 2.0, logprobs.numel()).reshape(logprobs.shape)
    ((logprobs * weights).sum() + entropy.sum()).backward()
    return logprobs.detach(), [p.grad.detach().clone() for p in learner._trainable()]


@pytest.mark.parametrize("lora", [False, True], ids=["full", "lora"])
def test_shared_forward_equals_whole_sequences(tiny_model_dir: Path, lora: bool) -> None:
    settings = LearnerSettings(lora=LoraSettings(r=4, alpha=8) if lora else None)
    learner = PolicyLearner(tiny_model_dir, settings)
    if lora:  # peft starts lora_B at zero: move it, so that the adapters' own gradients are not trivially equal
        with torch.no_grad():
            for name, param in learner.model.named_parameters():
                if ".lora_B." in name:
                    param.normal_(0.0, 0.05)
    positions = _Positions(learner.model)
    batch = TrainBatch.collate(_samples(6), learner.pad_id)
    assert len(set(batch.prompt_mask.sum(-1).tolist())) > 1  # prompts of different lengths in one micro-batch

    whole, whole_grads = _forward_and_grads(learner, batch, share=False)
    whole_positions, positions.count = positions.count, 0
    shared, shared_grads = _forward_and_grads(learner, batch, share=True)

    mask = batch.response_mask
    assert torch.allclose(shared[mask], whole[mask], atol=1e-5, rtol=0), (shared - whole)[mask].abs().max()
    assert len(shared_grads) == len(whole_grads) and whole_grads
    for ours, theirs in zip(shared_grads, whole_grads, strict=True):
        assert torch.allclose(ours, theirs, atol=1e-5, rtol=1e-4), (ours - theirs).abs().max()
    # The prefix of 40 tokens runs once instead of 6 times: 5 x 40 positions fewer.
    assert whole_positions == batch.input_ids.numel()
    assert positions.count == whole_positions - 5 * SYSTEM


def test_shared_length_is_the_common_prefix_short_of_each_last_token() -> None:
    pad = 0
    rows = [[7, 8, 9, 4, 5], [7, 8, 9, 4], [7, 8, 9, 6, 1, 2]]
    batch = TrainBatch.collate([TrainSample("g", f"e{i}", "p", 0, tuple(r), (3,), (-1.0,), 0.0)
                                for i, r in enumerate(rows)], pad)
    assert shared_prefix_length(batch.prompt_ids, batch.prompt_mask) == 3
    # A prompt that is the whole common prefix keeps its last token: the logits there predict its response.
    short = TrainBatch.collate([TrainSample("g", f"e{i}", "p", 0, tuple(r), (3,), (-1.0,), 0.0)
                                for i, r in enumerate([[7, 8, 9], [7, 8, 9, 4]])], pad)
    assert shared_prefix_length(short.prompt_ids, short.prompt_mask) == 2


def _kuhn_prompts(tokenizer, count: int) -> list[list[int]]:
    """Prompts of real Kuhn poker turns (depth 2) after random deals and moves."""
    rng = random.Random(3)
    prompts = []
    while len(prompts) < count:
        env = games.make("kuhn_poker")
        env.reset(seed=rng.randrange(10**6))
        for agent in env.turns():
            prompts.append(chat_prompt_ids(tokenizer, build_messages(env, agent, 2)))
            env.step(rng.choice(env.legal_actions(agent)))
    return prompts[:count]


def test_shared_length_covers_the_system_prompt(tiny_model_dir: Path) -> None:
    learner = PolicyLearner(tiny_model_dir, LearnerSettings())
    prompts = _kuhn_prompts(learner.tokenizer, 8)
    assert len({len(p) for p in prompts}) > 1
    end = learner.tokenizer.convert_tokens_to_ids(IM_END)
    system = prompts[0].index(end) + 1  # the system message, up to its closing marker
    assert all(p[:system] == prompts[0][:system] for p in prompts)
    samples = [TrainSample("g", f"e{i}", "player_0", 0, tuple(p), (5, 6), (-1.0, -1.0), 1.0)
               for i, p in enumerate(prompts)]
    batch = TrainBatch.collate(samples, learner.pad_id)
    assert shared_prefix_length(batch.prompt_ids, batch.prompt_mask) >= system > 100


@pytest.mark.parametrize(("lora", "checkpointing"), [(False, False), (True, False), (False, True)],
                         ids=["full", "lora", "gradient-checkpointing"])
def test_update_with_shared_prefix_equals_update_without(tiny_model_dir: Path, lora: bool, checkpointing: bool
                                                         ) -> None:
    samples = _samples(10, seed=1)
    results = {}
    for share in (False, True):
        torch.manual_seed(0)
        settings = LearnerSettings(lr=1e-2, micro_batch=4, minibatches=2, share_prefix=share,
                                   lora=LoraSettings(r=4, alpha=8) if lora else None,
                                   gradient_checkpointing=checkpointing)
        learner = PolicyLearner(tiny_model_dir, settings)
        for group in learner.optimizer.param_groups:  # see the weights' comparison below
            group["eps"] = 1e-6
        positions = _Positions(learner.model)
        steps = _Gradients(learner.optimizer)
        metrics = [learner.update(samples), learner.update([replace(s, advantage=-s.advantage) for s in samples])]
        results[share] = (metrics, steps.seen, learner.merged_state_dict(), positions.count)
    whole_metrics, whole_grads, whole_weights, whole_positions = results[False]
    shared_metrics, shared_grads, shared_weights, shared_positions = results[True]
    for ours, theirs in zip(shared_metrics, whole_metrics, strict=True):
        assert ours.keys() == theirs.keys()
        for name in theirs:
            assert ours[name] == pytest.approx(theirs[name], rel=1e-4, abs=1e-5), name
    assert len(whole_grads) == 4  # two updates of two optimizer steps
    for ours, theirs in zip(shared_grads, whole_grads, strict=True):
        for mine, other in zip(ours, theirs, strict=True):
            assert torch.allclose(mine, other, atol=1e-5, rtol=1e-4), (mine - other).abs().max()
    # AdamW divides each gradient by its own scale plus eps, so float32 rounding in a gradient near eps moves a
    # weight by a sizeable part of an lr-sized step: with the default eps (1e-8) the two updates' weights were up
    # to 2.4e-4 apart on one machine (AMD EPYC, 2026-12-04) and within 2e-4 on another. With eps 1e-6 for both
    # they are 4e-5 apart (the gradients themselves agree to 1e-5, above), while they moved by far more.
    start = PolicyLearner(tiny_model_dir, LearnerSettings()).state_dict()
    for name, tensor in whole_weights.items():
        assert torch.allclose(shared_weights[name], tensor, atol=2e-4, rtol=0), name
    assert max(float((tensor - start[name]).abs().max()) for name, tensor in whole_weights.items()) > 1e-2
    # Every micro-batch of more than one sample (training and proximal forwards) runs its 40-token prefix once.
    assert shared_positions < whole_positions - SYSTEM * len(samples)
