"""Records: the learning outcome of an episode and the padded training batch."""

from __future__ import annotations

import pytest
import torch

from strat.algorithm.records import TrainBatch, TrainSample

from .helpers import episode, turn


def test_outcome_is_the_penalty_after_any_invalid_turn() -> None:
    ep = episode(
        "e",
        "g",
        [turn("player_0", 0), turn("player_1", 1, penalty=-3.0), turn("player_0", 2)],
        {"player_0": -1.0, "player_1": 1.0},
    )
    assert ep.outcome("player_0") == -1.0
    assert ep.outcome("player_1") == -3.0
    assert [t.turn_index for t in ep.turns_of("player_0")] == [0, 2]


def _sample(prompt: tuple[int, ...], response: tuple[int, ...], advantage: float) -> TrainSample:
    return TrainSample(
        "g", "e", "player_0", 0, prompt, response, tuple(-0.5 * (i + 1) for i in range(len(response))), advantage
    )


def test_collate_pads_prompts_left_and_responses_right() -> None:
    batch = TrainBatch.collate([_sample((1, 2, 3), (4,), 1.0), _sample((5,), (6, 7), -1.0)], pad_token_id=0)
    assert batch.prompt_ids.tolist() == [[1, 2, 3], [0, 0, 5]]
    assert batch.prompt_mask.tolist() == [[True, True, True], [False, False, True]]
    assert batch.response_ids.tolist() == [[4, 0], [6, 7]]
    assert batch.response_mask.tolist() == [[True, False], [True, True]]
    assert batch.behaviour_logprobs.tolist() == [[-0.5, 0.0], [-0.5, -1.0]]
    assert batch.advantages.tolist() == [1.0, -1.0]
    assert batch.input_ids.tolist() == [[1, 2, 3, 4, 0], [0, 0, 5, 6, 7]]
    assert batch.attention_mask.sum().item() == 7
    moved = batch.to("cpu")
    assert torch.equal(moved.response_ids, batch.response_ids)


def test_collate_rejects_mismatched_logprobs_and_empty_batches() -> None:
    bad = TrainSample("g", "e", "player_0", 3, (1,), (2, 3), (-0.1,), 0.0)
    with pytest.raises(ValueError, match="e/3: 1 behaviour log-probs for 2 response tokens"):
        TrainBatch.collate([bad], pad_token_id=0)
    with pytest.raises(ValueError, match="empty"):
        TrainBatch.collate([], pad_token_id=0)
