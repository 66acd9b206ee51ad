"""Leduc poker with text."""

from __future__ import annotations

import random
import re

import pyspiel

from games.base import TextGameEnv
from games.cards import card_values, rank_names
from games.openspiel_env import OpenSpielEnv
from games.posterior import posterior

FOLD, CALL, RAISE = 0, 1, 2
_ANTES = re.compile(r"\[Ante: ([\d ]+)\]")


def heuristic_policy(env: LeducPokerEnv, agent: str) -> dict[int, float]:
    """Raise with a Queen, a King or a pair; otherwise check or call, but fold a Jack to a raise: the heuristic player
    (`games.heuristics`), kept here because the warm start's model of an opponent (`sensible_model`) reads it too."""
    legal = env.legal_actions(agent)
    strong = env.strong_hand(agent)
    if strong and RAISE in legal:
        return {RAISE: 1.0}
    if strong or FOLD not in legal:
        return {CALL: 1.0}
    return {FOLD: 1.0}


def sensible_model(env: TextGameEnv, agent: str) -> dict[int, float]:
    """The warm start's model of an opponent, for its templated belief: half the time the heuristic player's rule
    (`heuristic_policy`), half the time a uniformly random legal move. A belief read under it is close to the exact
    one against either player (docs/results.md, issue 41)."""
    assert isinstance(env, LeducPokerEnv)
    legal = env.legal_actions(agent)
    probs = dict.fromkeys(legal, 0.5 / len(legal))
    for action, p in heuristic_policy(env, agent).items():
        probs[action] += 0.5 * p
    return probs


class LeducPokerEnv(OpenSpielEnv):
    """Leduc poker: a private card each, a public card after round one, two betting rounds."""

    game_name = "leduc_poker"
    fixed_options = {"action_mapping": False, "suit_isomorphism": False}
    belief_values = staticmethod(card_values)
    exact_posterior = True

    @classmethod
    def _action_names(cls, game: pyspiel.Game) -> list[str]:
        return ["fold", "call", "raise"]

    @classmethod
    def _exploitable(cls, game: pyspiel.Game) -> bool:
        return game.num_players() == 2  # the sequence-form best response is two-player

    @property
    def _ranks(self) -> tuple[str, ...]:
        return rank_names(self.spec.num_players + 1)

    def rules(self) -> str:
        n = self.spec.num_players
        ranks = ", ".join(f"two {rank}s" for rank in self._ranks)
        return (
            f"Leduc poker for {n} players. The deck has {2 * (n + 1)} cards: {ranks} "
            f"({' < '.join(self._ranks)}). Each player puts 1 chip in the pot (the ante) and is "
            "dealt one private card. There are two betting rounds; after the first, one public "
            "card is revealed. In a round players act in turn, starting with player 0: "
            '"raise" matches the current bet and adds 2 chips in round 1 or 4 chips in round 2 '
            '(at most two raises per round); "call" matches the current bet, or checks when there '
            'is none; "fold", only when facing a bet, gives up the pot. A round ends when everyone '
            "has called the last raise or checked. At the showdown a player whose card pairs the "
            "public card wins; otherwise the highest card wins, and equal ranks split the pot. "
            "Your return is the chips you win minus the chips you put in."
        )

    def observation_text(self, agent: str) -> str:
        player = self._seats[agent]
        state = self._state
        parts = [f"You are player {player}. You hold a {self.private_info(agent)}."]
        public = self.public_card()
        if public is None:
            parts.append("No public card yet.")
        else:
            parts.append(f"The public card is a {self._ranks[public]}.")
        antes = [int(x) for x in _ANTES.search(state.observation_string(player)).group(1).split()]
        others = ", ".join(
            f"{self._who(p, player).lower()} {chips}"
            for p, chips in enumerate(antes)
            if p != player
        )
        parts.append(f"The pot has {sum(antes)} chips: you put in {antes[player]}, {others}.")
        parts.extend(self._moves_since_last_turn(player))
        if state.is_terminal():
            parts.append("The hand is over.")
        return " ".join(parts)

    def card(self, agent: str) -> int:
        """Rank of `agent`'s private card: 0 (Jack) to num_players (King for two players)."""
        return self._state.history()[self._seats[agent]] // 2

    def public_card(self) -> int | None:
        """Rank of the public card, or None before it is dealt."""
        deals = [action for player, action in self._events() if player == pyspiel.PlayerId.CHANCE]
        return deals[-1] // 2 if len(deals) > self.spec.num_players else None

    def private_info(self, agent: str) -> str:
        return self._ranks[self.card(agent)]

    def strong_hand(self, agent: str) -> bool:
        """A Queen, a King or a pair with the public card (with more players, one of the two highest ranks)."""
        card = self.card(agent)
        return card >= self.spec.num_players - 1 or card == self.public_card()

    def guess_private_info(self, agent: str, seat: int, rng: random.Random) -> tuple[str, str]:
        """The most likely card of player `seat` given what `agent` sees (its own card, the public card and the moves),
        under a stated model of the others, `sensible_model`: the exact posterior (`games.posterior`), ties broken by
        `rng`. The why names the evidence the moves give."""
        ranks = self._ranks
        deals = 0
        raised_late = raised = acted = False
        for event in self._state.full_history():
            if event.player < 0:
                deals += 1
            elif event.player == seat:
                acted = True
                raised |= event.action == RAISE
                raised_late |= event.action == RAISE and deals > self.spec.num_players
        if raised_late and self.public_card() is not None:
            evidence = "A raise after the public card suggests a pair or a strong card"
        elif raised:
            evidence = "A raise suggests a strong card"
        elif acted:
            evidence = "Only calling or checking suggests a weak card"
        else:
            evidence = "They have not acted yet"
        found = posterior(self, agent, self.possible_agents[seat], sensible_model)
        top = max(found.probabilities.values())
        names = [rank.lower() for rank in ranks]  # the posterior names a card as `belief_values` reads it
        likeliest = sorted((names.index(value) for value, p in found.probabilities.items() if p >= top - 1e-12))
        return f"{evidence}, and I count the cards I can see.", ranks[rng.choice(likeliest)]

    def move_reading(self, agent: str, action: int) -> str:
        return {"raise": "they may take it for a strong hand", "call": "they may take it for a middling hand"}.get(
            self.action_name(action, agent), "they will see that my hand is weak"
        )

    def _chance_text(self, index: int, outcome: int, viewer: int) -> str:
        if index < self.spec.num_players:
            return ""
        return f"The public card is a {self._ranks[outcome // 2]}."

    def _move_text(self, action: int, earlier: list[tuple[int, int]]) -> str:
        if action == FOLD:
            return "folded"
        if action == RAISE:
            return "raised"
        return "called" if _raises_in_round(earlier) else "checked"


def _raises_in_round(events: list[tuple[int, int]]) -> int:
    """Raises since the last chance event (a deal starts each betting round)."""
    start = max(i for i, (player, _) in enumerate(events) if player == pyspiel.PlayerId.CHANCE)
    return sum(1 for _, action in events[start + 1:] if action == RAISE)
