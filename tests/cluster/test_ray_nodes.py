"""The test clusters' heads: a start that fails on a taken port is made again on another."""

import os
import secrets
import socket
import urllib.request
from pathlib import Path

import pytest

from .ray_nodes import BIND_FAILURES, free_port, start_head

pytestmark = pytest.mark.faults


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
