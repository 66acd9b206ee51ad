"""No secret of the submitting shell in a submitted job: `strat submit --follow` of a one-step run with HF_TOKEN,
RAY_AUTH_TOKEN and WANDB_API_KEY set to marker values, on a Ray head started by the test. The job's runtime_env,
the command's output, the run directory and the head's session logs hold none of them."""

import os
from pathlib import Path

import pytest
import typer

from strat import cli
from strat.cli.cluster import submit_command

REPO = Path(__file__).resolve().parents[2]
ONE_STEP = [
    "warm_start.enabled=false", "engine.backend=hf", "schedule.steps=1", "algorithm.groups_per_step=1",
    "algorithm.group_size=2", "reasoning.max_new_tokens=16", "schedule.eval_every=0", "run.name=secrets",
]


@pytest.mark.slow
def test_a_submitted_job_carries_no_secret(ray_head, tmp_path, monkeypatch, capsys, secret_markers) -> None:
    from ray.job_submission import JobSubmissionClient

    from strat.model import tiny as tiny_model

    tiny_model.ensure("kuhn_poker")
    app = typer.Typer(pretty_exceptions_enable=False, add_completion=False)
    app.command("submit")(submit_command)
    monkeypatch.setattr(cli, "app", app)
    monkeypatch.setenv("RAY_AUTH_MODE", "disabled")  # the test's head runs without auth; the token stays unsent
    try:
        code = cli.main([
            "submit", str(REPO / "configs" / "kuhn_poker_tiny.yaml"), *ONE_STEP, f"run.output_dir={tmp_path}",
            "--address", ray_head.address, "--follow", "--env", f"STRAT_CACHE_DIR={os.environ['STRAT_CACHE_DIR']}",
        ])
    finally:
        # Ray caches the auth mode in the process: drop `disabled` so later local clusters start clean.
        monkeypatch.undo()
        from ray._private.authentication_test_utils import reset_auth_token_state

        reset_auth_token_state()
    printed = capsys.readouterr()
    assert code == 0, printed.out[-3000:]
    (job,) = JobSubmissionClient(ray_head.address).list_jobs()
    assert job.status == "SUCCEEDED" and (tmp_path / "secrets" / "metrics.jsonl").is_file()
    assert job.runtime_env["env_vars"]["STRAT_CACHE_DIR"] == os.environ["STRAT_CACHE_DIR"]
    logs = list(ray_head.temp_dir.glob("session_*/logs/job-driver-*.log"))
    assert logs, f"no job driver log under {ray_head.temp_dir}"
    files = secret_markers.files_under
    found = secret_markers.leaks([
        ("runtime_env", repr(job.runtime_env).encode()), ("entrypoint", job.entrypoint.encode()),
        ("stdout", printed.out.encode()), ("stderr", printed.err.encode()),
        *files(tmp_path), *files(ray_head.temp_dir),
    ])
    assert not found, found
