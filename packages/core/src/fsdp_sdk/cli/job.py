"""``fsdp-sdk job``: render, submit and follow training jobs on Kubernetes.

Exit codes of ``job wait`` and ``job submit --wait``: 0 the job succeeded, 1 it failed,
3 it was still running when ``--timeout`` passed (2 is a usage or configuration error,
as everywhere).
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from typing import Any, TypeVar

import click

from fsdp_sdk.cli.application import Application
from fsdp_sdk.cli.options import (
    common_options,
    complete_run_names,
    json_option,
    kube_options,
    setting,
    trainer_args_argument,
)

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


def _timeout_option(default: float | None) -> Callable[[F], F]:
    return click.option(
        "--timeout",
        type=click.FloatRange(min=0),
        default=default,
        show_default=default is not None,
        help="Seconds to wait for the job to end (exit 3 when it is still running then).",
    )


@click.group(short_help="Render, submit and follow training jobs on Kubernetes.")
def job() -> None:
    """Render, submit and follow PyTorch FSDP training jobs (Kubeflow PyTorchJob or TrainJob).

    NAME defaults to job.name. The cluster comes from --kubeconfig, the backend's
    kubeconfig, $KUBECONFIG, or ~/.kube/config, in that order. Requests the API server
    fails for a moment (5xx, 429, dropped connections) are retried with backoff.
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
    return trainer_args_argument(function)


@contextlib.contextmanager
def _render_warnings() -> Iterator[None]:
    """Print the rendering's :class:`~fsdp_sdk.k8s.render.RenderWarning` s on stderr as ``warning: ...`` lines."""
    import warnings

    from fsdp_sdk.k8s.render import RenderWarning

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", RenderWarning)
        yield  # on an error, the error alone is shown
    for warning in caught:
        if issubclass(warning.category, RenderWarning):
            click.echo(f"warning: {warning.message}", err=True)
        else:
            warnings.showwarning(warning.message, warning.category, warning.filename, warning.lineno)


