"""Where every actor of a run goes: one placement group per role, planned as pure logic and then
reserved on a Ray cluster.

`plan(config, cluster)` checks a config against a cluster description and simulates the placement
(first-fit, largest bundles first; Ray makes the final choice of nodes, but a plan that fits here
has a fit there). `reserve(plan)` creates the real placement groups and hands out a scheduling
strategy per actor. Ray is imported only inside `reserve` and `cluster_from_ray`.

How the trainer uses it, when the run asks for GPUs (`needs_placement(config)`):

    cluster = cluster_from_ray(ray.nodes())
    placement = reserve(plan(config, cluster))          # raises PlacementError / times out clearly
    AgentActor.options(num_cpus=..., num_gpus=..., scheduling_strategy=placement.strategy("agent", i))
    ...
    placement.remove()                                  # after the actors are killed

An agent's bundle holds all of its engine's tensor-parallel GPUs, and a bundle always lands on one
node, so a tensor-parallel engine never spans nodes.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal

from strat.config import (
    ExperimentConfig,
    cotrained_policy_names,
    fixed_policy_names,
    past_policy_agent,
    policy_actors_config,
)
from strat.errors import PlacementError

if TYPE_CHECKING:
    from ray.util.placement_group import PlacementGroup
    from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy

Role = Literal["agent", "snapshot", "fixed", "cotrained", "rollout_worker", "comparator", "learner",
               "cotrained_learner"]
Strategy = Literal["PACK", "SPREAD", "STRICT_PACK", "STRICT_SPREAD"]
_EPS = 1e-9



@dataclass(frozen=True)
class NodeSpec:
    """One node's schedulable resources; `cpus=None` means CPUs are not checked, `gpu_memory=None` (bytes per
    GPU) that memory is not."""

    gpus: float
    cpus: float | None = None
    gpu_memory: int | None = None


@dataclass(frozen=True)
class ClusterSpec:
    nodes: tuple[NodeSpec, ...]

    @property
    def total_gpus(self) -> float:
        return sum(node.gpus for node in self.nodes)

    @property
    def gpu_memory(self) -> int | None:
        """Bytes of the smallest GPU, or None when a node does not say."""
        sizes = [node.gpu_memory for node in self.nodes]
        return None if not sizes or None in sizes else min(size for size in sizes if size is not None)

    @property
    def max_node_gpus(self) -> float:
        return max((node.gpus for node in self.nodes), default=0.0)

    def describe(self) -> str:
        """`nodes=2,gpus_per_node=8` for a uniform cluster, else the per-node list."""
        first = self.nodes[0] if self.nodes else NodeSpec(0.0)
        if all(node == first for node in self.nodes):
            text = f"nodes={len(self.nodes)},gpus_per_node={first.gpus:g}"
            text += f",cpus_per_node={first.cpus:g}" if first.cpus is not None else ""
            return text + (f",gpu_memory={first.gpu_memory / _GIB:g}GiB" if first.gpu_memory is not None else "")
        return "nodes=[" + "; ".join(
            f"{n.gpus:g} GPU" + (f" {n.cpus:g} CPU" if n.cpus is not None else "") for n in self.nodes
        ) + "]"


@dataclass(frozen=True)
class Bundle:
    cpus: float
    gpus: float

    def as_ray(self) -> dict[str, float]:
        return {key: value for key, value in (("CPU", self.cpus), ("GPU", self.gpus)) if value > 0}


@dataclass(frozen=True)
class GroupPlan:
    """One placement group: a role's bundles and how Ray may spread them."""

    name: str
    strategy: Strategy
    bundles: tuple[Bundle, ...]


@dataclass(frozen=True)
class ActorPlacement:
    """Where one actor goes: its group and bundle, and the node the simulation put that bundle on."""

    role: Role
    index: int
    group: str | None
    """None when the actor asks for no resources (then it needs no reservation)."""
    bundle: int | None
    node: int | None
    cpus: float
    gpus: float
    label: str | None = None
    """What names the actor beside its role where its index does not: a fixed policy's name."""

    @property
    def name(self) -> str:
        return f"{self.role}[{self.label if self.label is not None else self.index}]"


