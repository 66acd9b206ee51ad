"""A loopback-only Ray head (with the dashboard, for the Jobs API) started and stopped by the test."""

import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

START_TIMEOUT_S = 120.0


@dataclass(frozen=True)
class RayHead:
    address: str
    """The dashboard (Jobs API) address."""
    gcs_address: str
    temp_dir: Path


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _stop(process: subprocess.Popen) -> None:
    """Stop only what this head started. `ray stop` is not used: in Ray 2.60 it takes no --temp-dir
    and stops every Ray cluster of the machine. `ray start --block` tears its processes down on
    SIGTERM; anything left in its own process group is killed by that group id."""
    if process.poll() is None:
        process.send_signal(signal.SIGTERM)
        try:
            process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            pass
    try:
        os.killpg(process.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    process.wait(timeout=10)


@pytest.fixture(scope="module")
def ray_head(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RayHead]:
    """`ray start --head --block` bound to 127.0.0.1, token auth disabled (loopback only); shared by a
    module's tests because starting it takes 10-30 s."""
    tmp_path = tmp_path_factory.mktemp("ray-head")
    # Not under tmp_path: Ray's socket paths there exceed the 107-byte AF_UNIX limit.
    temp_dir = Path(tempfile.mkdtemp(prefix="strat-ray-"))
    dashboard_port, gcs_port = free_port(), free_port()
    env = {
        **os.environ,
        "RAY_AUTH_MODE": "disabled",
        # The job's entrypoint runs `python`: this venv's.
        "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}",
    }
    command = [
        str(Path(sys.executable).parent / "ray"), "start", "--head", "--block",
        "--node-ip-address=127.0.0.1", "--dashboard-host=127.0.0.1", f"--dashboard-port={dashboard_port}",
        f"--temp-dir={temp_dir}", "--num-cpus=2", "--num-gpus=0", "--disable-usage-stats",
        f"--port={gcs_port}", f"--ray-client-server-port={free_port()}",
        f"--dashboard-agent-listen-port={free_port()}", f"--dashboard-agent-grpc-port={free_port()}",
        f"--metrics-export-port={free_port()}", f"--runtime-env-agent-port={free_port()}",
        f"--node-manager-port={free_port()}", f"--object-manager-port={free_port()}",
    ]
    log = (tmp_path / "ray_start.log").open("w")
    process = subprocess.Popen(command, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    address = f"http://127.0.0.1:{dashboard_port}"
    try:
        deadline = time.monotonic() + START_TIMEOUT_S
        while True:
            if process.poll() is not None:
                pytest.fail(f"ray start exited with {process.returncode}: {(tmp_path / 'ray_start.log').read_text()[-2000:]}")
            try:
                with urllib.request.urlopen(f"{address}/api/version", timeout=2):
                    break
            except OSError:
                if time.monotonic() > deadline:
                    pytest.fail(f"the Ray dashboard did not answer at {address} within {START_TIMEOUT_S:.0f} s")
                time.sleep(1)
        yield RayHead(address=address, gcs_address=f"127.0.0.1:{gcs_port}", temp_dir=temp_dir)
    finally:
        _stop(process)
        log.close()
        shutil.rmtree(temp_dir, ignore_errors=True)
