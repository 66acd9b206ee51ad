"""Tic-tac-toe with text; cells are named a1 (top left) to c3 (bottom right), or with the option
`move_names: digits` numbered 1 (top left) to 9 (bottom right), each empty cell shown on the board by its number. With
the option `lines: named` the text below the board names the cells that would complete a line, the player's own and
the other's."""

from __future__ import annotations

import pyspiel

from games.lines import board_rows, completing_moves, empty_cells, lines_text
from games.openspiel_env import OpenSpielEnv

COLUMNS = "abc"
MARKS = ("X", "O")
MOVE_NAMES = ("cells", "digits")
"""The `move_names` option: `cells` (a1 ... c3, the default) or `digits` (1 ... 9 row by row, as on a phone's keypad:
one token each in a tiny model's tokenizer, where a cell name is two)."""
LINES = ("hidden", "named")
"""The `lines` option (tic-tac-toe and Connect Four): `hidden` (the default: the board alone) or `named` (a line below
the board names the moves that would complete a line now, the player's own and the other's: what a reader sees at a
glance, given in words to a model that cannot yet read it off the board; which to play is left to the policy)."""


def cell_name(action: int) -> str:
    """Name of the cell of action id `action` (row-major from the top left): "a1" ... "c3"."""
    row, column = divmod(action, 3)
    return f"{COLUMNS[column]}{row + 1}"


def cell_digit(action: int) -> str:
    """Number of the cell of action id `action` under `move_names: digits`: "1" (top left) ... "9" (bottom right)."""
    return str(action + 1)


class TicTacToeEnv(OpenSpielEnv):
    """Tic-tac-toe: player 0 plays X and moves first; option `move_names` (`cells`, the default, or `digits`)."""

    game_name = "tic_tac_toe"
    text_options = {"move_names": MOVE_NAMES, "lines": LINES}

    @classmethod
    def _action_names(cls, game: pyspiel.Game) -> list[str]:
        return [cell_name(action) for action in range(game.num_distinct_actions())]

    def action_name(self, action: int, agent: str | None = None) -> str:
        return cell_digit(action) if self.text["move_names"] == "digits" else cell_name(action)

    def all_action_names(self) -> list[str]:
        return [self.action_name(action) for action in range(len(self._config.action_names))]

    def rules(self) -> str:
        if self.text["move_names"] == "digits":
            cells = ('Cells are numbered 1 to 9 row by row from the top left: "1" is the top left corner, "9" the '
                     'bottom right, "5" the centre; the board shows each empty cell by its number. ')
        else:
            cells = ("Cells are named by column (a, b, c from left to right) and row (1, 2, 3 from "
                     'top to bottom): "a1" is the top left corner, "c3" the bottom right, "b2" the centre. ')
        return (
            "Tic-tac-toe for 2 players on a 3x3 board. Player 0 plays X and moves first; player 1 "
            f"plays O. {cells}"
            "On your turn, name an empty cell to put your mark there. The first player with three "
            "marks in a row, column or diagonal wins: the winner's return is 1 and the loser's -1. "
            "A full board with no such line is a draw: both get 0."
            + (' Below the board, "Cells that complete a line" names the empty cells where your mark, and where '
               "theirs, would make three in a line." if self.text["lines"] == "named" else "")
        )

    def observation_text(self, agent: str) -> str:
        player = self._seats[agent]
        rows = str(self._state).upper().split("\n")
        if self.text["move_names"] == "digits":
            board = "\n".join(" ".join(cell_digit(3 * r + c) if mark == "." else mark for c, mark in enumerate(row))
                              for r, row in enumerate(rows))
            parts = [f"You are player {player} and play {MARKS[player]}. The board (a number is an empty cell):\n"
                     f"{board}"]
        else:
            board = "\n".join(["  a b c"] + [f"{r + 1} {' '.join(row)}" for r, row in enumerate(rows)])
            parts = [
                f"You are player {player} and play {MARKS[player]}. The board (. is empty):\n{board}"
            ]
        if self.text["lines"] == "named" and not self._state.is_terminal():
            parts.append(self._lines_text(player))
        parts.extend(self._moves_since_last_turn(player))
        if self._state.is_terminal():
            parts.append("The game is over.")
        return "\n".join(parts)

    def _lines_text(self, player: int) -> str:
        """The empty cells where `player`'s mark, and the other's, would complete a line (the `lines: named` text)."""
        grid = board_rows(self._state)
        yours, theirs = ([self.action_name(a) for a in completing_moves(grid, empty_cells(grid), mark.lower(), 3)]
                         for mark in (MARKS[player], MARKS[1 - player]))
        return lines_text("Cells", yours, theirs)

    def private_info(self, agent: str) -> str:
        return ""
