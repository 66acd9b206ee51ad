"""Ray nodes started by the tests with `ray start --block`, each in its own process group and temp dir, so that a test
can kill one node (SIGKILL of its group, as a machine that loses power) and leave the others running.

Ports: Ray lets the OS assign the GCS, dashboard, agent, raylet and object manager ports (`0`); the head's Ray Client
server alone needs a port chosen here, which another process may take between the choice and the bind. A head whose
start fails on a bind is started again with another port, a worker node whose call to the GCS timed out is started
again (`START_ATTEMPTS`)."""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import psutil

START_TIMEOUT_S = 180.0
START_ATTEMPTS = 3
BIND_FAILURES = ("Failed to bind", "Address already in use", "address already in use")
"""What a failed `ray start` log says when a port it was given is taken."""
GCS_TIMEOUTS = ("Deadline Exceeded",)
"""What a failed `ray start` of a worker node logs when the head's GCS did not answer in time (seen under load)."""
RAY = str(Path(sys.executable).parent / "ray")


@dataclass(frozen=True)
class RayHead:
    address: str
    """The dashboard (Jobs API, state API) address."""
    gcs_address: str
    temp_dir: Path


@dataclass
class NodeProcess:
    """One `ray start --block` and everything it started (its own process group)."""

    process: subprocess.Popen
    temp_dir: Path
    log: Path
    attempts: list[Path] = field(default_factory=list)
    """The logs of the starts that failed (on a bind, or a GCS call that timed out) before this one."""

    def text(self) -> str:
        return self.log.read_text(errors="replace")

    def kill(self) -> None:
        """SIGKILL the whole node at once: its raylet, workers and actors vanish without a goodbye."""
        _kill_group(self.process)

    def stop(self) -> None:
        """Stop the node and remove its temp dir. `ray stop` is not used: in Ray 2.60 it takes no --temp-dir and stops
        every Ray cluster of the machine. `ray start --block` tears its processes down on SIGTERM (a head can take
        tens of seconds, draining); anything left in its process group is killed by that group id."""
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                pass
        _kill_group(self.process)
        shutil.rmtree(self.temp_dir, ignore_errors=True)


