"""Job submission pieces that need no cluster: entrypoint, runtime_env, auth token, local validation."""

import shlex
from pathlib import Path

import pytest

from strat.cluster import jobs
from strat.errors import ConfigError

REPO = Path(__file__).resolve().parents[2]
TINY = REPO / "configs" / "kuhn_poker_tiny.yaml"


def test_entrypoint_runs_strat_train_on_the_jobs_cluster() -> None:
    command = jobs.entrypoint("configs/a b.yaml", ["schedule.steps=3"])
    assert shlex.split(command) == ["python", "-m", "strat.cli", "train", "configs/a b.yaml", "schedule.steps=3",
                                    "--address", "auto"]


def test_runtime_env_with_working_dir_installs_the_extra() -> None:
    env = jobs.runtime_env("gpu", None, REPO, {"HF_HOME": "/shared/hf"})
    assert env["working_dir"] == str(REPO) and ".venv" in env["excludes"]
    assert "vllm==0.32.0" in env["pip"] and "ray[default]==2.60.0" in env["pip"]
    assert env["env_vars"] == {"RAY_OVERRIDE_JOB_RUNTIME_ENV": "1", "HF_HOME": "/shared/hf"}


def test_runtime_env_with_an_image_has_only_the_image_and_env_vars() -> None:
    assert set(jobs.runtime_env("none", "registry/strat:cuda", None, {})) == {"image_uri", "env_vars"}
    with pytest.raises(jobs.JobError, match="--image"):
        jobs.runtime_env("gpu", "registry/strat:cuda", None, {})
    with pytest.raises(jobs.JobError, match="--working-dir"):
        jobs.runtime_env("gpu", None, None, {})


def test_installed_strat_needs_nothing_installed() -> None:
    assert set(jobs.runtime_env("none", None, None, {})) == {"env_vars"}


@pytest.mark.parametrize("key", ["RAY_AUTH_TOKEN", "RAY_AUTH_TOKEN_PATH", "HF_TOKEN", "HUGGING_FACE_HUB_TOKEN",
                                 "WANDB_API_KEY"])
def test_secrets_never_go_into_the_runtime_env(key: str) -> None:
    with pytest.raises(jobs.JobError, match="secrets") as refused:
        jobs.parse_env([f"{key}=marker-value-123"])
    assert "marker-value-123" not in str(refused.value)
    with pytest.raises(jobs.JobError, match="KEY=VALUE"):
        jobs.parse_env(["HF_HOME"])


def test_auth_token_follows_rays_precedence(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HOME", str(tmp_path))
    for key in ("RAY_AUTH_MODE", "RAY_AUTH_TOKEN", "RAY_AUTH_TOKEN_PATH"):
        monkeypatch.delenv(key, raising=False)
    assert jobs.auth_token() is None
    (tmp_path / ".ray").mkdir()
    (tmp_path / ".ray" / "auth_token").write_text("from-default\n")
    assert jobs.auth_token() == "from-default"
    (tmp_path / "token").write_text("from-path")
    monkeypatch.setenv("RAY_AUTH_TOKEN_PATH", str(tmp_path / "token"))
    assert jobs.auth_token() == "from-path"
    monkeypatch.setenv("RAY_AUTH_TOKEN", "from-env")
    assert jobs.auth_token() == "from-env"
    monkeypatch.setenv("RAY_AUTH_MODE", "disabled")
    assert jobs.auth_token() is None


def test_unreadable_token_path_is_one_clear_line_without_the_token(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.delenv("RAY_AUTH_MODE", raising=False)
    monkeypatch.delenv("RAY_AUTH_TOKEN", raising=False)
    monkeypatch.setenv("RAY_AUTH_TOKEN_PATH", str(tmp_path / "missing"))
    with pytest.raises(jobs.JobError, match="RAY_AUTH_TOKEN_PATH=.*cannot read"):
        jobs.auth_token()


def test_validation_accepts_a_model_that_exists_only_on_the_cluster() -> None:
    config, notes = jobs.validate(TINY, ["model.path=/models/Qwen2.5-1.5B-Instruct"])
    assert config.game.name == "kuhn_poker"
    assert notes and "/models/Qwen2.5-1.5B-Instruct" in notes[0]
    with pytest.raises(ConfigError, match="algorithm.group_size"):
        jobs.validate(TINY, ["algorithm.group_size=0"])


def test_config_outside_the_working_dir_is_refused(tmp_path: Path) -> None:
    with pytest.raises(jobs.JobError, match="outside --working-dir"):
        jobs.submit("http://127.0.0.1:1", TINY, [], working_dir=tmp_path)


def test_exit_codes() -> None:
    assert [jobs.exit_code(s) for s in ("SUCCEEDED", "FAILED", "STOPPED")] == [0, 1, 3]
