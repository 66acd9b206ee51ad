"""Placement plans: valid layouts, impossible ones with one-line errors, and `strat plan`."""

from pathlib import Path

import pytest
import typer
import yaml

from strat import cli
from strat.cli.cluster import plan_command
from strat.cluster.placement import parse_cluster, plan
from strat.config import ExperimentConfig
from strat.config_loading import from_dict, load_config
from strat.errors import PlacementError

REPO = Path(__file__).resolve().parents[2]


def gpu_config(**resources) -> ExperimentConfig:
    """A self-play + snapshot GPU config validated by the schema only (the unbuilt-feature refusal is the trainer's gate)."""
    tree = {"engine": {"tensor_parallel_size": resources.pop("tp", 1)},
            "comparison": resources.pop("comparison", {}),
            "game": {"opponents": [{"kind": "self"}, {"kind": "snapshot"}]},
            "resources": {"agents": 2, "gpus_per_agent": 1, "gpus_learner": 1, **resources}}
    return ExperimentConfig.model_validate(tree)


def test_two_node_plan_keeps_each_tensor_parallel_engine_on_one_node() -> None:
    config = gpu_config(agents=2, tp=4, gpus_learner=2, rollout_workers=3)
    result = plan(config, parse_cluster("nodes=2,gpus_per_node=8"))
    agents = [a for a in result.actors if a.role in ("agent", "snapshot")]
    assert [a.name for a in agents] == ["agent[0]", "agent[1]", "snapshot[0]"]
    assert all(a.gpus == 4 and a.group == "agents" for a in agents)
    assert {a.bundle for a in agents} == {0, 1, 2}
    assert result.node_usage()[0][0] + result.node_usage()[1][0] == 14
    assert all(gpus <= 8 for gpus, _ in result.node_usage())
    groups = {g.name: g for g in result.groups}
    assert set(groups) == {"agents", "rollout_workers", "comparator", "learner"}
    assert [b.gpus for b in groups["agents"].bundles] == [4, 4, 4]
    assert [b.gpus for b in groups["learner"].bundles] == [1, 1]  # one bundle per learner rank
    assert [a.name for a in result.actors if a.role == "learner"] == ["learner[0]", "learner[1]"]
    assert len(groups["rollout_workers"].bundles) == 3 and all(b.gpus == 0 for b in groups["rollout_workers"].bundles)


def test_tensor_parallel_engine_larger_than_a_node_is_refused() -> None:
    with pytest.raises(PlacementError) as err:
        plan(gpu_config(tp=16), parse_cluster("nodes=2,gpus_per_node=8"))
    message = str(err.value)
    assert "\n" not in message
    assert message.startswith("agent: its engine needs 16 GPUs on one node")
    assert "largest node has 8" in message and "nodes=2,gpus_per_node=8" in message


def test_more_gpus_than_the_cluster_is_refused() -> None:
    with pytest.raises(PlacementError) as err:
        plan(gpu_config(agents=4, tp=2, gpus_learner=4), parse_cluster("nodes=1,gpus_per_node=8"))
    assert "need 14 GPUs (agent 8, snapshot 2, learner 4) but the cluster has 8" in str(err.value)


def test_fragmented_cluster_is_refused_by_role() -> None:
    # 8 GPUs fit the 9 in all, but after three engines no node has 2 GPUs left for the fourth.
    with pytest.raises(PlacementError, match=r"^snapshot: needs 2 GPUs .* on one node"):
        plan(gpu_config(agents=3, tp=2, gpus_learner=0), parse_cluster("nodes=3,gpus_per_node=3"))


@pytest.mark.parametrize("text", ["nodes=2", "nodes=0,gpus_per_node=8", "nodes=2,gpus=8", "nodes=two,gpus_per_node=8"])
def test_bad_cluster_descriptions(text: str) -> None:
    with pytest.raises(PlacementError, match="cluster"):
        parse_cluster(text)


def test_separate_judge_gets_the_comparator_gpu_the_policy_judge_needs_none() -> None:
    cluster = parse_cluster("nodes=1,gpus_per_node=8")
    judge = {"agreement": "judge", "judge_engine": "separate"}
    with pytest.raises(PlacementError, match=r"^comparator: agreement=judge on a separate engine needs"):
        plan(gpu_config(comparison=judge), cluster)
    [comparator] = [a for a in plan(gpu_config(comparison=judge, gpus_comparator=1), cluster).actors
                    if a.role == "comparator"]
    assert comparator.gpus == 1
    policy = plan(gpu_config(comparison={"agreement": "judge", "judge_engine": "policy"}), cluster)
    assert [a.gpus for a in policy.actors if a.role == "comparator"] == [0]


