"""Tic-tac-toe with text; cells are named a1 (top left) to c3 (bottom right)."""

from __future__ import annotations

import pyspiel

from games.openspiel_env import OpenSpielEnv

COLUMNS = "abc"
MARKS = ("X", "O")


def cell_name(action: int) -> str:
    """Name of the cell of action id `action` (row-major from the top left): "a1" ... "c3"."""
    row, column = divmod(action, 3)
    return f"{COLUMNS[column]}{row + 1}"


class TicTacToeEnv(OpenSpielEnv):
    """Tic-tac-toe: player 0 plays X and moves first."""

    game_name = "tic_tac_toe"

    @classmethod
    def _action_names(cls, game: pyspiel.Game) -> list[str]:
        return [cell_name(action) for action in range(game.num_distinct_actions())]

    def rules(self) -> str:
        return (
            "Tic-tac-toe for 2 players on a 3x3 board. Player 0 plays X and moves first; player 1 "
            "plays O. Cells are named by column (a, b, c from left to right) and row (1, 2, 3 from "
            'top to bottom): "a1" is the top left corner, "c3" the bottom right, "b2" the centre. '
            "On your turn, name an empty cell to put your mark there. The first player with three "
            "marks in a row, column or diagonal wins: the winner's return is 1 and the loser's -1. "
            "A full board with no such line is a draw: both get 0."
        )

    def observation_text(self, agent: str) -> str:
        player = self._seats[agent]
        rows = str(self._state).upper().split("\n")
        board = "\n".join(["  a b c"] + [f"{r + 1} {' '.join(row)}" for r, row in enumerate(rows)])
        parts = [
            f"You are player {player} and play {MARKS[player]}. The board (. is empty):\n{board}"
        ]
        parts.extend(self._moves_since_last_turn(player))
        if self._state.is_terminal():
            parts.append("The game is over.")
        return "\n".join(parts)

    def private_info(self, agent: str) -> str:
        return ""
