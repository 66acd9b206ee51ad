"""Ray Jobs for Strat: submit `strat train` to a cluster, follow its logs, list and stop jobs.

Auth: Ray 2.60 clusters run with token authentication (`RAY_AUTH_MODE=token`). The token is sent as
`Authorization: Bearer <token>`, taken as Ray itself takes it: `RAY_AUTH_TOKEN`, else the file named
by `RAY_AUTH_TOKEN_PATH`, else `~/.ray/auth_token`; nothing is sent with `RAY_AUTH_MODE=disabled`.
Ray's own client sends a token only when `RAY_AUTH_MODE=token` is set in the submitting shell, so
it is passed explicitly here. The token never goes into the job's runtime_env (the dashboard shows
that) and is never printed.
"""

from __future__ import annotations

import asyncio
import os
import shlex
import sys
import time
import tomllib
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal, TextIO

import yaml

from strat.config import ExperimentConfig, parse_override
from strat.config_loading import load_config
from strat.errors import ConfigError, JobError
from strat.model import hub

if TYPE_CHECKING:
    from ray.job_submission import JobSubmissionClient

Extra = Literal["cpu", "gpu", "none"]

# The override lets the trainer's own `ray.init(runtime_env=...)` repeat env vars of the job's runtime_env (Ray
# refuses a job/driver env-var overlap otherwise). The Hub stays reachable: `--env HF_HUB_OFFLINE=1` turns it off.
DEFAULT_JOB_ENV = {"RAY_OVERRIDE_JOB_RUNTIME_ENV": "1"}
SECRET_ENV_KEYS = frozenset({"RAY_AUTH_TOKEN", "RAY_AUTH_TOKEN_PATH", "HF_TOKEN", "HUGGING_FACE_HUB_TOKEN", "WANDB_API_KEY"})
WORKING_DIR_EXCLUDES = [".git", ".venv", "runs", "models", "**/__pycache__", "*.egg-info"]



@dataclass(frozen=True)
class SubmittedJob:
    job_id: str
    entrypoint: str
    run_dir: str
    """The run directory as the job will see it (relative paths are relative to the job's working dir)."""
    notes: tuple[str, ...] = ()


@dataclass(frozen=True)
class JobRow:
    job_id: str
    status: str
    entrypoint: str
    start_time: int | None


# --- auth ------------------------------------------------------------------------------------


def auth_token() -> str | None:
    """The Ray auth token in Ray's precedence, or None (also when RAY_AUTH_MODE=disabled)."""
    if os.environ.get("RAY_AUTH_MODE", "").lower() == "disabled":
        return None
    token = os.environ.get("RAY_AUTH_TOKEN", "").strip()
    if token:
        return token
    path = os.environ.get("RAY_AUTH_TOKEN_PATH")
    if path:
        try:
            token = Path(path).expanduser().read_text().strip()
        except OSError as err:
            raise JobError(f"RAY_AUTH_TOKEN_PATH={path}: cannot read the token file ({err.strerror})") from None
        if not token:
            raise JobError(f"RAY_AUTH_TOKEN_PATH={path}: the token file is empty")
        return token
    default = Path.home() / ".ray" / "auth_token"
    try:
        return default.read_text().strip() or None
    except OSError:
        return None


def connect(address: str) -> JobSubmissionClient:
    """A Jobs API client for the dashboard at `address` (e.g. http://127.0.0.1:8265), token attached."""
    # Ray is imported here for start-up cost: `strat --help` imports this module to register the job verbs.
    from ray.job_submission import JobSubmissionClient

    token = auth_token()
    headers = {"Authorization": f"Bearer {token}"} if token else None
    try:
        return JobSubmissionClient(address, headers=headers)
    except Exception as err:  # Ray raises ConnectionError / RuntimeError / AuthenticationError here
        raise JobError(_explain(address, err, token is not None, connecting=True)) from None


def _explain(address: str, err: Exception, sent_token: bool, connecting: bool = False) -> str:
    text = str(err).strip().splitlines()[0] if str(err).strip() else type(err).__name__
    if "401" in str(err) or "403" in str(err) or "uthentication" in str(err):
        hint = ("the token was refused: check RAY_AUTH_TOKEN / RAY_AUTH_TOKEN_PATH" if sent_token else
                "the cluster needs a Ray auth token: set RAY_AUTH_TOKEN or RAY_AUTH_TOKEN_PATH "
                "(`ray get-auth-token` on the head prints it)")
        return f"Ray dashboard at {address}: {hint}"
    if connecting:
        text += " (is the dashboard reachable? e.g. through `kubectl port-forward` or an ssh tunnel)"
    return f"Ray dashboard at {address}: {text}"


