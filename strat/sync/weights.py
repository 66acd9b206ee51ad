"""How the learner's weights reach the agents' engines: the choice of path (pure) and the Ray calls.

Three paths, chosen by `engine.weight_sync`:
- `object_store`: the learner's state dict (merged, Hugging Face names) goes through Ray's object
  store and each engine loads it in place. Only in-process engines can take tensors this way.
- `directory`: the learner writes safetensors (+ config.json) into `<sync_dir>/step_<version>`
  atomically and every engine reloads from that path (vLLM `reload_weights(weights_path=...)`).
  Works for multi-process engines (CUDA vLLM, `engine.multiprocess=true`). The directory must be
  readable at the same path on every agent's node; only the latest version is kept.
- `collective`: a weight group (`strat.sync.process_group`) of the learner's rank 0 and every worker of
  every agent's engine (vLLM: one per tensor-parallel rank; hf: the actor) meets at a free port on
  the learner's node; the learner stages the merged weights (`stage_weights`, a collective of all
  its ranks), their metadata goes to the agents through Ray, and rank 0 broadcasts the tensors while
  every worker receives and reloads them (vLLM `reload_weights(weights_iterator=...)`, layerwise, as
  they arrive). NCCL when the learner and the agents are on GPUs, gloo over TCP otherwise
  (`engine.collective_backend`). No disk, no object store; works for any engine. The snapshot
  opponent has a group of its own (`SNAPSHOT`), so that a refresh reaches it alone.

  Restarts: a group is formed again, at a new port, whenever the agents it serves change. The
  learner keeps the weights it last staged (one CPU copy) and the snapshot it took, so an agent
  restarted after a fault gets, through a new group, exactly the version the others hold. Losing an
  agent during a broadcast or rendezvous fails it for the other members (the learner closes its
  side); one that hangs instead holds them for at most `weight_group.GROUP_TIMEOUT_S`.

The helpers take actor handles and return ObjectRefs, so the driver can wrap the waits in its own fault
handling; `sync_agents` / `sync_snapshot` do the whole round trip for simple callers.
"""

from __future__ import annotations

import shutil
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import ray

from strat.config import ExperimentConfig, SyncMode
from strat.sync.process_group import TensorMeta

SYNC_MODES = ("object_store", "directory", "collective")
PREFIX = "step_"
"""Version directories under the sync root are `step_<version>`."""
POLICY = "policy"
"""The weight group (collective sync) that carries the policy's weights to its agents."""
SNAPSHOT = "snapshot"
"""The weight group that carries the snapshot opponent's weights to its agent."""


def sync_root(config: ExperimentConfig, run_dir: str | Path) -> Path:
    """The directory the learner writes synced weights under: `engine.sync_dir` or `<run_dir>/sync`, absolute
    (actors may run with another working directory)."""
    root = Path(config.engine.sync_dir).expanduser() if config.engine.sync_dir else Path(run_dir) / "sync"
    return root.absolute()


def sync_path(config: ExperimentConfig, run_dir: str | Path, version: int) -> Path:
    """Where the weights of `version` are written for a directory sync."""
    return sync_root(config, run_dir) / f"{PREFIX}{int(version)}"


def prune_versions(keep: Path) -> list[Path]:
    """Delete the other `step_<n>` directories (and interrupted `.tmp` writes) next to `keep`; returns them.

    Safe once every engine has loaded an older version: engines hold weights in memory, not the files."""
    removed = []
    parent = keep.parent
    if not parent.is_dir():
        return removed
    for path in parent.iterdir():
        ours = path.name.startswith(PREFIX) or path.name.startswith(f".{PREFIX}")  # versions, interrupted writes
        if path == keep or not ours or not path.is_dir():
            continue
        shutil.rmtree(path, ignore_errors=True)
        removed.append(path)
    return removed


def publish_weights(learner: Any, mode: SyncMode, path: str | Path | None) -> Any:
    """Start making the learner's current weights available; returns an ObjectRef.

    `object_store`: the ref of the state dict itself (pass it on to the agents unresolved, so that the
    tensors go learner -> agents without the driver). `directory`: the ref of the path the learner wrote
    (`path`, older versions next to it removed first). `collective`: the ref of the metadata of the weights
    the learner staged for its broadcast. Resolve the last two and hand them to `loadable`."""
    _check_mode(mode, path)
    if mode == "object_store":
        return learner.state_dict.remote()
    if mode == "collective":
        return learner.stage_weights.remote()
    return learner.export_weights_dir.remote(str(path), True)


def publish_snapshot(learner: Any, mode: SyncMode, path: str | Path | None) -> Any:
    """As `publish_weights`, and the learner also keeps these weights as the snapshot opponent's (for
    checkpoints). For `directory`, `path` should be under its own root (see `snapshot_path`), so that
    pruning the policy's versions never removes it."""
    _check_mode(mode, path)
    if mode == "object_store":
        return learner.take_snapshot.remote()
    if mode == "collective":
        return learner.stage_snapshot.remote(True)
    return learner.take_snapshot_dir.remote(str(path), True)


