"""`strat.sync.weights.WeightSync` (push, refresh_snapshot, restore) through real Ray actors (learner + an hf agent):
every mode ends with the agent answering as the learner (collective: over a gloo weight group of the
two actors, formed once and reused for the second version). The engine side of every path, including a
multi-process vLLM engine, is in test_weight_sync.py; an hf agent keeps this module quick."""

from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import ray
from transformers import AutoTokenizer

from strat.algorithm.records import TrainSample
from strat.config_loading import load_config
from strat.engines import SamplingParams
from strat.sync.weights import PREFIX, WeightSync, sync_root
from strat.train.learner import LearnerSettings
from strat.train.learner_actor import LearnerGroup

from .sync_helpers import perturbing_samples, prompts_for

MAX_TOKENS = 16
pytestmark = pytest.mark.slow


@dataclass
class Cluster:
    learner: LearnerGroup
    agents: list[Any]
    prompts: list[list[int]]
    samples: list[TrainSample]
    model_dir: Path


@pytest.fixture(scope="module")
def cluster(tiny_model_dir: Path) -> Iterator[Cluster]:
    from strat.engines import EngineSettings
    from strat.train.agent_actor import AgentActor

    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False, configure_logging=False)
    try:
        # One agent keeps the module's start-up short (each actor process imports torch and transformers).
        agents = [AgentActor.options(num_cpus=0.25).remote("hf", str(tiny_model_dir), EngineSettings())]
        learner = LearnerGroup.start(str(tiny_model_dir), LearnerSettings(lr=2e-2), 1, lambda rank: {"num_cpus": 0.25})
        ray.get([*(agent.ready.remote() for agent in agents), learner.ready()], timeout=300)
        tokenizer = AutoTokenizer.from_pretrained(tiny_model_dir)
        yield Cluster(learner, agents, prompts_for(tokenizer), perturbing_samples(tokenizer), tiny_model_dir)
    finally:
        ray.shutdown()


def _greedy(agent: Any, prompts: list[list[int]]) -> list[list[int]]:
    generations = ray.get(agent.generate.remote(prompts, SamplingParams(max_tokens=MAX_TOKENS, temperature=0)))
    return [list(g.token_ids) for g in generations]


def _step(cluster: Cluster) -> list[list[int]]:
    """Reset the agents to the base weights, update the learner twice; the learner's greedy output."""
    ray.get([agent.load_weights_dir.remote(str(cluster.model_dir), 0) for agent in cluster.agents])
    for _ in range(2):
        cluster.learner.get(cluster.learner.update(cluster.samples))
    return cluster.learner.get(cluster.learner.greedy(cluster.prompts, MAX_TOKENS))


def _sync(cluster: Cluster, config: Any) -> WeightSync:
    """The weight sync of the cluster's learner, with its first agent as the snapshot opponent too."""
    return WeightSync(config, config.run_dir, cluster.learner, lambda: cluster.agents, lambda: cluster.agents[0],
                      cluster.learner.get)


@pytest.mark.parametrize("weight_sync", ["object_store", "directory", "collective"])
def test_sync_agents(cluster: Cluster, tmp_path: Path, weight_sync: str) -> None:
    config = load_config(None, [f"run.output_dir={tmp_path}", "engine.backend=hf", f"engine.weight_sync={weight_sync}"])
    sync = _sync(cluster, config)
    for version in (1, 2):
        expected = _step(cluster)
        before = [_greedy(agent, cluster.prompts) for agent in cluster.agents]
        assert all(b != expected for b in before)
        sync.push(version)
        assert [_greedy(agent, cluster.prompts) for agent in cluster.agents] == [expected] * len(cluster.agents)
    if sync.mode == "directory":
        assert [p.name for p in sync_root(config, config.run_dir).iterdir()] == [f"{PREFIX}2"]
    else:
        assert not sync_root(config, config.run_dir).exists()


@pytest.mark.parametrize("weight_sync", ["object_store", "directory", "collective"])
def test_sync_snapshot(cluster: Cluster, tmp_path: Path, weight_sync: str) -> None:
    config = load_config(None, [f"run.output_dir={tmp_path}", "engine.backend=hf", f"engine.weight_sync={weight_sync}"])
    expected = _step(cluster)
    _sync(cluster, config).refresh_snapshot(3)
    assert _greedy(cluster.agents[0], cluster.prompts) == expected


def test_a_restored_snapshot_is_broadcast_as_kept(cluster: Cluster, tmp_path: Path) -> None:
    """What resume does under collective sync: the snapshot the learner holds (restored with a checkpoint), not a new
    one, goes to the snapshot agent."""
    config = load_config(None, [f"run.output_dir={tmp_path}", "engine.backend=hf", "engine.weight_sync=collective"])
    snapshot = cluster.agents[0]
    # The agent plays the snapshot alone here: an engine is in one weight group at a time, and in a run the policy's
    # agents and the snapshot agent are different actors.
    sync = WeightSync(config, config.run_dir, cluster.learner, lambda: [], lambda: snapshot, cluster.learner.get)
    expected = _step(cluster)
    sync.refresh_snapshot(3)
    _step(cluster)  # the learner moves on; the agent is back to the base weights
    assert _greedy(snapshot, cluster.prompts) != expected
    checkpoint = tmp_path / "checkpoints" / "step_3"
    (checkpoint / "snapshot").mkdir(parents=True)  # what restore looks for; collective reads the learner's copy
    sync.restore(3, 3, checkpoint)
    assert sync.snapshot_step == 3
    assert _greedy(snapshot, cluster.prompts) == expected


def test_a_directory_the_agent_cannot_see_is_named(cluster: Cluster, tmp_path: Path) -> None:
    with pytest.raises(ray.exceptions.RayTaskError, match="every agent's node can read"):
        ray.get(cluster.agents[0].load_weights_dir.remote(str(tmp_path / "missing"), 9))
