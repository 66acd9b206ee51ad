"""experiments/which_parts_of_strat_reasoner_help/ablation.py: its arms are valid configs, identical arms share a
run, and a stopped ablation picks up where it stopped (the training call replaced by a fake that writes a finished
run's files)."""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path

import pytest

from strat.config import save_resolved
from strat.config_loading import load_config
from strat.errors import RunAborted, UserError
from strat.eval.summaries import load_summary

from .conftest import experiment_module

ROOT = Path(__file__).resolve().parents[2]
KUHN = "configs/kuhn_poker_tiny.yaml"


@pytest.fixture(scope="module")
def ablation():
    yield from experiment_module("ablation")


def test_every_arm_is_a_valid_config_that_changes_its_part(ablation) -> None:
    def settings(name: str) -> tuple[str, float, int, str, str, bool, str, str, str, str]:
        (arm,) = [a for a in ablation.ARMS if a.name == name]
        config = load_config(ROOT / KUHN, list(arm.overrides))
        algorithm = config.algorithm
        return (algorithm.advantage_mode, algorithm.lam, config.reasoning.depth, algorithm.policy_loss,
                algorithm.dph_divergence, config.comparison.skip_forced, config.comparison.prediction_target,
                config.comparison.belief_target, algorithm.credit, algorithm.process_baseline)

    # The Kuhn config with the hybrid advantage (the config itself trains on the outcome alone), lam 0.5, depth 1,
    # the clipped loss, no DPH-RL, forced moves scored.
    expected = {
        "hybrid": ("hybrid", 0.5, 1, "clipped", "none", False, "sampled", "truth", "response", "group"),
        "outcome": ("outcome", 0.5, 1, "clipped", "none", False, "sampled", "truth", "response", "group"),
        "process": ("process", 0.5, 1, "clipped", "none", False, "sampled", "truth", "response", "group"),
        "hybrid-lam0.25": ("hybrid", 0.25, 1, "clipped", "none", False, "sampled", "truth", "response", "group"),
        "skip-forced": ("hybrid", 0.5, 1, "clipped", "none", True, "sampled", "truth", "response", "group"),
        "targets": ("hybrid", 0.5, 1, "clipped", "none", False, "policy", "posterior", "response", "group"),
        "targets-segment": ("hybrid", 0.5, 1, "clipped", "none", False, "policy", "posterior", "segment", "group"),
        "targets-state": ("hybrid", 0.5, 1, "clipped", "none", False, "policy", "posterior", "response", "state"),
        "targets-segment-state": ("hybrid", 0.5, 1, "clipped", "none", False, "policy", "posterior", "segment",
                                  "state"),
        "depth0": ("hybrid", 0.5, 0, "clipped", "none", False, "sampled", "truth", "response", "group"),
        "depth1": ("hybrid", 0.5, 1, "clipped", "none", False, "sampled", "truth", "response", "group"),
        "depth2": ("hybrid", 0.5, 2, "clipped", "none", False, "sampled", "truth", "response", "group"),
        "clipped": ("hybrid", 0.5, 1, "clipped", "none", False, "sampled", "truth", "response", "group"),
        "fiberpo": ("hybrid", 0.5, 1, "fiberpo", "none", False, "sampled", "truth", "response", "group"),
        "dph-js": ("hybrid", 0.5, 1, "clipped", "js", False, "sampled", "truth", "response", "group"),
        "dph-fkl": ("hybrid", 0.5, 1, "clipped", "forward_kl", False, "sampled", "truth", "response", "group"),
        # The outcome's history baseline (checked apart below), outcome-only and hybrid.
        "outcome-history": ("outcome", 0.5, 1, "clipped", "none", False, "sampled", "truth", "response", "group"),
        "hybrid-history": ("hybrid", 0.5, 1, "clipped", "none", False, "sampled", "truth", "response", "group"),
        # Outcome-only with the outcome term not divided by the group's std (checked apart below).
        "outcome-unscaled": ("outcome", 0.5, 1, "clipped", "none", False, "sampled", "truth", "response", "group"),
        # The config as it is (outcome-only), and with its snapshot opponent replaced by a league.
        "as-configured": ("outcome", 0.5, 1, "clipped", "none", False, "sampled", "truth", "response", "group"),
        "league-uniform": ("outcome", 0.5, 1, "clipped", "none", False, "sampled", "truth", "response", "group"),
        "league-pfsp": ("outcome", 0.5, 1, "clipped", "none", False, "sampled", "truth", "response", "group"),
        # The config as it is on the hf engine, and that with the move constrained to the legal ones.
        "hf": ("outcome", 0.5, 1, "clipped", "none", False, "sampled", "truth", "response", "group"),
        "constrain-action": ("outcome", 0.5, 1, "clipped", "none", False, "sampled", "truth", "response", "group"),
    }
    assert {arm.name: settings(arm.name) for arm in ablation.ARMS} == expected
    baselines = {arm.name: load_config(ROOT / KUHN, list(arm.overrides)).algorithm.baseline for arm in ablation.ARMS}
    assert baselines == {**dict.fromkeys(expected, "group"), "outcome-history": "history", "hybrid-history": "history"}
    scales = {arm.name: load_config(ROOT / KUHN, list(arm.overrides)).algorithm.outcome_scale for arm in ablation.ARMS}
    assert scales == {**dict.fromkeys(expected, "std"), "outcome-unscaled": "none"}
    default = load_config(ROOT / KUHN).game.opponents
    for sampling in ("uniform", "pfsp"):
        (arm,) = [a for a in ablation.ARMS if a.name == f"league-{sampling}"]
        opponents = load_config(ROOT / KUHN, list(arm.overrides)).game.opponents
        assert [(o.kind, o.weight) for o in opponents] == [
            (o.kind if o.kind != "snapshot" else "league", o.weight) for o in default]
        (league,) = [o for o in opponents if o.kind == "league"]
        assert (league.league_size, league.league_sampling) == (4, sampling)
    decoding = {name: (config.engine.backend, config.reasoning.constrain_action) for name, config in
                ((a.name, load_config(ROOT / KUHN, list(a.overrides))) for a in ablation.ARMS)}
    assert decoding == {**dict.fromkeys(expected, ("vllm", False)), "hf": ("hf", False),
                        "constrain-action": ("hf", True)}
    assert all("hybrid" in ablation.GROUPS[group] for group in ablation.GROUPS
               if group not in ("league", "constrain", "scale", "all"))
    assert ablation.GROUPS["scale"] == ("outcome", "outcome-unscaled")
    assert {a.name: a.seeds for a in ablation.ARMS if len(a.seeds) == 5} == dict.fromkeys(
        ("hybrid", "outcome", "targets", "targets-segment", "targets-state", "targets-segment-state", "outcome-history",
         "hybrid-history", "outcome-unscaled"), (0, 1, 2, 3, 4))
    assert [a.name for a in ablation.select_arms(["loss", "depth0"])] == ["hybrid", "depth0", "clipped", "fiberpo"]
    with pytest.raises(UserError, match="--arms depth3: no such group or arm"):
        ablation.select_arms(["depth3"])


