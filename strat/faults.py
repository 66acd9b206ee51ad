"""Fault injection for the reliability tests, read from one environment variable.

    STRAT_INJECT_FAULTS="nonfinite:2,3"   # steps whose update gets a non-finite advantage
    STRAT_INJECT_FAULTS="enospc:4"        # steps whose checkpoint write fails with ENOSPC (a full disk)
    STRAT_INJECT_FAULTS="nonfinite:2;enospc:4"

For `nonfinite` the driver poisons the samples it sends to the learner on those steps, so that the learner's real
non-finite path (NaN loss and gradient -> the update is skipped) runs inside the real actor. For `enospc` the
process that writes the checkpoint (the learner actor, which gets the variable from the driver: `ray_node.
ACTOR_ENV_KEYS`) raises `OSError(ENOSPC)` once the weights are in the staging folder, so that the real clean-up
and the run's stop are what runs. Unset (the normal case), nothing changes."""

from __future__ import annotations

import os

ENV = "STRAT_INJECT_FAULTS"


def injected_steps(kind: str, spec: str | None = None) -> frozenset[int]:
    """Steps named for `kind` in the spec (default: the environment variable)."""
    spec = os.environ.get(ENV, "") if spec is None else spec
    steps: set[int] = set()
    for part in spec.split(";"):
        name, _, values = part.partition(":")
        if name.strip() == kind:
            steps.update(int(v) for v in values.split(",") if v.strip())
    return frozenset(steps)