def loadable(mode: SyncMode, ref: Any, result: Any, broadcast: WeightBroadcast | None) -> Any:
    """What the agents load once the learner has published (`ref`, resolved to `result`): the ref itself
    (object_store: the tensors go learner -> agents without the driver), the path written (directory), or
    the staged weights to broadcast in `broadcast`'s group (collective)."""
    if mode == "object_store":
        return ref
    if mode == "directory":
        return result
    if broadcast is None:
        raise ValueError("a collective sync needs the WeightBroadcast of the group that carries the weights")
    return Staged(broadcast, tuple(result))


def load_calls(agents: Sequence[Any], weights: Any, version: int) -> list[Any]:
    """The agents' load calls (ObjectRefs): a directory path (str) is reloaded from disk, `Staged` weights
    are broadcast in their weight group (formed first if these agents are not its members), anything
    else is a state dict (or its ObjectRef) loaded in place."""
    if isinstance(weights, (str, Path)):
        return [agent.load_weights_dir.remote(str(weights), version) for agent in agents]
    if isinstance(weights, Staged):
        return weights.broadcast.calls(agents, weights.metadata, version)
    return [agent.load_state_dict.remote(weights, version) for agent in agents]


@dataclass(frozen=True)
class Staged:
    """Weights the learner staged for a collective sync: the group that carries them and their metadata."""

    broadcast: WeightBroadcast
    metadata: tuple[TensorMeta, ...]


class WeightBroadcast:
    """The driver's side of one weight group: the learner's rank 0 and the workers of `members`, carrying the
    `weights` (POLICY or SNAPSHOT) over `backend`. Formed on first use and again, at a new port, whenever the
    agents to load differ from its members (an agent restarted); until then every sync reuses it."""

    def __init__(self, learner: Any, weights: str, backend: str) -> None:
        if weights not in (POLICY, SNAPSHOT):
            raise ValueError(f"weight group for {weights!r} (allowed: {POLICY}, {SNAPSHOT})")
        # Only rank 0 of a group of learner ranks (a LearnerGroup, which lists its `ranks`) holds gathered
        # weights: it alone is in the weight group. A single learner's actor handle has no `ranks`.
        ranks = getattr(learner, "ranks", None)
        self.sender = ranks[0] if ranks else learner
        self.weights = weights
        self.backend = backend
        self.members: list[Any] = []

    def calls(self, agents: Sequence[Any], metadata: Sequence[TensorMeta], version: int) -> list[Any]:
        """The receive calls of `agents` and, last, the learner's broadcast (ObjectRefs to wait for together; an
        agent's death is then the error raised, not the learner's broken broadcast)."""
        if list(agents) != self.members:
            self.form(agents)
        receives = [agent.receive_weights.remote(list(metadata), version) for agent in agents]
        return [*receives, self.sender.broadcast_weights.remote(self.weights)]

    def form(self, agents: Sequence[Any]) -> None:
        """Form the group with `agents` (replacing the one each member was in): a free port on the learner's
        node, ranks 1.. to each agent's workers in order; returns once every member has joined."""
        self.members = []
        address, *sizes = ray.get([self.sender.rendezvous_address.remote(),
                                   *[agent.weight_group_ranks.remote() for agent in agents]])
        world_size = 1 + sum(sizes)
        joins, first = [], 1
        for agent, size in zip(agents, sizes, strict=True):
            joins.append(agent.join_weight_group.remote(address, first, world_size, self.backend))
            first += size
        ray.get([*joins, self.sender.join_weight_group.remote(self.weights, address, world_size, self.backend)])
        self.members = list(agents)


def sync_agents(learner: Any, agents: Sequence[Any], mode: SyncMode, path: str | Path | None, version: int,
                broadcast: WeightBroadcast | None = None) -> None:
    """Push the learner's current weights to every agent and wait until all have them.

    `learner` is a `strat.train.learner_actor.Learner` handle (or a LearnerGroup), `agents` are `AgentActor` handles. For
    `directory`, `path` is the version's directory (`sync_path(...)`); for `collective`, `broadcast` is the POLICY
    group's WeightBroadcast (kept between calls: it is formed once)."""
    if not agents:
        return
    ref = publish_weights(learner, mode, path)
    result = None if mode == "object_store" else ray.get(ref)
    ray.get(load_calls(agents, loadable(mode, ref, result, broadcast), version))


def sync_snapshot(learner: Any, snapshot: Any, mode: SyncMode, path: str | Path | None, version: int,
                  broadcast: WeightBroadcast | None = None) -> None:
    """Freeze the learner's current weights as the snapshot opponent's and load them into the snapshot agent
    (`broadcast`: the SNAPSHOT group's, for `collective`)."""
    ref = publish_snapshot(learner, mode, path)
    result = None if mode == "object_store" else ray.get(ref)
    ray.get(load_calls([snapshot], loadable(mode, ref, result, broadcast), version))


def _check_mode(mode: str, path: str | Path | None) -> None:
    if mode not in SYNC_MODES:
        raise ValueError(f"unknown weight sync mode {mode!r} (allowed: {', '.join(SYNC_MODES)})")
    if mode == "directory" and path is None:
        raise ValueError("a directory sync needs the path to write the weights to")


def snapshot_path(config: ExperimentConfig, run_dir: str | Path, version: int) -> Path:
    """Where the snapshot opponent's weights of `version` are written for a directory sync."""
    return sync_root(config, run_dir) / "snapshot" / f"{PREFIX}{int(version)}"
