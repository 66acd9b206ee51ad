"""Where each section of a response lies in its tokens, for credit by segment (`algorithm.credit: segment`).

A response's sections are found in its text by the parser's own reading (`reasoning.section_occurrences`), and
mapped to tokens through each token's end offset in the text; the offsets come from the tokenizer, on the rollout
worker (`strat.train.token_offsets`): nothing here imports one.

A span is (name, start, end): the tokens `start` (inclusive) to `end` (exclusive) of the response's token ids.
The names are the section tags (`think`, `past`, `their_view`, `plan`, `predict`, `action`) and `belief`, the
guess on the belief line inside `<past>` (after the last `BELIEF_MARKER`, to the end of its line), which the
comparator scores as the belief."""

from __future__ import annotations

from bisect import bisect_left, bisect_right
from collections.abc import Sequence

from strat.algorithm.reasoning import BELIEF_MARKER, section_occurrences

SectionSpan = tuple[str, int, int]
"""(section name, first token, end token exclusive) over a response's token ids."""

BELIEF_SPAN = "belief"
"""The span name of the belief line's guess."""


def section_char_spans(text: str) -> tuple[SectionSpan, ...]:
    """Each section's content in `text` as character spans, stripped as the parser strips it, first occurrence of
    each name (the one the parser keeps), in order; `belief` follows `past` when its belief line has a guess.
    Empty sections have no span."""
    spans: list[SectionSpan] = []
    seen: set[str] = set()
    occurrences, _ = section_occurrences(text)
    for name, start, end in occurrences:
        if name in seen:
            continue
        seen.add(name)
        start, end = _stripped(text, start, end)
        if start < end:
            spans.append((name, start, end))
        if name == "past":
            belief = _belief_span(text, start, end)
            if belief is not None:
                spans.append(belief)
    return tuple(spans)


def _stripped(text: str, start: int, end: int) -> tuple[int, int]:
    content = text[start:end]
    lead = len(content) - len(content.lstrip())
    return (start + lead, end - (len(content) - len(content.rstrip()))) if content.strip() else (start, start)


def _belief_span(text: str, start: int, end: int) -> SectionSpan | None:
    """The guess after the last belief marker of the `past` content text[start:end], to the end of its line
    (as `comparison.belief_text` reads it), stripped."""
    past = text[start:end]
    marker = past.lower().rfind(BELIEF_MARKER)
    if marker < 0:
        return None
    guess_start = start + marker + len(BELIEF_MARKER)
    newline = text.find("\n", guess_start, end)
    first, last = _stripped(text, guess_start, end if newline < 0 else newline)
    return (BELIEF_SPAN, first, last) if first < last else None


def token_spans(char_spans: Sequence[SectionSpan], token_ends: Sequence[int]) -> tuple[SectionSpan, ...]:
    """`char_spans` as token spans, given each token's end offset in the text (non-decreasing; token i covers the
    characters token_ends[i-1] to token_ends[i], token 0 from 0). A span takes every token that covers one of its
    characters, so a token that straddles two sections (BPE merges such as `bet<`) lies in both. Spans that no
    token covers are left out."""
    out: list[SectionSpan] = []
    count = len(token_ends)
    for name, start, end in char_spans:
        first = bisect_right(token_ends, start)
        last = min(bisect_left(token_ends, end) + 1, count)
        if first < last:
            out.append((name, first, last))
    return tuple(out)


def section_token_spans(text: str, token_ends: Sequence[int]) -> tuple[SectionSpan, ...]:
    """The section spans of a response, over its tokens: `section_char_spans` through `token_spans`."""
    return token_spans(section_char_spans(text), token_ends)


def monotone_ends(ends: Sequence[int]) -> list[int]:
    """Token end offsets made non-decreasing: each is lowered to the smallest that follows it. Decoding a prefix
    that ends inside a multi-byte character gives a replacement character the full text does not have; the token
    that completes the character then holds it."""
    out = list(ends)
    for index in range(len(out) - 2, -1, -1):
        out[index] = min(out[index], out[index + 1])
    return out
