"""Sampling the whole local run from the driver: memory of the driver and every process under it
(Ray's own processes and every actor's worker are its descendants on a local node), and how many
cores other jobs on the machine were using meanwhile."""

from __future__ import annotations

import os
import threading
import time
from pathlib import PurePath
from typing import Literal

import psutil

from strat.benchmarks.results import Memory, ProcessMemory

Kind = Literal["driver", "ray", "actor"]

# Ray's own processes, named by their executable or script.
_RAY_SYSTEM = {
    "gcs_server": "ray: gcs_server",
    "raylet": "ray: raylet",
    "dashboard.py": "ray: dashboard head",
    "monitor.py": "ray: autoscaler monitor",
    "log_monitor.py": "ray: log monitor",
    "agent.py": "ray: dashboard agent",
    "main.py": "ray: runtime-env agent",
}
_RAY_SYSTEM_ACTORS = {"DashboardAgent", "RuntimeEnvAgent", "IDLE"}


def classify(cmdline: list[str], is_driver: bool = False) -> tuple[str, Kind]:
    """A label and kind for a process of the run from its command line.

    Ray titles its worker processes `ray::<Class>.<method>` (or `ray::<Class>` when idle)."""
    if is_driver:
        return "driver", "driver"
    if not cmdline:
        return "unknown", "ray"
    head = cmdline[0]
    if head.startswith("ray::"):
        name = head[5:].split(".", 1)[0].split(" ", 1)[0].split("(", 1)[0]
        if name in _RAY_SYSTEM_ACTORS:
            return ("ray: idle worker" if name == "IDLE" else f"ray: {name}"), "ray"
        return name, "actor"
    for part in cmdline[:3]:
        base = PurePath(part).name
        if base in _RAY_SYSTEM:
            return _RAY_SYSTEM[base], "ray"
    return PurePath(head).name or "unknown", "ray"


def _actor_ancestor(pid: int, seen: dict[int, tuple[int, int, int, str, Kind]]) -> str | None:
    """The label of the nearest actor among `pid`'s ancestors in this sample, if any."""
    parent = seen[pid][2]
    hops = 0
    while parent in seen and hops < 64:
        _, _, grandparent, label, kind = seen[parent]
        if kind == "actor":
            return label
        parent, hops = grandparent, hops + 1
    return None


class MemorySampler:
    """Samples RSS and PSS of the driver and all its descendants in a thread; use as a context manager."""

    def __init__(self, interval_s: float = 0.5, root_pid: int | None = None) -> None:
        self.interval_s = interval_s
        self.root = psutil.Process(root_pid or os.getpid())
        self.peak_rss = 0
        self.peak_pss = 0
        self.samples = 0
        self._procs: dict[int, ProcessMemory] = {}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="strat-bench-memory", daemon=True)

    def __enter__(self) -> MemorySampler:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()
        self.sample()

    def _loop(self) -> None:
        while not self._stop.is_set():
            self.sample()
            self._stop.wait(self.interval_s)

    def sample(self) -> None:
        try:
            procs = [self.root, *self.root.children(recursive=True)]
        except psutil.Error:
            return
        seen: dict[int, tuple[int, int, int, str, Kind]] = {}
        for proc in procs:
            try:
                info = proc.memory_full_info()
                cmdline = proc.cmdline()
                parent = proc.ppid()
            except psutil.Error:
                continue
            label, kind = classify(cmdline, proc.pid == self.root.pid)
            seen[proc.pid] = (int(info.rss), int(getattr(info, "pss", info.rss)), parent, label, kind)
        total_rss = total_pss = 0
        for pid, (rss, pss, parent, label, kind) in seen.items():
            total_rss += rss
            total_pss += pss
            owner = _actor_ancestor(pid, seen)
            if owner is not None:
                # A process an actor forked or spawned (it may even carry the actor's title): the actor's.
                label, kind = f"{owner} helper", "actor"
            old = self._procs.get(pid)
            if old is not None and old.kind == "actor" and kind != "actor":
                label, kind = old.label, old.kind  # an actor's title while it starts or ends
            self._procs[pid] = ProcessMemory(
                label=label, kind=kind, pid=pid,
                peak_rss=max(rss, old.peak_rss if old else 0), peak_pss=max(pss, old.peak_pss if old else 0),
            )
        self.samples += 1
        self.peak_rss = max(self.peak_rss, total_rss)
        self.peak_pss = max(self.peak_pss, total_pss)

    def result(self) -> Memory:
        order = {"driver": 0, "actor": 1, "ray": 2}
        processes = sorted(self._procs.values(), key=lambda p: (order[p.kind], -p.peak_pss))
        return Memory(peak_pss=self.peak_pss, peak_rss=self.peak_rss, samples=self.samples, processes=processes)


class LoadMonitor:
    """Mean cores busy on the whole machine, and how many of them were not this bench's processes."""

    def __init__(self, interval_s: float = 2.0) -> None:
        self.interval_s = interval_s
        self.root = psutil.Process()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="strat-bench-load", daemon=True)
        self._busy = 0.0
        self._ours = 0.0
        self._elapsed = 0.0

    def __enter__(self) -> LoadMonitor:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()

    def _tree_cpu(self, last: dict[int, float], first: bool = False) -> float:
        """CPU seconds our process tree used since the last call (a process new since then counts
        from its start; the last interval of one that ended is lost)."""
        used = 0.0
        try:
            procs = [self.root, *self.root.children(recursive=True)]
        except psutil.Error:
            return 0.0
        seen: dict[int, float] = {}
        for proc in procs:
            try:
                times = proc.cpu_times()
            except psutil.Error:
                continue
            now = times.user + times.system
            seen[proc.pid] = now
            used += now - last.get(proc.pid, now if first else 0.0)
        last.clear()
        last.update(seen)
        return used

    def _loop(self) -> None:
        last_tree: dict[int, float] = {}
        self._tree_cpu(last_tree, first=True)
        before = psutil.cpu_times()
        started = time.monotonic()
        while not self._stop.wait(self.interval_s):
            now = psutil.cpu_times()
            ended = time.monotonic()
            busy = sum(now) - sum(before) - (now.idle - before.idle) - (getattr(now, "iowait", 0) - getattr(before, "iowait", 0))
            self._busy += busy
            self._ours += self._tree_cpu(last_tree)
            self._elapsed += ended - started
            before, started = now, ended

    def summary(self) -> dict[str, float]:
        if self._elapsed <= 0:
            return {}
        busy = self._busy / self._elapsed
        ours = min(self._ours / self._elapsed, busy)
        return {"busy_cores_mean": round(busy, 2), "bench_cores_mean": round(ours, 2),
                "other_jobs_cores_mean": round(max(0.0, busy - ours), 2)}