@dataclass(frozen=True)
class Plan:
    cluster: ClusterSpec
    groups: tuple[GroupPlan, ...]
    actors: tuple[ActorPlacement, ...]

    def node_usage(self) -> list[tuple[float, float]]:
        """(GPUs, CPUs) the plan puts on each node."""
        usage = [[0.0, 0.0] for _ in self.cluster.nodes]
        for actor in self.actors:
            if actor.node is not None:
                usage[actor.node][0] += actor.gpus
                usage[actor.node][1] += actor.cpus
        return [(gpus, cpus) for gpus, cpus in usage]


_CLUSTER_KEYS = {"nodes": int, "gpus_per_node": float, "cpus_per_node": float}
_GIB = 2**30
_MEMORY_UNITS = {"GiB": _GIB, "MiB": 2**20, "GB": 10**9, "MB": 10**6}


def parse_memory(text: str) -> int:
    """Bytes in `80GiB`, `24GB`, `40960MiB`; PlacementError otherwise."""
    for unit, scale in _MEMORY_UNITS.items():
        if text.endswith(unit):
            try:
                value = float(text.removesuffix(unit))
            except ValueError:
                break
            if value > 0:
                return round(value * scale)
    raise PlacementError(f"gpu_memory={text!r}: a positive size with a unit ({', '.join(_MEMORY_UNITS)}), e.g. 80GiB")


def parse_cluster(text: str) -> ClusterSpec:
    """Parse `nodes=N,gpus_per_node=K[,cpus_per_node=C][,gpu_memory=80GiB]` into a uniform cluster."""
    values: dict[str, float] = {}
    gpu_memory: int | None = None
    for item in filter(None, (part.strip() for part in text.split(","))):
        key, _, raw = item.partition("=")
        key = key.strip()
        if key == "gpu_memory":
            gpu_memory = parse_memory(raw.strip())
            continue
        if key not in _CLUSTER_KEYS or not raw.strip():
            raise PlacementError(
                f"cluster {text!r}: {item!r} is not one of nodes=N, gpus_per_node=K, cpus_per_node=C, gpu_memory=SIZE"
            )
        try:
            values[key] = _CLUSTER_KEYS[key](raw.strip())
        except ValueError:
            raise PlacementError(f"cluster {text!r}: {key}={raw.strip()!r} is not a number") from None
        if values[key] < 0 or (key == "nodes" and values[key] < 1):
            raise PlacementError(f"cluster {text!r}: {key} must be {'>= 1' if key == 'nodes' else '>= 0'}")
    missing = [key for key in ("nodes", "gpus_per_node") if key not in values]
    if missing:
        raise PlacementError(f"cluster {text!r}: missing {', '.join(missing)} (e.g. nodes=2,gpus_per_node=8)")
    node = NodeSpec(gpus=values["gpus_per_node"], cpus=values.get("cpus_per_node"), gpu_memory=gpu_memory)
    return ClusterSpec(nodes=(node,) * int(values["nodes"]))


def cluster_from_ray(nodes: list[dict[str, Any]]) -> ClusterSpec:
    """The live cluster from `ray.nodes()`: every alive node with its GPUs and CPUs."""
    alive = [n for n in nodes if n.get("Alive", n.get("alive", False))]
    return ClusterSpec(nodes=tuple(
        NodeSpec(gpus=float(n.get("Resources", {}).get("GPU", 0.0)), cpus=float(n.get("Resources", {}).get("CPU", 0.0)))
        for n in alive
    ))


def needs_placement(config: ExperimentConfig) -> bool:
    """Placement groups are used when any actor asks for GPUs; CPU-only local runs schedule freely."""
    res = config.resources
    return res.gpus_per_agent > 0 or res.gpus_learner > 0 or res.gpus_comparator > 0


def _check_ray_amount(role: str, key: str, value: float) -> None:
    # Ray accepts fractions of one resource or whole numbers, not 1.5 GPUs.
    if value > 1 + _EPS and abs(value - round(value)) > _EPS:
        raise PlacementError(f"{role}: {key}={value:g} GPUs; Ray takes a fraction below 1 or a whole number")


