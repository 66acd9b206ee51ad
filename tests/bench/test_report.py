"""The pure parts of `strat bench`: padding fraction, steady steps, the figures derived from the
trainer's step records, and the shape of the JSON report."""

from __future__ import annotations

import json

import pytest

from strat.benchmarks.figures import end_to_end, pipeline_overlap, weight_sync
from strat.benchmarks.monitor import classify
from strat.benchmarks.results import (
    BenchReport,
    GRPOBaseline,
    LearnerEfficiency,
    Memory,
    ProcessMemory,
    RolloutEfficiency,
    StepTimes,
    Target,
    chunks,
    padding_fraction,
    steady_steps,
    step_record,
)


def test_padding_fraction_follows_the_collate_layout() -> None:
    # Prompts are left-padded to the longest prompt, responses right-padded to the longest response.
    assert padding_fraction([[(3, 2), (3, 2)]]) == 0.0
    # width 4 + 3 = 7 per row, 2 rows = 14 positions, 4 + 1 + 2 + 3 = 10 real.
    assert padding_fraction([[(4, 1), (2, 3)]]) == pytest.approx(4 / 14)
    # Several batches pool their positions; empty batches are ignored.
    assert padding_fraction([[(2, 2)], [], [(1, 1), (3, 3)]]) == pytest.approx(1 - (4 + 2 + 6) / (4 + 12))
    assert padding_fraction([]) == 0.0


def test_chunks() -> None:
    assert chunks([1, 2, 3, 4, 5], 2) == [[1, 2], [3, 4], [5]]
    with pytest.raises(ValueError):
        chunks([1], 0)


def _record(step: int, **times: float) -> dict:
    base = {"time/rollout_s": 2.0, "time/rollout_wait_s": 0.5, "time/learn_s": 1.5, "time/sync_s": 0.1,
            "time/step_s": 2.5, "throughput/gen_tokens_per_s": 100.0, "learn/tokens": 150.0, "learn/samples": 3.0,
            "reward/mean": 0.1 * step}
    base.update({f"time/{k}": v for k, v in times.items()})
    return {"step": step, **base}


def test_step_record_recovers_generated_tokens() -> None:
    row = step_record(_record(1))
    assert row["gen_tokens"] == 200
    assert row["step_s"] == 2.5 and row["reward"] == pytest.approx(0.1)


def test_steady_steps_drop_the_first_and_with_overlap_the_last() -> None:
    steps = [step_record(_record(i)) for i in range(1, 5)]
    assert [s["step"] for s in steady_steps(steps, overlapped=True)] == [2, 3]
    assert [s["step"] for s in steady_steps(steps, overlapped=False)] == [2, 3, 4]
    short = steps[:2]
    assert [s["step"] for s in steady_steps(short, overlapped=True)] == [2]
    assert [s["step"] for s in steady_steps(short[:1], overlapped=True)] == [1]


def _run(label: str, staleness: int, **per_step: float) -> StepTimes:
    steps = [step_record(_record(i, **per_step)) for i in range(1, 5)]
    for s in steps:
        s["learn_samples"] = 3.0
    return StepTimes(label=label, backend="vllm", max_staleness=staleness, steps=steps, startup_s=10.0)


def test_weight_sync_overlap_and_end_to_end_from_step_records() -> None:
    overlapped = _run("default", 1, step_s=2.5, sync_s=0.1)
    synchronous = _run("sync", 0, step_s=4.0, rollout_s=2.0, learn_s=1.5, sync_s=0.2)
    sync = weight_sync(overlapped)
    assert sync.syncs == 4 and sync.share == pytest.approx(0.1 / 2.5)
    overlap = pipeline_overlap(overlapped, synchronous)
    assert overlap.steady_steps == [2, 3]
    assert overlap.ratio == pytest.approx(2.5 / 2.0)
    assert overlap.speedup == pytest.approx(4.0 / 2.5)
    assert overlap.serial_s == pytest.approx(2.5 - 0.5 - 1.5 - 0.1)
    baseline = GRPOBaseline(steps=2, groups=1, group_size=2, max_new_tokens=8, threads=1, generated_tokens=100,
                            step_s=1.0, generate_s=0.5, learn_s=0.5, mean_response_tokens=25.0, reference_tok_s=9000.0)
    e2e = end_to_end(overlapped, baseline)
    assert e2e.strat_generated_tokens == 400 and e2e.strat_step_s == pytest.approx(5.0)
    assert e2e.ratio == pytest.approx((400 / 5.0) / 100.0)
    assert e2e.strat_mean_response_tokens == pytest.approx(50.0)


