"""A Ray cluster of several nodes on this machine, as on a real cluster: `strat train --address` places the run's
actors on them by logical GPUs (Ray's `num_gpus`; the engine and the learner still compute on the CPU), survives the
loss of an agent's node, and stops naming its checkpoint when the learner's node is lost.

The layout makes the placement certain: the head has CPUs and no GPU (rollout workers, comparator; the driver
attaches there), each other node one GPU and no CPU, and the learner and the agent ask for one GPU and no CPU each.
A node is lost the way a machine loses power: SIGKILL of everything its `ray start` started."""

import os
import secrets
import subprocess
import sys
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from strat import metrics
from strat.cluster.storage import NONCE_PREFIX
from strat.config_loading import load_config
from strat.model import checkpoint
from tests.reliability.conftest import DEFAULT, small_overrides
from tests.reliability.test_actor_faults import _check_ledger

from .ray_nodes import NodeProcess, RayHead, start_head, start_worker

pytestmark = pytest.mark.faults
STRAT = str(Path(sys.executable).parent / "strat")
GPU_NODE = "strat_test_gpu_node_"
"""The custom resource that names each GPU node (`<prefix><n>`: 1); nothing asks for it."""
MULTINODE = [
    "game.opponents=[{kind: self}]", "resources.agents=1", "resources.rollout_workers=1",
    "resources.cpus_per_agent=0", "resources.gpus_per_agent=1", "resources.cpus_learner=0", "resources.gpus_learner=1",
    "resources.cpus_per_worker=0.25", "resources.cpus_comparator=0.25",
    # Logical GPUs: Ray sets CUDA_VISIBLE_DEVICES, the models stay on the CPU.
    "engine.device=cpu", "learner.device=cpu",
]
RUN_TIMEOUT_S = 420.0


@dataclass
class Cluster:
    """The head and the GPU nodes the tests started, under one Ray token."""

    head: RayHead
    env: dict[str, str]
    log_dir: Path
    gpu_nodes: dict[str, NodeProcess] = field(default_factory=dict)
    """Live GPU nodes by name (the custom resource that names each)."""
    started: list[NodeProcess] = field(default_factory=list)
    """Every GPU node started, lost ones too (their temp dirs are removed at the end)."""

    @property
    def headers(self) -> dict[str, str]:
        return {**_token_header(self.env), "Content-Type": "application/json"}

    def add_gpu_node(self, wrap: Sequence[str] = ()) -> str:
        """Start a node with one GPU and no CPU (through `wrap`, see `start_worker`); returns its name once the GCS
        lists it alive."""
        name = f"{GPU_NODE}{len(self.started) + 1}"
        self.gpu_nodes[name] = start_worker(self.head, self.log_dir / f"{name}.log", self.env, num_cpus=0, num_gpus=1,
                                            resources={name: 1}, wrap=wrap)
        self.started.append(self.gpu_nodes[name])
        _until(lambda: name in self.node_names().values(), f"node {name} listed alive")
        return name

    def kill(self, name: str) -> None:
        self.gpu_nodes.pop(name).kill()

    def _state(self):
        from ray.util.state import StateApiClient

        return StateApiClient(address=self.head.address, headers=self.headers)

    def node_names(self) -> dict[str, str]:
        """Alive node id -> name ("head", or the GPU node's name)."""
        from ray.util.state.common import ListApiOptions, StateResource

        nodes = self._state().list(StateResource.NODES, options=ListApiOptions(detail=True),
                                   raise_on_missing_output=False)
        names = {}
        for node in nodes:
            if node.state == "ALIVE":
                tags = [key for key in node.resources_total if key.startswith(GPU_NODE)]
                names[node.node_id] = "head" if node.is_head_node else (tags[0] if tags else node.node_id)
        return names

    def placed_groups(self) -> set[str]:
        """Names of the placement groups placed now."""
        from ray.util.state.common import ListApiOptions, StateResource

        groups = self._state().list(StateResource.PLACEMENT_GROUPS, options=ListApiOptions(detail=True),
                                    raise_on_missing_output=False)
        return {group.name for group in groups if group.state == "CREATED"}

    def placement(self) -> dict[str, set[str]]:
        """Node name -> classes of the alive actors on it (`ray.util.state`'s actors with their node ids)."""
        from ray.util.state.common import ListApiOptions, StateResource

        names = self.node_names()
        actors = self._state().list(StateResource.ACTORS, options=ListApiOptions(filters=[("state", "=", "ALIVE")]),
                                    raise_on_missing_output=False)
        where: dict[str, set[str]] = {}
        for actor in actors:
            where.setdefault(names.get(actor.node_id, actor.node_id), set()).add(actor.class_name)
        return where


