"""Where a run's metrics come from: Prometheus, the trainer's ``metrics.jsonl``, or its log lines.

* :func:`from_prometheus`: the trainer's series (``fsdp_trainer_*``, selected by the ``run_id`` or
  ``fsdp_job`` target label the scrape configuration adds) and the DCGM exporter's series of the
  job's pods (``pod=~"<job>-.+"``), as raw samples with their scrape timestamps. Of several pods
  serving the trainer's metrics, the leader's (``fsdp_trainer_info{leader="true"}``) is used;
* :func:`from_jsonl`: a local run's ``metrics.jsonl`` (every step; time from the steps' ``time`` stamps, or the
  sum of step times for lines without them);
* :func:`from_lines`: the JSON step lines of the leader's log (Kubernetes jobs without Prometheus).
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from fsdp_sdk.dcgm_names import host_of, names_of
from fsdp_sdk.errors import BackendError, ConfigError
from fsdp_sdk.reports.prometheus_api import PrometheusApi, Series
from fsdp_sdk.reports.run_metrics import GPU_FIELDS, RunMetrics

__all__ = ["TRAINER_METRICS", "from_jsonl", "from_lines", "from_prometheus"]

#: Step record field -> (the trainer's Prometheus metric, factor from the metric's unit to the record's).
TRAINER_METRICS: dict[str, tuple[str, float]] = {
    "step": ("fsdp_trainer_step", 1.0),
    "loss": ("fsdp_trainer_loss", 1.0),
    "grad_norm": ("fsdp_trainer_grad_norm", 1.0),
    "tokens_per_s_per_gpu": ("fsdp_trainer_tokens_per_second_per_gpu", 1.0),
    "tflops_per_gpu": ("fsdp_trainer_tflops_per_gpu", 1.0),
    "mfu": ("fsdp_trainer_mfu_ratio", 1.0),
    "step_time_s": ("fsdp_trainer_step_time_seconds", 1.0),
    "peak_mem_gib": ("fsdp_trainer_peak_memory_bytes", 1.0 / 2**30),
}
_LOOKBACK_S = 30 * 86400


#: What ``t`` is, by the records' origin (:attr:`RunMetrics.time_axis`).
WALL_CLOCK = "wall-clock time since the first step began"
STEP_TIME_SUM = "sum of step times (the lines carry no time)"


def _timed(records: list[dict[str, Any]]) -> tuple[list[dict[str, Any]], str]:
    """Records with ``t`` (the end of each step, in seconds from the start of the first one) and what ``t`` is.

    Where every record has the trainer's ``time`` (the Unix time the step ended), ``t`` is the wall clock, in the
    order the steps ran (a step run again after a resume shows where it ran again); for lines without it (older
    trainers, a script's own lines), the sum of the step times, each step counted once (its last run).
    """
    if records and all(isinstance(r.get("time"), (int, float)) for r in records):
        ordered = sorted(records, key=lambda r: float(r["time"]))
        origin = float(ordered[0]["time"]) - float(ordered[0].get("step_time_s") or 0.0)
        return [{**r, "t": float(r["time"]) - origin} for r in ordered], WALL_CLOCK
    by_step = {int(r.get("step") or 0): r for r in records}
    elapsed = 0.0
    out = []
    for step in sorted(by_step):
        elapsed += float(by_step[step].get("step_time_s") or 0.0)
        out.append({**by_step[step], "t": elapsed})
    return out, STEP_TIME_SUM


def from_lines(lines: Iterable[str], *, run: str, source: str, job: str | None = None) -> RunMetrics:
    """The step records among ``lines`` (JSON objects with an integer ``step``; other lines are skipped).

    :raises BackendError: there is none.
    """
    records = []
    for line in lines:
        text = line.strip()
        if not text.startswith("{"):
            continue
        try:
            record = json.loads(text)
        except ValueError:
            continue  # a line cut short by a kill
        if isinstance(record, dict) and isinstance(record.get("step"), int) and "loss" in record:
            records.append(record)
    if not records:
        raise BackendError(f"{source} has no per-step metrics of run {run} (the trainer's JSON lines)")
    timed, axis = _timed(records)
    return RunMetrics(run=run, source=source, records=timed, job=job, time_axis=axis)


def from_jsonl(path: Path, *, run: str, job: str | None = None) -> RunMetrics:
    """A run's ``metrics.jsonl``.

    :raises ConfigError: the file does not exist.
    """
    if not path.is_file():
        raise ConfigError("RUN", f"{path} does not exist", "check the run id ('fsdp-sdk job report' lists the runs)")
    return from_lines(
        path.read_text(encoding="utf-8", errors="replace").splitlines(),
        run=run,
        source=f"metrics.jsonl {path}",
        job=job,
    )


def _quote(value: str) -> str:
    return json.dumps(value)


def _by_time(series: Series | None) -> dict[float, float]:
    return dict(series.samples) if series else {}


def _pick(found: list[Series], instance: str | None) -> Series | None:
    if not found:
        return None
    return next((s for s in found if s.labels.get("instance") == instance), found[0])


def from_prometheus(
    api: PrometheusApi,
    *,
    run_id: str | None = None,
    job: str | None = None,
    lookback_s: float = _LOOKBACK_S,
    now: float | None = None,
) -> RunMetrics:
    """A run's metrics from Prometheus: by ``run_id``, or the latest run of ``job``.

    :raises BackendError: Prometheus has no trainer metrics for it, or cannot be reached.
    """
    if not run_id and not job:
        raise ConfigError("NAME", "no run id or job name given", "pass the job name or the run id")
    now = time.time() if now is None else now
    selector = f"run_id={_quote(run_id)}" if run_id else f"fsdp_job={_quote(job or '')}"
    steps = api.samples(f"fsdp_trainer_step{{{selector}}}", seconds=lookback_s, at=now)
    if not steps:
        raise BackendError(
            f"Prometheus at {api.url} has no trainer metrics for {'run ' + str(run_id) if run_id else 'job ' + str(job)} "
            f"(fsdp_trainer_step{{{selector}}}); was the job rendered with observability.enabled?"
        )
    if not run_id:  # the latest run of the job
        latest = max(steps, key=lambda s: s.samples[-1][0] if s.samples else 0.0)
        run_id = latest.labels.get("run_id")
        if run_id:
            selector += f",run_id={_quote(run_id)}"
            steps = [s for s in steps if s.labels.get("run_id") == run_id]
    leaders = api.samples(f'fsdp_trainer_info{{{selector},leader="true"}}', seconds=lookback_s, at=now)
    instance = leaders[0].labels.get("instance") if leaders else None
    step_series = _pick(steps, instance)
    assert step_series is not None
    labels = step_series.labels
    start, end = step_series.samples[0][0], step_series.samples[-1][0]
    window = end - start + 1.0
    chosen = f"{selector},instance={_quote(labels['instance'])}" if "instance" in labels else selector
    values = {
        field: (_by_time(_pick(api.samples(f"{metric}{{{chosen}}}", seconds=window, at=end), instance)), factor)
        for field, (metric, factor) in TRAINER_METRICS.items()
    }
    records = []
    for t, step in step_series.samples:
        record: dict[str, Any] = {"t": t - start, "step": int(step)}
        for field, (samples, factor) in values.items():
            if field != "step" and t in samples:
                record[field] = samples[t] * factor
        records.append(record)
    job_name = labels.get("fsdp_job") or job
    gpus: dict[str, dict[str, list[tuple[float, float]]]] = {}
    if job_name:
        pods = f"pod=~{_quote(job_name + '-.+')}"
        if labels.get("namespace"):
            pods += f",namespace={_quote(labels['namespace'])}"
        for name, metric in GPU_FIELDS.items():
            for exported, factor in names_of(metric):  # the name before dcgm-exporter 4.9 and the one after
                for series in api.samples(f"{exported}{{{pods}}}", seconds=window, at=end):
                    host = host_of(series.labels) or series.labels.get("node") or series.labels.get("instance", "?")
                    key = f"{host} GPU {series.labels.get('gpu', '?')}"
                    points = [(t - start, v * factor) for t, v in series.samples if start <= t <= end]
                    gpus.setdefault(name, {}).setdefault(key, points)
    return RunMetrics(
        run=run_id or str(job),
        source=f"prometheus {api.url}",
        records=records,
        gpus=gpus,
        job=job_name,
        started=start,
        time_axis="wall-clock time since Prometheus's first sample of the run",
    )