def test_cpu_learner_ranks_get_a_bundle_each() -> None:
    config = ExperimentConfig.model_validate({"resources": {"learner_ranks": 2, "cpus_learner": 1}})
    result = plan(config, parse_cluster("nodes=2,gpus_per_node=0,cpus_per_node=2"))
    learners = [a for a in result.actors if a.role == "learner"]
    assert [(a.name, a.bundle, a.cpus, a.gpus) for a in learners] == [("learner[0]", 0, 1, 0), ("learner[1]", 1, 1, 0)]


def test_cpu_only_run_spreads_over_cpu_nodes() -> None:
    result = plan(ExperimentConfig(), parse_cluster("nodes=2,gpus_per_node=0,cpus_per_node=1"))
    assert {a.node for a in result.actors} == {0, 1}


@pytest.mark.parametrize("name", ["qwen2_5_1_5b_kuhn.yaml", "qwen2_5_7b_leduc.yaml"])
def test_cluster_configs_validate_and_plan_on_two_nodes(name: str) -> None:
    from strat.model import tiny as tiny_model

    tree = yaml.safe_load((REPO / "configs" / "cluster" / name).read_text())
    tree["model"]["path"] = str(tiny_model.ensure("kuhn_poker"))  # the real checkpoints live on the cluster
    config = from_dict(tree)
    assert config.engine.backend == "vllm" and config.engine.dtype == "bfloat16"
    result = plan(config, parse_cluster("nodes=2,gpus_per_node=8"))
    assert sum(a.gpus for a in result.actors) > 0


@pytest.fixture
def strat_main(monkeypatch: pytest.MonkeyPatch):
    app = typer.Typer(pretty_exceptions_enable=False, add_completion=False)
    app.command("plan")(plan_command)
    app.command("noop")(lambda: None)  # two commands keep typer in sub-command mode
    monkeypatch.setattr(cli, "app", app)
    return cli.main


def test_plan_command_prints_a_table(strat_main, capsys) -> None:
    code = strat_main(["plan", str(REPO / "configs" / "kuhn_poker_tiny.yaml"), "resources.rollout_workers=3",
                       "--cluster", "nodes=2,gpus_per_node=0,cpus_per_node=2"])
    out = capsys.readouterr().out
    assert code == 0, out
    assert "rollout_worker[2]" in out and "learner[0]" in out and "node 1:" in out


def test_plan_command_refuses_an_impossible_layout_in_one_line(strat_main, capsys) -> None:
    code = strat_main(["plan", str(REPO / "configs" / "kuhn_poker_tiny.yaml"), "resources.agents=4",
                       "--cluster", "nodes=1,gpus_per_node=0,cpus_per_node=2"])
    err = capsys.readouterr().err
    assert code == 2
    assert err.count("\n") == 1 and err.startswith("strat: error: all roles: the actors need")


def test_each_fixed_policy_gets_an_agent_bundle(tmp_path: Path) -> None:
    """A fixed LLM opponent is one more engine: an agent's bundle in the agents group, counted in the GPUs needed."""
    tree = {"game": {"opponents": [{"kind": "self"}, {"kind": "policy", "name": "rival"}]},
            "policies": [{"name": "rival", "model": str(tmp_path), "train": False}],
            "resources": {"agents": 2, "gpus_per_agent": 1, "gpus_learner": 1}}
    result = plan(ExperimentConfig.model_validate(tree), parse_cluster("nodes=1,gpus_per_node=8"))
    engines = [a for a in result.actors if a.group == "agents"]
    assert [a.name for a in engines] == ["agent[0]", "agent[1]", "fixed[rival]"] and all(a.gpus == 1 for a in engines)
    with pytest.raises(PlacementError, match=r"need 4 GPUs \(agent 2, fixed 1, learner 1\) but the cluster has 3"):
        plan(ExperimentConfig.model_validate(tree), parse_cluster("nodes=1,gpus_per_node=3"))


def test_each_co_trained_policy_gets_an_engine_and_a_learner_bundle() -> None:
    """A co-trained policy on a GPU run: its engine takes an agent's bundle, its learner (one rank) a learner rank's,
    each with its own GPU, counted in the GPUs needed; beside a two-GPU learner it is one rank on one GPU."""
    two = REPO / "configs" / "kuhn_poker_two_policies_tiny.yaml"
    gpus = ["resources.gpus_per_agent=1", "resources.gpus_learner=1"]
    result = plan(load_config(two, gpus), parse_cluster("nodes=2,gpus_per_node=2"))
    placed = {a.name: (a.group, a.gpus) for a in result.actors if a.gpus > 0}
    assert placed == {"agent[0]": ("agents", 1.0), "cotrained[small]": ("agents", 1.0),
                      "learner[0]": ("learner", 1.0), "cotrained_learner[small]": ("learner", 1.0)}
    assert [gpus for gpus, _ in result.node_usage()] == [2.0, 2.0]
    with pytest.raises(PlacementError, match=r"need 4 GPUs \(agent 1, cotrained 1, learner 1, cotrained_learner 1\) "
                                             r"but the cluster has 3"):
        plan(load_config(two, gpus), parse_cluster("nodes=1,gpus_per_node=3"))
    wide = plan(load_config(two, ["resources.gpus_per_agent=1", "resources.gpus_learner=2"]),
                parse_cluster("nodes=1,gpus_per_node=8"))
    assert [(a.name, a.gpus) for a in wide.actors if a.group == "learner"] == [
        ("learner[0]", 1.0), ("learner[1]", 1.0), ("cotrained_learner[small]", 1.0)]


