"""Each response token's end offset in the response text, from the tokenizer: what credit by segment maps a
response's sections onto its tokens with (`strat.algorithm.segments`). The rollout worker holds the tokenizer."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from strat.algorithm.segments import SectionSpan, monotone_ends, section_token_spans


class TokenOffsets:
    """Token end offsets in a decoded response, as the engines decode it (`skip_special_tokens=True`).

    Tokens decoded one at a time (cached by id) give the offsets at once when their pieces join into the text, as
    byte-level BPE's do away from multi-byte characters. Otherwise (a character split over tokens, a tokenizer that
    drops a word's leading space when it decodes the word alone) each prefix is decoded: exact, and quadratic in
    the response's length."""

    def __init__(self, tokenizer: Any) -> None:
        self.tokenizer = tokenizer
        self._pieces: dict[int, str] = {}

    def __call__(self, token_ids: Sequence[int], text: str) -> list[int]:
        """The end offset of each of `token_ids` in `text`, their decoding."""
        ends: list[int] = []
        total = 0
        for token in token_ids:
            total += len(self._piece(token))
            ends.append(total)
        if total == len(text) and "".join(self._piece(token) for token in token_ids) == text:
            return ends
        decode = self.tokenizer.decode
        return monotone_ends([len(decode(list(token_ids[: index + 1]), skip_special_tokens=True))
                              for index in range(len(token_ids))])

    def spans(self, token_ids: Sequence[int], text: str) -> tuple[SectionSpan, ...]:
        """The section spans of the response `token_ids` that decode to `text`."""
        return section_token_spans(text, self(token_ids, text))

    def _piece(self, token: int) -> str:
        piece = self._pieces.get(token)
        if piece is None:
            piece = self._pieces[token] = self.tokenizer.decode([token], skip_special_tokens=True)
        return piece