def test_the_plan_pairs_seeds_and_shares_the_runs_of_identical_arms(ablation, tmp_path: Path, monkeypatch) -> None:
    monkeypatch.chdir(ROOT)
    runs = ablation.plan_runs(KUHN, ablation.select_arms(["all"]), tmp_path / "runs", tmp_path / "results")
    # hybrid, outcome, the four targets arms, the two history arms and outcome-unscaled on 5 seeds, the 15 other arms
    # on 3: 90 runs; depth1 and clipped are the Kuhn config with the hybrid advantage, so their 2 x 3 runs are
    # hybrid's, and as-configured is the config as it is, outcome's: 81 to train.
    assert len(runs) == 90 and len({run.config.run_dir for run in runs}) == 81
    (configured,) = [r for r in runs if r.arm == "as-configured" and r.seed == 2]
    assert configured.config.run_dir == tmp_path / "runs" / "outcome-seed2"
    assert [(r.arm, r.seed) for r in runs[:3]] == [("hybrid", 0), ("outcome", 0), ("process", 0)]
    assert [(r.arm, r.seed) for r in runs[-3:]] == [("outcome-history", 4), ("hybrid-history", 4),
                                                    ("outcome-unscaled", 4)]
    assert [a.name for a in ablation.select_arms(["state"])] == ["hybrid", "outcome", "targets-state",
                                                                "targets-segment-state"]
    (depth1,) = [r for r in runs if r.arm == "depth1" and r.seed == 1]
    assert depth1.config.run_dir == tmp_path / "runs" / "hybrid-seed1"
    assert depth1.summary == tmp_path / "results" / "kuhn_poker_tiny-depth1-seed1.json"
    # The committed table's recipe (depth 2) as an override: every arm but the depth arms at depth 2, and depth2
    # then shares hybrid's runs instead.
    old = ablation.plan_runs(KUHN, ablation.select_arms(["all"]), tmp_path / "runs", tmp_path / "results",
                             overrides=["reasoning.depth=2"])
    depths = {r.arm: r.config.reasoning.depth for r in old if r.seed == 0}
    assert depths == {**{arm.name: 2 for arm in ablation.ARMS}, "depth0": 0, "depth1": 1}
    (depth2,) = [r for r in old if r.arm == "depth2" and r.seed == 1]
    assert depth2.config.run_dir == tmp_path / "runs" / "hybrid-seed1" and len({r.config.run_dir for r in old}) == 81
    (fiberpo,) = [r for r in ablation.plan_runs(KUHN, ablation.select_arms(["fiberpo"]), tmp_path / "runs",
                                                tmp_path / "results", seeds=[7], steps=4, overrides=["eval.games=50"])]
    assert fiberpo.overrides == ("eval.games=50", "schedule.steps=4", "algorithm.advantage_mode=hybrid",
                                 "algorithm.policy_loss=fiberpo", "run.seed=7", "run.name=fiberpo-seed7",
                                 f"run.output_dir={tmp_path / 'runs'}")
    assert fiberpo.config.schedule.steps == 4 and fiberpo.config.run.seed == 7


