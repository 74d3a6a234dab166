"""``fsdp-sdk job``: render, submit and follow training jobs on Kubernetes.

Exit codes of ``job wait``: 0 the job succeeded, 1 it failed, 3 it was still
running when ``--timeout`` passed (2 is a usage or configuration error, as everywhere).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

import click

from fsdp_sdk.cli.application import Application
from fsdp_sdk.cli.options import common_options, json_option, kube_options, setting

__all__ = ["job"]

F = TypeVar("F", bound=Callable[..., Any])


def _api_option(function: F) -> F:
    return click.option(
        "--api",
        type=click.Choice(["pytorchjob", "trainjob"]),
        expose_value=False,
        callback=setting("job.api"),
        help="Kubeflow API of the job (job.api): pytorchjob (Training Operator) or trainjob (Trainer v2).",
    )(function)


def _name_argument(function: F) -> F:
    return click.argument("name", required=False, metavar="[NAME]")(function)


@click.group(short_help="Render, submit and follow training jobs on Kubernetes.")
def job() -> None:
    """Render, submit and follow PyTorch FSDP training jobs (Kubeflow PyTorchJob or TrainJob).

    NAME defaults to job.name. The cluster comes from --kubeconfig, the backend's
    kubeconfig, $KUBECONFIG, or ~/.kube/config, in that order.
    """


def _render_options(function: F) -> F:
    options = [
        _api_option,
        click.option("--rdzv-id", metavar="ID", help="Rendezvous id (elasticPolicy.rdzvId); default: a fresh one."),
        click.option(
            "--create-secret/--no-create-secret",
            default=None,
            help="Also create the Hugging Face token Secret (default: when job.hf_token is set).",
        ),
    ]
    for option in reversed(options):
        function = option(function)
    return function


@job.command(short_help="Print the job's Kubernetes objects as YAML.")
@common_options
@_render_options
@click.option(
    "--validate",
    is_flag=True,
    help="Validate the objects offline (built-in kinds and pod templates against the Kubernetes OpenAPI, "
    "custom resources against --crd); the report goes to stderr, exit 1 on a problem.",
)
@click.option(
    "--crd",
    "crds",
    metavar="FILE",
    multiple=True,
    type=click.Path(exists=True, dir_okay=False),
    help="CRD file to validate custom resources with (e.g. kubeflow.org_pytorchjobs.yaml). Repeatable.",
)
@click.option(
    "--k8s-version", default="1.31", show_default=True, help="Kubernetes version of the OpenAPI used by --validate."
)
@click.pass_obj
def render(
    app: Application,
    rdzv_id: str | None,
    create_secret: bool | None,
    validate: bool,
    crds: tuple[str, ...],
    k8s_version: str,
) -> None:
    """Print the objects 'job submit' would apply, as multi-document YAML; nothing is sent anywhere.

    The Hugging Face token never appears: the job references the Secret, and the
    Secret is printed without its data.
    """
    from fsdp_sdk.cli.output import to_yaml_documents

    objects = app.client.render_job(rdzv_id=rdzv_id, create_secret=create_secret)
    click.echo(to_yaml_documents(objects), nl=False)
    if validate:
        from fsdp_sdk.k8s.validate import validate_objects

        report = validate_objects(objects, crd_paths=crds, version=k8s_version)
        for check in report.checks:
            if check.ok:
                click.echo(f"valid: {check.subject}, checked against {check.schema}", err=True)
            for line in check.errors:
                click.echo(f"invalid: {line} (checked against {check.schema})", err=True)
        for obj in objects:
            ref = f"{obj.get('kind')}/{(obj.get('metadata') or {}).get('name')}"
            if ref in report.skipped:
                itself = " itself" if any(c.subject.startswith(f"{ref} ") for c in report.checks) else ""
                crd = f"{str(obj.get('apiVersion', '')).split('/')[0]}_{str(obj.get('kind')).lower()}s.yaml"
                click.echo(
                    f"not validated: {ref}{itself} (no schema for its kind without its CRD; "
                    f"pass --crd {crd} to check it)",
                    err=True,
                )
        if not report.ok:
            raise click.exceptions.Exit(1)


@job.command(short_help="Submit the job.")
@common_options
@kube_options
@_render_options
@click.option(
    "--dry-run",
    "dry_run",
    is_flag=True,
    help="Server-side dry run (dryRun=All): the API server validates, stores nothing.",
)
@click.option("--force", is_flag=True, help="Submit even when the estimate says the job will not fit in GPU memory.")
@json_option
@click.pass_obj
def submit(
    app: Application,
    rdzv_id: str | None,
    create_secret: bool | None,
    dry_run: bool,
    force: bool,
    as_json: bool,
) -> None:
    """Run the preflight checks, render the job and apply it with server-side apply (field manager fsdp-sdk).

    A job the estimate says will not fit in its GPUs' memory is refused (see 'fsdp-sdk estimate'), unless --force.
    """
    ref = app.client.submit_job(run_id=rdzv_id, create_secret=create_secret, dry_run=dry_run, force=force)
    jobs = app.client.jobs
    kind = jobs.last_objects[0]["kind"]
    if as_json:
        app.echo_json(
            {
                "name": ref.name,
                "namespace": ref.namespace,
                "kind": kind,
                "rdzv_id": ref.run_id,
                "dry_run": dry_run,
                "objects": [f"{o['kind']}/{o['metadata']['name']}" for o in jobs.last_objects],
            }
        )
        return
    verb = "would submit (server dry run passed)" if dry_run else "submitted"
    click.echo(f"{verb} {kind} {ref.namespace}/{ref.name} (rdzv id {ref.run_id})")


def _print_status(status: Any) -> None:
    from fsdp_sdk.cli.output import key_values

    data = status.to_dict()
    data["replicas"] = {k: ", ".join(f"{n} {c}" for n, c in v.items()) for k, v in status.replicas.items()}
    click.echo(key_values(data))


@job.command(short_help="Show a job's state.")
@common_options
@kube_options
@_api_option
@json_option
@_name_argument
@click.pass_obj
def status(app: Application, as_json: bool, name: str | None) -> None:
    """Show the job's phase (Created, Running, Restarting, Succeeded, Failed) and replica counts."""
    result = app.client.jobs.status(name)
    if as_json:
        app.echo_json(result.to_dict())
    else:
        _print_status(result)


