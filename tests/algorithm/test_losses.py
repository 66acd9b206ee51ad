"""Losses on hand-computed 3-token examples: values, gradient signs, masking, ratio-1 equivalence, DPH generators."""

from __future__ import annotations

import math

import pytest
import torch

from strat.algorithm.losses import (
    LossConfig,
    aggregate,
    choice_entropy,
    clipped_surrogate,
    dph_generator,
    dph_rehearsal,
    fiberpo_surrogate,
    kl_penalty,
    policy_loss,
    rehearsal_loss,
    token_entropy,
    token_logprobs,
    truncated_is_weight,
)

FULL = torch.tensor([[True, True, True]])


def _leaf(values: list[float]) -> torch.Tensor:
    return torch.tensor([values], dtype=torch.float64, requires_grad=True)


def _grad(loss: torch.Tensor, leaf: torch.Tensor) -> list[float]:
    loss.backward()
    return leaf.grad[0].tolist()


def test_seq_mean_leaves_a_fully_masked_row_out_of_the_mean() -> None:
    # Row 0: tokens 2 and 4 (mean 3); row 1: no token at all (a padded sample); row 2: token 7 (mean 7).
    values = torch.tensor([[2.0, 4.0, 9.0], [5.0, 5.0, 5.0], [7.0, 1.0, 1.0]])
    mask = torch.tensor([[True, True, False], [False, False, False], [True, False, False]])
    assert aggregate(values, mask, "seq_mean").item() == 5.0  # (3 + 7) / 2, not / 3 and not counting row 1's 5s
    assert aggregate(values, mask, "token_mean").item() == pytest.approx(13 / 3)  # (2 + 4 + 7) / 3


def test_aggregate_token_mean_and_seq_mean() -> None:
    values = torch.tensor([[1.0, 2.0, 3.0], [4.0, 99.0, float("nan")]])
    mask = torch.tensor([[True, True, True], [True, False, False]])
    assert aggregate(values, mask, "token_mean").item() == 2.5
    assert aggregate(values, mask, "seq_mean").item() == 3.0  # (2 + 4) / 2
    assert aggregate(values, torch.zeros_like(mask), "seq_mean").item() == 0.0


@pytest.mark.parametrize("advantage", [1.0, -1.0])
def test_clipped_surrogate_by_hand(advantage: float) -> None:
    # Ratios 1.5 (above 1 + 0.28), 1.0, 0.7 (below 1 - 0.2).
    logprobs = _leaf([math.log(1.5), 0.0, math.log(0.7)])
    out = clipped_surrogate(
        logprobs, torch.zeros(1, 3, dtype=torch.float64), torch.tensor([advantage]), FULL, 0.2, 0.28, "token_mean"
    )
    grad = _grad(out.loss, logprobs)
    if advantage > 0:
        # -min(rA, clip(r)A) = -[1.28, 1, 0.7]; the first token is clipped and gets no gradient.
        assert out.loss.item() == pytest.approx(-(1.28 + 1.0 + 0.7) / 3)
        assert grad == pytest.approx([0.0, -1.0 / 3, -0.7 / 3])
    else:
        # -min(-r, -clip(r)) = [1.5, 1, 0.8]; the last token is clipped.
        assert out.loss.item() == pytest.approx((1.5 + 1.0 + 0.8) / 3)
        assert grad == pytest.approx([1.5 / 3, 1.0 / 3, 0.0])
    assert out.clip_fraction.item() == pytest.approx(1 / 3)
    assert out.ratio_min.item() == pytest.approx(0.7) and out.ratio_max.item() == pytest.approx(1.5)
    assert out.ratio_mean.item() == pytest.approx(3.2 / 3)
    # k3 of KL(current || proximal) = mean(1/r - 1 + log r).
    assert out.approx_kl.item() == pytest.approx(sum(1 / r - 1 + math.log(r) for r in (1.5, 1.0, 0.7)) / 3)
    assert out.divergence is None


def test_seq_mean_weights_sequences_equally() -> None:
    logprobs = torch.zeros(2, 3, dtype=torch.float64, requires_grad=True)
    mask = torch.tensor([[True, True, True], [True, False, False]])
    out = clipped_surrogate(
        logprobs, torch.zeros(2, 3, dtype=torch.float64), torch.tensor([1.0, 1.0]), mask, 0.2, 0.2, "seq_mean"
    )
    out.loss.backward()
    assert out.loss.item() == pytest.approx(-1.0)
    # Each sequence counts 1/2, spread over its own tokens.
    assert logprobs.grad.flatten().tolist() == pytest.approx([-1 / 6, -1 / 6, -1 / 6, -1 / 2, 0.0, 0.0])


