"""Finding a run's metrics for ``fsdp-sdk job report``: which source, in which order.

* A local run (``cluster.backend: local``), named by its run id (default: the latest):
  Prometheus when ``--prometheus URL`` is given, else its ``metrics.jsonl``, else the leader's
  lines in its agent logs.
* A Kubernetes job, named by its job name: Prometheus at ``--prometheus URL``; else the
  in-cluster Prometheus of the monitoring components, reached through ``kubectl port-forward``
  for the duration; else the JSON step lines of the leader's log.
"""

from __future__ import annotations

import os
import socket
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

from fsdp_sdk.errors import ConfigError, FsdpSdkError
from fsdp_sdk.reports.prometheus_api import PrometheusApi
from fsdp_sdk.reports.run_metrics import RunMetrics
from fsdp_sdk.reports.sources import from_jsonl, from_lines, from_prometheus

if TYPE_CHECKING:
    from fsdp_sdk.client import Client

__all__ = ["collect_run_metrics", "local_runs"]


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def local_runs(runs_dir: Path) -> list[str]:
    """The run ids under ``runs_dir``, the most recent first."""
    if not runs_dir.is_dir():
        return []
    runs = [p for p in runs_dir.iterdir() if p.is_dir()]
    return [p.name for p in sorted(runs, key=lambda p: p.stat().st_mtime, reverse=True)]


def _local(client: Client, name: str | None, prometheus: str | None) -> RunMetrics:
    runs_dir = Path(client.config.cluster.state_dir) / "local" / "runs"
    runs = local_runs(runs_dir)
    run_id = name or (runs[0] if runs else None)
    if run_id is None or run_id not in runs:
        known = ", ".join(runs[:5]) or "none yet (fsdp-sdk run starts one)"
        raise ConfigError("NAME", f"no local run {run_id!r} in {runs_dir}", f"recent runs: {known}")
    if prometheus:
        return from_prometheus(PrometheusApi(prometheus), run_id=run_id)
    run_dir = runs_dir / run_id
    if (run_dir / "metrics.jsonl").is_file():
        metrics = from_jsonl(run_dir / "metrics.jsonl", run=run_id, job=client.config.job.name)
    else:
        logs = sorted((run_dir / "logs").glob("*.log"))
        lines = [line for log in logs for line in log.read_text(encoding="utf-8", errors="replace").splitlines()]
        source = f"the agent logs in {run_dir / 'logs'}"
        metrics = from_lines(lines, run=run_id, source=source, job=client.config.job.name)
    from fsdp_sdk.backends.local.records import read_record

    record = read_record(run_dir)  # the run's start and duration, as 'fsdp-sdk runs' shows them
    if record is not None:
        metrics.started = record.first_started_at
        if record.ended_at is not None:
            metrics.duration_s = record.run_duration_s
            metrics.segment_duration_s = record.duration_s if record.earlier_s else None
        metrics.job = record.job_name or metrics.job
        if metrics.records and all(isinstance(r.get("time"), (int, float)) for r in metrics.records):
            for r in metrics.records:  # on the run's clock: the plots span the duration the tables give
                r["t"] = record.running_time(float(r["time"]))
            metrics.time_axis = "the run's running time since its start (time stopped between segments left out)"
    metrics.run_dir = run_dir
    return metrics


def _kubernetes(
    client: Client, name: str | None, prometheus: str | None, progress: Callable[[str], None]
) -> RunMetrics:
    job = name or client.config.job.name
    if prometheus:
        return from_prometheus(PrometheusApi(prometheus), job=job)
    try:
        monitoring = client.monitoring()
        if "prometheus" in monitoring.endpoints():
            port = _free_port()
            with monitoring.forwarded("prometheus", port):
                return from_prometheus(PrometheusApi(f"http://127.0.0.1:{port}"), job=job)
        progress("no Prometheus among the monitoring components: reading the leader's log")
    except FsdpSdkError as error:
        progress(f"Prometheus not used ({error}): reading the leader's log")
    lines: list[str] = []
    jobs = client.jobs
    jobs.logs(job, out=lines.append)
    return from_lines(lines, run=job, source=f"the leader's log of job {jobs.namespace}/{job}", job=job)


def collect_run_metrics(
    client: Client,
    name: str | None = None,
    *,
    prometheus: str | None = None,
    progress: Callable[[str], None] = lambda line: None,
) -> RunMetrics:
    """The metrics of run ``name`` (a local run id, or a Kubernetes job name) from the best source there is.

    :param prometheus: a Prometheus URL to read them from (default: ``$FSDP_SDK_PROMETHEUS_URL``).
    :raises ConfigError: no such local run.
    :raises BackendError: no source has metrics of it.
    """
    prometheus = prometheus or os.environ.get("FSDP_SDK_PROMETHEUS_URL") or None
    given_kubeconfig = client.config.cluster.kubeconfig or client.context.given_kubeconfig  # a cluster named explicitly
    if client.backend.runs_jobs and not given_kubeconfig:
        return _local(client, name, prometheus)
    return _kubernetes(client, name, prometheus, progress)