def _token_header(env: dict[str, str]) -> dict[str, str]:
    return {"Authorization": f"Bearer {env['RAY_AUTH_TOKEN']}"}


def _until(condition: Callable[[], bool], what: str, timeout_s: float = RUN_TIMEOUT_S,
           process: subprocess.Popen | None = None, log: Path | None = None, seen: list | None = None) -> None:
    """Poll `condition` until it holds; fails when `process` ends first (with its log, and the last of `seen`)."""
    deadline = time.monotonic() + timeout_s
    while not condition():
        if process is not None and process.poll() is not None:
            raise AssertionError(f"waiting for {what}: strat train ended ({process.returncode}); last seen "
                                 f"{seen[-1] if seen else None}:\n{log.read_text()[-3000:] if log else ''}")
        if time.monotonic() > deadline:
            raise AssertionError(f"{what}: not within {timeout_s:.0f} s")
        time.sleep(0.5)


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    """A head (2 CPUs, no GPU) and two nodes of one GPU each, with token authentication (the token is the test's)."""
    log_dir = tmp_path_factory.mktemp("ray-nodes")
    env = {**os.environ, "RAY_AUTH_MODE": "token", "RAY_AUTH_TOKEN": secrets.token_hex(16),
           # Workers run `python`: this venv's.
           "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}"}
    head, process = start_head(log_dir, env, num_cpus=2, headers=_token_header(env))
    found = Cluster(head, env, log_dir)
    try:
        for _ in range(2):
            found.add_gpu_node()
        yield found
    finally:
        for node in found.started:
            node.kill()
            node.stop()
        process.stop()