class FakeTrainer:
    """Writes what a finished `strat train` leaves for the summary (config.yaml, metrics.jsonl), and remembers."""

    def __init__(self, stop_at: int | None = None) -> None:
        self.trained: list[str] = []
        self.stop_at = stop_at

    def __call__(self, config: str, overrides: Sequence[str]) -> int:
        resolved = load_config(config, list(overrides))
        run_dir, steps, seed = resolved.run_dir, resolved.schedule.steps, resolved.run.seed
        save_resolved(resolved, run_dir)
        last = steps if self.stop_at is None else self.stop_at
        records = [{"step": 0, "eval/return_vs_random": -0.1, "eval/exploitability": 0.5}]
        records += [{"step": s, "format/valid_rate": 1.0, "throughput/gen_tokens_per_s": 100.0, "time/rollout_s": 2.0}
                    for s in range(1, last + 1)]
        records[-1].update({"eval/return_vs_random": 0.1 * seed, "eval/return_vs_random_ci": 0.2,
                            "eval/exploitability": 0.3, "eval/exploitability_ci": [0.25, 0.35]})
        with (run_dir / "metrics.jsonl").open("a") as handle:
            handle.writelines(json.dumps(r) + "\n" for r in records)
        self.trained.append(resolved.run.name)
        return last


