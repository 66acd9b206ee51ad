"""Card rank names for the poker games, whose decks have one rank more than players."""

from __future__ import annotations

_RANKS = ("Two", "Three", "Four", "Five", "Six", "Seven", "Eight", "Nine", "Ten",
          "Jack", "Queen", "King", "Ace")


def rank_names(num_ranks: int) -> tuple[str, ...]:
    """Names of ranks 0..num_ranks-1, lowest first: Jack to King for three, up to Ace beyond."""
    if num_ranks == 3:
        return ("Jack", "Queen", "King")
    return _RANKS[len(_RANKS) - num_ranks:]
