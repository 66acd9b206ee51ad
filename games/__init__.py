"""Strat's games: PettingZoo AEC environments that an LLM plays through text."""

from __future__ import annotations

from games.base import GameSpec, TextGameEnv
from games.corpus import text_corpus
from games.registry import belief_values, make, moves_can_be_illegal, names, register, spec, text_options

__all__ = [
    "GameSpec", "TextGameEnv", "belief_values", "make", "moves_can_be_illegal",
    "names", "register", "spec", "text_corpus", "text_options",
]
