"""Shared storage checked at the start of a multi-node run (`strat.cluster.storage`), on a cluster of several Ray
nodes on this machine (the layout of test_multinode.py: a head with the CPUs, two nodes of one logical GPU each).

Storage that is not shared is made as a machine without the shared mount has it: each GPU node runs in its own mount
namespace (`unshare --mount`), where a directory of its own is bind-mounted over `private/`. The same path then names
other files on each GPU node than on the head, where the driver writes. `shared/` is the same directory on every
node. Nothing in Strat knows about it: the driver and the nodes only see paths. That nodes which share the storage
run, and are told so in one line, is checked by test_multinode.py's runs, whose nodes share this machine's disk."""

import os
import re
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from strat.cluster.storage import NONCE_PREFIX
from tests.reliability.conftest import DEFAULT, small_overrides

from .ray_nodes import start_head
from .test_multinode import MULTINODE, RUN_TIMEOUT_S, STRAT, Cluster, _token_header

pytestmark = pytest.mark.long
BIND = 'mount --bind "$1" "$2" && shift 2 && exec "$@"'
"""Run by `sh -c` in the node's mount namespace: its own directory over the private one, then `ray start`."""


def _unshare() -> list[str] | None:
    """The command that runs the rest of its arguments in a mount namespace of their own, or None where this machine
    does not allow it (not root, and no unprivileged user namespaces)."""
    wrap = ["unshare", "--mount", "--propagation", "private", *([] if os.geteuid() == 0 else ["--map-root-user"]),
            "--"]
    try:
        probe = subprocess.run([*wrap, "sh", "-c", 'mount --bind "$1" "$1"', "sh", "/tmp"], capture_output=True,
                               check=False, timeout=30)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return wrap if probe.returncode == 0 else None


@dataclass
class Storage:
    cluster: Cluster
    private: Path
    """The driver's and the head's directory; each GPU node sees its own one (`own`) at this path."""
    shared: Path
    own: dict[str, Path]


@pytest.fixture(scope="module")
def storage(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Storage]:
    wrap = _unshare()
    if wrap is None:
        pytest.skip("unshare --mount is not allowed here: a node with storage of its own cannot be simulated")
    log_dir, base = tmp_path_factory.mktemp("ray-nodes"), tmp_path_factory.mktemp("storage")
    private, shared = base / "private", base / "shared"
    private.mkdir()
    shared.mkdir()
    env = {**os.environ, "RAY_AUTH_MODE": "token", "RAY_AUTH_TOKEN": os.urandom(16).hex(),
           "PATH": f"{Path(STRAT).parent}{os.pathsep}{os.environ.get('PATH', '')}"}
    head, process = start_head(log_dir, env, num_cpus=2, headers=_token_header(env))
    cluster, own = Cluster(head, env, log_dir), {}
    try:
        for index in (1, 2):
            node_dir = base / f"node{index}"
            node_dir.mkdir()
            name = cluster.add_gpu_node(wrap=[*wrap, "sh", "-c", BIND, "sh", str(node_dir), str(private)])
            own[name] = node_dir
        yield Storage(cluster, private, shared, own)
    finally:
        for node in cluster.started:
            node.kill()
            node.stop()
        process.stop()


def _train(storage: Storage, output_dir: Path, tmp_path: Path, model_dir: Path, *extra: str) -> tuple[int, str]:
    """`strat train --address HEAD` of the small multi-node run into `output_dir`, with directory sync; (exit status,
    output)."""
    log = tmp_path / "train.log"
    overrides = small_overrides(output_dir, model_dir, *MULTINODE, "engine.weight_sync=directory", *extra)
    with log.open("w") as out:
        process = subprocess.Popen([STRAT, "train", "--address", storage.cluster.head.gcs_address, str(DEFAULT),
                                    *overrides], env=storage.cluster.env, stdout=out, stderr=subprocess.STDOUT,
                                   start_new_session=True)
    try:
        code = process.wait(timeout=RUN_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        process.kill()
        raise AssertionError(f"strat train did not end:\n{log.read_text()[-3000:]}") from None
    return code, log.read_text()


def _nonces(directory: Path) -> list[Path]:
    return list(directory.rglob(f"{NONCE_PREFIX}*"))


def test_nodes_with_storage_of_their_own_are_refused_naming_the_node(storage: Storage, tmp_path: Path,
                                                                     tiny_model_dir: Path) -> None:
    code, text = _train(storage, storage.private, tmp_path, tiny_model_dir, "schedule.steps=2")
    assert code == 2, text[-3000:]
    assert "Traceback" not in text
    names = storage.cluster.node_names()
    run_dir = storage.private / "kuhn_poker_tiny"
    errors = [line for line in text.splitlines() if line.startswith("strat: error:")]
    assert len(errors) == 1, text[-3000:]
    found = re.match(r"strat: error: shared storage: node (\S+) \(node id (\w+)\) does not see the run directory "
                     r"\(run\.output_dir\): the nonce the driver on (\S+) \(node id (\w+)\) wrote to (\S+) ",
                     errors[0])
    assert found is not None, errors[0]
    assert names[found[2]] in storage.own, f"not a GPU node: {errors[0]}"
    assert names[found[4]] == "head"
    assert found[5].startswith(f"{run_dir}/{NONCE_PREFIX}")
    assert (": not found); put run.output_dir on storage every node mounts at the same path (an absolute path: a "
            "relative one is relative to each process's working directory); 3 more miss(es) on this or other nodes"
            ) in errors[0]
    # Stopped before any actor started: nothing was written on the nodes' own storage, and the nonces are gone.
    assert [list(path.iterdir()) for path in storage.own.values()] == [[], []]
    assert _nonces(storage.private) == []
    assert "actors ready" not in text

