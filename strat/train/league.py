"""A league of the policy's past selves (`{kind: league, size, sampling}` in `game.opponents`): the last `size`
snapshots, one of which plays the league's seats in each step, drawn uniformly or by prioritized fictitious self-play
(PFSP), and the running results of the policy against each. Pure bookkeeping: the trainer writes the members'
weights, loads the drawn one into the league's agent and checkpoints `League.to_json()`.

PFSP (AlphaStar's `f_hard`): a member's weight is (1 - p)^2, where p is the policy's estimated score against it, wins
counting 1 and draws 1/2, with one win and one loss of prior, (wins + draws/2 + 1) / (games + 2). A member the policy
always beats fades; one it still loses to is drawn most; an unplayed one has p = 1/2. With `decay` below 1 the
record is a running one: each time a member plays, its record so far is multiplied by `decay` before the step's
games are added, so the score follows the policy as it changes instead of averaging over its whole history.
"""

from __future__ import annotations

import random
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any, Literal

from strat.algorithm.records import Episode
from strat.play.rollout import LEAGUE_SEAT

Sampling = Literal["uniform", "pfsp"]
SAMPLINGS: tuple[str, ...] = ("uniform", "pfsp")


@dataclass
class Member:
    """One past policy in the league: the step whose weights it holds, where they are, and the policy's record
    against it (games counted from the ego seat: won, drawn, lost)."""

    step: int
    path: str
    wins: float = 0
    draws: float = 0
    losses: float = 0
    """Games won, drawn and lost; fractional once a decay has weighed earlier games down."""

    @property
    def games(self) -> float:
        return self.wins + self.draws + self.losses

    @property
    def score(self) -> float:
        """The policy's estimated score against this member: (wins + draws/2 + 1) / (games + 2)."""
        return (self.wins + 0.5 * self.draws + 1.0) / (self.games + 2.0)


@dataclass
class League:
    """The last `size` snapshots of the policy and its record against each; `draw` picks the member of a step."""

    size: int
    sampling: Sampling
    members: list[Member] = field(default_factory=list)
    decay: float = 1.0
    """The weight a member's earlier games keep each time it plays again (1: every game counts the same)."""

    def __post_init__(self) -> None:
        if self.size < 1:
            raise ValueError(f"a league holds at least one member, not {self.size}")
        if not 0.0 < self.decay <= 1.0:
            raise ValueError(f"a league's decay lies in (0, 1], not {self.decay}")
        if self.sampling not in SAMPLINGS:
            raise ValueError(f"league sampling {self.sampling!r} (allowed: {', '.join(SAMPLINGS)})")

    def add(self, step: int, path: str) -> list[Member]:
        """The policy of `step` (its weights at `path`) joins; returns the members it pushed out, oldest first."""
        if any(member.step == step for member in self.members):
            raise ValueError(f"the league already holds the policy of step {step}")
        self.members.append(Member(step, path))
        dropped = self.members[: max(0, len(self.members) - self.size)]
        self.members = self.members[len(dropped):]
        return dropped

    def weights(self) -> list[float]:
        """Each member's share of the draw, in `members`' order (they sum to 1)."""
        if not self.members:
            raise ValueError("the league has no member yet")
        if self.sampling == "uniform":
            raw = [1.0] * len(self.members)
        else:
            raw = [(1.0 - member.score) ** 2 for member in self.members]
        total = sum(raw)
        return [value / total for value in raw]

    def draw(self, seed: int) -> Member:
        """The member that plays a step, drawn with `weights()` from a stream of its own seed."""
        return random.Random(seed).choices(self.members, weights=self.weights())[0]

    def find(self, step: int) -> Member | None:
        """The member holding the policy of `step`, or None once it has left (or never joined)."""
        return next((member for member in self.members if member.step == step), None)

    def member(self, step: int) -> Member:
        """The member holding the policy of `step`."""
        member = self.find(step)
        if member is None:
            raise KeyError(f"no member of step {step} in the league (members: {[m.step for m in self.members]})")
        return member

    def record(self, step: int, episodes: Iterable[Episode]) -> tuple[int, int, int]:
        """Count the games of `episodes` played against the league (the member of `step` held its seats) from the
        learning seat's return: > 0 a win, 0 a draw, < 0 a loss; returns this call's (wins, draws, losses). The
        member's record so far is first multiplied by `decay`. A member already pushed out is not counted."""
        wins = draws = losses = 0
        for episode in episodes:
            if LEAGUE_SEAT not in episode.seats.values():
                continue
            for agent in episode.ego_agents:
                result = episode.returns[agent]
                wins += result > 0
                draws += result == 0
                losses += result < 0
        member = self.find(step)
        if member is not None:
            member.wins = self.decay * member.wins + wins
            member.draws = self.decay * member.draws + draws
            member.losses = self.decay * member.losses + losses
        return wins, draws, losses

    def paths(self) -> list[str]:
        return [member.path for member in self.members]

    def to_json(self) -> dict[str, Any]:
        return {"size": self.size, "sampling": self.sampling, "decay": self.decay,
                "members": [asdict(m) for m in self.members]}

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> League:
        """The league `to_json` wrote; one saved before `decay` existed has decay 1 (what it ran with)."""
        return cls(int(data["size"]), data["sampling"], [Member(**m) for m in data["members"]],
                   float(data.get("decay", 1.0)))


def keep_paths(*leagues: League | None) -> set[str]:
    """The member paths any of `leagues` (the current one, the last checkpoint's) still needs on disk."""
    return {path for league in leagues if league is not None for path in league.paths()}


def league_metrics(league: League, step: int, result: Sequence[int]) -> dict[str, float]:
    """The step's league figures: the member that played (its step), how many members there are, the policy's
    score against that member this step (when a league game was played) and its running estimate."""
    wins, draws, losses = result
    games = wins + draws + losses
    member = league.find(step)
    return {
        "league/member_step": float(step),
        "league/members": float(len(league.members)),
        "league/games": float(games),
        **({"league/score_vs_member": (wins + 0.5 * draws) / games} if games else {}),
        **({"league/member_score_estimate": member.score} if member is not None else {}),
    }
