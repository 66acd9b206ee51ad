"""Shared storage, checked at the start of a run on more than one node, before any actor starts.

A run's actors read and write paths the driver names: the learner writes checkpoints into the run directory and
synced weights into the sync directory, which the agents read back; every actor loads the model from the directory
the driver resolved. On several nodes those paths must name the same files everywhere. Nothing else can see that
(`strat submit` runs on another machine, and the config only names paths), so the driver asks the nodes:

- it writes a nonce (`.strat-storage-<nonce>`, holding the nonce) into the run directory and, for
  `engine.weight_sync=directory`, the sync directory;
- a task pinned to each node that will host an actor reads the nonce back, and checks that the model's
  `config.json` is there (the model need not be shared: a copy at the same path on every node will do);
- a miss stops the run in one line that names the path, the node and what to change (`storage_message`).

The nonce files are removed afterwards. Runs on one node skip the check. `probes`, `read_back`, `hosting_nodes`
and `storage_message` are pure (no Ray); `check_shared_storage` runs them on the cluster.
"""

from __future__ import annotations

import logging
import os
import secrets
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from strat.config import ExperimentConfig
from strat.errors import ConfigError
from strat.model import hub

log = logging.getLogger("strat.train")

NONCE_PREFIX = ".strat-storage-"
"""The nonce file's name is this prefix and the nonce."""
CHECK_TIMEOUT_S = 120.0
"""How long the driver waits for every node's answer (a task needs a new worker process on each node)."""


@dataclass(frozen=True)
class Probe:
    """One thing every node must see: `file` under `path`, holding `content` (None: it need only exist)."""

    what: str
    """The path's role in the run, with its config key: `run directory (run.output_dir)`."""
    path: str
    """The directory as the actors are given it (a relative one resolves in each process's working directory)."""
    file: str
    content: str | None
    fix: str
    """What to change when a node misses it."""

    @property
    def target(self) -> str:
        return os.path.join(self.path, self.file)


@dataclass(frozen=True)
class NodeInfo:
    """An alive Ray node: its id and address, and whether it offers any CPU or GPU."""

    node_id: str
    address: str
    schedulable: bool = True

    def describe(self) -> str:
        return f"{self.address} (node id {self.node_id})"


@dataclass(frozen=True)
class Miss:
    """A probe a node did not see: where it looked (the path resolved on that node) and why."""

    node: NodeInfo
    probe: Probe
    seen_at: str
    reason: str


def nonce_file(nonce: str) -> str:
    return f"{NONCE_PREFIX}{nonce}"


def _model_fix(config: ExperimentConfig) -> str:
    """Where a node that misses the model gets it from, by the kind of `model.path`."""
    name = hub.parse(config.model.path)
    if config.model.path.startswith("tiny:") or config.warm_start.enabled:
        return ("set STRAT_CACHE_DIR (where tiny and warm-started models are cached) to storage every node mounts at "
                "the same path")
    if name is not None:
        return (f"put HF_HOME on storage every node mounts at the same path (strat submit --env HF_HOME=/shared/hf),"
                f" or download {name} under the same HF_HOME on every node")
    return "put model.path on storage every node mounts at the same path, or copy it to that path on every node"


def probes(config: ExperimentConfig, run_dir: str | Path, model_path: str | Path, nonce: str,
           fixed_models: Sequence[tuple[str, str]] = ()) -> list[Probe]:
    """What each node must see: the nonce in the run directory, in the sync directory when weights are synced
    through it (else in the league's folder of it, when a league is configured), the model's `config.json` and each
    fixed policy's ((name, model directory) in `fixed_models`, co-trained ones' too), and under a collective sync the
    sync root's folders that are read from disk all the same (the league's, the co-trained policies'). Paths are given
    as the actors get them."""
    from strat.config import cotrained_policy_names, league_opponent
    from strat.sync.weights import (  # imports Ray (not the pure part)
        league_path,
        policy_sync_dir,
        resolve_weight_sync,
        sync_root,
    )

    shared = "on storage every node mounts at the same path (an absolute path: a relative one is relative to each" \
             " process's working directory)"
    found = [Probe("run directory (run.output_dir)", str(run_dir), nonce_file(nonce), nonce,
                   f"put run.output_dir {shared}")]
    if resolve_weight_sync(config) == "directory":
        root = str(sync_root(config, run_dir))
        if root != found[0].path:
            found.append(Probe("weight sync directory (engine.sync_dir)", root, nonce_file(nonce), nonce,
                               f"put engine.sync_dir (default <run directory>/sync) {shared}, or use "
                               "engine.weight_sync=collective (no disk)"))
    else:
        if league_opponent(config) is not None:
            # Whatever the sync, the league's engine loads each member from the sync root's league folder.
            found.append(Probe("league members' directory (<engine.sync_dir>/league)",
                               str(league_path(config, run_dir, 0).parent), nonce_file(nonce), nonce,
                               f"put engine.sync_dir (default <run directory>/sync) {shared}: the league's engine"
                               " loads each member's weights from there"))
        if cotrained_policy_names(config):
            # Whatever the first policy's sync, a co-trained policy's weights reach its agent through this folder.
            found.append(Probe("co-trained policies' directory (<engine.sync_dir>/policies)",
                               str(policy_sync_dir(config, run_dir)), nonce_file(nonce), nonce,
                               f"put engine.sync_dir (default <run directory>/sync) {shared}: each co-trained"
                               " policy's agent loads its learner's weights from there"))
    found.append(Probe("model (model.path)", str(model_path), "config.json", None, _model_fix(config)))
    found += [Probe(f"fixed policy {name} (policies)", str(path), "config.json", None,
                    f"put its checkpoint {shared} (a Hub name: HF_HOME on shared storage)")
              for name, path in fixed_models]
    return found


