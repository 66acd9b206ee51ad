"""A run's JSON-lines records (`metrics.jsonl`, `episodes.jsonl`, `overrides.jsonl`) read strictly.

Only a torn last line is skipped, with a warning: a run killed, or still writing, mid-line. Any other line that is
not a JSON object is an error naming the file and the line number. Readers that must go on (reports) read
leniently: they skip every unreadable line, and say how many they skipped (`JsonLines.skipped_note`)."""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from strat.errors import UserError

log = logging.getLogger("strat.records")


class RecordError(UserError):
    """A line of a run's records that cannot be read, and is not a torn last line (exit status 2)."""


@dataclass(frozen=True)
class Line:
    """A readable line: its number (from 1), its text and the record it holds."""

    number: int
    text: str
    record: dict[str, Any]


@dataclass(frozen=True)
class JsonLines:
    """What `read_lines` found: the readable lines, and the numbers of the lines it skipped."""

    path: Path
    lines: tuple[Line, ...]
    skipped: tuple[int, ...] = ()

    @property
    def records(self) -> list[dict[str, Any]]:
        return [line.record for line in self.lines]

    def skipped_note(self) -> str:
        """One line saying which lines were skipped (empty when none was)."""
        if not self.skipped:
            return ""
        shown = ", ".join(map(str, self.skipped[:10])) + (", ..." if len(self.skipped) > 10 else "")
        return f"{self.path}: {len(self.skipped)} unreadable line(s) skipped (line {shown})"


def _parse(raw: bytes) -> tuple[dict[str, Any] | None, str]:
    """The record on a line, or None and why it cannot be read."""
    try:
        value = json.loads(raw.decode("utf-8"))
    except UnicodeDecodeError:
        return None, "not UTF-8 text"
    except json.JSONDecodeError as err:
        return None, f"not JSON: {err.msg} at column {err.colno}"
    if not isinstance(value, dict):
        return None, f"a JSON {type(value).__name__}, not an object"
    return value, ""


def read_lines(path: Path, lenient: bool = False) -> JsonLines:
    """Every record of `path` (none when it does not exist). A torn last line is skipped with a warning; another
    unreadable line raises `RecordError` naming the file and the line, or with `lenient` is skipped and counted."""
    if not path.is_file():
        return JsonLines(path, ())
    raw_lines = path.read_bytes().split(b"\n")
    last = max((i for i, raw in enumerate(raw_lines) if raw.strip()), default=-1)
    lines, skipped = [], []
    for index, raw in enumerate(raw_lines):
        if not raw.strip():
            continue
        record, why = _parse(raw)
        if record is not None:
            lines.append(Line(index + 1, raw.decode("utf-8"), record))
            continue
        if index == last:
            log.warning("%s: the last line (%d) is torn (%s; a write cut short), skipped", path, index + 1, why)
        elif not lenient:
            raise RecordError(f"{path}, line {index + 1}: unreadable record ({why}); only a torn last line is"
                              f" skipped: repair or remove line {index + 1}")
        skipped.append(index + 1)
    return JsonLines(path, tuple(lines), tuple(skipped))
