"""Tolerant matching of free text against a game's action names."""

from __future__ import annotations

import re
from collections.abc import Iterable

_NON_WORD = re.compile(r"[^a-z0-9]+")


def normalize(text: str) -> str:
    """Lower-case `text` and reduce every run of non-alphanumerics to one space."""
    return _NON_WORD.sub(" ", text.lower()).strip()


class ActionNameMatcher:
    """Finds which of a fixed set of action names a piece of text mentions."""

    def __init__(self, names: Iterable[str]) -> None:
        self._by_normal: dict[str, str] = {}
        for name in names:
            key = normalize(name)
            if not key or key in self._by_normal:
                raise ValueError(f"action name {name!r} is empty or not unique after normalization")
            self._by_normal[key] = name
        # Longest first, so that a name that contains another name wins at the same position.
        alternatives = sorted(self._by_normal, key=len, reverse=True)
        self._pattern = re.compile(
            r"(?<![a-z0-9])(" + "|".join(map(re.escape, alternatives)) + r")(?![a-z0-9])"
        )

    def exact(self, text: str) -> str | None:
        """The name that `text` spells, up to case, spacing and punctuation."""
        return self._by_normal.get(normalize(text))

    def find(self, text: str) -> str | None:
        """The one name that `text` mentions; None if it mentions none or several different ones."""
        found = {match.group(1) for match in self._pattern.finditer(normalize(text))}
        if len(found) != 1:
            return None
        return self._by_normal[found.pop()]
