"""The model card names the KL penalty by the divergence its gradient follows and says what it is anchored to."""

from __future__ import annotations

from pathlib import Path

from strat.config_loading import load_config
from strat.export.card import _method_rows

KUHN = Path(__file__).resolve().parents[2] / "configs" / "kuhn_poker_tiny.yaml"


def _loss_row(*overrides: str) -> str:
    return dict(_method_rows(load_config(KUHN, list(overrides))))["loss"]


def test_the_card_says_what_the_kl_is_and_what_it_is_anchored_to() -> None:
    # The shipped Kuhn config: the earlier k3, a moving anchor on the snapshot opponent.
    row = _loss_row("schedule.snapshot_every=7")
    assert ("forward KL(anchor || policy) penalty (k3 estimator) x 0.2, anchored to the snapshot opponent's weights,"
            " moved every 7 steps") in row
    assert "initial policy" not in row
    row = _loss_row("algorithm.kl_type=reverse", "algorithm.kl_coef=0.05", "algorithm.kl_reference=initial")
    assert ("reverse KL(policy || anchor) penalty (k2 estimator) x 0.05, anchored to the initial policy (the weights"
            " RL started from)") in row
    assert "KL" not in _loss_row("algorithm.kl_type=none", "algorithm.kl_coef=0", "algorithm.kl_reference=initial")
