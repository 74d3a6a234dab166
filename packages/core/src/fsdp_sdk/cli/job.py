"""``fsdp-sdk job``: render, submit and follow training jobs on Kubernetes; follow local runs.

``status``, ``logs``, ``stop``, ``wait`` and ``list`` go through the job runner (:mod:`fsdp_sdk.runner`): the
local one for the local backend's runs, the Kubernetes one for cluster jobs (:func:`_runner` picks).

Exit codes of ``job wait`` and ``job submit --wait``: 0 the job succeeded, 1 it failed,
3 it was still running when ``--timeout`` passed (2 is a usage or configuration error,
as everywhere).
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any, TypeVar

import click

from fsdp_sdk.cli.application import Application
from fsdp_sdk.cli.code_options import code_options
from fsdp_sdk.cli.options import (
    common_options,
    complete_run_names,
    json_option,
    kube_options,
    nodes_option,
    setting,
    trainer_args_argument,
    workers_option,
)

if TYPE_CHECKING:
    from fsdp_sdk.runner import JobRunner, RunStatus

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
    return click.argument("name", required=False, metavar="[NAME]", shell_complete=complete_run_names)(function)


def _timeout_option(default: float | None) -> Callable[[F], F]:
    return click.option(
        "--timeout",
        type=click.FloatRange(min=0),
        default=default,
        show_default=default is not None,
        help="Seconds to wait for the job to end (exit 3 when it is still running then).",
    )


@click.group(short_help="Render, submit and follow training jobs (status, logs, stop, wait, list: local runs too).")
def job() -> None:
    """Render, submit and follow PyTorch FSDP training jobs (Kubeflow PyTorchJob or TrainJob).

    NAME defaults to job.name. The cluster comes from --kubeconfig, the backend's
    kubeconfig, $KUBECONFIG, or ~/.kube/config, in that order. Requests the API server
    fails for a moment (5xx, 429, dropped connections) are retried with backoff.

    On the local backend, status, logs, stop, wait and list are about local runs
    (NAME is a run id; default: the latest run).
    """


def _render_options(function: F) -> F:
    options = [
        _api_option,
        nodes_option(),
        workers_option,
        click.option("--rdzv-id", metavar="ID", help="Rendezvous id (elasticPolicy.rdzvId); default: a fresh one."),
        click.option(
            "--create-secret/--no-create-secret",
            default=None,
            help="Also create the Hugging Face token Secret (default: when job.hf_token is set).",
        ),
    ]
    for option in reversed(options):
        function = option(function)
    return trainer_args_argument(code_options(function))


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
    "(--validate names the ones the SDK renders for); with or without --validate, a field a plugin's render hook "
    "set that this CRD would prune is a warning naming the plugin. Repeatable.",
)
@click.option(
    "--k8s-version",
    default=None,
    help="Kubernetes version of the OpenAPI used by --validate (default: cluster.kubernetes_version).",
)
@click.option(
    "--fresh-id",
    is_flag=True,
    help="A fresh random rendezvous id, as each submission gets (default: one derived from the configuration, "
    "the same on every call for the same input).",
)
@click.pass_obj
def render(
    app: Application,
    rdzv_id: str | None,
    create_secret: bool | None,
    validate: bool,
    crds: tuple[str, ...],
    k8s_version: str | None,
    fresh_id: bool,
) -> None:
    """Print the objects 'job submit' would apply, as multi-document YAML; nothing is sent anywhere.

    The rendezvous id (and so the output) is the same on every call for the
    same configuration unless --rdzv-id or --fresh-id says otherwise.

    Trainer options go after '--', as for 'run' (fsdp-sdk job render -- --train.steps 20).

    The Hugging Face token never appears: the job references the Secret, and the
    Secret is printed without its data. Without job.registry the image gets a
    placeholder registry (and a warning); 'job submit' needs the real one.
    """
    from fsdp_sdk.cli.output import to_yaml_documents

    if validate:
        from fsdp_sdk.k8s.validate import require_validation

        require_validation()
    schemas = []
    if crds:
        from fsdp_sdk.k8s.validate import load_crd_schema

        schemas = [load_crd_schema(c) for c in crds]
    with _render_warnings():
        objects = app.client.render_job(
            rdzv_id=rdzv_id, create_secret=create_secret, preview=True, fresh_id=fresh_id, crds=schemas
        )
    click.echo(to_yaml_documents(objects), nl=False)
    if validate:
        _report_validation(objects, crds, k8s_version or app.client.config.cluster.kubernetes_version)


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


def _runner(app: Application, name: str | None) -> JobRunner:
    """The runner a job command is about (:meth:`fsdp_sdk.workflows.jobs.JobWorkflow.runner_for`): the local
    backend's when it runs jobs itself and no kubeconfig reaches a cluster or NAME is a local run; else the
    Kubernetes job layer's."""
    return app.client.job_workflow.runner_for(name)


