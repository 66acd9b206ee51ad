"""Lines on the board games' grids: which cells would complete a line of a mark (tic-tac-toe, Connect Four). Read by
the scripted players in `games.heuristics` and by the games' `lines: named` text option."""

from __future__ import annotations

from collections.abc import Mapping

import pyspiel


def board_rows(state: pyspiel.State) -> list[list[str]]:
    """The board as rows of "x", "o" and "." (top row first)."""
    return [list(row) for row in str(state).strip().split("\n")]


def empty_cells(grid: list[list[str]]) -> dict[int, tuple[int, int]]:
    """Tic-tac-toe's moves: each empty cell by its action id (row-major from the top left) -> (row, column)."""
    width = len(grid[0])
    return {row * width + column: (row, column) for row in range(len(grid)) for column in range(width)
            if grid[row][column] == "."}


def drop_cells(grid: list[list[str]]) -> dict[int, tuple[int, int]]:
    """Connect Four's moves: each open column -> the (row, column) where a piece dropped there lands, the lowest empty
    cell."""
    return {column: (max(row for row in range(len(grid)) if grid[row][column] == "."), column)
            for column in range(len(grid[0])) if grid[0][column] == "."}


def lines_text(noun: str, yours: list[str], theirs: list[str]) -> str:
    """The `lines: named` text: "{noun} that complete a line: yours ...; theirs ...", "none" for no move."""
    return f"{noun} that complete a line: yours {', '.join(yours) or 'none'}; theirs {', '.join(theirs) or 'none'}."


def completes_line(grid: list[list[str]], row: int, col: int, mark: str, length: int) -> bool:
    """Whether putting `mark` at (row, col) makes a line of `length` of that mark."""
    for dr, dc in ((0, 1), (1, 0), (1, 1), (1, -1)):
        run = 1
        for sign in (1, -1):
            r, c = row + sign * dr, col + sign * dc
            while 0 <= r < len(grid) and 0 <= c < len(grid[0]) and grid[r][c] == mark:
                run += 1
                r, c = r + sign * dr, c + sign * dc
        if run >= length:
            return True
    return False


def completing_moves(grid: list[list[str]], cells: Mapping[int, tuple[int, int]], mark: str, length: int) -> list[int]:
    """The moves of `cells` (move -> the (row, column) it fills) where `mark` would complete a line of `length`."""
    return [move for move, cell in cells.items() if completes_line(grid, *cell, mark, length)]