def write_nonces(found: Sequence[Probe]) -> list[Path]:
    """Write each probe's nonce where the driver runs; returns the files written (for `remove_nonces`). A directory
    that cannot be written is refused in one line."""
    written = []
    for probe in found:
        if probe.content is None:
            continue
        try:
            Path(probe.path).mkdir(parents=True, exist_ok=True)
            Path(probe.target).write_text(probe.content)
        except OSError as err:
            remove_nonces(written)
            raise ConfigError(f"{probe.what} {probe.path} is not writable: {err.strerror or err}") from None
        written.append(Path(probe.target))
    return written


def remove_nonces(files: Sequence[Path]) -> None:
    for file in files:
        file.unlink(missing_ok=True)


def read_back(found: Sequence[Probe]) -> list[tuple[int, str, str]]:
    """On a node: (probe index, the path as resolved here, why) for each probe this node does not see."""
    misses = []
    for index, probe in enumerate(found):
        where = os.path.abspath(probe.target)
        try:
            if probe.content is None:
                if not os.path.isfile(where):
                    misses.append((index, where, "not found"))
                continue
            with open(where) as file:
                if file.read() != probe.content:
                    misses.append((index, where, "holds another nonce"))
        except FileNotFoundError:
            misses.append((index, where, "not found"))
        except OSError as err:
            misses.append((index, where, err.strerror or type(err).__name__))
    return misses


def hosting_nodes(alive: Sequence[NodeInfo], bundle_nodes: Sequence[str] | None) -> list[NodeInfo]:
    """The nodes that will host an actor: those holding a placement bundle, or, without a placement (or with an actor
    outside one), every alive node that offers CPUs or GPUs."""
    if bundle_nodes is None:
        return [node for node in alive if node.schedulable]
    wanted = set(bundle_nodes)
    return [node for node in alive if node.node_id in wanted]


def storage_message(misses: Sequence[Miss], driver: NodeInfo) -> str:
    """The one line that stops a run whose nodes do not share its storage: the first miss in full, then a count."""
    first = misses[0]
    seen = f"{first.seen_at}: {first.reason}" if first.probe.content is None else (
        f"the nonce the driver on {driver.describe()} wrote to {first.probe.target} ({first.seen_at}: {first.reason})")
    more = f"; {len(misses) - 1} more miss(es) on this or other nodes" if len(misses) > 1 else ""
    return (f"shared storage: node {first.node.describe()} does not see the {first.probe.what}: {seen}; "
            f"{first.probe.fix}{more}")


# --- on the Ray cluster ----------------------------------------------------------------------------------------------


def alive_nodes(nodes: list[dict[str, Any]]) -> list[NodeInfo]:
    """`ray.nodes()` as NodeInfo, alive ones only."""
    return [
        NodeInfo(node["NodeID"], node.get("NodeManagerAddress", "?"),
                 any(node.get("Resources", {}).get(kind, 0) > 0 for kind in ("CPU", "GPU")))
        for node in nodes if node.get("Alive")
    ]


def bundle_nodes(placement: Any) -> list[str] | None:
    """The node ids holding the placement's bundles; None when there is no placement, or when an actor has no
    bundle (it may land on any node)."""
    if placement is None or any(actor.group is None for actor in placement.plan.actors):
        return None
    from ray.util import placement_group_table

    found = []
    for group in placement.groups.values():
        found.extend(placement_group_table(group)["bundles_to_node_id"].values())
    return found


def check_shared_storage(config: ExperimentConfig, run_dir: str | Path, model_path: str | Path,
                         placement: Any = None, fixed_models: Sequence[tuple[str, str]] = ()) -> None:
    """On a cluster of more than one node: the nonce check above on every node that will host an actor; raises a
    ConfigError (`storage_message`) at the first run whose nodes miss a path. Nothing on one node."""
    import ray
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

    alive = alive_nodes(ray.nodes())
    if len(alive) < 2:
        return
    driver_id = ray.get_runtime_context().get_node_id()
    driver = next((node for node in alive if node.node_id == driver_id), NodeInfo(driver_id, "?"))
    nodes = hosting_nodes(alive, bundle_nodes(placement))
    if {node.node_id for node in nodes} <= {driver_id}:
        return
    found = probes(config, run_dir, model_path, secrets.token_hex(8), fixed_models)
    written = write_nonces(found)
    try:
        task = ray.remote(num_cpus=0, max_retries=0)(read_back)
        refs = {node.node_id: task.options(scheduling_strategy=NodeAffinitySchedulingStrategy(node.node_id, soft=False))
                .remote(found) for node in nodes}
        _, pending = ray.wait(list(refs.values()), num_returns=len(refs), timeout=CHECK_TIMEOUT_S)
        if pending:
            late = [node.describe() for node in nodes if refs[node.node_id] in pending]
            for ref in pending:
                ray.cancel(ref, force=True)
            raise ConfigError(f"shared storage: node(s) {', '.join(late)} did not answer the storage check within "
                              f"{CHECK_TIMEOUT_S:.0f} s (a task there could not start)")
        misses = [Miss(node, found[index], where, reason)
                  for node in nodes for index, where, reason in ray.get(refs[node.node_id])]
    finally:
        remove_nonces(written)
    if misses:
        raise ConfigError(storage_message(misses, driver))
    log.info("shared storage: %d node(s) see the %s", len(nodes), ", the ".join(probe.what for probe in found))