def _engine_bundle(config: ExperimentConfig, role: str) -> Bundle:
    """An engine's bundle: its CPUs, and its GPUs per rank times its tensor-parallel ranks (whole GPUs then)."""
    res, tp = config.resources, config.engine.tensor_parallel_size
    if tp > 1 and (res.gpus_per_agent < 1 or abs(res.gpus_per_agent - round(res.gpus_per_agent)) > _EPS):
        raise PlacementError(
            f"{role}: engine.tensor_parallel_size={tp} needs whole GPUs per rank, "
            f"but resources.gpus_per_agent={res.gpus_per_agent:g} (use 1)"
        )
    bundle = Bundle(cpus=res.cpus_per_agent, gpus=res.gpus_per_agent * tp)
    _check_ray_amount(role, "resources.gpus_per_agent x engine.tensor_parallel_size", bundle.gpus)
    return bundle


def role_bundles(config: ExperimentConfig) -> list[tuple[Role, int, str, Bundle]]:
    """Every actor with its group name and resource bundle, in the trainer's order."""
    res = config.resources
    judge_separate = config.comparison.agreement == "judge" and config.comparison.judge_engine == "separate"
    if judge_separate and res.gpus_per_agent > 0 and res.gpus_comparator <= 0:
        raise PlacementError(
            "comparator: agreement=judge on a separate engine needs resources.gpus_comparator > 0 "
            "on a GPU run (the judge engine runs in the comparator)"
        )
    agent = _engine_bundle(config, "agent")
    _check_ray_amount("learner", "resources.gpus_learner", res.gpus_learner)
    _check_ray_amount("comparator", "resources.gpus_comparator", res.gpus_comparator)
    rows: list[tuple[Role, int, str, Bundle]] = [("agent", i, "agents", agent) for i in range(res.agents)]
    if past_policy_agent(config):  # the snapshot opponent's engine, which also plays a league's members
        rows.append(("snapshot", 0, "agents", agent))
    # Each other policy's engine (a fixed LLM opponent's, a co-trained policy's) takes a bundle of its own size: the
    # agent's, or what its `resources` says.
    def own(name: str, role: str) -> Bundle:
        try:
            return _engine_bundle(policy_actors_config(config, name), f"{role}[{name}]")
        except PlacementError as err:
            raise PlacementError(f"{err} (or set it in the policy's own resources)") from None

    rows += [("fixed", i, "agents", own(name, "fixed")) for i, name in enumerate(fixed_policy_names(config))]
    rows += [("cotrained", i, "agents", own(name, "cotrained"))
             for i, name in enumerate(cotrained_policy_names(config))]
    rows += [("rollout_worker", i, "rollout_workers", Bundle(res.cpus_per_worker, 0.0))
             for i in range(res.rollout_workers)]
    rows.append(("comparator", 0, "comparator", Bundle(res.cpus_comparator, res.gpus_comparator)))
    # One bundle per learner rank (one GPU each on a multi-GPU learner); FSDP2 ranks may span nodes.
    rows += [("learner", i, "learner", Bundle(res.cpus_learner, res.gpus_per_learner_rank))
             for i in range(res.learner_world_size)]
    # A co-trained policy's learner: one rank by default (one GPU beside a multi-GPU learner, else the learner's own
    # share), or the ranks its `resources` ask for, one bundle each.
    for i, (name, _) in enumerate(cotrained_learner_slots(config)):
        learner = policy_actors_config(config, name).resources
        rows.append(("cotrained_learner", i, "learner", Bundle(learner.cpus_learner, learner.gpus_per_learner_rank)))
    return rows


def cotrained_learner_slots(config: ExperimentConfig) -> list[tuple[str, int]]:
    """(policy, rank) of every co-trained policy's learner rank, in the order of their bundles: a slot's position
    is its `cotrained_learner` index in the plan."""
    return [(name, rank) for name in cotrained_policy_names(config)
            for rank in range(policy_actors_config(config, name).resources.learner_world_size)]


def _cotrained_learner_labels(config: ExperimentConfig) -> list[str]:
    """Each co-trained learner rank's name in the plan: the policy's, with `:<rank>` where it has several."""
    slots = cotrained_learner_slots(config)
    several = {name for name, rank in slots if rank > 0}
    return [f"{name}:{rank}" if name in several else name for name, rank in slots]


