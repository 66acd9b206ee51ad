"""`strat plan`, `strat submit`, `strat jobs`: a config's placement on a cluster, and Ray Jobs.

Job errors (`JobError`) reach `strat.cli.app.main`, which prints them as one line and exits 2. Ray is imported
inside `strat.cluster.jobs` only when a job command runs, so that registering these keeps `strat --help` fast."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from strat.cluster import jobs
from strat.cluster.jobs import Extra
from strat.cluster.placement import format_plan, parse_cluster, plan

ConfigArg = Annotated[Path, typer.Argument(help="Experiment YAML file, e.g. configs/cluster/qwen2_5_1_5b_kuhn.yaml.")]
OverridesArg = Annotated[list[str] | None, typer.Argument(help="Overrides as key.sub=value.")]
AddressOpt = Annotated[
    str,
    typer.Option(envvar="RAY_API_SERVER_ADDRESS",
                 help="The cluster's Ray dashboard (Jobs API), e.g. http://127.0.0.1:8265 through a tunnel."),
]
DEFAULT_ADDRESS = "http://127.0.0.1:8265"


def plan_command(
    config: ConfigArg,
    overrides: OverridesArg = None,
    cluster: Annotated[str, typer.Option(help="nodes=N,gpus_per_node=K[,cpus_per_node=C]")] = "nodes=1,gpus_per_node=8",
) -> None:
    """Show where every actor of a run would go on a cluster (placement groups, bundles, nodes)."""
    resolved, notes = jobs.validate(config, list(overrides or []))
    for note in notes:
        typer.echo(f"note: {note}")
    typer.echo(format_plan(plan(resolved, parse_cluster(cluster))))


def submit_command(
    config: ConfigArg,
    overrides: OverridesArg = None,
    address: AddressOpt = DEFAULT_ADDRESS,
    follow: Annotated[bool, typer.Option(help="Stream the job's logs until it ends; exit 0 only if it succeeded.")] = False,
    extra: Annotated[Extra, typer.Option(
        help="Install the project's dependencies with this extra in the job (pip; needs --working-dir), "
             "or none when the cluster's image already has Strat.")] = "none",
    image: Annotated[str | None, typer.Option(help="Run the job in this container image (holds code and dependencies).")] = None,
    working_dir: Annotated[Path | None, typer.Option(help="Upload this directory (the Strat checkout) as the job's working dir.")] = None,
    env: Annotated[list[str] | None, typer.Option(
        help="KEY=VALUE for the job, repeatable, e.g. HF_HOME=/shared/hf, VLLM_CACHE_ROOT=/shared/vllm.")] = None,
) -> None:
    """Submit `strat train CONFIG OVERRIDES` as a Ray job; prints the job id and the run directory."""
    job = jobs.submit(address, config, list(overrides or []), extra=extra, image=image,
                      working_dir=working_dir, env=jobs.parse_env(list(env or [])))
    for note in job.notes:
        typer.echo(f"note: {note}")
    typer.echo(f"job: {job.job_id}")
    typer.echo(f"run directory: {job.run_dir}")
    if not follow:
        typer.echo(f"logs: ray job logs --address {address} --follow {job.job_id}")
        return
    try:
        status = jobs.follow(address, job.job_id)
        message = jobs.job_message(address, job.job_id)
    except KeyboardInterrupt:
        typer.echo(f"\nstopped following; the job keeps running (strat jobs --stop {job.job_id} ends it)", err=True)
        raise typer.Exit(130) from None
    typer.echo(f"job {job.job_id}: {status}" + (f" ({message})" if message and status != "SUCCEEDED" else ""))
    raise typer.Exit(jobs.exit_code(status))


def jobs_command(
    address: AddressOpt = DEFAULT_ADDRESS,
    stop: Annotated[str | None, typer.Option(help="Stop the job with this id instead of listing.")] = None,
) -> None:
    """List the cluster's Ray jobs (id, status, entrypoint), or stop one with --stop ID."""
    if stop is not None:
        was_running = jobs.stop(address, stop)
        typer.echo(f"job {stop}: {'stop requested' if was_running else 'was not running'}")
        return
    rows = jobs.list_jobs(address)
    if not rows:
        typer.echo("no jobs")
        return
    width_id = max(len("id"), *(len(r.job_id) for r in rows))
    width_status = max(len("status"), *(len(r.status) for r in rows))
    typer.echo(f"{'id'.ljust(width_id)}  {'status'.ljust(width_status)}  entrypoint")
    for row in rows:
        typer.echo(f"{row.job_id.ljust(width_id)}  {row.status.ljust(width_status)}  {row.entrypoint}")
