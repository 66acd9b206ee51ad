"""DPH-RL rehearsal under FSDP2: two Ray learner ranks on the CPU score the rehearsal samples and add the
divergence term as one unsharded learner does (each rank takes its part of the rehearsal batch)."""

from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path

import pytest
import ray
import torch

from strat.algorithm.losses import LossConfig
from strat.train.learner import LearnerSettings, PolicyLearner

from .sync_helpers import prompts_for, target_response
from .test_learner_group import _samples

SETTINGS = LearnerSettings(lr=2e-3, micro_batch=1, minibatches=2, rehearsal_batch=3,
                           loss=LossConfig(dph_divergence="js", dph_eta=0.5))


@pytest.fixture(scope="module")
def local_ray() -> Iterator[None]:
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False, configure_logging=False)
    yield
    ray.shutdown()


def test_two_ranks_rehearse_as_one_learner(local_ray, tiny_model_dir: Path) -> None:
    from strat.train.learner_actor import LearnerGroup

    group = LearnerGroup.start(str(tiny_model_dir), SETTINGS, 2, lambda rank: {"num_cpus": 0.5})
    reference = PolicyLearner(tiny_model_dir, SETTINGS)
    try:
        group.get(group.ready())
        tokenizer = reference.tokenizer
        target = target_response(tokenizer)
        stored = [replace(sample, advantage=0.0) for sample in _samples(tokenizer)]
        stored += [replace(stored[0], episode_id="r", prompt_token_ids=tuple(prompts_for(tokenizer)[1]),
                           response_token_ids=target[2:], behaviour_logprobs=(0.0,) * len(target[2:]))]
        ours = group.get(group.set_rehearsal(stored, True))
        theirs = reference.set_rehearsal(stored, True)
        for a, b in zip(ours, theirs, strict=True):
            assert torch.allclose(torch.tensor(a.behaviour_logprobs), torch.tensor(b.behaviour_logprobs), atol=1e-5)
        samples = _samples(tokenizer)
        for _ in range(2):  # the second update rehearses on a policy the first one moved
            got = group.get(group.update(samples))
            want = reference.update(samples)
            for key in ("loss/dph", "loss/policy", "learn/grad_norm"):
                assert got[key] == pytest.approx(want[key], rel=1e-4, abs=1e-6), key
        assert want["loss/dph"] > 0
        state = group.get(group.state_dict())
        assert all(torch.allclose(state[k], v, atol=1e-5) for k, v in reference.state_dict().items())
    finally:
        for rank in group.ranks:
            ray.kill(rank)