def test_truncated_importance_weight() -> None:
    proximal = torch.tensor([[math.log(3.0), math.log(0.5), 0.0]])
    behaviour = torch.zeros(1, 3)
    weight = truncated_is_weight(proximal, behaviour, torch.tensor([[True, True, False]]), cap=2.0)
    assert weight[0].tolist() == pytest.approx([2.0, 0.5, 1.0])
    logprobs = _leaf([0.0, 0.0, 0.0])
    out = clipped_surrogate(
        logprobs, torch.zeros(1, 3, dtype=torch.float64), torch.tensor([1.0]), FULL, 0.2, 0.2, "token_mean", weight
    )
    assert _grad(out.loss, logprobs) == pytest.approx([-2 / 3, -0.5 / 3, -1 / 3])


def test_fiberpo_by_hand() -> None:
    # l = [0.9, 0.3, 0.05]: rho = 1.25 / 3 > delta -> rho~ = 0.2; e = [0.7, 0.1, -0.15] -> e~ = [0.2, 0.1, -0.15].
    logprobs = _leaf([0.9, 0.3, 0.05])
    out = fiberpo_surrogate(
        logprobs, torch.zeros(1, 3, dtype=torch.float64), torch.tensor([1.0]), FULL, 0.2, 0.2, "token_mean"
    )
    gates = [math.exp(0.4), math.exp(0.3), math.exp(0.05)]
    assert out.loss.item() == pytest.approx(-sum(gates) / 3)
    # rho~ is clipped (no gradient through it), the first residual is clipped too.
    assert _grad(out.loss, logprobs) == pytest.approx([0.0, -gates[1] / 3, -gates[2] / 3])
    assert out.clip_fraction.item() == 1.0


def test_fiberpo_inside_the_budget_is_the_plain_ratio() -> None:
    logprobs = _leaf([0.1, -0.05, 0.0])
    out = fiberpo_surrogate(
        logprobs, torch.zeros(1, 3, dtype=torch.float64), torch.tensor([-2.0]), FULL, 0.2, 0.2, "token_mean"
    )
    ratios = [math.exp(0.1), math.exp(-0.05), 1.0]
    assert out.loss.item() == pytest.approx(2 * sum(ratios) / 3)
    # The gate's Jacobian is the identity inside the budget: d/dl of -A exp(l) / 3.
    assert _grad(out.loss, logprobs) == pytest.approx([2 * r / 3 for r in ratios])
    assert out.clip_fraction.item() == 0.0


def test_kl_penalties_by_hand() -> None:
    # pi = 0.5 and ref = 0.25 on every token: l = log(pi / ref) = log 2.
    ref = torch.full((1, 3), math.log(0.25), dtype=torch.float64)
    logprobs = _leaf([math.log(0.5)] * 3)
    reverse = kl_penalty(logprobs, ref, FULL, "reverse", "token_mean")
    assert reverse.loss.item() == pytest.approx(math.log(2) ** 2 / 2)
    # d/dl (l^2 / 2) = l; the logged divergence is k3's value, the estimate of KL(pi || ref), either way.
    assert _grad(reverse.loss, logprobs) == pytest.approx([math.log(2) / 3] * 3)
    assert reverse.divergence.item() == pytest.approx(0.5 - 1 + math.log(2))
    logprobs = _leaf([math.log(0.5)] * 3)
    forward = kl_penalty(logprobs, ref, FULL, "forward", "token_mean")
    assert forward.loss.item() == pytest.approx(0.5 - 1 + math.log(2))
    assert forward.divergence.item() == pytest.approx(forward.loss.item())
    # d/dl (e^-l - 1 + l) = 1 - e^-l: positive when pi > ref, negative when pi < ref.
    assert _grad(forward.loss, logprobs) == pytest.approx([0.5 / 3] * 3)
    logprobs = _leaf([math.log(0.125)] * 3)
    assert all(g < 0 for g in _grad(kl_penalty(logprobs, ref, FULL, "forward", "token_mean").loss, logprobs))
    with pytest.raises(ValueError, match="unknown KL penalty"):
        kl_penalty(logprobs, ref, FULL, "k1", "token_mean")