@dataclass
class Run:
    process: subprocess.Popen
    run_dir: Path
    log: Path

    def steps(self) -> list[int]:
        return [record["step"] for record in metrics.read(self.run_dir)]

    def wait(self) -> int:
        try:
            return self.process.wait(timeout=RUN_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            self.process.kill()
            raise AssertionError(f"strat train did not end:\n{self.log.read_text()[-3000:]}") from None

    def kill_if_running(self) -> None:
        """Kill `strat train` if a failed check left it running."""
        if self.process.poll() is None:
            self.process.kill()


def _train(cluster: Cluster, tmp_path: Path, model_dir: Path, *extra: str) -> Run:
    """`strat train --address HEAD` of the small reliability config on the multi-node layout (two GPU nodes, one for
    the learner and one for the agent: a node lost by an earlier test is replaced first)."""
    while len(cluster.gpu_nodes) < 2:
        cluster.add_gpu_node()
    log = tmp_path / "train.log"
    overrides = [*small_overrides(tmp_path, model_dir, *MULTINODE, *extra)]
    with log.open("w") as out:
        process = subprocess.Popen([STRAT, "train", "--address", cluster.head.gcs_address, str(DEFAULT), *overrides],
                                   env=cluster.env, stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
    return Run(process, tmp_path / "kuhn_poker_tiny", log)


def _placed(cluster: Cluster, run: Run) -> dict[str, str]:
    """The GPU node of the agent and of the learner (by class), once the run's four actors are alive; checks the
    layout: the CPU actors on the head, the learner and the agent alone on a GPU node each."""
    expected = {"AgentActor", "RolloutWorker", "Comparator", "Learner"}
    where: dict[str, set[str]] = {}

    def all_alive() -> bool:
        where.clear()
        where.update(cluster.placement())
        return set().union(*where.values(), set()) >= expected

    _until(all_alive, "the run's actors alive", process=run.process, log=run.log)
    assert where.pop("head") == {"RolloutWorker", "Comparator"}
    assert sorted(where.values(), key=sorted) == [{"AgentActor"}, {"Learner"}], where
    return {next(iter(classes)): name for name, classes in where.items()}


def _lose_node_and_stop(cluster: Cluster, run: Run, role: str, steps: int,
                        check: Callable[[], None] | None = None) -> tuple[str, int]:
    """Kill the node of the run's `role` actor once step 1 is logged; checks that the run then stops with exit
    status 1, no traceback, and a checkpoint for every logged step (checkpoint_every=1). Returns the run's log and
    its last complete checkpoint's step."""
    try:
        nodes = _placed(cluster, run)
        if check is not None:
            check()
        _until(lambda: len(run.steps()) >= 1, "step 1 logged", process=run.process, log=run.log)
        assert len(run.steps()) < steps, "the run ended before its node could be lost; it needs more steps"
        cluster.kill(nodes[role])
        code = run.wait()
    finally:
        run.kill_if_running()
    text = run.log.read_text()
    last = checkpoint.latest(run.run_dir).step
    assert code == 1, text[-3000:]
    assert run.steps() == list(range(1, last + 1)), "every logged step has its checkpoint (checkpoint_every=1)"
    assert "Traceback" not in text
    return text, last


@pytest.mark.parametrize("sync", ["directory", "collective"])
def test_actors_span_nodes_and_a_lost_agent_node_is_replaced(cluster: Cluster, tmp_path: Path, tiny_model_dir: Path,
                                                             sync: str) -> None:
    # Enough steps that the run is still going once the agent is back: a step can take half a second, and Ray notices
    # the lost node only after its health checks fail.
    steps = 16
    extra = [f"engine.weight_sync={sync}", f"schedule.steps={steps}", "schedule.checkpoint_every=0"]
    if sync == "collective":
        extra.append("engine.collective_backend=gloo")  # auto would pick NCCL for whole logical GPUs
    run = _train(cluster, tmp_path, tiny_model_dir, *extra)
    try:
        # Spare capacity for the agent, once the run's bundles are placed (so that they are not placed there), while
        # the actors load their models.
        _until(lambda: cluster.placed_groups() >= {"strat-agents", "strat-learner"}, "the placement groups placed",
               process=run.process, log=run.log)
        spare = cluster.add_gpu_node()
        nodes = _placed(cluster, run)
        assert spare not in nodes.values()
        _until(lambda: len(run.steps()) >= 1, "step 1 logged", process=run.process, log=run.log)
        assert len(run.steps()) < steps, "the run ended before its node could be lost; it needs more steps"
        cluster.kill(nodes["AgentActor"])
        # The agent's bundle moves to the spare node, and its new actor with it.
        seen: list[dict[str, set[str]]] = []

        def agent_on_spare() -> bool:
            seen.append(cluster.placement())
            return "AgentActor" in seen[-1].get(spare, set())

        _until(agent_on_spare, "the agent restarted on the spare node", process=run.process, log=run.log, seen=seen)
        code = run.wait()
    finally:
        run.kill_if_running()
    text = run.log.read_text()
    assert code == 0, text[-3000:]
    # The nodes share this machine's disk: the storage check at the start passes and says what it checked.
    logged = " ".join(text.split())  # the console wraps log lines
    assert ("shared storage: 3 node(s) see the run directory (run.output_dir)" + (
        ", the weight sync directory (engine.sync_dir)" if sync == "directory" else "")) in logged, text[-3000:]
    assert list(run.run_dir.rglob(f"{NONCE_PREFIX}*")) == [], "the storage check's nonces are removed"
    assert run.steps() == list(range(1, steps + 1))
    restarts = [record["faults/actor_restarts"] for record in metrics.read(run.run_dir)]
    assert restarts[0] == 0.0 and restarts[-1] == 1.0, restarts
    _check_ledger(load_config(run.run_dir / "config.yaml"))


def test_a_lost_learner_node_stops_the_run_naming_its_checkpoint(cluster: Cluster, tmp_path: Path,
                                                                  tiny_model_dir: Path) -> None:
    steps = 4
    run = _train(cluster, tmp_path, tiny_model_dir, f"schedule.steps={steps}", "schedule.checkpoint_every=1")
    text, last = _lose_node_and_stop(cluster, run, "Learner", steps)
    assert (f"strat: run stopped: the learner actor died at step {last + 1}; the last complete checkpoint is step "
            f"{last}: continue with strat train --resume {run.run_dir}") in text, text[-3000:]



def test_a_lost_agent_node_without_spare_capacity_stops_the_run_naming_its_checkpoint(
        cluster: Cluster, tmp_path: Path, tiny_model_dir: Path) -> None:
    """No GPU is left for the agent's bundle once its node is lost: the restarted agent cannot start, and after
    `resources.actor_start_timeout_s` the run stops in one line with the checkpoint to resume from (no traceback)."""
    steps, timeout_s = 16, 60
    run = _train(cluster, tmp_path, tiny_model_dir, f"schedule.steps={steps}", "schedule.checkpoint_every=1",
                 f"resources.actor_start_timeout_s={timeout_s}")

    def no_spare() -> None:
        assert len(cluster.gpu_nodes) == 2, "a spare GPU node would take the agent"

    text, last = _lose_node_and_stop(cluster, run, "AgentActor", steps, no_spare)
    assert (f"restarted actor(s) did not start within {timeout_s} s (resources.actor_start_timeout_s; the cluster "
            "has") in text, text[-3000:]
    assert f"the last complete checkpoint is step {last}: continue with strat train --resume {run.run_dir}" in text


def test_two_policies_place_their_learners_on_two_gpu_nodes(cluster: Cluster, tmp_path: Path,
                                                           tiny_model_dir: Path) -> None:
    """A co-trained policy on the cluster: with four GPU nodes, each policy's engine and learner take a GPU node of
    their own (two learners on two nodes), the storage check covers the co-trained policy's sync folder, and both
    policies train every step."""
    while len(cluster.gpu_nodes) < 4:
        cluster.add_gpu_node()
    steps = 2
    try:
        run = _train(cluster, tmp_path, tiny_model_dir, f"schedule.steps={steps}",
                     f"policies=[{{name: small, model: {tiny_model_dir}}}]",
                     "game.opponents=[{kind: policy, name: small}]")
        try:
            where: dict[str, set[str]] = {}

            def all_alive() -> bool:
                """Every class alive on the head, and an actor on each of the four GPU nodes."""
                where.clear()
                where.update(cluster.placement())
                on_gpus = [classes for name, classes in where.items() if name != "head"]
                return len(where.get("head", set())) >= 2 and len(on_gpus) == 4 and all(on_gpus)

            _until(all_alive, "the actors alive on the head and the four GPU nodes", process=run.process, log=run.log)
            assert where["head"] == {"RolloutWorker", "Comparator"}
            on_gpus = [classes for name, classes in where.items() if name != "head"]
            assert sorted(on_gpus, key=sorted) == [{"AgentActor"}, {"AgentActor"}, {"Learner"}, {"Learner"}], where
            code = run.wait()
        finally:
            run.kill_if_running()
        text = run.log.read_text()
        assert code == 0, text[-3000:]
        assert "the co-trained policies' directory (<engine.sync_dir>/policies)" in " ".join(text.split())
        records = metrics.read(run.run_dir)
        assert [r["step"] for r in records] == list(range(1, steps + 1))
        assert all(r["small/learn/samples"] > 0 for r in records)
    finally:
        for name in list(cluster.gpu_nodes)[2:]:
            cluster.kill(name)
