"""experiments/can_the_model_read_its_game/copy_curve.py: its training decisions are the probe's task with a legal
move as the answer, and its loss is the targets' cross-entropy, checked against unpadded forward passes."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

from strat.model import tiny

from .conftest import experiment_module


@pytest.fixture(scope="module")
def curve():
    yield from experiment_module("copy_curve")


def test_each_decision_is_cut_where_the_probe_cuts_and_answered_with_a_legal_move(curve) -> None:
    drawn = curve.decisions("tic_tac_toe", 2, 12, seed=3, options={}, name_legal=False)
    assert len(drawn) == 12
    for decision in drawn:
        assert decision.move in decision.legal
        assert decision.prefix.startswith("<past>") and decision.move not in decision.prefix.split("<their_view>")[1]
    assert any(len(decision.legal) < 9 for decision in drawn)


def test_the_loss_is_the_targets_cross_entropy(curve, tmp_path: Path) -> None:
    """The padded batch's loss equals the mean over examples of each target's cross-entropy computed from that
    example alone (no padding), plus, with a context weight, that weight times the context's own mean next-token
    cross-entropy."""
    model_dir = tiny.build("tic_tac_toe", tmp_path / "ttt", seed=0)
    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32, use_safetensors=True).eval()
    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    batch = [curve.tokenized(tokenizer, d) for d in curve.decisions("tic_tac_toe", 1, 3, seed=5, options={},
                                                                     name_legal=False)]
    assert len({len(context) for context, _, _ in batch}) > 1, "the examples must need padding"
    alone, with_context = [], []
    with torch.no_grad():
        for context, target, _ in batch:
            logprobs = torch.log_softmax(model(torch.tensor([context + target])).logits[0], dim=-1)
            move = -sum(float(logprobs[len(context) - 1 + k, token]) for k, token in enumerate(target)) / len(target)
            reading = -sum(float(logprobs[k - 1, context[k]]) for k in range(1, len(context))) / (len(context) - 1)
            alone.append(move)
            with_context.append(move + 0.25 * reading)
        loss = curve.batch_loss(model, tokenizer.pad_token_id, batch)
        dense = curve.batch_loss(model, tokenizer.pad_token_id, batch, context_weight=0.25)
    assert float(loss) == pytest.approx(sum(alone) / len(alone), abs=1e-4)
    # --context-loss adds the weighted mean next-token loss of each example's own context
    assert float(dense) == pytest.approx(sum(with_context) / len(with_context), abs=1e-4)


def test_the_soft_target_is_the_mean_of_the_legal_moves_targets(curve, tmp_path: Path) -> None:
    """`--soft`: a decision's loss is the mean, over its legal moves, of the loss with that move as the target (the
    expectation of the drawn target's loss); the digits' names share the leading space and part at the digit."""
    from dataclasses import replace

    model_dir = tiny.build("tic_tac_toe", tmp_path / "ttt", seed=0, text_options=(("move_names", "digits"),))
    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32, use_safetensors=True).eval()
    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    decision = curve.decisions("tic_tac_toe", 2, 3, seed=5, options={"move_names": "digits"}, name_legal=False)[2]
    assert 1 < len(decision.legal) < 9
    with torch.no_grad():
        drawn = [float(curve.batch_loss(model, tokenizer.pad_token_id,
                                        [curve.tokenized(tokenizer, replace(decision, move=move))]))
                 for move in decision.legal]
        soft = float(curve.batch_loss(model, tokenizer.pad_token_id, [curve.tokenized(tokenizer, decision, soft=True)]))
    assert len(set(drawn)) > 1
    assert soft == pytest.approx(sum(drawn) / len(drawn), abs=1e-5)


def test_one_token_names_replace_every_whole_move_name(curve) -> None:
    names = curve.one_token_names(["a1", "b1", "c1", "a2", "b2", "c2", "a3", "b3", "c3"])
    assert names["a1"] == "1" and names["b2"] == "5" and names["c3"] == "9"
    assert curve.renamed("Legal actions: b1, c3. <action>b2</action> ab1 b12", names) == \
        "Legal actions: 2, 9. <action>5</action> ab1 b12"
    drawn = curve.decisions("tic_tac_toe", 2, 4, seed=3, options={}, name_legal=False, one_token=True)
    for decision in drawn:
        assert decision.move in decision.legal and all(len(name) == 1 for name in decision.legal)
        assert f"Legal actions: {', '.join(decision.legal)}" in decision.messages[-1]["content"]


def test_the_figure_is_the_board_probe_s_and_the_short_context_is_the_legal_line(curve, tmp_path: Path) -> None:
    """With the full context the held-out figure is `perception_probes.legal_mass`'s on the same decisions; the
    `legal` context is the prompt's legal-moves line and "I play"."""
    import perception_probes as probes

    model_dir = tiny.build("tic_tac_toe", tmp_path / "ttt", seed=0)
    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32, use_safetensors=True).eval()
    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    held_out = curve.decisions("tic_tac_toe", 2, 5, seed=0, options={}, name_legal=False)
    shares = curve.legal_shares(model, tokenizer, held_out)
    expected = probes.legal_mass(probes.model_scorer(model, tokenizer), "tic_tac_toe", states=5, seed=0, depth=2)
    assert sum(shares) / len(shares) == pytest.approx(expected.share.mean, abs=1e-6)
    ids, space = curve.context_ids(tokenizer, held_out[0], "legal")
    assert space and tokenizer.decode(ids) == f"Legal actions: {', '.join(held_out[0].legal)}\nI play"
    full, _ = curve.context_ids(tokenizer, held_out[0], "full")
    user, _ = curve.context_ids(tokenizer, held_out[0], "user")
    assert "Rules:" in tokenizer.decode(full) and "Rules:" not in tokenizer.decode(user)
    assert tokenizer.decode(user).endswith(held_out[0].prefix) and len(user) < len(full)


def test_curriculum_stages_are_read_in_order_and_bad_ones_refused(curve) -> None:
    assert curve.curriculum("legal:8000, user:4000") == [("legal", 8000), ("user", 4000)]
    assert curve.curriculum("") == []
    for bad in ("legal", "board:10", "legal:0", "legal:x"):
        with pytest.raises(ValueError, match="expected CONTEXT:EXAMPLES"):
            curve.curriculum(bad)
