"""Prompts and a real policy update that moves the tiny model's greedy output, for the sync and learner tests."""

from __future__ import annotations

from strat.algorithm.records import TrainSample
from strat.sync.process_group import Rendezvous
from strat.train.learner import PolicyLearner

CONVERSATIONS = [
    "You hold the King. Your opponent bet.",
    "Legal actions: pass, bet",
    "<past>They passed.</past> Which action?",
]


def prompts_for(tokenizer) -> list[list[int]]:
    """The conversations as chat-template token ids, ready for the assistant's turn."""
    return [
        list(tokenizer.apply_chat_template([{"role": "user", "content": c}], add_generation_prompt=True,
                                           tokenize=True)["input_ids"])
        for c in CONVERSATIONS
    ]


def target_response(tokenizer) -> tuple[int, ...]:
    return tuple(tokenizer.encode("<action>bet</action>") + [tokenizer.convert_tokens_to_ids("<|im_end|>")])


def perturbing_samples(tokenizer) -> list[TrainSample]:
    """Every prompt answered with the same response, advantage +1."""
    target = target_response(tokenizer)
    return [TrainSample("g", f"e{i}", "player_0", 0, tuple(p), target, (0.0,) * len(target), 1.0)
            for i, p in enumerate(prompts_for(tokenizer))]


def perturb(learner: PolicyLearner, steps: int = 2) -> list[dict[str, float]]:
    """A few real policy updates toward a fixed response, so that greedy output moves."""
    samples = perturbing_samples(learner.tokenizer)
    metrics = [learner.update(samples) for _ in range(steps)]
    assert all(m["learn/skipped_minibatches"] == 0 for m in metrics)
    return metrics


def local_rendezvous() -> Rendezvous:
    """Where a test's weight group meets: a port of this machine the OS assigned, held for rank 0 (the test's
    learner side joins with it, the others with its `address`)."""
    return Rendezvous("127.0.0.1")
