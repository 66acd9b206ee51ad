"""Constrained decoding of the move (`reasoning.constrain_action`): once a response opens its `<action>` section, the
next tokens may only spell one of the legal moves followed by `</action>`, and then the end of the turn. The reasoning
before it stays free. Pure Python over a tokenizer's token texts: the `hf` engine masks its logits with it, and the
allowed token ids of each constrained position travel with the response so that the learner scores those tokens
under the same mask (`strat.train.sequences`)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

ACTION_OPEN = "<action>"
ACTION_CLOSE = "</action>"


class Decoder(Protocol):
    """The part of a Hugging Face tokenizer that turns token ids into text."""

    all_special_ids: list[int]

    def __len__(self) -> int: ...

    def decode(self, token_ids: list[int], skip_special_tokens: bool = ...) -> str: ...


@dataclass(frozen=True)
class TokenTexts:
    """The text each token id adds to a response (special tokens ""), and the ids by their text's first character."""

    texts: tuple[str, ...]
    by_first: dict[str, tuple[int, ...]]

    @classmethod
    def of(cls, texts: Sequence[str]) -> TokenTexts:
        index: dict[str, list[int]] = {}
        for token, piece in enumerate(texts):
            if piece:
                index.setdefault(piece[0], []).append(token)
        return cls(tuple(texts), {first: tuple(ids) for first, ids in index.items()})

    def starting(self, remainders: Sequence[str]) -> tuple[int, ...]:
        """Sorted token ids whose text starts one of `remainders` (non-empty strings)."""
        found: set[int] = set()
        for remainder in remainders:
            for token in self.by_first.get(remainder[0], ()):
                if remainder.startswith(self.texts[token]):
                    found.add(token)
        return tuple(sorted(found))


def token_texts(tokenizer: Decoder) -> TokenTexts:
    """Each token id's text as it adds to a response, read after an anchor (the first token that is not special): a
    tokenizer that drops the leading space of a text's first token would misstate a token read alone."""
    special = set(tokenizer.all_special_ids)
    anchor = next(token for token in range(len(tokenizer)) if token not in special)
    base = tokenizer.decode([anchor], skip_special_tokens=True)
    return TokenTexts.of([tokenizer.decode([anchor, token], skip_special_tokens=True)[len(base):]
                          for token in range(len(tokenizer))])


@dataclass(frozen=True)
class ActionConstraint:
    """What may follow a response's text, for one prompt: free until the text opens `<action>`, then a legal
    move's name and `</action>` (as the token texts spell them), then only an end-of-turn token."""

    vocabulary: TokenTexts
    stop_ids: tuple[int, ...]
    """The end-of-turn token ids."""
    moves: tuple[str, ...]
    """The legal moves' names."""

    def allowed(self, text: str) -> tuple[int, ...] | None:
        """The token ids that may come next after the response's `text` so far; None where the choice is free:
        before `<action>`, or where the action's text already left every legal move (a tokenizer that merged the tag
        with what follows into one token)."""
        start = text.find(ACTION_OPEN)
        if start < 0:
            return None
        written = text[start + len(ACTION_OPEN):]
        remainders = [target[len(written):] for target in (m + ACTION_CLOSE for m in self.moves)
                      if target.startswith(written)]
        if not remainders:
            return None
        if "" in remainders:
            return self.stop_ids
        return self.vocabulary.starting(remainders) or None