# --- submission ------------------------------------------------------------------------------


def validate(config_path: Path, overrides: list[str]) -> tuple[ExperimentConfig, tuple[str, ...]]:
    """Validate the config here before anything reaches the cluster. A model directory that exists
    only on the cluster, or a Hub name this machine cannot resolve, is accepted with a note."""
    try:
        return load_config(config_path, overrides), ()
    except ConfigError as err:
        if not str(err).startswith("model.path="):
            raise
        config = load_config(config_path, [*overrides, "model.path=tiny:kuhn_poker"])
        tree_path = model_path_as_written(config_path, overrides)
        if hub.parse(tree_path) is not None:
            note = (f"model.path={tree_path!r} is not resolvable here; the job resolves it on the cluster and its "
                    "config.yaml records the revision")
            return config, (note,)
        return config, (f"model.path={tree_path!r} is not a directory here; it must exist on the cluster",)


def pinned_overrides(config: ExperimentConfig, overrides: list[str]) -> list[str]:
    """`overrides` plus the model's Hub name pinned to the commit resolved here, so the job loads that revision."""
    name = hub.parse(config.model.path)
    if name is None or not name.pinned:
        return list(overrides)
    return [*overrides, f"model.path={config.model.path}"]


def model_path_as_written(config_path: Path, overrides: list[str]) -> str:
    """`model.path` as the config file and the overrides give it, before any resolution."""
    path = (yaml.safe_load(config_path.read_text()) or {}).get("model", {}).get("path", "")
    for text in overrides:
        parts, value = parse_override(text)
        if parts == ["model", "path"]:
            path = value
    return str(path)


def entrypoint(config_arg: str, overrides: list[str]) -> str:
    """The job's shell command: `python -m strat.cli train CONFIG OVERRIDES --address auto`.

    `python -m` works both for an installed Strat and for one that travels in the working_dir (no
    console script there); `--address auto` joins the job's cluster (Ray sets RAY_ADDRESS)."""
    return shlex.join(["python", "-m", "strat.cli", "train", config_arg, *overrides, "--address", "auto"])


def _pip_requirements(working_dir: Path, extra: Extra) -> list[str]:
    project = working_dir / "pyproject.toml"
    try:
        meta = tomllib.loads(project.read_text())["project"]
    except (OSError, KeyError, tomllib.TOMLDecodeError):
        raise JobError(f"--extra {extra} reads the dependencies from {project}, which is missing or not a project") from None
    extras = meta.get("optional-dependencies", {})
    if extra not in extras:
        raise JobError(f"--extra {extra}: {project} has no such extra (allowed: {', '.join(extras) or 'none'})")
    return [*meta.get("dependencies", []), *extras[extra]]


def parse_env(items: list[str]) -> dict[str, str]:
    """`KEY=VALUE` pairs for the job's environment; secrets are refused (the dashboard shows them)."""
    env: dict[str, str] = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            raise JobError(f"--env {item!r} is not KEY=VALUE (e.g. HF_HOME=/shared/hf)")
        if key.strip() in SECRET_ENV_KEYS:
            raise JobError(f"--env {key.strip()}: secrets do not go in a job's runtime_env (the dashboard shows it); "
                           "set them on the cluster's nodes instead")
        env[key.strip()] = value
    return env


def runtime_env(extra: Extra, image: str | None, working_dir: Path | None, env: dict[str, str]) -> dict[str, Any]:
    """The job's runtime_env: environment variables plus either a container image, or the code as a
    working_dir with the project's dependencies (and the `cpu`/`gpu` extra) installed by pip."""
    result: dict[str, Any] = {"env_vars": {**DEFAULT_JOB_ENV, **env}}
    if image is not None:
        # Ray runs an image_uri job with env_vars only: the code and its dependencies are in the image.
        if working_dir is not None or extra != "none":
            raise JobError("--image carries the code and its dependencies: it excludes --working-dir and --extra")
        result["image_uri"] = image
        return result
    if working_dir is not None:
        result["working_dir"] = str(working_dir)
        result["excludes"] = list(WORKING_DIR_EXCLUDES)
    if extra != "none":
        if working_dir is None:
            raise JobError(f"--extra {extra} installs the dependencies; the Strat code must travel with --working-dir")
        result["pip"] = _pip_requirements(working_dir, extra)
    return result


