"""The league opponent at run time (`{kind: league, ...}` in `game.opponents`): the driver's side of `League`.

The league's members are the policy's weights every `schedule.snapshot_every` steps, the initial policy first, each
written once by the learner to `<sync root>/league/step_<n>` (`strat.sync.weights.league_path`). Before each step's
rollout one member is drawn (`League.draw`, from a stream of the run seed and the step) and loaded from its directory
into the snapshot agent, the league's engine, unless it holds that member already; the step's games against the
league then update its record. The league (members and records) is checkpointed with the loop state, and a member's
directory is deleted only once neither the league nor the last checkpoint's league holds it, so a resumed run finds
every member it restores.
"""

from __future__ import annotations

import logging
import shutil
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from strat.algorithm.records import Episode
from strat.config import ExperimentConfig, league_opponent
from strat.errors import RunAborted
from strat.play.rollout import derive_seed
from strat.sync.weights import league_path
from strat.train.league import League, keep_paths, league_metrics

if TYPE_CHECKING:
    from strat.train.fleet import Fleet  # imports Ray; only the trainer builds one

log = logging.getLogger(__name__)

LOOP_STATE_KEY = "league"
"""The league's entry in a checkpoint's loop state."""


class LeagueOpponent:
    """The run's league: which member plays each step, its engine's weights, the members' weights on disk."""

    def __init__(self, config: ExperimentConfig, run_dir: Path, fleet: Fleet) -> None:
        opponent = league_opponent(config)
        if opponent is None:
            raise ValueError("the config has no league opponent")
        self.config, self.run_dir, self.fleet = config, run_dir, fleet
        self.league = League(opponent.league_size, opponent.league_sampling, decay=opponent.league_decay)
        self._checkpointed: League | None = None
        """The league as the last checkpoint holds it (its members' weights must stay on disk)."""
        self._drawn: dict[int, int] = {}
        """Step -> the step of the member drawn to play it (until its games are recorded)."""
        self._loaded: tuple[int, str] | None = None
        """The member (its step and directory) the league's engine holds now: its directory stays on disk while it
        does, even once the member has left the league, since a restarted agent reloads it from there."""

    # --- members ---------------------------------------------------------------------------

    def start(self) -> None:
        """A fresh run: the initial policy is the first member."""
        self.add(0)

    def add(self, step: int) -> None:
        """The learner's current weights join as the member of `step`; a member pushed out leaves the disk unless
        the last checkpoint's league still holds it. With `kl_reference: snapshot` the KL anchor moves to them."""
        path = league_path(self.config, self.run_dir, step)
        learner = self.fleet.learner
        anchor = self.config.algorithm.kl_reference == "snapshot" and self.config.algorithm.kl_type != "none"
        write = learner.take_snapshot_dir if anchor else learner.export_weights_dir
        written = self.fleet.learner_get(write(str(path)))
        for dropped in self.league.add(step, written):
            self._delete_unless_kept(dropped.path)

    def _kept(self) -> set[str]:
        """The member directories still needed: the league's, the last checkpoint's league's, the loaded member's."""
        return keep_paths(self.league, self._checkpointed) | ({self._loaded[1]} if self._loaded else set())

    def _delete_unless_kept(self, path: str) -> None:
        if path not in self._kept():
            shutil.rmtree(path, ignore_errors=True)

    # --- each step -------------------------------------------------------------------------

    def prepare(self, step: int) -> None:
        """Draw the member that plays step `step` and load it into the league's engine (if it holds another)."""
        member = self.league.draw(derive_seed(self.config.run.seed, step, "league"))
        self._drawn[step] = member.step
        if self._loaded is None or self._loaded[0] != member.step:
            self.fleet.sync.load_snapshot(member.path, member.step)
            previous, self._loaded = self._loaded, (member.step, member.path)
            if previous is not None:
                self._delete_unless_kept(previous[1])

    def record(self, step: int, episodes: Sequence[Episode]) -> dict[str, float]:
        """Count step `step`'s games against the league for the member that played them; the step's figures."""
        member = self._drawn.pop(step)
        result = self.league.record(member, episodes)
        return league_metrics(self.league, member, result)

    def finish(self) -> None:
        """The run is over: the engine's member is released, and only the directories of the league's members and
        the last checkpoint's are left on disk."""
        self._loaded = None
        for stale in self._stale_dirs():
            shutil.rmtree(stale, ignore_errors=True)

    # --- checkpoints -----------------------------------------------------------------------

    def state(self) -> dict[str, Any]:
        """The league for a checkpoint's loop state, with the member drawn for a rollout already played (overlap's
        next rollout, stored in the checkpoint too); its members' weights stay on disk from now on."""
        self._checkpointed = League.from_json(self.league.to_json())
        for stale in self._stale_dirs():
            shutil.rmtree(stale, ignore_errors=True)
        return {**self.league.to_json(), "drawn": {str(step): member for step, member in self._drawn.items()}}

    def _stale_dirs(self) -> list[Path]:
        """Member directories neither the league nor the last checkpoint's holds (from a run's steps after its last
        checkpoint, before a resume)."""
        root = league_path(self.config, self.run_dir, 0).parent
        kept = self._kept()
        return [path for path in root.iterdir() if path.is_dir() and str(path) not in kept] if root.is_dir() else []

    def restore(self, data: dict[str, Any] | None) -> None:
        """The league a checkpoint saved; every member's weights must still be on disk."""
        if data is None:
            raise RunAborted("the checkpoint holds no league (it was written by a run without one); resume it"
                             " without the league opponent, or start a new run")
        self.league = League.from_json(data)
        self._checkpointed = League.from_json(data)
        self._drawn = {int(step): int(member) for step, member in data.get("drawn", {}).items()}
        missing = [path for path in self.league.paths() if not Path(path).is_dir()]
        if missing:
            raise RunAborted(f"the league's member weights are missing: {', '.join(missing)} (written under the sync"
                             " root, engine.sync_dir or <run>/sync); start a new run")
        self._loaded = None
        log.info("league restored: members of steps %s", ", ".join(str(m.step) for m in self.league.members))