def _say_status(status: RunStatus) -> None:
    line = f"{status.label}: {status.phase}"
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
        **({"queue": jobs.last_queue} if getattr(jobs, "last_queue", None) else {}),
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
    runner = app.client.job_workflow.cluster_runner()
    try:
        if follow_logs:
            result = jobs.follow(
                ref, on_output=click.echo, timeout=timeout, on_change=lambda s: _say_status(runner.run_status(s))
            )
            status = runner.run_status(result.status)
            if result.log_error:
                click.echo(f"warning: {result.log_error}", err=True)
        else:
            status = runner.wait_for(ref.name, timeout=timeout, on_change=_say_status)
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


def _exit_for(status: RunStatus, timeout: float | None, exit_timeout: int) -> None:
    if not status.finished:
        click.echo(f"timed out after {timeout:g}s: {status.name} is still {status.phase}", err=True)
        raise click.exceptions.Exit(exit_timeout)
    if not status.succeeded:
        raise click.exceptions.Exit(1)


def _print_status(status: RunStatus) -> None:
    from fsdp_sdk.cli.output import key_values

    data = status.to_dict()
    if status.backend == "local":  # times as a person reads them (--json keeps the raw values)
        from fsdp_sdk.cli.run_display import readable_times

        data = readable_times(data)
    if isinstance(data.get("replicas"), dict):  # a cluster job's per-replica counts on one line each
        data["replicas"] = {k: ", ".join(f"{n} {c}" for n, c in v.items()) for k, v in data["replicas"].items()}
    click.echo(key_values(data))


@job.command(short_help="Show a job's state.")
@common_options
@kube_options
@_api_option
@json_option
@_name_argument
@click.pass_obj
def status(app: Application, as_json: bool, name: str | None) -> None:
    """Show the job's phase (Created, Running, Restarting, Succeeded, Failed), replica counts, and what it has
    cost so far (its nodes x its hours x the on-demand price of a node-hour, the plan's price source).

    On the local backend NAME is a run id (default: the latest run): its state
    (Running, Succeeded, Failed, Interrupted, Lost), steps and cause of failure; a local run costs nothing.
    """
    result = _runner(app, name).status(name)
    cost = app.client.job_cost(result)
    if as_json:
        app.echo_json({**result.to_dict(), "cost": cost.to_dict()})
    else:
        _print_status(result)
        click.echo(cost.line())


@job.command("list", short_help="List the jobs in the namespace (local runs too).")
@common_options
@kube_options
@_api_option
@json_option
@click.pass_obj
def list_jobs(app: Application, as_json: bool) -> None:
    """List the jobs of the configured kind in the namespace, with what each has cost so far (its nodes x hours x
    the on-demand price of a node-hour).

    On the local backend: the local runs (oldest first), with their state and steps.
    """
    from fsdp_sdk.cli.output import table

    client = app.client
    runner = _runner(app, None)
    jobs = runner.list()
    price = client.hourly_price().usd_per_hour if jobs and runner.kind != "local" else None
    costs = [client.job_cost(j, usd_per_node_hour=price) for j in jobs]
    if as_json:
        app.echo_json([{**j.to_dict(), "cost": c.to_dict()} for j, c in zip(jobs, costs, strict=True)])
        return
    if runner.kind == "local":
        rows: list[tuple[Any, ...]] = [
            (j.name, j.phase, _steps(j.details), _started(j.details.get("started_at"))) for j in jobs
        ]
        click.echo(table(["name", "phase", "steps", "started"], rows))
        return
    rows = [
        (
            j.name,
            _queued_phase(j),
            sum(c.get("active", 0) for c in (j.details.get("replicas") or {}).values()),
            j.details.get("rdzv_id"),
            j.details.get("created"),
            cost.text(),
        )
        for j, cost in zip(jobs, costs, strict=True)
    ]
    click.echo(table(["name", "phase", "active", "rdzv id", "created", "cost"], rows))


def _queued_phase(status: RunStatus) -> str:
    """The phase, with the place in Kueue's queue of a queued job (``Queued (#2 in fsdp-sdk)``)."""
    queue = status.details.get("queue") or {}
    if status.phase == "Queued" and queue.get("position"):
        return f"Queued (#{queue['position']} in {queue.get('cluster_queue') or queue.get('queue')})"
    return status.phase


