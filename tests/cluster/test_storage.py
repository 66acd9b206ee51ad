"""The shared-storage check's pure part: which paths get a nonce, what a node reads back, which nodes are asked, and
the one line that stops the run. The check on a real multi-node cluster is in test_shared_storage.py."""

from pathlib import Path

from strat.cluster.storage import (
    Miss,
    NodeInfo,
    alive_nodes,
    hosting_nodes,
    nonce_file,
    probes,
    read_back,
    remove_nonces,
    storage_message,
    write_nonces,
)
from strat.config import ExperimentConfig

NONCE = "0123abcd"


def config(**engine: object) -> ExperimentConfig:
    return ExperimentConfig.model_validate({"engine": engine, "model": {"path": "tiny:kuhn_poker"}})


def test_the_run_directory_and_a_directory_sync_get_a_nonce_the_model_is_read(tmp_path: Path) -> None:
    found = probes(config(weight_sync="directory"), tmp_path / "run", tmp_path / "model", NONCE)
    assert [(p.what, p.path, p.file, p.content) for p in found] == [
        ("run directory (run.output_dir)", str(tmp_path / "run"), nonce_file(NONCE), NONCE),
        ("weight sync directory (engine.sync_dir)", str(tmp_path / "run" / "sync"), nonce_file(NONCE), NONCE),
        ("model (model.path)", str(tmp_path / "model"), "config.json", None),
    ]
    shared = probes(config(weight_sync="directory", sync_dir=str(tmp_path / "shared")), tmp_path / "run",
                    tmp_path / "model", NONCE)
    assert shared[1].path == str(tmp_path / "shared")
    # No disk between learner and agents: nothing to check for the sync.
    assert [p.what for p in probes(config(weight_sync="collective"), "runs/x", tmp_path, NONCE)] == [
        "run directory (run.output_dir)", "model (model.path)"]


def test_a_league_s_members_directory_is_checked_whatever_the_sync(tmp_path: Path) -> None:
    league = {"opponents": [{"kind": "self"}, {"kind": "league", "size": 2}]}
    tree = {"engine": {"weight_sync": "collective"}, "model": {"path": "tiny:kuhn_poker"}, "game": league}
    found = probes(ExperimentConfig.model_validate(tree), tmp_path / "run", tmp_path / "model", NONCE)
    assert [(p.what, p.path, p.content) for p in found][1] == (
        "league members' directory (<engine.sync_dir>/league)", str(tmp_path / "run" / "sync" / "league"), NONCE)
    assert "the league's engine loads each member's weights from there" in found[1].fix
    # A directory sync checks the sync root already, which holds the league's folder.
    tree["engine"] = {"weight_sync": "directory"}
    found = probes(ExperimentConfig.model_validate(tree), tmp_path / "run", tmp_path / "model", NONCE)
    assert [p.what for p in found] == ["run directory (run.output_dir)", "weight sync directory (engine.sync_dir)",
                                       "model (model.path)"]


def test_a_co_trained_policy_s_sync_folder_is_checked_whatever_the_sync(tmp_path: Path) -> None:
    """A co-trained policy's weights reach its agent through `<sync root>/policies` under any sync of the first
    policy's: a collective sync checks that folder; a directory sync's check of the sync root covers it."""
    tree = {"engine": {"weight_sync": "collective"}, "model": {"path": "tiny:kuhn_poker"},
            "game": {"opponents": [{"kind": "policy", "name": "small"}]},
            "policies": [{"name": "small", "model": "tiny:kuhn_poker"}]}
    found = probes(ExperimentConfig.model_validate(tree), tmp_path / "run", tmp_path / "model", NONCE)
    assert [(p.what, p.path, p.content) for p in found][1] == (
        "co-trained policies' directory (<engine.sync_dir>/policies)", str(tmp_path / "run" / "sync" / "policies"),
        NONCE)
    tree["engine"] = {"weight_sync": "directory"}
    found = probes(ExperimentConfig.model_validate(tree), tmp_path / "run", tmp_path / "model", NONCE)
    assert [p.what for p in found] == ["run directory (run.output_dir)", "weight sync directory (engine.sync_dir)",
                                       "model (model.path)"]


def test_each_fixed_policy_model_is_read_on_every_node(tmp_path: Path) -> None:
    found = probes(config(weight_sync="collective"), "runs/x", tmp_path, NONCE, [("rival", str(tmp_path / "r"))])
    assert [(p.what, p.path, p.file, p.content) for p in found][-1] == (
        "fixed policy rival (policies)", str(tmp_path / "r"), "config.json", None)
    (tmp_path / "r").mkdir()
    assert read_back(found)[-1] == (2, str(tmp_path / "r" / "config.json"), "not found")


