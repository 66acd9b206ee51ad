"""A game Strat does not ship, defined here as a user would add one: misère Nim (OpenSpiel's `nim`, piles of 1, 3, 5
and 7 sticks by default). A user's package would name `NimEnv` under the `strat.games` entry points (or a script call
`games.register(NimEnv)`); the tests register or install it for each test that needs it, so that the other tests see
only the shipped games."""

from __future__ import annotations

import re

import pyspiel

from games.openspiel_env import OpenSpielEnv

_ACTION = re.compile(r"pile:(\d+), take:(\d+);")


class NimEnv(OpenSpielEnv):
    """Misère Nim: take one or more sticks from one pile; whoever takes the last stick loses."""

    game_name = "nim"
    fixed_options = {"is_misere": True}

    @classmethod
    def _action_names(cls, game: pyspiel.Game) -> list[str]:
        state = game.new_initial_state()
        names = []
        for action in range(game.num_distinct_actions()):
            pile, take = _ACTION.fullmatch(state.action_to_string(0, action)).groups()
            names.append(f"take {take} from pile {pile}")
        return names

    def rules(self) -> str:
        start = self.pyspiel_state.get_game().get_parameters()["pile_sizes"].split(";")
        sizes = ", ".join(f"pile {i} has {n}" for i, n in enumerate(start, start=1))
        return (
            f"Nim for 2 players with piles of sticks: {sizes}. Players take turns, player 0 first. On your turn "
            'take one or more sticks from one pile, e.g. "take 1 from pile 2". Whoever takes the last stick loses: '
            "the loser's return is -1 and the winner's 1."
        )

    def _piles(self) -> list[str]:
        return str(self._state).split(":", 1)[1].split()

    def observation_text(self, agent: str) -> str:
        player = self._seats[agent]
        sizes = ", ".join(f"pile {i} has {n}" for i, n in enumerate(self._piles(), start=1))
        parts = [f"You are player {player}. Sticks left: {sizes}."]
        parts.extend(self._moves_since_last_turn(player))
        if self._state.is_terminal():
            parts.append("The game is over.")
        return " ".join(parts)

    def private_info(self, agent: str) -> str:
        return ""

    def _move_text(self, action: int, earlier: list[tuple[int, int]]) -> str:
        return f"took {self.action_name(action).removeprefix('take ')}"
