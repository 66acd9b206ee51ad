"""Errors that end a run with a one-line message for the user (no traceback)."""

from __future__ import annotations


class RunAborted(RuntimeError):
    """The run cannot go on (a dead comparator or learner, repeated non-finite updates, a failed
    checkpoint write). The message says why and which checkpoint to resume from."""