@job.command("list", short_help="List the jobs in the namespace.")
@common_options
@kube_options
@_api_option
@json_option
@click.pass_obj
def list_jobs(app: Application, as_json: bool) -> None:
    """List the jobs of the configured kind in the namespace."""
    from fsdp_sdk.cli.output import table

    jobs = app.client.jobs.list()
    if as_json:
        app.echo_json([j.to_dict() for j in jobs])
        return
    rows = [(j.name, j.phase, sum(c.get("active", 0) for c in j.replicas.values()), j.rdzv_id, j.created) for j in jobs]
    click.echo(table(["name", "phase", "active", "rdzv id", "created"], rows))


@job.command(short_help="Print the leader's log (or every worker's).")
@common_options
@kube_options
@_api_option
@click.option("-f", "--follow", is_flag=True, help="Keep printing as the log grows, until the containers end.")
@click.option("--all", "all_workers", is_flag=True, help="Every worker, each line prefixed with [pod-name].")
@_name_argument
@click.pass_obj
def logs(
    app: Application,
    follow: bool,
    all_workers: bool,
    name: str | None,
) -> None:
    """Print the log of the leader (the pod whose trainer printed master_addr=), or of all workers with --all."""
    app.client.jobs.logs(name, follow=follow, all_workers=all_workers, out=lambda line: click.echo(line))


@job.command(short_help="Delete a job and clear its rendezvous state.")
@common_options
@kube_options
@_api_option
@click.option("--keep-rendezvous", is_flag=True, help="Leave the job's keys in etcd.")
@json_option
@_name_argument
@click.pass_obj
def stop(
    app: Application,
    keep_rendezvous: bool,
    as_json: bool,
    name: str | None,
) -> None:
    """Delete the job (its pods go in the background) and delete its rendezvous keys in etcd.

    etcd is reached through the API server's service proxy, so the next run
    starts clean without deleting the etcd pod.
    """
    jobs = app.client.jobs
    name = name or jobs.config.job.name
    result = jobs.stop(name, clear_rendezvous=not keep_rendezvous)
    if as_json:
        app.echo_json(
            {
                "name": name,
                "deleted": result.deleted,
                "rendezvous_keys": result.rendezvous_keys,
                "rendezvous_error": result.rendezvous_error,
            }
        )
    elif not result.deleted:
        click.echo(f"job {jobs.namespace}/{name} does not exist; nothing to stop")
    else:
        click.echo(f"deleted job {jobs.namespace}/{name}; cleared {len(result.rendezvous_keys)} rendezvous key(s)")
    if result.rendezvous_error:
        click.echo(f"warning: the rendezvous keys were not cleared: {result.rendezvous_error}", err=True)


