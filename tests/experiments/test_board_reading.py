"""experiments/does_the_model_read_the_board/board_reading.py: the cell probabilities against a forward pass per
token, and the figures' ranges."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

from strat.model import tiny

from .conftest import experiment_module


@pytest.fixture(scope="module")
def reading():
    yield from experiment_module("board_reading")


@pytest.fixture(scope="module")
def board_model(tmp_path_factory: pytest.TempPathFactory) -> tuple[object, object]:
    model_dir: Path = tiny.build("tic_tac_toe", tmp_path_factory.mktemp("models") / "ttt", seed=0)
    model = AutoModelForCausalLM.from_pretrained(model_dir, use_safetensors=True).eval()
    return model, AutoTokenizer.from_pretrained(model_dir)


def test_cell_probabilities_against_one_forward_pass_per_token(reading, board_model) -> None:
    model, tokenizer = board_model
    context = tokenizer("<plan>I will play a1.</plan>\n<action>", add_special_tokens=False)["input_ids"]
    got = reading.cell_probabilities(model, tokenizer, context, space=False)
    # Reference: each cell's tokens scored one at a time, without padding, then renormalised over the nine.
    scores = []
    with torch.no_grad():
        for cell in reading.CELLS:
            ids, score = list(context), 0.0
            for token in tokenizer(cell, add_special_tokens=False)["input_ids"]:
                score += float(torch.log_softmax(model(torch.tensor([ids])).logits[0, -1].float(), -1)[token])
                ids.append(token)
            scores.append(score)
    expected = torch.softmax(torch.tensor(scores), 0).tolist()
    assert [got[cell] for cell in reading.CELLS] == pytest.approx(expected, abs=1e-5)
    assert sum(got.values()) == pytest.approx(1.0)
    assert all(len(tokenizer(" " + c, add_special_tokens=False)["input_ids"]) == 2 for c in reading.CELLS)


def test_the_figures_are_shares_over_the_requested_decisions(reading, board_model) -> None:
    model, tokenizer = board_model
    result = reading.read_boards(model, tokenizer, states=3, seed=0)
    assert result.states == 3
    for share in (result.legal_at_first_mention, result.legal_at_action, result.planned_at_action):
        assert 0.0 < share < 1.0
    # A random-weights model does not copy its plan: no more than a uniform pick's 1/9 by a wide margin.
    assert result.planned_at_action < 0.5