def _kill_group(process: subprocess.Popen) -> None:
    try:
        os.killpg(process.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    process.wait(timeout=30)


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _temp_dir() -> Path:
    # Not under pytest's tmp_path: Ray's socket paths there exceed the 107-byte AF_UNIX limit.
    return Path(tempfile.mkdtemp(prefix="strat-ray-"))


def _launch(args: list[str], env: dict[str, str], log: Path, temp_dir: Path,
            wrap: Sequence[str] = ()) -> subprocess.Popen:
    """`ray start --block`, run through `wrap` (a command that execs the rest of its arguments) when given."""
    command = [*wrap, RAY, "start", "--block", "--disable-usage-stats", f"--temp-dir={temp_dir}",
               "--dashboard-agent-listen-port=0", *args]
    with log.open("w") as out:
        return subprocess.Popen(command, env=env, stdout=out, stderr=subprocess.STDOUT, start_new_session=True)


def _wait_for(ready: Callable[[], bool], node: NodeProcess, what: str) -> None:
    """Until `ready()`; fails with the node's log when it exits or the start timeout passes (the caller stops it)."""
    deadline = time.monotonic() + START_TIMEOUT_S
    while not ready():
        if node.process.poll() is not None:
            raise RayStartFailed(node, f"ray start exited with {node.process.returncode}")
        if time.monotonic() > deadline:
            raise RayStartFailed(node, f"{what} not ready within {START_TIMEOUT_S:.0f} s")
        time.sleep(1)


class RayStartFailed(RuntimeError):
    """A `ray start` that exited or never became ready, with the end of its log."""

    def __init__(self, node: NodeProcess, why: str) -> None:
        super().__init__(f"{why}: {node.text()[-3000:]}")


def _head_addresses(log: str) -> tuple[str, str] | None:
    """(dashboard URL, GCS address) from the start log of a head, once it printed them."""
    gcs = re.search(r"ray start --address='([^']+)'", log)
    dashboard = re.search(r"RAY_API_SERVER_ADDRESS='([^']+)'", log)
    return (dashboard.group(1), gcs.group(1)) if gcs and dashboard else None


def _answers(url: str, headers: dict[str, str]) -> bool:
    try:
        with urllib.request.urlopen(urllib.request.Request(f"{url}/api/version", headers=headers), timeout=2):
            return True
    except OSError:
        return False


def _listens(node: NodeProcess, port: int) -> bool:
    """Whether a process of the node (its process group) listens on `port`: the port is the node's, not a squatter's."""
    for process in psutil.process_iter():
        try:
            if os.getpgid(process.pid) == node.process.pid and any(
                c.status == psutil.CONN_LISTEN and c.laddr.port == port for c in process.net_connections("inet")
            ):
                return True
        except (psutil.Error, ProcessLookupError):
            continue
    return False


def _head_ready(node: NodeProcess, client_port: int, headers: dict[str, str]) -> bool:
    """The dashboard answers and the Ray Client server holds its port (it binds last, after `ray start` reports the
    runtime started: a taken port shows only then)."""
    found = _head_addresses(node.text())
    return found is not None and _answers(found[0], headers) and _listens(node, client_port)


def _start_until_ready(start: Callable[[int, list[Path]], tuple[NodeProcess, Callable[[], bool]]], what: str,
                       again: Callable[[NodeProcess], bool]) -> NodeProcess:
    """`start(attempt, failed logs)` -> (node, ready), waited for; a start that fails is made again while `again(node)`
    says so, up to `START_ATTEMPTS` in all (the failed logs go to the next node's `attempts`)."""
    failed: list[Path] = []
    for attempt in range(START_ATTEMPTS):
        node, ready = start(attempt, list(failed))
        try:
            _wait_for(ready, node, what)
        except RayStartFailed:
            node.stop()  # the log is outside the temp dir: still readable
            if not again(node) or attempt == START_ATTEMPTS - 1:
                raise
            failed.append(node.log)
            continue
        return node
    raise AssertionError("unreachable")


def start_head(log_dir: Path, env: dict[str, str], num_cpus: int, num_gpus: int = 0,
               client_port: Callable[[], int] = free_port, headers: dict[str, str] | None = None,
               ) -> tuple[RayHead, NodeProcess]:
    """A head with the dashboard on 127.0.0.1, every port the OS's choice but the Ray Client server's
    (`client_port()`), started again with another on a bind failure; returns once the dashboard answers."""

    def start(attempt: int, failed: list[Path]) -> tuple[NodeProcess, Callable[[], bool]]:
        temp_dir, log, port = _temp_dir(), log_dir / f"ray_head.{attempt}.log", client_port()
        args = ["--head", "--node-ip-address=127.0.0.1", "--dashboard-host=127.0.0.1", "--dashboard-port=0",
                "--port=0", f"--ray-client-server-port={port}", f"--num-cpus={num_cpus}", f"--num-gpus={num_gpus}"]
        node = NodeProcess(_launch(args, env, log, temp_dir), temp_dir, log, failed)
        return node, lambda: _head_ready(node, port, headers or {})

    node = _start_until_ready(start, "the Ray head", lambda node: any(text in node.text() for text in BIND_FAILURES))
    dashboard, gcs = _head_addresses(node.text())
    return RayHead(address=dashboard, gcs_address=gcs, temp_dir=node.temp_dir), node


def start_worker(head: RayHead, log: Path, env: dict[str, str], num_cpus: int, num_gpus: int,
                 resources: dict[str, float], wrap: Sequence[str] = ()) -> NodeProcess:
    """A node joining `head` with these resources, started through `wrap` (`_launch`); returns once `ray start`
    reports it running (the caller waits for the GCS to list it). A start whose call to the head's GCS timed out (a
    busy machine) is made again, up to `START_ATTEMPTS` in all; the later ones log to `<log>.<attempt>`."""
    args = [f"--address={head.gcs_address}", "--node-ip-address=127.0.0.1", f"--num-cpus={num_cpus}",
            f"--num-gpus={num_gpus}", f"--resources={json.dumps(resources)}"]

    def start(attempt: int, failed: list[Path]) -> tuple[NodeProcess, Callable[[], bool]]:
        temp_dir, attempt_log = _temp_dir(), log if attempt == 0 else log.with_name(f"{log.name}.{attempt}")
        node = NodeProcess(_launch(args, env, attempt_log, temp_dir, wrap), temp_dir, attempt_log, failed)
        return node, lambda: "Ray runtime started" in node.text()

    return _start_until_ready(start, "the Ray node", lambda node: any(text in node.text() for text in GCS_TIMEOUTS))
