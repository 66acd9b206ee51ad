"""Connect Four with text; moves are named by column, "column 1" (left) to "column 7". With the option
`column_numbers: open` the row above the board numbers only the columns that are not full (the legal moves); with
`lines: named` (as in tic-tac-toe) a line below the board names the columns that would complete a line now."""

from __future__ import annotations

import pyspiel

from games.lines import board_rows, completing_moves, drop_cells, lines_text
from games.openspiel_env import OpenSpielEnv
from games.tic_tac_toe import LINES

MARKS = ("X", "O")
COLUMN_NUMBERS = ("all", "open")
"""The `column_numbers` option: `all` (the row above the board numbers every column, the default) or `open` (it numbers
the columns that are not full and shows a full one as "-": the legal moves are the numbers written there, as
tic-tac-toe's `move_names: digits` shows each empty cell by its number)."""


class ConnectFourEnv(OpenSpielEnv):
    """Connect Four: player 0 plays X and moves first; option `column_numbers` (`all`, the default, or `open`)."""

    game_name = "connect_four"
    text_options = {"column_numbers": COLUMN_NUMBERS, "lines": LINES}

    @classmethod
    def _action_names(cls, game: pyspiel.Game) -> list[str]:
        return [f"column {column + 1}" for column in range(game.num_distinct_actions())]

    def rules(self) -> str:
        options = self._config.game.get_parameters()
        rows, columns, in_row = options["rows"], options["columns"], options["x_in_row"]
        numbers = (" The row above the board numbers each column that is not full; a full column shows -."
                   if self.text["column_numbers"] == "open" else "")
        return (
            f"Connect Four for 2 players on an upright board of {rows} rows and {columns} columns. "
            "Player 0 plays X and moves first; player 1 plays O. On your turn, name a column that "
            f'is not full, from "column 1" (left) to "column {columns}" (right): your piece falls '
            f"to the lowest empty cell of that column. The first player with {in_row} pieces in a "
            "line (across, up and down, or diagonal) wins: the winner's return is 1 and the "
            f"loser's -1. A full board with no such line is a draw: both get 0.{numbers}"
            + (' Below the board, "Columns that complete a line" names the columns where your piece, and where '
               f"theirs, would land to make {in_row} in a line." if self.text["lines"] == "named" else "")
        )

    def observation_text(self, agent: str) -> str:
        player = self._seats[agent]
        rows = str(self._state).upper().strip().split("\n")
        every = self.text["column_numbers"] == "all"
        header = " ".join(str(column + 1) if every or rows[0][column] == "." else "-" for column in range(len(rows[0])))
        board = "\n".join([header] + [" ".join(row) for row in rows])
        parts = [
            f"You are player {player} and play {MARKS[player]}. "
            f"The board, top row first (. is empty):\n{board}"
        ]
        if self.text["lines"] == "named" and not self._state.is_terminal():
            parts.append(self._lines_text(player))
        parts.extend(self._moves_since_last_turn(player))
        if self._state.is_terminal():
            parts.append("The game is over.")
        return "\n".join(parts)

    def private_info(self, agent: str) -> str:
        return ""

    def _lines_text(self, player: int) -> str:
        """The open columns where `player`'s piece, and the other's, would land to complete a line (the `lines:
        named` text)."""
        grid = board_rows(self._state)
        in_row = self._config.game.get_parameters()["x_in_row"]
        yours, theirs = ([self.action_name(c) for c in completing_moves(grid, drop_cells(grid), mark.lower(),
                                                                         in_row)]
                         for mark in (MARKS[player], MARKS[1 - player]))
        return lines_text("Columns", yours, theirs)

    def _move_text(self, action: int, earlier: list[tuple[int, int]]) -> str:
        return f"dropped a piece in {self.action_name(action)}"
