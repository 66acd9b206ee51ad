"""The staleness weight through `policy_loss`: with behaviour != proximal log-probs each token's gradient is the
surrogate's times min(proximal / behaviour, is_cap), worked out by hand in float64; dropping the weight fails."""

from __future__ import annotations

import math

import pytest
import torch

from strat.algorithm import losses
from strat.algorithm.losses import LossConfig, policy_loss

CONFIG = LossConfig(clip_eps_low=0.2, clip_eps_high=0.28, is_cap=2.0)
# Two rows of two tokens: row 0 with advantage +1.5, row 1 with -0.5.
CURRENT = [[-1.0, -0.5], [-2.0, -0.3]]
PROXIMAL = [[-1.1, -0.5], [-1.5, -0.4]]
# log(proximal / behaviour) per token: 3 (truncated to the cap, 2), 1/2, 3/2 and 1/4.
LOG_WEIGHT = [[math.log(3.0), math.log(0.5)], [math.log(1.5), math.log(0.25)]]
ADVANTAGES = [1.5, -0.5]


def _by_hand() -> tuple[float, list[list[float]]]:
    """The token-mean loss -1/N sum_t w_t min(r_t A, clip(r_t) A) and its gradient in the current log-probs:
    -w_t r_t A / N where the unclipped term is the minimum, 0 where the clipped one is."""
    tokens = 4
    loss, grad = 0.0, [[0.0, 0.0], [0.0, 0.0]]
    for row, advantage in enumerate(ADVANTAGES):
        for col in range(2):
            ratio = math.exp(CURRENT[row][col] - PROXIMAL[row][col])
            weight = min(math.exp(LOG_WEIGHT[row][col]), CONFIG.is_cap)
            clipped = min(max(ratio, 1 - CONFIG.clip_eps_low), 1 + CONFIG.clip_eps_high)
            unclipped_is_min = ratio * advantage <= clipped * advantage
            loss -= weight * min(ratio * advantage, clipped * advantage) / tokens
            grad[row][col] = -weight * ratio * advantage / tokens if unclipped_is_min else 0.0
    return loss, grad


def _autograd() -> tuple[float, list[list[float]]]:
    current = torch.tensor(CURRENT, dtype=torch.float64, requires_grad=True)
    proximal = torch.tensor(PROXIMAL, dtype=torch.float64)
    behaviour = proximal - torch.tensor(LOG_WEIGHT, dtype=torch.float64)
    mask = torch.ones(2, 2, dtype=torch.bool)
    out = policy_loss(CONFIG, current, proximal, torch.tensor(ADVANTAGES, dtype=torch.float64), mask, behaviour)
    out.loss.backward()
    return out.loss.item(), current.grad.tolist()


def test_the_case_exercises_the_cap_a_clip_and_weights_both_sides_of_one() -> None:
    ratio_row_1 = math.exp(CURRENT[1][0] - PROXIMAL[1][0])
    assert ratio_row_1 < 1 - CONFIG.clip_eps_low  # negative advantage, ratio below the clip: no gradient there
    assert _by_hand()[1][1][0] == 0.0
    assert math.exp(LOG_WEIGHT[0][0]) > CONFIG.is_cap


def test_policy_loss_gradient_equals_the_hand_worked_one() -> None:
    expected_loss, expected_grad = _by_hand()
    loss, grad = _autograd()
    assert loss == pytest.approx(expected_loss, rel=1e-12)
    assert grad == [pytest.approx(row, rel=1e-12, abs=1e-15) for row in expected_grad]
    # Token (0, 0): weight 2 (3 truncated at the cap), ratio e^0.1, advantage 1.5, over 4 tokens.
    assert grad[0][0] == pytest.approx(-2.0 * math.exp(0.1) * 1.5 / 4, rel=1e-12)


def test_dropping_the_weight_changes_the_gradient(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(losses, "truncated_is_weight", lambda proximal, behaviour, mask, cap: torch.ones_like(proximal))
    _, expected_grad = _by_hand()
    _, grad = _autograd()
    assert grad != [pytest.approx(row, rel=1e-6) for row in expected_grad]
