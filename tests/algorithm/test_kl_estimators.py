"""The KL penalties are named by the divergence whose gradient they follow. On an exact categorical distribution
pi = softmax(theta) (every outcome y weighted by pi(y), as pi's own samples would be), the expected gradient of each
per-sample estimator equals the analytic gradient of the divergence it is named after:

- `reverse`, k2 = (log pi/ref)^2 / 2:      E_pi[grad k2] = grad KL(pi || ref);
- `forward`, k3 = ref/pi - 1 - log(ref/pi): E_pi[grad k3] = grad KL(ref || pi);
- k1 = log(pi/ref) (not offered):          E_pi[grad k1] = E_pi[grad log pi] = 0."""

from __future__ import annotations

import math

import pytest
import torch

from strat.algorithm.losses import kl_penalty, masked_log_ratio

ONE = torch.ones(1, 1, dtype=torch.bool)


def _estimator(name: str, logprob: torch.Tensor, ref_logprob: torch.Tensor) -> torch.Tensor:
    """One sample's penalty as the loss computes it, from [1, 1] log-probs."""
    if name == "k1":
        return masked_log_ratio(logprob, ref_logprob, ONE).sum()
    return kl_penalty(logprob, ref_logprob, ONE, name, "token_mean").loss


def _expected_gradient(name: str, theta: torch.Tensor, ref: torch.Tensor) -> torch.Tensor:
    """sum_y pi(y) grad_theta estimator(y): pi weighs the outcomes (the sampling distribution, no gradient)."""
    total = torch.zeros_like(theta)
    weights = torch.softmax(theta, dim=0).detach()
    for y in range(theta.shape[0]):
        leaf = theta.detach().clone().requires_grad_(True)
        logprob = torch.log_softmax(leaf, dim=0)[y].reshape(1, 1)
        (gradient,) = torch.autograd.grad(_estimator(name, logprob, ref[y].log().reshape(1, 1)), leaf)
        total += weights[y] * gradient
    return total


def _divergence_gradient(name: str, theta: torch.Tensor, ref: torch.Tensor) -> torch.Tensor:
    """The analytic divergence's gradient in theta, by autograd on the exact sum."""
    leaf = theta.detach().clone().requires_grad_(True)
    logpi = torch.log_softmax(leaf, dim=0)
    if name == "reverse":
        divergence = (logpi.exp() * (logpi - ref.log())).sum()  # KL(pi || ref)
    elif name == "forward":
        divergence = (ref * (ref.log() - logpi)).sum()  # KL(ref || pi)
    else:
        return torch.zeros_like(theta)
    (gradient,) = torch.autograd.grad(divergence, leaf)
    return gradient


def test_expected_gradients_by_hand() -> None:
    # pi = (1/2, 1/2) (theta = 0), ref = (1/4, 3/4); grad_theta log pi(y) = e_y - pi.
    theta = torch.zeros(2, dtype=torch.float64)
    ref = torch.tensor([0.25, 0.75], dtype=torch.float64)
    # reverse: sum_y pi_y l_y (e_y - pi) with l = (log 2, log 2/3): (l_1 - l_2) / 4 (1, -1) = log 3 / 4 (1, -1).
    assert _expected_gradient("reverse", theta, ref).tolist() == pytest.approx([math.log(3) / 4, -math.log(3) / 4])
    # forward: sum_y pi_y (1 - ref_y / pi_y)(e_y - pi) = pi - ref = (1/4, -1/4).
    assert _expected_gradient("forward", theta, ref).tolist() == pytest.approx([0.25, -0.25])
    # k1: sum_y pi_y (e_y - pi) = pi - pi = 0, whatever ref.
    assert _expected_gradient("k1", theta, ref).tolist() == pytest.approx([0.0, 0.0], abs=1e-15)
    # The analytic gradients, worked by hand the same way.
    assert _divergence_gradient("reverse", theta, ref).tolist() == pytest.approx([math.log(3) / 4, -math.log(3) / 4])
    assert _divergence_gradient("forward", theta, ref).tolist() == pytest.approx([0.25, -0.25])


@pytest.mark.parametrize("name", ["reverse", "forward", "k1"])
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_the_expected_gradient_is_the_named_divergences(name: str, seed: int) -> None:
    generator = torch.Generator().manual_seed(seed)
    theta = torch.randn(6, generator=generator, dtype=torch.float64) * 1.5
    ref = torch.softmax(torch.randn(6, generator=generator, dtype=torch.float64) * 1.5, dim=0)
    expected = _expected_gradient(name, theta, ref)
    analytic = _divergence_gradient(name, theta, ref)
    assert torch.allclose(expected, analytic, atol=1e-12), (expected, analytic)
    if name != "k1":
        assert float(analytic.abs().max()) > 1e-2  # not a trivial agreement at zero


def test_forward_and_reverse_gradients_differ() -> None:
    # The names are not interchangeable: away from ref the two penalties pull in different directions.
    theta = torch.tensor([2.0, 0.0, -2.0], dtype=torch.float64)
    ref = torch.tensor([0.2, 0.3, 0.5], dtype=torch.float64)
    reverse, forward = _expected_gradient("reverse", theta, ref), _expected_gradient("forward", theta, ref)
    assert not torch.allclose(reverse, forward, atol=1e-3)
