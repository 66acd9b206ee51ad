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
  side); one that hangs instead holds them for at most `process_group.GROUP_TIMEOUT_S`.

`WeightSync` is what the driver calls: one call per sync, whatever the path. The helpers below it take actor
handles and return ObjectRefs, so that the driver's fault handling can wrap the waits.
"""

from __future__ import annotations

import shutil
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import ray

from strat.config import ExperimentConfig, agents_on_gpu, engine_is_multiprocess, learner_on_gpu
from strat.sync.process_group import TensorMeta

SYNC_MODES = ("object_store", "directory", "collective")
PREFIX = "step_"
"""Version directories under the sync root are `step_<version>`."""
POLICY = "policy"
"""The weight group (collective sync) that carries the policy's weights to its agents."""
SNAPSHOT = "snapshot"
"""The weight group that carries the snapshot opponent's weights to its agent."""
POLICIES_DIR = "policies"
"""Under the run directory (checkpoints) and the sync root (weights): one folder per co-trained policy."""

SyncMode = Literal["object_store", "directory", "collective"]
"""A weight-sync path with `auto` resolved (`WeightSync` carries it out)."""


def resolve_weight_sync(config: ExperimentConfig) -> SyncMode:
    """`engine.weight_sync` with `auto` resolved: directory for multi-process engines, else object_store
    (`collective` is only ever chosen explicitly)."""
    mode = config.engine.weight_sync
    if mode != "auto":
        return mode
    return "directory" if engine_is_multiprocess(config) else "object_store"


def resolve_collective_backend(config: ExperimentConfig) -> Literal["nccl", "gloo"]:
    """`engine.collective_backend` with `auto` resolved: nccl when the learner and the agents' vLLM workers run on
    whole GPUs (NCCL needs a GPU in every member, and no two members on one), else gloo."""
    backend = config.engine.collective_backend
    if backend != "auto":
        return backend
    res = config.resources
    whole = res.gpus_learner >= 1 and res.gpus_per_agent >= 1
    return "nccl" if whole and learner_on_gpu(config) and agents_on_gpu(config) else "gloo"


def sync_root(config: ExperimentConfig, run_dir: str | Path) -> Path:
    """The directory the learner writes synced weights under: `engine.sync_dir` or `<run_dir>/sync`, absolute
    (actors may run with another working directory)."""
    root = Path(config.engine.sync_dir).expanduser() if config.engine.sync_dir else Path(run_dir) / "sync"
    return root.absolute()


def policy_sync_dir(config: ExperimentConfig, run_dir: str | Path, name: str = "") -> Path:
    """Where a co-trained policy's learner writes its weights for its agent, whatever the first policy's sync
    (`<sync root>/policies/<name>`); the folder of them all with `name` empty."""
    root = sync_root(config, run_dir) / POLICIES_DIR
    return root / name if name else root


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
        return learner.state_dict()
    if mode == "collective":
        return learner.stage_weights()
    return learner.export_weights_dir(str(path), True)