def test_dph_rehearsal_by_hand() -> None:
    initial = torch.full((1, 3), math.log(0.25), dtype=torch.float64)
    logprobs = _leaf([math.log(0.5)] * 3)  # u = 2
    forward = dph_rehearsal(logprobs, initial, FULL, "forward_kl", "token_mean")
    assert forward.loss.item() == pytest.approx(2 - math.log(2) - 1)
    assert _grad(forward.loss, logprobs) == pytest.approx([(2 - 1) / 3] * 3)  # d/dl (e^l - l - 1) = u - 1
    logprobs = _leaf([math.log(0.5)] * 3)
    js = dph_rehearsal(logprobs, initial, FULL, "js", "token_mean")
    assert js.loss.item() == pytest.approx(2 * math.log(2) - 3 * math.log(1.5))
    assert _grad(js.loss, logprobs) == pytest.approx([2 * math.log(4 / 3) / 3] * 3)  # u log(2u / (u + 1))
    config = LossConfig(dph_divergence="js", dph_eta=0.1)
    logprobs = _leaf([math.log(0.5)] * 3)
    assert rehearsal_loss(config, logprobs, initial, FULL).loss.item() == pytest.approx(0.1 * js.loss.item())
    with pytest.raises(ValueError, match="dph_divergence"):
        rehearsal_loss(LossConfig(), logprobs, initial, FULL)


@pytest.mark.parametrize("divergence", ["forward_kl", "js"])
def test_dph_generators_zero_at_one_positive_elsewhere(divergence: str) -> None:
    assert dph_generator(torch.tensor([0.0], dtype=torch.float64), divergence).item() == 0.0
    log_u = torch.tensor([k / 10 for k in range(-80, 81) if k != 0], dtype=torch.float64)
    assert bool(torch.all(dph_generator(log_u, divergence) > 0))
    # Clamped as in DPH-RL: log-ratio to [-20, 20], value to [-10, 10].
    assert dph_generator(torch.tensor([50.0]), divergence).item() == 10.0


def _all_losses(logprobs, proximal, advantages, mask) -> dict[str, torch.Tensor]:
    behaviour = proximal - 0.3
    return {
        "clip_token": clipped_surrogate(logprobs, proximal, advantages, mask, 0.2, 0.28, "token_mean").loss,
        "clip_seq": clipped_surrogate(logprobs, proximal, advantages, mask, 0.2, 0.28, "seq_mean").loss,
        "fiberpo_token": fiberpo_surrogate(logprobs, proximal, advantages, mask, 0.2, 0.2, "token_mean").loss,
        "fiberpo_seq": fiberpo_surrogate(logprobs, proximal, advantages, mask, 0.2, 0.2, "seq_mean").loss,
        "kl_reverse": kl_penalty(logprobs, proximal, mask, "reverse", "token_mean").loss,
        "kl_forward": kl_penalty(logprobs, proximal, mask, "forward", "seq_mean").loss,
        "dph_forward_kl": dph_rehearsal(logprobs, proximal, mask, "forward_kl", "token_mean").loss,
        "dph_js": dph_rehearsal(logprobs, proximal, mask, "js", "token_mean").loss,
        "policy_stale_kl": policy_loss(
            LossConfig(kl_type="forward", kl_coef=0.1), logprobs, proximal, advantages, mask, behaviour, proximal - 0.1
        ).loss,
        "policy_fiberpo": policy_loss(LossConfig(policy_loss="fiberpo"), logprobs, proximal, advantages, mask, behaviour).loss,
    }


def test_masked_tokens_get_exactly_zero_gradient() -> None:
    mask = torch.tensor([[True, True, False], [True, False, False]])
    garbage = float("inf")
    for name in _all_losses(torch.zeros(2, 3), torch.zeros(2, 3), torch.zeros(2), mask):
        logprobs = torch.tensor([[-0.5, -1.0, 1e4], [-2.0, -garbage, 7.0]], requires_grad=True)
        proximal = torch.tensor([[-0.7, -0.9, garbage], [-1.9, 3.0, -garbage]])
        loss = _all_losses(logprobs, proximal, torch.tensor([1.0, -1.0]), mask)[name]
        loss.backward()
        assert torch.isfinite(loss), name
        assert torch.all(logprobs.grad[~mask] == 0), name
        assert torch.all(logprobs.grad[mask] != 0), name