@job.command(short_help="Print the job's Kubernetes objects as YAML.")
@common_options
@_render_options
@click.option(
    "--validate",
    is_flag=True,
    help="Validate the objects offline (built-in kinds and pod templates against the Kubernetes OpenAPI, "
    "custom resources against --crd); the report goes to stderr, exit 1 on a problem. Needs fsdp-sdk[validate].",
)
@click.option(
    "--crd",
    "crds",
    metavar="FILE|URL",
    multiple=True,
    help="CRD to validate custom resources with: a file, or the URL of a release's CRD "
    "(--validate names the ones the SDK renders for). Repeatable.",
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

    Trainer options go after '--', as for 'run' (fsdp-sdk job render -- --train.steps 20).

    The Hugging Face token never appears: the job references the Secret, and the
    Secret is printed without its data. Without job.registry the image gets a
    placeholder registry (and a warning); 'job submit' needs the real one.
    """
    from fsdp_sdk.cli.output import to_yaml_documents

    if validate:
        from fsdp_sdk.k8s.validate import require_validation

        require_validation()
    with _render_warnings():
        objects = app.client.render_job(rdzv_id=rdzv_id, create_secret=create_secret, preview=True)
    click.echo(to_yaml_documents(objects), nl=False)
    if validate:
        _report_validation(objects, crds, k8s_version)


def _report_validation(objects: list[dict[str, Any]], crds: tuple[str, ...], k8s_version: str) -> None:
    from fsdp_sdk.k8s.validate import CRD_URLS, validate_objects

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
            url = CRD_URLS.get(str(obj.get("kind")))
            crd = f" or pass --crd {url}" if url else " or pass --crd with its CRD"
            click.echo(
                f"not validated offline: {ref}{itself} (fsdp-sdk ships no CRD); 'fsdp-sdk job submit --dry-run' "
                f"has the cluster validate it against the CRD it runs,{crd}",
                err=True,
            )
    if not report.ok:
        raise click.exceptions.Exit(1)


def _say_status(status: Any) -> None:
    line = f"{status.kind} {status.namespace}/{status.name}: {status.phase}"
    click.echo(f"{line} ({status.message})" if status.message else line, err=True)


@job.command(short_help="Submit the job (and follow it with --wait / --logs).")
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
@click.option(
    "--replace",
    is_flag=True,
    help="Delete a job of the same name first (waiting until its pods are gone); the new one resumes from its checkpoints.",
)
@click.option("--unique", is_flag=True, help="Submit under job.name plus a fresh suffix (fsdp-k3x9p): a new job.")
@click.option(
    "--wait", "wait_", is_flag=True, help="Wait for the job to end (exit 0 succeeded, 1 failed, 3 timed out)."
)
@click.option("--logs", "follow_logs", is_flag=True, help="Print the leader's log as it is written (implies --wait).")
@_timeout_option(None)
@json_option
@click.pass_obj
def submit(
    app: Application,
    rdzv_id: str | None,
    create_secret: bool | None,
    dry_run: bool,
    force: bool,
    replace: bool,
    unique: bool,
    wait_: bool,
    follow_logs: bool,
    timeout: float | None,
    as_json: bool,
) -> None:
    """Run the preflight checks, render the job and apply it with server-side apply (field manager fsdp-sdk).
    Trainer options go after '--', as for 'run' (fsdp-sdk job submit --wait -- --train.steps 20).

    \b
    A job the estimate says will not fit in its GPUs' memory is refused (see
    'fsdp-sdk estimate'), unless --force. A job of the same name is refused unless
    --replace (stop it, submit again, resume from its checkpoints) or --unique (a
    new name). With --wait or --logs the command follows the job to its end, like
    'job wait'; Ctrl-C then leaves the job running.
    """
    from fsdp_sdk.k8s.jobs import EXIT_TIMEOUT

    with _render_warnings():
        ref = app.client.submit_job(
            run_id=rdzv_id, create_secret=create_secret, dry_run=dry_run, force=force, replace=replace, unique=unique
        )
    jobs = app.client.jobs
    kind = jobs.last_objects[0]["kind"]
    summary = {
        "name": ref.name,
        "namespace": ref.namespace,
        "kind": kind,
        "rdzv_id": ref.run_id,
        "dry_run": dry_run,
        "objects": [f"{o['kind']}/{o['metadata']['name']}" for o in jobs.last_objects],
    }
    verb = "would submit (server dry run passed)" if dry_run else "submitted"
    line = f"{verb} {kind} {ref.namespace}/{ref.name} (rdzv id {ref.run_id})"
    if dry_run or not (wait_ or follow_logs):
        if as_json:
            app.echo_json(summary)
        else:
            click.echo(line)
        return
    click.echo(line, err=True)
    try:
        if follow_logs:
            result = jobs.follow(ref, on_output=click.echo, timeout=timeout, on_change=_say_status)
            status = result.status
            if result.log_error:
                click.echo(f"warning: {result.log_error}", err=True)
        else:
            status = jobs.wait_for_completion(ref, timeout=timeout, on_change=_say_status)
    except KeyboardInterrupt:
        click.echo(
            f"\ndetached from {kind} {ref.namespace}/{ref.name}, which keeps running: "
            f"'fsdp-sdk job logs -f {ref.name}' follows it, 'fsdp-sdk job stop {ref.name}' ends it",
            err=True,
        )
        raise click.exceptions.Exit(130) from None
    if as_json:
        app.echo_json({**summary, **status.to_dict(), "timed_out": not status.finished})
    _exit_for(status, timeout, EXIT_TIMEOUT)


def _exit_for(status: Any, timeout: float | None, exit_timeout: int) -> None:
    if not status.finished:
        click.echo(f"timed out after {timeout:g}s: {status.name} is still {status.phase}", err=True)
        raise click.exceptions.Exit(exit_timeout)
    if not status.succeeded:
        raise click.exceptions.Exit(1)


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
@click.option(
    "-f",
    "--follow",
    is_flag=True,
    help="Wait for the leader if it has not started, and keep printing until the job ends "
    "(through container restarts and dropped connections).",
)
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
@_timeout_option(3600)
@click.option("--poll", type=float, hidden=True, help="Ignored: status changes come from the API's watch.")
@json_option
@_name_argument
@click.pass_obj
def wait(
    app: Application,
    timeout: float,
    poll: float | None,
    as_json: bool,
    name: str | None,
) -> None:
    """Wait until the job succeeds or fails, following its status through the API's watch.

    \b
    Exit status: 0 succeeded, 1 failed, 3 still running after --timeout seconds.
    The API server may fail meanwhile (an upgrade, throttling): the wait goes on.
    """
    from fsdp_sdk.k8s.jobs import EXIT_TIMEOUT

    if poll is not None:
        click.echo("warning: --poll is ignored: status changes come from the API's watch", err=True)
    result = app.client.jobs.wait_for_completion(name, timeout=timeout, on_change=_say_status)
    if as_json:
        app.echo_json({**result.to_dict(), "timed_out": not result.finished})
    else:
        _print_status(result)
    _exit_for(result, timeout, EXIT_TIMEOUT)


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
@click.argument("name", required=False, metavar="[NAME]", shell_complete=complete_run_names)
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
