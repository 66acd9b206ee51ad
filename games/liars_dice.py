"""Liar's dice (one round, two players) with text; bids are named like "bid 2 fives"."""

from __future__ import annotations

import random
import re

import pyspiel

from games.openspiel_env import OpenSpielEnv

_FACES = {1: ("one", "ones"), 2: ("two", "twos"), 3: ("three", "threes"),
          4: ("four", "fours"), 5: ("five", "fives"), 6: ("six", "sixes")}
_FACE_WORDS = ("one", "two", "three", "four", "five", "six", "seven", "eight", "nine")
_DIE = re.compile(r"\b(" + "|".join(_FACE_WORDS) + r")(?:e?s)?\b|(\d)", re.IGNORECASE)


def face_word(face: int, count: int = 1) -> str:
    """"five" or "fives" for face 5; digits for faces above six."""
    singular, plural = _FACES.get(face, (str(face), f"{face}s"))
    return singular if count == 1 else plural


def dice_values(text: str) -> tuple[str, ...]:
    """Die faces named in `text` as digits or words ("sixes" counts as "6"), in order."""
    return tuple(str(_FACE_WORDS.index(word.lower()) + 1) if word else digit for word, digit in _DIE.findall(text))


class LiarsDiceEnv(OpenSpielEnv):
    """Liar's dice: bid on the dice of all players, or call the last bid a lie.

    Options `numdice` and `dice_sides`; only OpenSpiel's default "reset-face" bidding rule.
    """

    game_name = "liars_dice"
    fixed_options = {"bidding_rule": "reset-face"}
    belief_values = staticmethod(dice_values)
    exact_posterior = True

    @classmethod
    def _action_names(cls, game: pyspiel.Game) -> list[str]:
        sides = game.get_parameters()["dice_sides"]
        bids = [_bid(action, sides) for action in range(game.num_distinct_actions() - 1)]
        return [f"bid {count} {face_word(face, count)}" for count, face in bids] + ["liar"]

    @property
    def dice_per_player(self) -> int:
        """Dice each player rolls."""
        return self._config.game.get_parameters()["numdice"]

    @property
    def sides(self) -> int:
        """Faces per die; the highest face is wild."""
        return self._config.game.get_parameters()["dice_sides"]

    @property
    def liar_action(self) -> int:
        """The action id of "liar"."""
        return len(self._config.action_names) - 1

    def dice(self, agent: str) -> list[int]:
        """`agent`'s faces (1 to `sides`), sorted."""
        start = self._seats[agent] * self.dice_per_player
        rolls = self._state.history()[start:start + self.dice_per_player]
        return sorted(roll + 1 for roll in rolls)

    def bid(self, action: int) -> tuple[int, int]:
        """(count, face) claimed by bid action `action`."""
        return _bid(action, self.sides)

    def current_bid(self) -> int | None:
        """The latest bid action, or None before the first bid."""
        bids = [a for p, a in self._events() if p >= 0 and a != self.liar_action]
        return bids[-1] if bids else None

    def rules(self) -> str:
        n, dice, sides = self.spec.num_players, self.dice_per_player, self.sides
        wild = face_word(sides, 2)
        return (
            f"Liar's dice for {n} players, {dice} {'die' if dice == 1 else 'dice'} each, faces 1 "
            f"to {sides}. Everyone rolls in secret. Players take turns, starting with player 0. "
            'On your turn either bid, e.g. "bid 2 fives", claiming that at least two of all the '
            'dice on the table show a five, or say "liar" to challenge the last bid. '
            f"{wild.capitalize()} are wild: they count as every face. Each bid must be higher "
            "than the last: more dice, or the same number of dice and a higher face. After a "
            "challenge all dice are shown: if the bid was true the challenger loses, otherwise "
            "the bidder loses. The loser's return is -1 and the winner's 1."
        )

    def observation_text(self, agent: str) -> str:
        player = self._seats[agent]
        dice = list(map(str, self.dice(agent)))
        if len(dice) == 1:
            parts = [f"You are player {player}. Your die shows {dice[0]}."]
        else:
            parts = [f"You are player {player}. Your dice show {', '.join(dice)}."]
        recent = self._moves_since_last_turn(player)
        if not recent and player == self._current:
            parts.append("No one has bid yet.")
        parts.extend(recent)
        if self._state.is_terminal():
            parts.append("The game is over.")
        return " ".join(parts)

    def private_info(self, agent: str) -> str:
        return " ".join(map(str, self.dice(agent)))

    def guess_private_info(self, agent: str, seat: int, rng: random.Random) -> tuple[str, str]:
        bids = [action for action in self.moves_of(seat) if action != self.liar_action]
        if bids:
            face = self.bid(bids[-1])[1]
            reason = f"Bidding on {face_word(face, 2)} suggests they hold some."
        else:
            face, reason = rng.randint(1, self.sides), "They have not bid yet."
        return reason, " ".join([str(face)] * self.dice_per_player)

    def move_reading(self, agent: str, action: int) -> str:
        if action == self.liar_action:
            return "they will know that I doubt their bid"
        return f"they may think I hold some {face_word(self.bid(action)[1], 2)}"

    def _move_text(self, action: int, earlier: list[tuple[int, int]]) -> str:
        if action == self.liar_action:
            return 'called "liar"'
        return self.action_name(action)


def _bid(action: int, sides: int) -> tuple[int, int]:
    """(count, face) of a bid: ids run through the faces of one count, then the next count."""
    count, face = divmod(action, sides)
    return count + 1, face + 1
