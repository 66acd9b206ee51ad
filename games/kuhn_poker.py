"""Kuhn poker (2 or more players) with text."""

from __future__ import annotations

import random

import pyspiel

from games.cards import card_values, rank_names
from games.openspiel_env import OpenSpielEnv

PASS, BET = 0, 1

MOVE_NAMES: dict[str, tuple[tuple[str, str], tuple[str, str]]] = {
    "pass-bet": (("pass", "bet"), ("pass", "bet")),
    "situational": (("check", "bet"), ("fold", "call")),
}
"""The `move_names` option: the names of (pass, bet) before anyone has bet, and once someone has. `pass-bet` is
OpenSpiel's naming, one pair for both situations; `situational` names the moves as a poker player does, so that
opening and answering a bet are different words."""


class KuhnPokerEnv(OpenSpielEnv):
    """Kuhn poker: one private card each, one betting round; options `players` (default 2) and `move_names`
    (`pass-bet`, the default, or `situational`: check/bet before a bet, fold/call after one)."""

    game_name = "kuhn_poker"
    belief_values = staticmethod(card_values)
    exact_posterior = True
    text_options = {"move_names": tuple(MOVE_NAMES)}

    @classmethod
    def _action_names(cls, game: pyspiel.Game) -> list[str]:
        return ["pass", "bet"]

    @classmethod
    def _exploitable(cls, game: pyspiel.Game) -> bool:
        return game.num_players() == 2  # the sequence-form best response is two-player

    def action_name(self, action: int, agent: str | None = None) -> str:
        """The move's name in the current situation (`move_names`): answering a bet may name it differently."""
        opening, facing = MOVE_NAMES[self.text["move_names"]]
        return (facing if self.facing_bet() else opening)[action]

    def all_action_names(self) -> list[str]:
        opening, facing = MOVE_NAMES[self.text["move_names"]]
        return list(dict.fromkeys([*opening, *facing]))

    @property
    def _ranks(self) -> tuple[str, ...]:
        return rank_names(self.spec.num_players + 1)

    def rules(self) -> str:
        n = self.spec.num_players
        ranks = self._ranks
        return (
            f"Kuhn poker for {n} players. The deck has {n + 1} cards, one of each rank: "
            f"{' < '.join(ranks)}. Each player puts 1 chip in the pot (the ante) and is dealt one "
            "private card; the other cards stay hidden. Players act once each in turn, starting "
            f"with player 0{self._moves_rule()} The pot goes "
            "to the player with the highest card among those who did not fold; if everyone but "
            "the bettor folds, the bettor takes it without a showdown. Your return is the chips "
            "you win minus the chips you put in."
        )

    def _moves_rule(self) -> str:
        (check, bet), (fold, call) = MOVE_NAMES[self.text["move_names"]]
        if (check, bet) == (fold, call):
            return (f', choosing "{check}" or "{bet}". Before anyone has bet, "{check}" checks and "{bet}" puts 1 '
                    f'more chip in the pot. Once someone has bet, every other player gets one turn: "{bet}" calls '
                    f'(puts 1 chip in) and "{check}" folds (gives up the pot).')
        return (f'. Before anyone has bet, each chooses "{check}" (put nothing in) or "{bet}" (put 1 more chip in the '
                f'pot). Once someone has bet, every other player gets one turn and chooses "{call}" (put 1 chip in) '
                f'or "{fold}" (give up the pot).')

    def observation_text(self, agent: str) -> str:
        player = self._seats[agent]
        moves = [action for p, action in self._events() if p >= 0]
        pot = self.spec.num_players + moves.count(BET)
        parts = [f"You are player {player}. You hold the {self.private_info(agent)}."]
        parts.extend(self._moves_since_last_turn(player))
        if not moves and player == self._current:
            parts.append("You act first.")
        parts.append(f"The pot has {pot} chips.")
        if self._state.is_terminal():
            parts.append("The hand is over.")
        return " ".join(parts)

    def card(self, agent: str) -> int:
        """Rank of `agent`'s card: 0 is the lowest (Jack), num_players the highest."""
        return self._state.history()[self._seats[agent]]

    def private_info(self, agent: str) -> str:
        return self._ranks[self.card(agent)]

    def guess_private_info(self, agent: str, seat: int, rng: random.Random) -> tuple[str, str]:
        others = [rank for rank in self._ranks if rank != self.private_info(agent)]
        moves = self.moves_of(seat)
        if BET in moves:
            return "A bet or a call suggests a strong card.", others[-1]
        if PASS in moves:
            return "Checking or folding suggests a weak card.", others[0]
        return "They have not acted yet.", rng.choice(others)

    def facing_bet(self) -> bool:
        """Whether someone has bet this hand: the player to act then calls or folds rather than bets or checks."""
        return any(event.player >= 0 and event.action == BET for event in self._state.full_history())

    def move_reading(self, agent: str, action: int) -> str:
        facing = self.facing_bet()
        if action == BET:
            return "they may think my card is good enough to win" if facing else "they may take it for a strong card"
        return "they will see that my card is weak" if facing else "they may take it for a weak or middling card"

    def _move_text(self, action: int, earlier: list[tuple[int, int]]) -> str:
        if any(player >= 0 and move == BET for player, move in earlier):
            return "called" if action == BET else "folded"
        return "bet" if action == BET else "checked"