def test_report_json_lists_each_figure_with_its_baseline_and_target() -> None:
    report = BenchReport(config="configs/kuhn_poker_tiny.yaml", quick=True, machine={"cpus": 2})
    report.rollout.append(RolloutEfficiency(
        backend="hf", games=16, engine_calls=4, generated_tokens=1000, rollout_s=2.0, engine_in_path_s=1.8,
        replay_s=1.6, replay_tokens=1000, replay_same_lengths=1.0, worker_cpu_s=0.1))
    report.learner = LearnerEfficiency(samples=10, tokens=5000, response_tokens=1000, micro_batches=1, micro_batch=32,
                                       padding_fraction=0.05, padding_fraction_unsorted=0.2, repeats=1,
                                       learner_s=1.0, plain_s=0.9)
    report.memory = Memory(peak_pss=3 * 2**30, peak_rss=5 * 2**30, samples=3, processes=[
        ProcessMemory("driver", "driver", 1, 2**30, 2**29), ProcessMemory("AgentActor", "actor", 2, 2**30, 2**29)])
    data = json.loads(report.dumps())
    figures = {f["key"]: f for f in data["figures"]}
    rollout = figures["rollout_efficiency.hf"]
    assert rollout["value"] == pytest.approx(0.8)
    assert rollout["numerator"] == pytest.approx(500.0) and rollout["baseline"] == pytest.approx(625.0)
    assert rollout["target"] == ">= 0.85" and rollout["met"] is False
    assert figures["learner_efficiency"]["value"] == pytest.approx(0.9)
    assert figures["learner_efficiency"]["met"] is True
    assert figures["memory.peak_gib"]["value"] == pytest.approx(3.0) and figures["memory.peak_gib"]["met"] is True
    # Sections carry the raw measurements and the derived figures.
    assert data["sections"]["rollout"][0]["transport_s"] == pytest.approx(0.1)
    assert data["sections"]["learner"]["efficiency"] == pytest.approx(0.9)
    assert data["machine"] == {"cpus": 2} and data["errors"] == {}
    assert "| Rollout efficiency (hf) | 0.8 |" in data["table"]
    assert data["table"] == report.table()


def test_target() -> None:
    assert Target(">=", 0.85).met(0.9) is True
    assert Target("<=", 0.05).met(0.06) is False
    assert Target(">=", 1.0).met(None) is None
    assert str(Target("<=", 1.25)) == "<= 1.25"


@pytest.mark.parametrize(("cmdline", "expected"), [
    (["ray::AgentActor.generate", "", ""], ("AgentActor", "actor")),
    (["ray::Learner", "", ""], ("Learner", "actor")),
    (["ray::IDLE", "", ""], ("ray: idle worker", "ray")),
    (["ray::DashboardAgent", ""], ("ray: DashboardAgent", "ray")),
    (["/venv/lib/ray/core/src/ray/raylet/raylet", "--x"], ("ray: raylet", "ray")),
    (["/venv/bin/python", "-u", "/venv/lib/ray/_private/log_monitor.py"], ("ray: log monitor", "ray")),
    ([], ("unknown", "ray")),
])
def test_classify_processes(cmdline: list[str], expected: tuple[str, str]) -> None:
    assert classify(cmdline) == expected


def test_classify_driver() -> None:
    assert classify(["python", "x.py"], is_driver=True) == ("driver", "driver")


def test_memory_sampler_counts_this_process_and_its_children() -> None:
    import subprocess
    import sys

    from strat.benchmarks.monitor import MemorySampler

    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(5)"])
    try:
        with MemorySampler(interval_s=0.05) as sampler:
            pass
    finally:
        child.kill()
        child.wait()
    memory = sampler.result()
    pids = {p.pid for p in memory.processes}
    assert child.pid in pids and memory.processes[0].kind == "driver"
    assert memory.peak_rss >= sum(p.peak_rss for p in memory.processes if p.pid == child.pid) > 0
    assert memory.peak_pss > 0 and memory.samples >= 1
