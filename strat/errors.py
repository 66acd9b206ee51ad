"""Every error whose one-line message is for the user: the CLI prints it without a traceback and exits
with the status named here."""

from __future__ import annotations


class ConfigError(ValueError):
    """A configuration the user must fix; its message is one line naming the key (exit status 2)."""


class PlacementError(ConfigError):
    """A run the cluster cannot hold; the one-line message names the role, its need and the cluster.
    A ConfigError, so that the CLI prints it as one line and exits 2."""


class UserError(Exception):
    """A command-line input the user must fix (a missing file, an unknown name); exit status 2."""


class JobError(Exception):
    """A job operation that failed for a reason the user can act on; one line (exit status 2)."""


class RunAborted(RuntimeError):
    """The run cannot go on (a dead comparator or learner, repeated non-finite updates, a failed
    checkpoint write). The message says why and which checkpoint to resume from (exit status 1)."""