# PACK keeps weight sync and rollout traffic on few nodes but, unlike STRICT_PACK, may use another
# node when one is full; each bundle (one actor) is on a single node either way.
GROUP_STRATEGY: Strategy = "PACK"
_NEED_KEY = {
    "agent": "resources.gpus_per_agent x engine.tensor_parallel_size",
    "snapshot": "resources.gpus_per_agent x engine.tensor_parallel_size",
    "fixed": "resources.gpus_per_agent x engine.tensor_parallel_size, or the policy's own resources",
    "cotrained": "resources.gpus_per_agent x engine.tensor_parallel_size, or the policy's own resources",
    "cotrained_learner": "resources.gpus_learner, or the policy's own resources.gpus_learner",
    "rollout_worker": "resources.cpus_per_worker",
    "comparator": "resources.gpus_comparator",
    "learner": "resources.gpus_learner",
}


def plan(config: ExperimentConfig, cluster: ClusterSpec) -> Plan:
    """Every actor's group, bundle and node on `cluster`; PlacementError when the run cannot fit."""
    if not cluster.nodes:
        raise PlacementError("cluster: no nodes")
    rows = role_bundles(config)
    where = cluster.describe()
    max_cpus = max((n.cpus for n in cluster.nodes if n.cpus is not None), default=None)
    for role, _, _, bundle in rows:
        if bundle.gpus > cluster.max_node_gpus + _EPS:
            engine_role = role in ("agent", "snapshot", "fixed", "cotrained")
            what = "its engine" if engine_role else "its actor"
            raise PlacementError(
                f"{role}: {what} needs {bundle.gpus:g} GPUs on one node ({_NEED_KEY[role]}) "
                f"but the largest node has {cluster.max_node_gpus:g} ({where})"
            )
        if max_cpus is not None and bundle.cpus > max_cpus + _EPS:
            raise PlacementError(
                f"{role}: needs {bundle.cpus:g} CPUs on one node but the largest node has {max_cpus:g} ({where})"
            )
    total = sum(bundle.gpus for *_, bundle in rows)
    if total > cluster.total_gpus + _EPS:
        by_role: dict[str, float] = {}
        for role, _, _, bundle in rows:
            by_role[role] = by_role.get(role, 0.0) + bundle.gpus
        parts = ", ".join(f"{role} {gpus:g}" for role, gpus in by_role.items() if gpus > 0)
        raise PlacementError(f"all roles: the actors need {total:g} GPUs ({parts}) but the cluster has "
                             f"{cluster.total_gpus:g} ({where})")
    total_cpus = sum(bundle.cpus for *_, bundle in rows)
    if all(n.cpus is not None for n in cluster.nodes):
        have = sum(n.cpus or 0.0 for n in cluster.nodes)
        if total_cpus > have + _EPS:
            raise PlacementError(f"all roles: the actors need {total_cpus:g} CPUs but the cluster has {have:g} ({where})")
    nodes = _first_fit(rows, cluster, where)
    fixed_names = fixed_policy_names(config)
    cotrained_names = cotrained_policy_names(config)
    learner_labels = _cotrained_learner_labels(config)
    groups: dict[str, list[Bundle]] = {}
    actors = []
    for (role, index, group, bundle), node in zip(rows, nodes, strict=True):
        names = {"fixed": fixed_names, "cotrained": cotrained_names, "cotrained_learner": learner_labels}.get(role)
        label = names[index] if names else None
        if bundle.cpus <= 0 and bundle.gpus <= 0:
            actors.append(ActorPlacement(role, index, None, None, None, 0.0, 0.0, label))
            continue
        groups.setdefault(group, []).append(bundle)
        actors.append(ActorPlacement(role, index, group, len(groups[group]) - 1, node, bundle.cpus, bundle.gpus,
                                     label))
    return Plan(
        cluster=cluster,
        groups=tuple(GroupPlan(name, GROUP_STRATEGY, tuple(bundles)) for name, bundles in groups.items()),
        actors=tuple(actors),
    )