def test_a_stopped_ablation_trains_only_what_has_no_summary(ablation, tmp_path: Path, monkeypatch, capsys) -> None:
    monkeypatch.chdir(ROOT)
    out, results = tmp_path / "runs", tmp_path / "results"
    runs = ablation.plan_runs(KUHN, ablation.select_arms(["hybrid", "outcome", "depth1"]), out, results,
                              seeds=[0, 1], steps=2)
    assert [(r.arm, r.seed) for r in runs] == [("hybrid", 0), ("outcome", 0), ("depth1", 0), ("hybrid", 1),
                                               ("outcome", 1), ("depth1", 1)]
    # outcome seed 1 was summarised before the stop; hybrid seed 1 was interrupted (no provenance.json) after it
    # had written a metrics line and a checkpoint.
    results.mkdir()
    (results / "kuhn_poker_tiny-outcome-seed1.json").write_text("{}")
    interrupted = out / "hybrid-seed1"
    (interrupted / "checkpoints" / "step_1").mkdir(parents=True)
    save_resolved(runs[3].config, interrupted)
    (interrupted / "metrics.jsonl").write_text(json.dumps({"step": 0, "eval/return_vs_random": 9.0}) + "\n")

    trainer = FakeTrainer()
    ablation.run_ablation(KUHN, runs, trainer)
    # depth1 is the Kuhn config as it is: it is summarised from hybrid's run, never trained.
    assert trainer.trained == ["hybrid-seed0", "outcome-seed0", "hybrid-seed1"]
    printed = capsys.readouterr().out
    assert "outcome seed 1: skipped" in printed and "hybrid-seed1: interrupted" in printed
    assert "depth1 seed 0: finished already in" in printed

    hybrid = load_summary(results / "kuhn_poker_tiny-hybrid-seed1.json")
    assert hybrid.arm == "hybrid" and hybrid.section == "ablation" and hybrid.seed == 1 and hybrid.steps == 2
    assert hybrid.command == (f"strat train {KUHN} schedule.steps=2 algorithm.advantage_mode=hybrid run.seed=1"
                              f" run.name=hybrid-seed1 run.output_dir={out}")
    # From the fresh run's metrics only (the interrupted run's return of 9.0 was deleted with it).
    assert hybrid.before.return_vs["random"].value == -0.1
    assert hybrid.after.return_vs["random"].value == pytest.approx(0.1)
    assert hybrid.after.exploitability is not None and hybrid.after.exploitability.low == 0.25
    assert hybrid.after.format_validity == 1.0 and hybrid.tokens_per_step == 200.0
    depth1 = load_summary(results / "kuhn_poker_tiny-depth1-seed1.json")
    assert depth1.arm == "depth1" and depth1.command == hybrid.command
    assert (results / "kuhn_poker_tiny-outcome-seed1.json").read_text() == "{}"

    again = FakeTrainer()
    ablation.run_ablation(KUHN, runs, again)
    assert again.trained == [] and capsys.readouterr().out.count(": skipped, summarised in") == 6


def test_a_run_stopped_short_gets_no_provenance_and_no_summary(ablation, tmp_path: Path, monkeypatch) -> None:
    monkeypatch.chdir(ROOT)
    (run,) = ablation.plan_runs(KUHN, ablation.select_arms(["outcome"]), tmp_path / "runs", tmp_path / "results",
                                seeds=[0], steps=3)
    with pytest.raises(RunAborted, match="stopped at step 2 of 3"):
        ablation.run_ablation(KUHN, [run], FakeTrainer(stop_at=2))
    assert not (run.config.run_dir / "provenance.json").exists() and not run.summary.exists()


def test_a_finished_run_of_another_config_is_not_reused(ablation, tmp_path: Path, monkeypatch) -> None:
    monkeypatch.chdir(ROOT)
    plan = ablation.plan_runs(KUHN, ablation.select_arms(["outcome"]), tmp_path / "runs", tmp_path / "results",
                              seeds=[0], steps=2)
    ablation.run_ablation(KUHN, plan, FakeTrainer())
    plan[0].summary.unlink()
    (longer,) = ablation.plan_runs(KUHN, ablation.select_arms(["outcome"]), tmp_path / "runs", tmp_path / "results",
                                   seeds=[0], steps=3)
    with pytest.raises(UserError, match="a finished run of another config"):
        ablation.run_ablation(KUHN, [longer], FakeTrainer())