def test_a_policy_s_own_resources_size_its_bundles() -> None:
    """A co-trained policy with its own sizes: its engine on two tensor-parallel GPUs, its learner on half a GPU; a
    fixed policy's engine on half a GPU. Counted in the GPUs needed (1 + 0.5 + 2 + 1 + 0.5 = 5) and refused, naming
    the role and the key, where no node holds the two-GPU engine."""
    from strat.train.fleet import required_resources

    two = REPO / "configs" / "kuhn_poker_two_policies_tiny.yaml"
    policies = ("policies=[{name: small, model: 'tiny:kuhn_poker', tiny: {hidden_size: 64, intermediate_size: 176},"
                " resources: {gpus_per_agent: 1, tensor_parallel_size: 2, gpus_learner: 0.5}},"
                " {name: rival, model: %s, train: false, resources: {gpus_per_agent: 0.5}}]")
    opponents = "game.opponents=[{kind: policy, name: small}, {kind: policy, name: rival}]"
    gpus = ["resources.gpus_per_agent=1", "resources.gpus_learner=1", opponents, "game.seats=null"]
    config = load_config(two, [*gpus, policies % (REPO / "configs")])
    result = plan(config, parse_cluster("nodes=2,gpus_per_node=4"))
    placed = {a.name: (a.group, a.gpus) for a in result.actors if a.gpus > 0}
    assert placed == {"agent[0]": ("agents", 1.0), "fixed[rival]": ("agents", 0.5),
                      "cotrained[small]": ("agents", 2.0), "learner[0]": ("learner", 1.0),
                      "cotrained_learner[small]": ("learner", 0.5)}
    assert required_resources(config)["GPU"] == pytest.approx(5.0)
    with pytest.raises(PlacementError, match=r"cotrained: its engine needs 2 GPUs on one node"):
        plan(config, parse_cluster("nodes=5,gpus_per_node=1"))
    fractional = policies.replace("gpus_per_agent: 1, tensor", "gpus_per_agent: 0.5, tensor") % (REPO / "configs")
    with pytest.raises(PlacementError, match=r"cotrained\[small\]: engine.tensor_parallel_size=2 needs whole GPUs"
                                             r" per rank, but resources.gpus_per_agent=0.5 \(use 1\) \(or set it"
                                             r" in the policy's own resources\)"):
        plan(load_config(two, [*gpus, fractional]), parse_cluster("nodes=2,gpus_per_node=4"))


def test_a_co_trained_learner_of_several_ranks_takes_a_bundle_a_rank() -> None:
    """The co-trained policy's learner on two GPUs: two one-GPU bundles in the learner group, named by rank, counted
    in the GPUs needed (agent 1 + its engine 1 + learner 1 + its learner 2 = 5), and its memory row sharded over the
    two ranks."""
    from strat.cluster.memory import memory_plan_for
    from strat.train.fleet import required_resources

    two = REPO / "configs" / "kuhn_poker_two_policies_tiny.yaml"
    config = load_config(two, ["resources.gpus_per_agent=1", "resources.gpus_learner=1",
                               "policies=[{name: small, model: 'tiny:kuhn_poker', resources: {gpus_learner: 2}}]"])
    result = plan(config, parse_cluster("nodes=2,gpus_per_node=4"))
    learners = [(a.name, a.group, a.gpus) for a in result.actors if "learner" in a.role]
    assert learners == [("learner[0]", "learner", 1.0), ("cotrained_learner[small:0]", "learner", 1.0),
                        ("cotrained_learner[small:1]", "learner", 1.0)]
    assert required_resources(config)["GPU"] == pytest.approx(5.0)
    rows = {a.role: a for a in memory_plan_for(config, config.model.path, None).actors}
    assert rows["cotrained_learner:small"].count == 2 and rows["learner"].count == 1
    with pytest.raises(PlacementError, match=r"all roles: the actors need 5 GPUs .*cotrained_learner 2"):
        plan(config, parse_cluster("nodes=1,gpus_per_node=4"))
