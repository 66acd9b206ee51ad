"""experiments/can_the_model_read_its_game/rules_answers.py: the held-out answer shares on fake models whose answers
are known (an oracle, a blind guesser, one that names half the legal moves), seen questions left out, and the greedy
answer of a tiny model reaching its chat prompt."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

from games.rules_corpus import rules_corpus
from strat.engines.base import chat_prompt_ids
from strat.train.pretrain import rules_messages
from strat.train.supervised import Messages

from .conftest import experiment_module

GAME = "tic_tac_toe"


@pytest.fixture(scope="module")
def answers():
    yield from experiment_module("rules_answers")


def oracle(game: str, kinds: tuple[str, ...], per_kind: int, seed: int):
    """An Answer that knows each drawn question's answer, by the question's user message."""
    drawn = rules_corpus(game, per_kind * len(kinds), seed=seed, kinds=kinds)
    table = {rules_messages("", example)[1]["content"]: example.answer for example in drawn}
    return lambda messages: table[messages[1]["content"]], drawn


def test_the_oracle_answers_every_question_exactly_and_a_blind_model_none(answers) -> None:
    kinds = ("legal_moves", "next_state")
    right, _ = oracle(GAME, kinds, 10, seed=7)
    results = answers.rules_answers(right, GAME, kinds, 10, 7, training=[])
    assert [(r.kind, r.exact.k, r.exact.n, r.seen.n) for r in results] == [("legal_moves", 10, 10, 0),
                                                                            ("next_state", 10, 10, 0)]
    assert results[0].precision == 1.0 and results[0].recall == 1.0 and results[1].precision is None
    blind = answers.rules_answers(lambda messages: "a1", GAME, ("legal_moves",), 10, 7, training=[])[0]
    assert blind.exact.k == 0


def test_half_the_legal_moves_named_with_one_taken_cell(answers) -> None:
    right, drawn = oracle(GAME, ("legal_moves",), 20, seed=3)
    cells = ("a1", "b1", "c1", "a2", "b2", "c2", "a3", "b3", "c3")

    def half(messages: Messages) -> str:  # half the legal cells, then a taken cell where there is one
        legal = answers.named_moves(right(messages))
        return ", ".join(legal[: len(legal) // 2] + [cell for cell in cells if cell not in legal][:1])

    result = answers.rules_answers(half, GAME, ("legal_moves",), 20, 3, training=[])[0]
    lists = [answers.named_moves(example.answer) for example in drawn]
    assert any(len(legal) == 9 for legal in lists) and any(len(legal) < 9 for legal in lists)
    expected_precision = sum((len(m) // 2) / (len(m) // 2 + (len(m) < 9)) for m in lists) / len(lists)
    expected_recall = sum((len(m) // 2) / len(m) for m in lists) / len(lists)
    assert result.exact.k == 0
    assert result.precision == pytest.approx(expected_precision)
    assert result.recall == pytest.approx(expected_recall)


def test_questions_in_the_training_corpus_are_left_out(answers) -> None:
    right, drawn = oracle("kuhn_poker", ("own_info",), 30, seed=7)
    training = drawn[:10]
    result = answers.rules_answers(right, "kuhn_poker", ("own_info",), 30, 7, training=training)[0]
    keys = {answers.question_key(example) for example in training}
    assert result.seen.n == sum(answers.question_key(example) in keys for example in drawn) >= 10
    assert result.exact.n == 30 - result.seen.n and result.exact.k == result.exact.n and result.seen.k == result.seen.n


def test_wilson_interval_by_hand(answers) -> None:
    low, high = answers.Share(8, 10).interval()
    assert (round(low, 4), round(high, 4)) == (0.4902, 0.9433)
    assert str(answers.Share(0, 0)).startswith("nan")


def test_the_greedy_answer_is_the_argmax_continuation_of_the_chat_prompt(answers, tiny_model_dir: Path) -> None:
    tokenizer = AutoTokenizer.from_pretrained(tiny_model_dir)
    model = AutoModelForCausalLM.from_pretrained(tiny_model_dir).eval()
    (example,) = rules_corpus("kuhn_poker", 1, seed=0, kinds=("own_info",))
    messages = rules_messages("rules", example)
    ids = chat_prompt_ids(tokenizer, messages)
    for _ in range(8):  # greedy decoding by hand: the argmax of the next-token logits, until end of turn
        with torch.no_grad():
            token = int(model(torch.tensor([ids])).logits[0, -1].argmax())
        if token == tokenizer.eos_token_id:
            break
        ids.append(token)
    expected = tokenizer.decode(ids[len(chat_prompt_ids(tokenizer, messages)):], skip_special_tokens=True)
    assert answers.greedy_answer(model, tokenizer, max_new_tokens=8)(messages) == expected
