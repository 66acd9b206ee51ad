"""Policy losses by name: the two built in, one registered from outside `strat/` and selected from the config (values
computed by hand, the KL term added on top of it), the learner's update running it, unknown names refused with the
registered ones listed, and the earlier `fiberpo: true` spelling still meaning `policy_loss: fiberpo`."""

from __future__ import annotations

import math
import random
from collections.abc import Iterator
from pathlib import Path

import pytest
import torch

from strat.algorithm import losses
from strat.algorithm.losses import (
    LossConfig,
    LossOutput,
    SurrogateInputs,
    aggregate,
    clipped_surrogate,
    fiberpo_surrogate,
    masked_log_ratio,
    policy_loss,
    policy_loss_names,
    policy_surrogate,
    register_policy_loss,
)
from strat.algorithm.records import TrainSample
from strat.config_loading import load_config
from strat.errors import ConfigError
from strat.train.settings import learner_settings

ROOT = Path(__file__).resolve().parents[2]
KUHN = ROOT / "configs" / "kuhn_poker_tiny.yaml"
CALLS: list[int] = []


def unclipped(config: LossConfig, inputs: SurrogateInputs) -> LossOutput:
    """The plain importance-weighted policy gradient, -A x pi / pi_old with no clip (a variant a user adds)."""
    CALLS.append(int(inputs.mask.shape[0]))
    log_ratio = masked_log_ratio(inputs.logprobs, inputs.proximal_logprobs, inputs.mask)
    advantages = inputs.advantages.unsqueeze(-1).expand_as(log_ratio)
    value = aggregate(-advantages * torch.exp(log_ratio), inputs.mask, config.loss_agg)
    zero = value.detach() * 0
    return LossOutput(value, zero, zero, zero, zero, zero)


@pytest.fixture
def registered() -> Iterator[None]:
    """`unclipped` registered as a user's module would register it, for this test only."""
    register_policy_loss("test_unclipped")(unclipped)
    CALLS.clear()
    yield
    losses.SURROGATES.unregister("test_unclipped")


def test_the_built_in_losses_are_the_surrogates_by_name() -> None:
    torch.manual_seed(0)
    logprobs, proximal = -torch.rand(2, 3), -torch.rand(2, 3)
    advantages, mask = torch.tensor([1.0, -0.5]), torch.tensor([[True, True, False], [True, True, True]])
    config = LossConfig(clip_eps_low=0.1, clip_eps_high=0.3, fiberpo_delta=0.05, fiberpo_eps=0.02)
    inputs = SurrogateInputs(logprobs, proximal, advantages, mask)
    clipped = clipped_surrogate(logprobs, proximal, advantages, mask, 0.1, 0.3, "token_mean")
    fiberpo = fiberpo_surrogate(logprobs, proximal, advantages, mask, 0.05, 0.02, "token_mean")
    assert float(policy_surrogate("clipped")(config, inputs).loss) == float(clipped.loss)
    assert float(policy_surrogate("fiberpo")(config, inputs).loss) == float(fiberpo.loss)
    assert {"clipped", "fiberpo"} <= set(policy_loss_names())


def test_a_loss_registered_outside_strat_is_selected_from_the_config(registered: None) -> None:
    config = load_config(KUHN, ["algorithm.policy_loss=test_unclipped", "algorithm.kl_type=reverse", "algorithm.kl_coef=0.5",
                                "algorithm.kl_reference=initial"])
    loss_config = learner_settings(config).loss
    assert loss_config.policy_loss == "test_unclipped"
    # pi / pi_old = 0.5 / 0.25 = 2 on the first token, 1 on the second; A = 1: the surrogate is -(2 + 1) / 2 = -1.5.
    logprobs = torch.tensor([[math.log(0.5), math.log(0.25)]], requires_grad=True)
    proximal = torch.tensor([[math.log(0.25), math.log(0.25)]])
    # k2 = (log(pi / ref))^2 / 2 = ((log 2)^2 / 2 + 0) / 2, weighed 0.5 on top of the registered surrogate; the logged
    # divergence is k3's value, ((1/2 - 1 + log 2) + 0) / 2.
    ref = torch.tensor([[math.log(0.25), math.log(0.25)]])
    out = policy_loss(loss_config, logprobs, proximal, torch.tensor([1.0]), torch.ones(1, 2, dtype=torch.bool),
                      ref_logprobs=ref)
    assert float(out.loss.detach()) == pytest.approx(-1.5 + 0.5 * math.log(2) ** 2 / 4)
    assert float(out.divergence) == pytest.approx((0.5 - 1 + math.log(2)) / 2)
    out.loss.backward()
    # d/dl_t of -(r_t) / 2 is -r_t / 2 (-1 and -0.5); the KL adds 0.5 x l_t / 2 (log 2 / 4, then 0).
    assert logprobs.grad[0].tolist() == pytest.approx([-1.0 + math.log(2) / 4, -0.5])


def test_the_learner_update_runs_the_configured_loss(registered: None, tiny_model_dir: Path) -> None:
    from strat.train.learner import LearnerSettings, PolicyLearner

    rng = random.Random(0)
    samples = [TrainSample(f"g{i}", f"e{i}", "player_0", 0, tuple(rng.randrange(5, 200) for _ in range(5)),
                           tuple(rng.randrange(5, 200) for _ in range(4)), (-1.0,) * 4, advantage)
               for i, advantage in enumerate([1.0, 0.5, -0.25])]
    learner = PolicyLearner(tiny_model_dir, LearnerSettings(micro_batch=2, loss=LossConfig(policy_loss="test_unclipped")))
    metrics = learner.update(samples)
    assert sorted(CALLS) == [1, 2]  # one call per micro-batch: 3 samples in micro-batches of 2
    # The first forward is the proximal policy itself: every ratio is 1, and the loss is -(mean advantage per token).
    assert metrics["loss/policy"] == pytest.approx(-(1.0 + 0.5 - 0.25) / 3, abs=1e-6)
    assert metrics["loss/clip_frac"] == 0.0


def test_unknown_losses_are_refused_with_the_registered_names() -> None:
    with pytest.raises(ConfigError, match=r"algorithm.policy_loss='ppo'.*allowed: clipped, fiberpo"):
        load_config(KUHN, ["algorithm.policy_loss=ppo"])
    with pytest.raises(ValueError, match="registered already"):
        register_policy_loss("clipped")(unclipped)
    with pytest.raises(ValueError, match="unknown policy loss 'ppo'"):
        policy_loss(LossConfig(policy_loss="ppo"), torch.zeros(1, 1), torch.zeros(1, 1), torch.ones(1),
                    torch.ones(1, 1, dtype=torch.bool))


def test_the_earlier_fiberpo_switch_still_selects_fiberpo() -> None:
    assert load_config(KUHN, ["algorithm.fiberpo=true"]).algorithm.policy_loss == "fiberpo"
    assert load_config(KUHN, ["algorithm.fiberpo=false"]).algorithm.policy_loss == "clipped"
    with pytest.raises(ConfigError, match="contradicts policy_loss='clipped'"):
        load_config(KUHN, ["algorithm.fiberpo=true", "algorithm.policy_loss=clipped"])