def test_the_model_fix_follows_the_kind_of_model_path(tmp_path: Path) -> None:
    def fix(path: str) -> str:
        base = config()  # not validated again: the schema would resolve a Hub name, here not in the cache
        named = base.model_copy(update={"model": base.model.model_copy(update={"path": path})})
        return probes(named, tmp_path, tmp_path, NONCE)[-1].fix

    assert "STRAT_CACHE_DIR" in fix("tiny:kuhn_poker")
    assert "HF_HOME" in fix("Qwen/Qwen2.5-0.5B-Instruct") and "download Qwen/Qwen2.5-0.5B-Instruct" in fix(
        "Qwen/Qwen2.5-0.5B-Instruct")
    assert "copy it to that path on every node" in fix(str(tmp_path))


def test_a_node_reads_back_the_nonce_and_the_model_and_the_nonces_are_removed(tmp_path: Path) -> None:
    model = tmp_path / "model"
    model.mkdir()
    (model / "config.json").write_text("{}")
    found = probes(config(weight_sync="directory"), tmp_path / "run", model, NONCE)
    written = write_nonces(found)
    assert written == [tmp_path / "run" / nonce_file(NONCE), tmp_path / "run" / "sync" / nonce_file(NONCE)]
    assert read_back(found) == []
    (written[1]).write_text("another run's")
    (model / "config.json").unlink()
    assert read_back(found) == [(1, str(written[1]), "holds another nonce"),
                                (2, str(model / "config.json"), "not found")]
    remove_nonces(written)
    assert not any(path.exists() for path in written)
    assert read_back(found)[0] == (0, str(written[0]), "not found")


def test_an_unwritable_directory_is_refused_in_one_line(tmp_path: Path) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("")
    found = probes(config(), blocker / "run", tmp_path, NONCE)
    try:
        write_nonces(found)
    except ValueError as err:
        assert str(err).startswith(f"run directory (run.output_dir) {blocker / 'run'} is not writable: ")
        assert "\n" not in str(err)
    else:
        raise AssertionError("an unwritable run directory was accepted")


def test_hosting_nodes_are_the_bundles_nodes_else_every_node_with_resources() -> None:
    raw = [{"NodeID": "a", "NodeManagerAddress": "10.0.0.1", "Alive": True, "Resources": {"CPU": 2.0}},
           {"NodeID": "b", "NodeManagerAddress": "10.0.0.2", "Alive": True, "Resources": {"GPU": 1.0}},
           {"NodeID": "c", "NodeManagerAddress": "10.0.0.3", "Alive": True, "Resources": {"memory": 1.0}},
           {"NodeID": "d", "NodeManagerAddress": "10.0.0.4", "Alive": False, "Resources": {"GPU": 1.0}}]
    alive = alive_nodes(raw)
    assert [node.node_id for node in alive] == ["a", "b", "c"]
    assert [node.node_id for node in hosting_nodes(alive, None)] == ["a", "b"]
    assert [node.node_id for node in hosting_nodes(alive, ["b", "b", "c"])] == ["b", "c"]


def test_the_refusal_names_the_node_the_path_and_the_fix(tmp_path: Path) -> None:
    found = probes(config(weight_sync="directory"), "/shared/runs/x", "/models/m", NONCE)
    driver, node = NodeInfo("aa11", "10.0.0.1"), NodeInfo("bb22", "10.0.0.2")
    message = storage_message([Miss(node, found[0], f"/shared/runs/x/{nonce_file(NONCE)}", "not found")], driver)
    assert message == (
        "shared storage: node 10.0.0.2 (node id bb22) does not see the run directory (run.output_dir): the nonce the "
        f"driver on 10.0.0.1 (node id aa11) wrote to /shared/runs/x/{nonce_file(NONCE)} "
        f"(/shared/runs/x/{nonce_file(NONCE)}: not found); put run.output_dir on storage every node mounts at the "
        "same path (an absolute path: a relative one is relative to each process's working directory)")
    two = storage_message([Miss(node, found[2], "/models/m/config.json", "not found"),
                           Miss(node, found[1], "/x", "not found")], driver)
    assert two.startswith("shared storage: node 10.0.0.2 (node id bb22) does not see the model (model.path): "
                          "/models/m/config.json: not found; set STRAT_CACHE_DIR")
    assert two.endswith("; 1 more miss(es) on this or other nodes") and "\n" not in two
