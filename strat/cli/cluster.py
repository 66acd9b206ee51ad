"""`strat plan`, `strat submit`, `strat jobs`: a config's placement on a cluster, and Ray Jobs.

Job errors (`JobError`) reach `strat.cli.app.main`, which prints them as one line and exits 2. Ray is imported
inside `strat.cluster.jobs` only when a job command runs, so that registering these keeps `strat --help` fast."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from strat.cluster import jobs
from strat.cluster.jobs import Extra
from strat.cluster.memory import check_fits, format_memory, memory_plan_for
from strat.cluster.placement import format_plan, parse_cluster, plan
from strat.config import ExperimentConfig

ConfigArg = Annotated[Path, typer.Argument(help="Experiment YAML file, e.g. configs/cluster/qwen2_5_1_5b_kuhn.yaml.")]
OverridesArg = Annotated[list[str] | None, typer.Argument(help="Overrides as key.sub=value.")]
AddressOpt = Annotated[
    str,
    typer.Option(envvar="RAY_API_SERVER_ADDRESS",
                 help="The cluster's Ray dashboard (Jobs API), e.g. http://127.0.0.1:8265 through a tunnel."),
]
DEFAULT_ADDRESS = "http://127.0.0.1:8265"
CLUSTER_HELP = "nodes=N,gpus_per_node=K[,cpus_per_node=C][,gpu_memory=80GiB]; with gpu_memory, refuse an actor that would not fit"


def plan_cluster(config_path: Path, overrides: list[str], resolved: ExperimentConfig, notes: tuple[str, ...],
                 cluster: str) -> str:
    """The placement and memory plan of a validated config on `cluster` as text; PlacementError when it does not fit."""
    spec = parse_cluster(cluster)
    placement = plan(resolved, spec)
    # An unresolvable model was replaced for validation: estimate (or decline) the one the config names.
    model_path = jobs.model_path_as_written(config_path, overrides) if notes else resolved.model.path
    memory = memory_plan_for(resolved, model_path, spec.gpu_memory)
    check_fits(memory)
    return format_plan(placement) + "\n\n" + format_memory(memory)


def plan_command(
    config: ConfigArg,
    overrides: OverridesArg = None,
    cluster: Annotated[str, typer.Option(help=CLUSTER_HELP)] = "nodes=1,gpus_per_node=8",
) -> None:
    """Show where every actor of a run would go on a cluster (placement groups, bundles, nodes) and the GPU memory
    each would need."""
    resolved, notes = jobs.validate(config, list(overrides or []))
    for note in notes:
        typer.echo(f"note: {note}")
    typer.echo(plan_cluster(config, list(overrides or []), resolved, notes, cluster))


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
    cluster: Annotated[str | None, typer.Option(help=f"Plan on this cluster first and refuse what would not fit: "
                                                     f"{CLUSTER_HELP}")] = None,
) -> None:
    """Submit `strat train CONFIG OVERRIDES` as a Ray job; prints the job id and the run directory."""
    if cluster is not None:
        resolved, notes = jobs.validate(config, list(overrides or []))
        typer.echo(plan_cluster(config, list(overrides or []), resolved, notes, cluster))
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