def test_with_ratio_one_every_variant_is_the_plain_policy_gradient() -> None:
    mask = torch.tensor([[True, True, True], [True, True, False]])
    advantages = torch.tensor([0.7, -1.3])
    base = torch.tensor([[-0.5, -1.0, -2.0], [-0.1, -3.0, 0.0]], dtype=torch.float64)
    for agg in ("token_mean", "seq_mean"):
        reference = base.clone().requires_grad_(True)
        plain = aggregate(-advantages[:, None] * reference, mask, agg)
        plain.backward()
        for config in (
            LossConfig(loss_agg=agg),
            LossConfig(loss_agg=agg, clip_eps_low=0.01, clip_eps_high=0.5),
            LossConfig(loss_agg=agg, policy_loss="fiberpo", fiberpo_delta=0.05, fiberpo_eps=0.01),
        ):
            logprobs = base.clone().requires_grad_(True)
            # Behaviour equal to proximal: on-policy, importance weight 1.
            out = policy_loss(config, logprobs, base.detach(), advantages, mask, behaviour_logprobs=base.detach())
            out.loss.backward()
            assert out.loss.item() == pytest.approx(
                aggregate(-advantages[:, None].expand(2, 3).double(), mask, agg).item()
            )
            assert torch.allclose(logprobs.grad, reference.grad), (agg, config)
            assert out.clip_fraction.item() == 0.0 and out.ratio_mean.item() == 1.0


def test_policy_loss_adds_the_kl_term() -> None:
    logprobs = _leaf([-1.0, -1.0, -1.0])
    ref = torch.full((1, 3), -1.5, dtype=torch.float64)
    out = policy_loss(
        LossConfig(kl_type="reverse", kl_coef=0.5), logprobs, logprobs.detach(), torch.tensor([1.0]), FULL,
        ref_logprobs=ref,
    )
    # l = 0.5 on every token: k2 = 0.125, weighed 0.5; the divergence logged is k3's value e^-l - 1 + l.
    assert out.loss.item() == pytest.approx(-1.0 + 0.5 * 0.125)
    assert out.divergence.item() == pytest.approx(math.exp(-0.5) - 0.5)
    with pytest.raises(ValueError, match="reference"):
        policy_loss(LossConfig(kl_type="reverse"), logprobs, logprobs.detach(), torch.tensor([1.0]), FULL)


def test_token_logprobs_use_the_temperature() -> None:
    logits = torch.tensor([[[2.0, 0.0], [0.0, 0.0]]])
    ids = torch.tensor([[0, 1]])
    at_two = token_logprobs(logits, ids, temperature=2.0)
    assert at_two[0].tolist() == pytest.approx([math.log(math.e / (math.e + 1)), math.log(0.5)])


def test_token_logprobs_are_float32_at_least() -> None:
    """bf16 logits are upcast to float32; float64 ones (the reference step's float64 check) stay float64."""
    ids = torch.tensor([[0]])
    logits = torch.tensor([[[1.0, 1.0 + 2**-40]]], dtype=torch.float64)
    assert token_logprobs(logits.to(torch.bfloat16), ids, 1.0).dtype == torch.float32
    exact = token_logprobs(logits, ids, 1.0)
    assert exact.dtype == torch.float64 and float(exact) != math.log(0.5)  # float32 would round the 2**-40 away


def test_token_entropy_by_hand() -> None:
    logits = torch.tensor([[[0.0, 0.0, 0.0, 0.0], [math.log(3.0), 0.0, -1e9, -1e9]]])
    entropy = token_entropy(logits, temperature=1.0)[0]
    assert entropy[0].item() == pytest.approx(math.log(4.0))  # uniform over 4
    # p = (3/4, 1/4): H = -(3/4 ln 3/4 + 1/4 ln 1/4)
    assert entropy[1].item() == pytest.approx(-(0.75 * math.log(0.75) + 0.25 * math.log(0.25)), rel=1e-6)
    # A high temperature flattens the distribution: more entropy.
    assert token_entropy(logits, temperature=4.0)[0, 1].item() > entropy[1].item()