def _config_argument(config_path: Path, working_dir: Path | None, image: str | None) -> str:
    """How the job names the config: relative to the uploaded working_dir, as given for an image
    (read from the image's workdir), else absolute (same machine or a shared filesystem)."""
    if image is not None:
        return str(config_path)
    if working_dir is not None:
        try:
            return str(config_path.resolve().relative_to(working_dir.resolve()))
        except ValueError:
            raise JobError(f"config {config_path} is outside --working-dir {working_dir}; the job could not read it") from None
    return str(config_path.resolve())


def submit(
    address: str,
    config_path: Path,
    overrides: list[str],
    extra: Extra = "none",
    image: str | None = None,
    working_dir: Path | None = None,
    env: dict[str, str] | None = None,
) -> SubmittedJob:
    """Validate the config locally, then submit `strat train` as a Ray job; returns its id and run dir."""
    config, notes = validate(config_path, overrides)
    if working_dir is not None and not working_dir.is_dir():
        raise JobError(f"--working-dir {working_dir}: not a directory")
    command = entrypoint(_config_argument(config_path, working_dir, image), pinned_overrides(config, overrides))
    renv = runtime_env(extra, image, working_dir, env or {})
    client = connect(address)
    try:
        job_id = client.submit_job(entrypoint=command, runtime_env=renv,
                                   metadata={"strat_run": config.run.name})
    except Exception as err:  # the SDK raises RuntimeError with the server's reply
        raise JobError(_explain(address, err, auth_token() is not None)) from None
    run_dir = str(config.run_dir)
    if not config.run_dir.is_absolute():
        notes = (*notes, f"run directory {run_dir} is relative to the job's working directory on the cluster")
    return SubmittedJob(job_id=job_id, entrypoint=command, run_dir=run_dir, notes=notes)


# --- following, listing, stopping --------------------------------------------------------------


def follow(address: str, job_id: str, out: TextIO = sys.stdout, poll_s: float = 1.0) -> str:
    """Stream the job's logs to `out` until it ends; returns its final status (e.g. SUCCEEDED)."""
    client = connect(address)

    async def stream() -> None:
        async for chunk in client.tail_job_logs(job_id):
            out.write(chunk)
            out.flush()

    try:
        asyncio.run(stream())
    except RuntimeError as err:
        # The log socket can close just before the job's status turns terminal; the status decides.
        out.write(f"[strat] log stream ended: {str(err).splitlines()[0] if str(err) else 'closed'}\n")
    return wait_terminal(client, job_id, poll_s)


def wait_terminal(client: JobSubmissionClient, job_id: str, poll_s: float = 1.0) -> str:
    while True:
        status = client.get_job_status(job_id)
        if status.is_terminal():
            return str(status)
        time.sleep(poll_s)


def exit_code(status: str) -> int:
    """0 for SUCCEEDED, 1 for FAILED, 3 for STOPPED (any other status: 1)."""
    return {"SUCCEEDED": 0, "STOPPED": 3}.get(status, 1)


def list_jobs(address: str) -> list[JobRow]:
    """Every job the cluster knows, oldest first."""
    client = connect(address)
    try:
        details = client.list_jobs()
    except Exception as err:
        raise JobError(_explain(address, err, auth_token() is not None)) from None
    rows = [JobRow(job_id=d.submission_id or d.job_id or "?", status=str(d.status), entrypoint=d.entrypoint,
                   start_time=d.start_time) for d in details]
    return sorted(rows, key=lambda row: row.start_time or 0)


def stop(address: str, job_id: str) -> bool:
    """Ask the job to stop; True if it was running."""
    client = connect(address)
    try:
        return bool(client.stop_job(job_id))
    except Exception as err:
        raise JobError(_explain(address, err, auth_token() is not None)) from None


def job_message(address: str, job_id: str) -> str:
    """The job's final message from Ray (why it failed, for example)."""
    return connect(address).get_job_info(job_id).message or ""
