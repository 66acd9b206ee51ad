"""The policy update's learning-rate schedule (`algorithm.lr_schedule`): the factor on `algorithm.lr` for each
update of a run. Pure arithmetic on the update's number, so that a resumed run continues the same curve."""

from __future__ import annotations

import math
from typing import Literal, get_args

LrSchedule = Literal["constant", "linear", "cosine"]
LR_SCHEDULES: tuple[str, ...] = get_args(LrSchedule)


def lr_factor(schedule: LrSchedule, update: int, total: int, final: float) -> float:
    """The factor on the base learning rate for update number `update` (0 for the run's first) of `total`.

    `constant` is 1 throughout. `linear` and `cosine` start at 1 and reach `final` (a fraction of the base rate)
    at the last update, `total - 1`, and stay there for any update past it (a resumed run given more steps than
    `total` continues at `final`)."""
    if schedule not in LR_SCHEDULES:
        raise ValueError(f"unknown learning-rate schedule {schedule!r} (allowed: {', '.join(LR_SCHEDULES)})")
    if update < 0 or total < 1:
        raise ValueError(f"update must be >= 0 and total >= 1, got {update} and {total}")
    if not 0.0 <= final <= 1.0:
        raise ValueError(f"final must lie in [0, 1], got {final}")
    if schedule == "constant":
        return 1.0
    progress = min(1.0, update / max(1, total - 1))
    if schedule == "linear":
        return 1.0 - (1.0 - final) * progress
    return final + (1.0 - final) * 0.5 * (1.0 + math.cos(math.pi * progress))
