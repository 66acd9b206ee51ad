"""experiments/does_the_move_read_its_reasoning/belief_swap.py: the swap of a belief's card, the move's bet share, and
the per-state effect on fake models whose move reads the belief, or ignores it, by construction."""

from __future__ import annotations

import math
import re

import pytest

from .conftest import experiment_module

MOVE = "\n<plan>p</plan>\n<predict>pass</predict>\n<action>{}</action>"


@pytest.fixture(scope="module")
def swap():
    yield from experiment_module("belief_swap")


def test_the_belief_names_each_card_one_may_face(swap) -> None:
    past = "My opponent bet.\nbelief: player 1 King"
    assert swap.swap_belief(past, "Queen") == ("My opponent bet.\nbelief: player 1 Jack", past)
    assert swap.swap_belief(past, "Jack") == ("My opponent bet.\nbelief: player 1 Queen", past)
    assert swap.swap_belief(past, "King") is None  # it names one's own card
    assert swap.swap_belief("My opponent bet.", "Queen") is None
    # Only the belief line's last card changes, not a card named before the marker.
    hedged = "I hold the Queen.\nbelief: Jack or king"
    assert swap.swap_belief(hedged, "Queen")[1] == "I hold the Queen.\nbelief: Jack or King"


def test_the_bet_share_counts_legal_moves_only(swap) -> None:
    prefix = "<past>x\nbelief: player 1 Jack</past>"
    continuations = [MOVE.format("bet"), MOVE.format("bet"), MOVE.format("pass"), MOVE.format("raise")]
    assert swap.bet_share(prefix, continuations, depth=1) == pytest.approx(2 / 3)
    assert math.isnan(swap.bet_share(prefix, [MOVE.format("fold")], depth=1))


def fake_model(reads_belief: bool):
    """Texts are their characters' code points. A first response names the highest card one does not hold; after a
    given past, the move bets when the belief names a card below one's own, or, not reading the belief, bets on
    every other continuation whatever it names."""
    ranks = ("Jack", "Queen", "King")

    def encode(messages) -> list[int]:
        return [ord(c) for c in messages[-1]["content"]]

    def tokenize(text: str) -> list[int]:
        return [ord(c) for c in text]

    def complete(prompts: list[list[int]], samples: int) -> list[str]:
        texts = []
        for prompt in prompts:
            text = "".join(map(chr, prompt))
            own = re.search(r"You hold the (\w+)", text).group(1)
            believed = re.findall(r"belief: player \d (\w+)</past>", text)
            for sample in range(samples):
                if not believed:
                    top = [rank for rank in ranks if rank != own][-1]
                    texts.append(f"<past>x\nbelief: player 1 {top}</past>" + MOVE.format("pass"))
                elif reads_belief:
                    texts.append(MOVE.format("bet" if ranks.index(believed[0]) < ranks.index(own) else "pass")[1:])
                else:
                    texts.append(MOVE.format("bet" if sample % 2 else "pass")[1:])
        return texts

    return encode, tokenize, complete


def test_a_move_that_reads_the_belief_moves_with_it(swap) -> None:
    results = swap.belief_effects(*fake_model(reads_belief=True), responses=3, continuations=2, depth=1)
    assert len(results) == 12 and all(r.skipped == 0 and len(r.effects) == 3 for r in results)
    by_state = {r.info_state: set(r.effects) for r in results}
    # Holding the Queen, the lower card (Jack) is below it and the higher (King) is not: the move flips, effect 1.
    assert by_state["1"] == by_state["1pb"] == {1.0}
    # Holding the Jack neither other card is below it; holding the King both are: the belief changes nothing.
    assert by_state["0"] == by_state["2b"] == {0.0}


def test_a_move_that_ignores_the_belief_scores_zero(swap) -> None:
    results = swap.belief_effects(*fake_model(reads_belief=False), responses=2, continuations=4, depth=1)
    assert all(set(r.effects) == {0.0} for r in results)
