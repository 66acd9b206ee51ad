"""Where a response names a move, and which tokens a move could start with there: what the move entropy bonus
(`loss.move_entropy_coef`) is computed over."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch
from transformers import PreTrainedTokenizerBase

from strat.algorithm.reasoning import move_mention_indices
from strat.algorithm.records import TrainSample


@dataclass(frozen=True)
class MoveChoices:
    """A batch's move mentions: `mask` [B, width] bool where a move is named, `candidates` [B, width, K] the token ids
    a move could start with there (-1 for none)."""

    mask: torch.Tensor
    candidates: torch.Tensor


class MoveTokens:
    """The game's move names as a tokenizer spells them."""

    def __init__(self, tokenizer: PreTrainedTokenizerBase, move_names: Sequence[str]) -> None:
        self.tokenizer = tokenizer
        self.move_names = tuple(move_names)
        self._pieces: dict[int, str] = {}
        """Each token id's text, decoded alone (for finding where moves are named)."""
        self._first: tuple[list[int], list[int]] | None = None

    def choices(self, samples: Sequence[TrainSample], width: int, device: torch.device) -> MoveChoices:
        """Where each response names a move (`strat.algorithm.reasoning.move_mention_indices`) and the tokens a move
        could start with there.

        The candidates are the first tokens of the move names spelt as the named token is (after a space or not);
        a mention whose token starts no name that way (merged with the text before it) is left out."""
        spaced, plain = self.first_tokens()
        size = max(len(spaced), len(plain), 1)
        mask = torch.zeros((len(samples), width), dtype=torch.bool)
        candidates = torch.full((len(samples), width, size), -1, dtype=torch.long)
        for row, sample in enumerate(samples):
            pieces = [self._piece(token) for token in sample.response_token_ids]
            for index in move_mention_indices(pieces, self.move_names):
                token = sample.response_token_ids[index]
                options = spaced if pieces[index][:1].isspace() else plain
                if token not in options:
                    continue
                mask[row, index] = True
                candidates[row, index, : len(options)] = torch.tensor(options, dtype=torch.long)
        return MoveChoices(mask.to(device), candidates.to(device))

    def _piece(self, token: int) -> str:
        if token not in self._pieces:
            self._pieces[token] = self.tokenizer.decode([token])
        return self._pieces[token]

    def first_tokens(self) -> tuple[list[int], list[int]]:
        """The distinct first tokens of the move names after a space, and without one."""
        if self._first is None:
            def first(text: str) -> list[int]:
                return self.tokenizer.encode(text, add_special_tokens=False)[:1]

            names = [name.strip() for name in self.move_names if name.strip()]
            spaced = sorted({token for name in names for token in first(" " + name)})
            plain = sorted({token for name in names for token in first(name)})
            self._first = (spaced, plain)
        return self._first