def publish_snapshot(learner: Any, mode: SyncMode, path: str | Path | None) -> Any:
    """As `publish_weights`, and the learner also keeps these weights as the snapshot opponent's (for
    checkpoints). For `directory`, `path` should be under its own root (see `snapshot_path`), so that
    pruning the policy's versions never removes it."""
    _check_mode(mode, path)
    if mode == "object_store":
        return learner.take_snapshot()
    if mode == "collective":
        return learner.stage_snapshot(True)
    return learner.take_snapshot_dir(str(path), True)


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
    else is a state dict (or its ObjectRef) loaded in place. No agents, no calls (and no broadcast)."""
    if not agents:
        return []
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
        # Only rank 0 of the learner's group (a LearnerGroup) holds gathered weights: it alone is in the weight group.
        self.sender = learner.ranks[0]
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


AgentCalls = Callable[[str, Callable[[], list[Any]]], Any]
"""(where, a function making the agents' calls) -> their results. The trainer's restarts a dead agent and calls again;
by default the calls are just waited for."""


def _wait(where: str, calls: Callable[[], list[Any]]) -> Any:
    return ray.get(calls())


class WeightSync:
    """The learner's weights to the inference engines, one call each and the same for every path (object store,
    directory, collective): `push` the policy's to the agents, `refresh_snapshot` the snapshot opponent's,
    `restore` both after a checkpoint is loaded, and `reload_calls` for agents restarted after a fault, which get
    the version the others hold.

    `learner` is the run's `LearnerGroup`; `agents` and `snapshot` return the current handles (a restart replaces
    them); `learner_get` waits for a learner call (the group's own `get` by default, which waits for every rank; the
    trainer ends the run when the learner dies), `on_agents` for the agents' calls."""

    def __init__(self, config: ExperimentConfig, run_dir: str | Path, learner: Any,
                 agents: Callable[[], Sequence[Any]], snapshot: Callable[[], Any | None] = lambda: None,
                 learner_get: Callable[[Any], Any] | None = None, on_agents: AgentCalls = _wait) -> None:
        self.mode: SyncMode = resolve_weight_sync(config)
        self.config, self.run_dir, self.learner = config, run_dir, learner
        self._agents, self._snapshot = agents, snapshot
        self._learner_get = learner_get if learner_get is not None else learner.get
        self._on_agents = on_agents
        self.broadcasts: dict[str, WeightBroadcast] = {}
        """Collective sync: the weight group of the policy's agents (POLICY) and the snapshot agent's (SNAPSHOT)."""
        if self.mode == "collective":
            backend = resolve_collective_backend(config)
            self.broadcasts = {weights: WeightBroadcast(learner, weights, backend) for weights in (POLICY, SNAPSHOT)}
        self.policy: tuple[Any, int] | None = None
        """The weights the agents hold now (object ref, sync directory or weights staged on the learner; version);
        None: the initial model's."""
        self.snapshot_weights: Any = None
        """What the snapshot agent holds now: as `policy`, or a kept copy of a checkpoint's snapshot, or None."""
        self.snapshot_step = 0
        """The step whose policy the snapshot opponent plays."""

    def push(self, version: int) -> None:
        """The learner's current weights to every agent, as `version`; returns once all hold them."""
        ref = publish_weights(self.learner, self.mode, sync_path(self.config, self.run_dir, version))
        written = self._learner_get(ref)  # the learner's death ends the run here, not inside an agent
        weights = loadable(self.mode, ref, written, self.broadcasts.get(POLICY))
        self.policy = (weights, version)
        self._on_agents("weight sync", lambda: load_calls(self._agents(), weights, version))

    def refresh_snapshot(self, step: int) -> None:
        """Freeze the learner's current weights as the snapshot opponent's (of `step`) and load them into it."""
        ref = publish_snapshot(self.learner, self.mode, snapshot_path(self.config, self.run_dir, step))
        written = self._learner_get(ref)
        weights = loadable(self.mode, ref, written, self.broadcasts.get(SNAPSHOT))
        self.snapshot_weights, self.snapshot_step = weights, step
        self._on_agents("snapshot refresh", lambda: load_calls([self._snapshot()], weights, step))

    def load_snapshot(self, path: str | Path, step: int) -> None:
        """Load the weights directory `path` (the policy of `step`: a league member) into the snapshot agent; an agent
        restarted later reloads it from there."""
        self.snapshot_weights, self.snapshot_step = str(path), step
        self._on_agents("league member load", lambda: load_calls([self._snapshot()], str(path), step))

    def restore(self, version: int, snapshot_step: int, checkpoint: Path, snapshot_agent: bool = True) -> None:
        """After the learner loaded `checkpoint`: its weights to the agents and, when it holds one, its snapshot to
        the snapshot agent (of `snapshot_step`). `snapshot_agent=False` (a league, which loads its own members):
        the agents only."""
        self.push(version)
        self.snapshot_step = snapshot_step
        snapshot = self._snapshot()
        if not snapshot_agent or snapshot is None or not (checkpoint / "snapshot").is_dir():
            return
        if self.mode == "collective":
            # The learner restored the snapshot with the checkpoint: broadcast it from there, no disk.
            ref = self.learner.stage_snapshot(False)
            self.snapshot_weights = loadable("collective", ref, self._learner_get(ref), self.broadcasts[SNAPSHOT])
        else:
            # A copy outside the checkpoint, which keep_checkpoints may prune while a restarted snapshot agent could
            # still need it.
            kept = snapshot_path(self.config, self.run_dir, snapshot_step)
            if not kept.is_dir():
                kept.parent.mkdir(parents=True, exist_ok=True)
                staging = kept.with_name(kept.name + ".tmp")
                shutil.copytree(checkpoint / "snapshot", staging, dirs_exist_ok=True)
                staging.rename(kept)
            self.snapshot_weights = str(kept)
        ray.get(load_calls([snapshot], self.snapshot_weights, snapshot_step))

    def reload_calls(self, agents: Sequence[Any], snapshot: bool) -> list[Any]:
        """The load calls that give restarted `agents` (and the snapshot agent, when `snapshot`) the weights the
        others hold. Collective: a weight group of these agents is formed for it (the learner kept those weights),
        and one of all agents again at the next push."""
        loads = []
        if self.policy is not None:
            weights, version = self.policy
            loads += load_calls(agents, weights, version)
        if snapshot and self.snapshot_weights is not None:
            loads += load_calls([self._snapshot()], self.snapshot_weights, self.snapshot_step)
        return loads


def _check_mode(mode: str, path: str | Path | None) -> None:
    if mode not in SYNC_MODES:
        raise ValueError(f"unknown weight sync mode {mode!r} (allowed: {', '.join(SYNC_MODES)})")
    if mode == "directory" and path is None:
        raise ValueError("a directory sync needs the path to write the weights to")


def snapshot_path(config: ExperimentConfig, run_dir: str | Path, version: int) -> Path:
    """Where the snapshot opponent's weights of `version` are written for a directory sync."""
    return sync_root(config, run_dir) / "snapshot" / f"{PREFIX}{int(version)}"


def league_path(config: ExperimentConfig, run_dir: str | Path, step: int) -> Path:
    """Where the league's member holding the policy of `step` keeps its weights (whatever the sync path: the league's
    agent loads each step's member from disk, so the sync root must be readable on its node)."""
    return sync_root(config, run_dir) / "league" / f"{PREFIX}{int(step)}"