@job.command(short_help="Wait for a job to end (exit 0 succeeded, 1 failed, 3 timed out).")
@common_options
@kube_options
@_api_option
@click.option("--timeout", type=click.FloatRange(min=0), default=3600, show_default=True, help="Seconds to wait.")
@click.option("--poll", type=click.FloatRange(min=0.05), default=10, show_default=True, help="Seconds between checks.")
@json_option
@_name_argument
@click.pass_obj
def wait(
    app: Application,
    timeout: float,
    poll: float,
    as_json: bool,
    name: str | None,
) -> None:
    """Wait until the job succeeds or fails.

    \b
    Exit status: 0 succeeded, 1 failed, 3 still running after --timeout seconds.
    """
    from fsdp_sdk.k8s.jobs import EXIT_TIMEOUT

    def changed(status: Any) -> None:
        click.echo(f"{status.name}: {status.phase}", err=True)

    result = app.client.jobs.wait_for_completion(name, timeout=timeout, poll=poll, on_change=changed)
    if as_json:
        app.echo_json({**result.to_dict(), "timed_out": not result.finished})
    else:
        _print_status(result)
    if not result.finished:
        click.echo(f"timed out after {timeout:g}s: {result.name} is still {result.phase}", err=True)
        raise click.exceptions.Exit(EXIT_TIMEOUT)
    if not result.succeeded:
        raise click.exceptions.Exit(1)


@job.command(short_help="Write a run's report: HTML page and PNG plots of throughput, MFU, loss, GPUs.")
@common_options
@kube_options
@click.option(
    "--prometheus",
    metavar="URL",
    envvar="FSDP_SDK_PROMETHEUS_URL",
    show_envvar=True,
    help="Prometheus to read the metrics from (default: the cluster's monitoring Prometheus through "
    "kubectl port-forward; for local runs: none).",
)
@click.option(
    "-o",
    "--out",
    metavar="DIR",
    type=click.Path(file_okay=False),
    help="Directory of the report (default: ./fsdp-report-<run>).",
)
@json_option
@click.argument("name", required=False, metavar="[NAME]")
@click.pass_obj
def report(app: Application, prometheus: str | None, out: str | None, as_json: bool, name: str | None) -> None:
    """Read a run's metrics and write report.html (self-contained), throughput.png, mfu.png, loss.png,
    gpu_utilisation.png and summary.json: the averages over the steps after the warm-up, the final loss,
    and the GPUs' mean utilisation, power, temperature and XID errors.

    \b
    NAME is a job name (Kubernetes; default job.name) or, on the local backend, a run id (default: the
    latest run). The metrics come from Prometheus when there is one (the trainer's endpoint and the DCGM
    exporter), else from the trainer's per-step JSON (metrics.jsonl of a local run, the leader's log).
    """
    from pathlib import Path

    from fsdp_sdk.reports.collect import collect_run_metrics
    from fsdp_sdk.reports.render import write_report

    metrics = collect_run_metrics(app.client, name, prometheus=prometheus, progress=app.progress)
    target = Path(out) if out else Path(f"fsdp-report-{metrics.run}")
    files = write_report(metrics, target)
    if as_json:
        app.echo_json({"summary": metrics.summary(), "files": files.to_dict()})
        return
    train = metrics.summary()["training"]
    tps = train["tokens_per_s_per_gpu"]
    click.echo(
        f"run {metrics.run}: {train['steps']} steps, "
        + (f"{tps:,.1f} tokens/s per GPU, " if tps is not None else "")
        + f"final loss {train['final_loss']}; metrics from {metrics.source}"
    )
    click.echo(f"wrote {files.html}")