def test_entropy_bonus_is_subtracted_from_the_surrogate() -> None:
    logprobs = _leaf([-1.0, -2.0, -0.5])
    proximal = logprobs.detach().clone()
    advantages = torch.tensor([1.0], dtype=torch.float64)
    entropy = torch.tensor([[0.3, 0.6, 0.9]], dtype=torch.float64)
    plain = policy_loss(LossConfig(), logprobs, proximal, advantages, FULL)
    reported = policy_loss(LossConfig(), logprobs, proximal, advantages, FULL, entropy=entropy)
    bonus = policy_loss(LossConfig(entropy_coef=0.1), logprobs, proximal, advantages, FULL, entropy=entropy)
    assert reported.loss.item() == pytest.approx(plain.loss.item())  # coef 0: reported, not added
    assert reported.entropy.item() == pytest.approx(0.6)
    assert bonus.loss.item() == pytest.approx(plain.loss.item() - 0.1 * 0.6)
    with pytest.raises(ValueError, match="entropy"):
        policy_loss(LossConfig(entropy_coef=0.1), logprobs, proximal, advantages, FULL)


def test_choice_entropy_by_hand() -> None:
    # Vocabulary of 4; candidates: tokens 0 and 1 at position 0, tokens 2 and 3 (and a pad) at position 1, none at 2.
    logits = torch.tensor([[[math.log(3.0), 0.0, 5.0, -7.0], [1.0, 2.0, 0.0, 0.0], [0.0, 0.0, 0.0, 0.0]]])
    candidates = torch.tensor([[[0, 1, -1], [2, 3, -1], [-1, -1, -1]]])
    entropy = choice_entropy(logits, candidates, temperature=1.0)[0]
    # Renormalised over the candidates only: (3/4, 1/4) whatever token 2 holds; uniform over 2.
    assert entropy[0].item() == pytest.approx(-(0.75 * math.log(0.75) + 0.25 * math.log(0.25)), rel=1e-6)
    assert entropy[1].item() == pytest.approx(math.log(2.0), rel=1e-6)
    assert entropy[2].item() == 0.0
    assert choice_entropy(logits, candidates, temperature=4.0)[0, 0].item() > entropy[0].item()


def test_move_entropy_bonus_acts_on_the_move_tokens_in_the_advantage_units() -> None:
    logprobs = _leaf([-1.0, -2.0, -0.5])
    proximal = logprobs.detach().clone()
    advantages = torch.tensor([1.0], dtype=torch.float64)
    choices = torch.tensor([[0.3, 0.6, 0.9]], dtype=torch.float64)
    moves = torch.tensor([[False, True, False]])
    plain = policy_loss(LossConfig(), logprobs, proximal, advantages, FULL)
    config = LossConfig(move_entropy_coef=0.5)
    bonus = policy_loss(config, logprobs, proximal, advantages, FULL, move_entropy=choices, move_mask=moves)
    # token_mean: the move token's entropy over the 3 response tokens, as each token's advantage term is.
    assert bonus.loss.item() == pytest.approx(plain.loss.item() - 0.5 * 0.6 / 3)
    assert bonus.move_entropy.item() == pytest.approx(0.6)
    assert bonus.entropy is None  # the all-token entropy was not computed
    seq = policy_loss(LossConfig(move_entropy_coef=0.5, loss_agg="seq_mean"), logprobs, proximal, advantages, FULL,
                      move_entropy=choices, move_mask=moves)
    plain_seq = policy_loss(LossConfig(loss_agg="seq_mean"), logprobs, proximal, advantages, FULL)
    assert seq.loss.item() == pytest.approx(plain_seq.loss.item() - 0.5 * 0.6 / 3)
    # The gradient of the bonus reaches the move token's entropy only.
    grad_choices = choices.clone().requires_grad_(True)
    policy_loss(config, logprobs, proximal, advantages, FULL, move_entropy=grad_choices,
                move_mask=moves).loss.backward()
    assert grad_choices.grad[0].tolist() == pytest.approx([0.0, -0.5 / 3, 0.0])
    with pytest.raises(ValueError, match="move"):
        policy_loss(config, logprobs, proximal, advantages, FULL, move_entropy=choices)
    with pytest.raises(ValueError, match="move"):
        policy_loss(config, logprobs, proximal, advantages, FULL, move_mask=moves)
