"""Bargaining (Deal or No Deal): divide books, hats and balls; general-sum, with text."""

from __future__ import annotations

import random
import re

import pyspiel

from games.openspiel_env import OpenSpielEnv

ITEMS = ("book", "hat", "ball")
AGREE_NAME = "agree"
_NUMBERS = re.compile(r"\d+")
_ITEM = re.compile(r"\b(book|hat|ball)s?\W{0,3}(\d+)", re.IGNORECASE)


def item_values(text: str) -> tuple[str, ...]:
    """Item valuations named in `text` as "item=value" ("a book 3" counts as "book=3")."""
    return tuple(f"{item.lower()}={value}" for item, value in _ITEM.findall(text))


def items_text(quantities: tuple[int, ...]) -> str:
    """"1 book 0 hats 2 balls"."""
    return " ".join(f"{q} {item if q == 1 else item + 's'}" for q, item in zip(quantities, ITEMS))


_OFFERS: dict[str, tuple[tuple[int, ...], ...]] = {}


def _offers(game: pyspiel.Game) -> tuple[tuple[int, ...], ...]:
    """Items the proposer takes, for every offer action id (computed once per game config)."""
    key = str(game)
    if key not in _OFFERS:
        state = game.new_initial_state()
        _OFFERS[key] = tuple(
            tuple(int(x) for x in _NUMBERS.findall(state.action_to_string(0, action)))
            for action in range(game.num_distinct_actions() - 1)
        )
    return _OFFERS[key]


def _line_numbers(info_state: str, prefix: str) -> tuple[int, ...]:
    line = next(line for line in info_state.split("\n") if line.startswith(prefix))
    return tuple(int(x) for x in _NUMBERS.findall(line))


class BargainingEnv(OpenSpielEnv):
    """Bargaining: alternate proposals ("take 1 book 0 hats 2 balls") until one is agreed."""

    game_name = "bargaining"
    fixed_options = {"discount": 1.0, "prob_end": 0.0}
    belief_values = staticmethod(item_values)

    @classmethod
    def _action_names(cls, game: pyspiel.Game) -> list[str]:
        return [f"take {items_text(offer)}" for offer in _offers(game)] + [AGREE_NAME]

    @property
    def agree_action(self) -> int:
        """The action id of "agree"."""
        return len(self._config.action_names) - 1

    def rules(self) -> str:
        return (
            "Bargaining for 2 players. A pool of books, hats and balls is to be divided. Each "
            "player has private values for each kind of item (whole points; the whole pool is "
            "worth 10 to each player). Players take turns, starting with player 0. On your "
            "turn either propose a division by naming what you take, e.g. "
            '"take 1 book 0 hats 2 balls" (your opponent gets the rest of the pool), or "agree" '
            "to accept your opponent's last proposal, which ends the game. Your return is the "
            "value to you of the items you get under the agreed division. If no proposal is "
            f"agreed within {self.max_turns} turns, both players get 0."
        )

    @property
    def max_turns(self) -> int:
        """Turns before the game ends without agreement."""
        return self._config.game.get_parameters()["max_turns"]

    def turn(self) -> int:
        """Moves made so far."""
        return sum(1 for player, _ in self._events() if player >= 0)

    def pool(self) -> tuple[int, ...]:
        """Number of books, hats and balls in the pool."""
        return _line_numbers(self._state.information_state_string(0), "Pool:")

    def values(self, agent: str) -> tuple[int, ...]:
        """`agent`'s private value of one book, hat and ball."""
        info_state = self._state.information_state_string(self._seats[agent])
        return _line_numbers(info_state, "My values:")

    def offer(self, action: int) -> tuple[int, ...]:
        """The items that the proposer of offer `action` takes."""
        return _offers(self._config.game)[action]

    def last_offer(self) -> tuple[int, int] | None:
        """(proposer, offer action) of the latest proposal, or None before the first."""
        offers = [(p, a) for p, a in self._events() if p >= 0 and a != self.agree_action]
        return offers[-1] if offers else None

    def observation_text(self, agent: str) -> str:
        player = self._seats[agent]
        pool, values = self.pool(), self.values(agent)
        worth = ", ".join(f"a {item} {value}" for item, value in zip(ITEMS, values))
        parts = [
            f"You are player {player}. The pool has {items_text(pool)}.",
            f"Your values: {worth} (the whole pool is worth "
            f"{sum(q * v for q, v in zip(pool, values))} to you).",
        ]
        parts.extend(self._moves_since_last_turn(player))
        latest = self.last_offer()
        if latest and latest[0] != player and not self._state.is_terminal():
            yours = tuple(q - t for q, t in zip(pool, self.offer(latest[1])))
            value = sum(q * v for q, v in zip(yours, values))
            parts.append(f"If you agree, you get {items_text(yours)}, worth {value} to you.")
        if self._state.is_terminal():
            parts.append("The game is over.")
        else:
            parts.append(f"Turn {self.turn() + 1} of {self.max_turns}.")
        return " ".join(parts)

    def private_info(self, agent: str) -> str:
        return " ".join(f"{item} {value}" for item, value in zip(ITEMS, self.values(agent)))

    def guess_private_info(self, agent: str, seat: int, rng: random.Random) -> tuple[str, str]:
        pool = self.pool()
        offers = [action for action in self.moves_of(seat) if action != self.agree_action]
        kinds = [k for k, count in enumerate(pool) if count]
        if offers:
            taken = self.offer(offers[-1])
            best = max(taken[k] / pool[k] for k in kinds)
            kinds = [k for k in kinds if taken[k] / pool[k] == best]
            reason = "What they ask for most is probably worth the most to them."
        else:
            reason = "They have not proposed yet, so I assume even values."
        value = 10 // sum(pool[k] for k in kinds)
        return reason, " ".join(f"{item} {value if k in kinds else 0}" for k, item in enumerate(ITEMS))

    def move_reading(self, agent: str, action: int) -> str:
        if action == self.agree_action:
            return "they will see that their offer is good enough for me"
        return "they may think I value most what I ask for"

    def _move_text(self, action: int, earlier: list[tuple[int, int]]) -> str:
        if action == self.agree_action:
            return "agreed"
        return f"proposed to {self.action_name(action)}"