def _steps(details: Any) -> str | None:
    done, total = details.get("steps"), details.get("total_steps")
    if done is None:
        return None
    return f"{done}/{total}" if total else str(done)


def _started(when: Any) -> str | None:
    from fsdp_sdk.cli.run_display import format_started

    return format_started(when) if isinstance(when, (int, float)) else None  # as 'runs' and 'job status' write it


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
    """Print the log of the leader (the pod whose trainer printed master_addr=), or of all workers with --all.

    On the local backend NAME is a run id (default: the latest run) and the
    logs are its agents' (runs/<id>/logs/agent-<i>.log).
    """
    _runner(app, name).logs(name, follow=follow, all_workers=all_workers, out=lambda line: click.echo(line))


@job.command(short_help="Delete a job and clear its rendezvous state.")
@common_options
@kube_options
@_api_option
@click.option("--keep-rendezvous", is_flag=True, help="Leave the job's keys in etcd (cluster jobs).")
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

    On the local backend NAME is a run id (default: the latest run): a running
    run is stopped as Ctrl-C in its terminal would (its fsdp-sdk process, once
    checked to be the run's, stops every agent and records it interrupted);
    run it again, or 'fsdp-sdk run --resume NAME', to continue it.
    """
    result = _runner(app, name).stop(name, keep_rendezvous=keep_rendezvous)
    if as_json:
        app.echo_json(result.to_dict())
    else:
        click.echo(result.message)
    if result.warning:
        click.echo(f"warning: {result.warning}", err=True)


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
    On the local backend NAME is a run id (default: the latest run), waited for
    until its record leaves running (interrupted and lost runs exit 1).
    """
    from fsdp_sdk.k8s.jobs import EXIT_TIMEOUT

    if poll is not None:
        click.echo("warning: --poll is ignored: status changes come from the API's watch", err=True)
    result = _runner(app, name).wait_for(name, timeout=timeout, on_change=_say_status)
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
    help="Directory of the report (default: a local run's own directory, report/ in it; a cluster job's: "
    "<cluster.state_dir>/reports/<job>).",
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
    It also says what the run cost: a job's nodes x hours x the on-demand price of a node-hour; a local run, nothing.
    """
    import json
    from pathlib import Path

    from fsdp_sdk.reports.collect import collect_run_metrics
    from fsdp_sdk.reports.render import write_report

    metrics = collect_run_metrics(app.client, name, prometheus=prometheus, progress=app.progress)
    from fsdp_sdk.reports.render import default_report_dir

    target = Path(out) if out else default_report_dir(metrics, app.client.config.cluster.state_dir)
    files = write_report(metrics, target)
    cost = _report_cost(app, name or metrics.run)
    if as_json:
        summary = json.loads(files.summary.read_text())  # what summary.json holds: the figures and the plots' axis
        app.echo_json({"summary": summary, "files": files.to_dict(), "cost": cost.to_dict() if cost else None})
        return
    train = metrics.summary()["training"]
    tps = train["tokens_per_s_per_gpu"]
    click.echo(
        f"run {metrics.run}: {train['steps']} steps, "
        + (f"{tps:,.0f} tokens/s per GPU (whole run, after warm-up), " if tps is not None else "")
        + "final loss "
        + (f"{train['final_loss']:.4f}" if isinstance(train["final_loss"], (int, float)) else "-")
        + f"; metrics from {metrics.source}"
    )
    if cost is not None:
        click.echo(cost.line())
    click.echo(f"wrote {files.html}")


def _report_cost(app: Application, name: str | None) -> Any:
    """The run's cost for its report (:class:`fsdp_sdk.costs.JobCost`), chosen as ``collect_run_metrics`` chooses
    the run: a local run costs nothing; a Kubernetes job's is read from its status (None when it is gone)."""
    from fsdp_sdk.errors import FsdpSdkError

    client = app.client
    if client.backend.runs_jobs and not (client.config.cluster.kubeconfig or app.kubeconfig):
        from fsdp_sdk.costs import JobCost

        run = next((r for r in client.runs() if r.run_id == name), None)
        if run is None:
            return JobCost(0.0, client.config.job.num_workers, 0.0, 0.0, local=True)
        nodes = getattr(run, "nodes", client.config.job.num_workers)  # the local backend's records have it
        return JobCost(0.0, int(nodes), run.duration_s / 3600, 0.0, local=True)
    try:
        return client.job_cost(client.jobs.status(name))
    except FsdpSdkError:
        return None
