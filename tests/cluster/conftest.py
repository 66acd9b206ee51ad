"""A Ray head (with the dashboard, for the Jobs API) started and stopped by the test."""

import os
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from .ray_nodes import RayHead, start_head


@pytest.fixture(scope="module")
def ray_head(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RayHead]:
    """`ray start --head --block` with its dashboard on 127.0.0.1 and token authentication disabled, shared by a
    module's tests because starting it takes 10-30 s. Not loopback-only: its GCS, raylet, Ray Client server and
    workers listen on every interface whatever node IP they are given (docs/reliability.md), so while it runs anyone
    who reaches this machine can use it without a token."""
    env = {
        **os.environ,
        "RAY_AUTH_MODE": "disabled",
        # The job's entrypoint runs `python`: this venv's.
        "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}",
    }
    head, node = start_head(tmp_path_factory.mktemp("ray-head"), env, num_cpus=2)
    try:
        yield head
    finally:
        node.stop()
