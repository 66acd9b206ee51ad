"""The test clusters' nodes: a head's start that fails on a taken port is made again on another; a worker's whose
call to the GCS timed out is made again."""

import os
import secrets
import socket
import urllib.request
from pathlib import Path

import pytest

from .ray_nodes import BIND_FAILURES, START_ATTEMPTS, RayHead, RayStartFailed, free_port, start_head, start_worker


@pytest.mark.faults
def test_a_head_whose_port_is_taken_starts_again_on_another(tmp_path: Path) -> None:
    env = {**os.environ, "RAY_AUTH_MODE": "token", "RAY_AUTH_TOKEN": secrets.token_hex(16)}
    headers = {"Authorization": f"Bearer {env['RAY_AUTH_TOKEN']}"}
    with socket.socket() as taken:
        taken.bind(("0.0.0.0", 0))  # every interface, as a server of another program would
        taken.listen()
        ports = [taken.getsockname()[1]]  # the first start gets the taken port, the next ones free ports
        head, node = start_head(tmp_path, env, num_cpus=1, headers=headers,
                                client_port=lambda: ports.pop(0) if ports else free_port())
        try:
            assert len(node.attempts) == 1
            failed = node.attempts[0].read_text()
            assert any(text in failed for text in BIND_FAILURES), failed[-2000:]
            assert str(taken.getsockname()[1]) in failed
            request = urllib.request.Request(f"{head.address}/api/version", headers=headers)
            with urllib.request.urlopen(request, timeout=10) as answer:
                assert answer.status == 200
        finally:
            node.stop()


# Stands for `ray start`: each call takes the next line of the plan in $PLAN_FILE ("timeout", "fail" or "start").
FAKE_RAY_START = r"""
outcome=$(head -n 1 "$PLAN_FILE"); sed -i 1d "$PLAN_FILE"
case "$outcome" in
  timeout) echo "INFO node.py:438 -- Failed to get node info b'RPC error: Deadline Exceeded'"; exit 1 ;;
  fail) echo "ValueError: something else"; exit 1 ;;
  start) echo "Ray runtime started."; exec sleep 60 ;;
esac
"""


@pytest.mark.parametrize(("plan", "started", "left"), [
    (["timeout", "start"], True, ""),
    (["timeout"] * START_ATTEMPTS, False, ""),
    (["fail", "start"], False, "start\n"),
], ids=["timed-out-then-started", "timed-out-every-time", "other-failure"])
def test_a_worker_whose_gcs_call_timed_out_starts_again(tmp_path: Path, plan: list[str], started: bool,
                                                        left: str) -> None:
    """A worker node's `ray start` that exits on a GCS call past its deadline (as under load in CI) is made again, up
    to START_ATTEMPTS in all; any other failure is raised at once."""
    plan_file = tmp_path / "plan"
    plan_file.write_text("".join(f"{line}\n" for line in plan))
    head = RayHead(address="http://127.0.0.1:1", gcs_address="127.0.0.1:1", temp_dir=tmp_path)
    env = {**os.environ, "PLAN_FILE": str(plan_file)}
    wrap = ["bash", "-c", FAKE_RAY_START, "fake-ray"]
    log = tmp_path / "gpu_node.log"
    if not started:
        with pytest.raises(RayStartFailed):
            start_worker(head, log, env, num_cpus=0, num_gpus=1, resources={}, wrap=wrap)
        assert plan_file.read_text() == left
        return
    node = start_worker(head, log, env, num_cpus=0, num_gpus=1, resources={}, wrap=wrap)
    try:
        assert node.attempts == [log] and node.log == tmp_path / "gpu_node.log.1"
        assert "Deadline Exceeded" in log.read_text() and "Ray runtime started" in node.text()
        assert plan_file.read_text() == left
    finally:
        node.stop()
