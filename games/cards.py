"""Card rank names for the poker games, whose decks have one rank more than players."""

from __future__ import annotations

import re

_RANKS = ("Two", "Three", "Four", "Five", "Six", "Seven", "Eight", "Nine", "Ten",
          "Jack", "Queen", "King", "Ace")


def rank_names(num_ranks: int) -> tuple[str, ...]:
    """Names of ranks 0..num_ranks-1, lowest first: Jack to King for three, up to Ace beyond."""
    if num_ranks == 3:
        return ("Jack", "Queen", "King")
    return _RANKS[len(_RANKS) - num_ranks:]


_CARD = re.compile(r"\b(" + "|".join(rank.lower() for rank in _RANKS) + r")s?\b", re.IGNORECASE)


def card_values(text: str) -> tuple[str, ...]:
    """Card ranks named in `text`, lower-case, in order ("Kings" counts as "king")."""
    return tuple(match.group(1).lower() for match in _CARD.finditer(text))