def _first_fit(rows: list[tuple[Role, int, str, Bundle]], cluster: ClusterSpec, where: str) -> list[int | None]:
    """Put bundles on nodes, largest first; each on the first node with room (None for empty bundles)."""
    free_gpus = [node.gpus for node in cluster.nodes]
    free_cpus = [node.cpus if node.cpus is not None else math.inf for node in cluster.nodes]
    order = sorted(range(len(rows)), key=lambda i: (-rows[i][3].gpus, -rows[i][3].cpus, i))
    nodes: list[int | None] = [None] * len(rows)
    for i in order:
        role, _, _, bundle = rows[i]
        if bundle.cpus <= 0 and bundle.gpus <= 0:
            continue
        for n in range(len(cluster.nodes)):
            if free_gpus[n] + _EPS >= bundle.gpus and free_cpus[n] + _EPS >= bundle.cpus:
                free_gpus[n] -= bundle.gpus
                free_cpus[n] -= bundle.cpus
                nodes[i] = n
                break
        else:
            left = ", ".join(f"node {n}: {g:g} GPU" + (f" {c:g} CPU" if math.isfinite(c) else "")
                             for n, (g, c) in enumerate(zip(free_gpus, free_cpus, strict=True)))
            raise PlacementError(
                f"{role}: needs {bundle.gpus:g} GPUs and {bundle.cpus:g} CPUs on one node, but after the larger "
                f"actors no node has that much left ({left}; {where})"
            )
    return nodes


def format_plan(result: Plan) -> str:
    """A plain-text table: one row per actor, then the groups and the per-node totals."""
    header = ("actor", "group", "bundle", "node", "GPUs", "CPUs")
    rows = [
        (a.name, a.group or "-", "-" if a.bundle is None else str(a.bundle), "any" if a.node is None else str(a.node),
         f"{a.gpus:g}", f"{a.cpus:g}")
        for a in result.actors
    ]
    widths = [max(len(r[c]) for r in [header, *rows]) for c in range(len(header))]
    lines = ["  ".join(cell.ljust(width) for cell, width in zip(row, widths, strict=True)).rstrip()
             for row in [header, *rows]]
    lines.append("")
    for group in result.groups:
        lines.append(f"group {group.name}: {len(group.bundles)} bundle(s), {group.strategy}")
    for n, ((gpus, cpus), node) in enumerate(zip(result.node_usage(), result.cluster.nodes, strict=True)):
        cpu_have = f"/{node.cpus:g}" if node.cpus is not None else ""
        lines.append(f"node {n}: {gpus:g}/{node.gpus:g} GPUs, {cpus:g}{cpu_have} CPUs")
    return "\n".join(lines)


@dataclass
class Placement:
    """The reserved placement groups of a run; `strategy` gives each actor its bundle."""

    plan: Plan
    groups: dict[str, PlacementGroup]

    def strategy(self, role: Role, index: int = 0) -> PlacementGroupSchedulingStrategy | str:
        """The `scheduling_strategy` for an actor (`"DEFAULT"` when it reserved nothing)."""
        from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy  # start-up cost, as in `reserve`

        for actor in self.plan.actors:
            if actor.role == role and actor.index == index:
                if actor.group is None:
                    return "DEFAULT"
                return PlacementGroupSchedulingStrategy(
                    placement_group=self.groups[actor.group], placement_group_bundle_index=actor.bundle
                )
        raise KeyError(f"no {role}[{index}] in the plan")

    def remove(self) -> None:
        from ray.util import remove_placement_group  # start-up cost, as in `reserve`

        for group in self.groups.values():
            remove_placement_group(group)
        self.groups = {}


def reserve(result: Plan, timeout_s: float = 600.0) -> Placement:
    """Create the plan's placement groups on the connected Ray cluster and wait until all are placed."""
    # Ray is imported here for start-up cost: `strat plan` and the config checks use the plan alone, and the CLI
    # imports this module to register its verbs.
    import ray
    from ray.util import placement_group, remove_placement_group

    groups = {
        group.name: placement_group([b.as_ray() for b in group.bundles], strategy=group.strategy,
                                    name=f"strat-{group.name}")
        for group in result.groups
    }
    ready = {name: group.ready() for name, group in groups.items()}
    _, pending = ray.wait(list(ready.values()), num_returns=len(ready), timeout=timeout_s)
    if pending:
        for group in groups.values():
            remove_placement_group(group)
        names = [name for name, ref in ready.items() if ref in pending]
        raise PlacementError(
            f"placement groups {', '.join(names)} not placed within {timeout_s:.0f} s; "
            f"the cluster has {ray.available_resources()} free"
        )
    return Placement(plan=result, groups=groups)
