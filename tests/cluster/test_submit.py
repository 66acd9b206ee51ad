"""`strat submit --follow` of a 3-step tiny run on a Ray head started by the test, then `strat jobs`; a job that
fails; placement bundles. The first job also checks that no secret of the submitting shell reaches the job."""

import json
from pathlib import Path

import pytest
import typer

from strat import cli
from strat.cli.cluster import jobs_command, plan_command, submit_command

REPO = Path(__file__).resolve().parents[2]
TINY_OVERRIDES = [
    "warm_start.enabled=false", "engine.backend=hf", "schedule.steps=3", "algorithm.groups_per_step=1",
    "algorithm.group_size=2", "reasoning.max_new_tokens=16", "schedule.eval_every=0",
]


@pytest.fixture
def strat_main(monkeypatch: pytest.MonkeyPatch):
    """`strat.cli.main` with the cluster verbs registered as the lead registers them."""
    app = typer.Typer(pretty_exceptions_enable=False, add_completion=False)
    app.command("plan")(plan_command)
    app.command("submit")(submit_command)
    app.command("jobs")(jobs_command)
    monkeypatch.setattr(cli, "app", app)
    return cli.main


@pytest.mark.slow
def test_submit_follow_runs_a_tiny_job_that_carries_no_secret(
    ray_head, strat_main, tmp_path, monkeypatch, capsys, secret_markers
) -> None:
    """The job succeeds and writes its run, `strat jobs` lists it; and with HF_TOKEN, RAY_AUTH_TOKEN and
    WANDB_API_KEY set to marker values in the submitting shell, the job's runtime_env, the command's output, the run
    directory and the head's session logs hold none of them (the first job on the module's head: its logs are this
    job's alone)."""
    import os

    from ray.job_submission import JobSubmissionClient

    from strat.model import tiny as tiny_model

    tiny_model.ensure("kuhn_poker")  # built here once, so that the job only loads it
    monkeypatch.setenv("RAY_AUTH_MODE", "disabled")  # the test's head runs without auth; the token stays unsent
    out_dir = tmp_path / "runs"
    try:
        code = strat_main([
            "submit", str(REPO / "configs" / "kuhn_poker_tiny.yaml"), *TINY_OVERRIDES, f"run.output_dir={out_dir}",
            "--address", ray_head.address, "--follow", "--env", f"STRAT_CACHE_DIR={os.environ['STRAT_CACHE_DIR']}",
        ])
        printed = capsys.readouterr()
        assert code == 0, printed.out[-3000:]
        assert f"run directory: {out_dir / 'kuhn_poker_tiny'}" in printed.out
        assert "SUCCEEDED" in printed.out
        lines = (out_dir / "kuhn_poker_tiny" / "metrics.jsonl").read_text().splitlines()
        assert [json.loads(line)["step"] for line in lines] == [1, 2, 3]

        assert strat_main(["jobs", "--address", ray_head.address]) == 0
        listing = capsys.readouterr().out
        assert "SUCCEEDED" in listing and "strat.cli train" in listing
    finally:
        # Ray caches the auth mode in the process: drop `disabled` so later local clusters start clean.
        monkeypatch.undo()
        from ray._private.authentication_test_utils import reset_auth_token_state

        reset_auth_token_state()

    (job,) = JobSubmissionClient(ray_head.address).list_jobs()
    assert job.runtime_env["env_vars"]["STRAT_CACHE_DIR"] == os.environ["STRAT_CACHE_DIR"]
    assert list(ray_head.temp_dir.glob("session_*/logs/job-driver-*.log")), f"no job driver log in {ray_head.temp_dir}"
    files = secret_markers.files_under
    found = secret_markers.leaks([
        ("runtime_env", repr(job.runtime_env).encode()), ("entrypoint", job.entrypoint.encode()),
        ("stdout", printed.out.encode()), ("stderr", printed.err.encode()), ("jobs", listing.encode()),
        *files(tmp_path), *files(ray_head.temp_dir),
    ])
    assert not found, found


@pytest.mark.slow
def test_submit_follow_exits_1_when_the_job_fails(ray_head, strat_main, tmp_path, monkeypatch, capsys) -> None:
    """A run that stops with an error at run time (a non-finite update, injected, with no skip allowed) is a FAILED
    job, and `strat submit --follow` says so with exit status 1."""
    import os

    from strat.model import tiny as tiny_model

    tiny_model.ensure("kuhn_poker")
    monkeypatch.setenv("RAY_AUTH_MODE", "disabled")
    code = strat_main([
        "submit", str(REPO / "configs" / "kuhn_poker_tiny.yaml"), *TINY_OVERRIDES, f"run.output_dir={tmp_path}",
        "schedule.max_nonfinite_updates=1", "--address", ray_head.address, "--follow",
        "--env", f"STRAT_CACHE_DIR={os.environ['STRAT_CACHE_DIR']}", "--env", "STRAT_INJECT_FAULTS=nonfinite:1",
    ])
    printed = capsys.readouterr().out
    assert code == 1, printed[-3000:]
    assert ": FAILED" in printed


@pytest.mark.slow
def test_reserve_places_actors_in_their_bundles(ray_head, monkeypatch) -> None:
    import ray

    from strat.cluster.placement import cluster_from_ray, plan, reserve
    from strat.config import ExperimentConfig

    monkeypatch.setenv("RAY_AUTH_MODE", "disabled")
    ray.init(address=ray_head.gcs_address, logging_level="ERROR", log_to_driver=False)
    try:
        config = ExperimentConfig.model_validate({"resources": {"rollout_workers": 2, "cpus_per_worker": 0.25}})
        placement = reserve(plan(config, cluster_from_ray(ray.nodes())), timeout_s=60)

        @ray.remote(num_cpus=0.25)
        def where() -> str:
            return ray.get_runtime_context().get_placement_group_id()

        strategy = placement.strategy("rollout_worker", 1)
        assert strategy.placement_group_bundle_index == 1
        assert ray.get(where.options(scheduling_strategy=strategy).remote()) == placement.groups["rollout_workers"].id.hex()
        placement.remove()
        assert placement.groups == {}
    finally:
        ray.shutdown()
        # Ray caches the auth mode in the process: drop `disabled` so later local clusters start clean.
        monkeypatch.undo()
        from ray._private.authentication_test_utils import reset_auth_token_state

        reset_auth_token_state()
