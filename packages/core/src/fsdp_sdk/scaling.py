"""Weak-scaling sweeps: the same job at several node counts, measured, beside the estimate.

Every point runs the configured job with the same per-GPU batch on a different number of nodes: on a cluster
backend the GPU node group is scaled first (:meth:`fsdp_sdk.Client.scale`), then the job is submitted, followed
to its end and its trainer summary read; on the local backend each point runs that many simulated nodes. Results
go to the sweep's directory after every point, each file replaced atomically::

    <out>/scaling.json   # the sweep's settings and one record per point (measured and estimated)
    <out>/scaling.csv    # the same points as a table
    <out>/scaling.png    # throughput and efficiency against nodes, the estimate beside the measurement

Running the same sweep again into the same directory continues where it stopped: points already recorded are
kept (failed ones too, unless ``retry_failed``). A point that fails is recorded with its error; the sweep goes on.
Efficiency is tokens/s per GPU against the smallest node count measured.
"""

from __future__ import annotations

import csv
import io
import json
import os
import time
import uuid
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from fsdp_sdk.config import Setting
from fsdp_sdk.config.resolution import resolve
from fsdp_sdk.errors import BackendError, ConfigError, FsdpSdkError
from fsdp_sdk.files import write_atomic

if TYPE_CHECKING:
    from fsdp_sdk.client import Client
    from fsdp_sdk.config import Config

__all__ = ["CSV_COLUMNS", "LOCAL_ESTIMATE_NOTE", "ScalingSweep", "parse_node_counts", "point_estimate", "run_sweep"]

RESULTS_JSON, RESULTS_CSV, CHART = "scaling.json", "scaling.csv", "scaling.png"
#: Columns of ``scaling.csv``; ``scaling.json`` holds the same per point, and more.
CSV_COLUMNS = (
    "nodes",
    "gpus",
    "status",
    "tokens_per_s",
    "tokens_per_s_per_gpu",
    "mfu",
    "step_time_s",
    "peak_mem_gib",
    "efficiency",
    "estimated_tokens_per_s",
    "estimated_tokens_per_s_per_gpu",
    "estimated_step_time_s",
    "estimated_peak_gib",
    "estimated_efficiency",
    "run_id",
    "error",
)
_FORMAT = 1


def parse_node_counts(text: str | Iterable[int]) -> list[int]:
    """``1,2,4,8`` (or integers) as sorted distinct node counts.

    :raises ConfigError: not a list of positive whole numbers.
    """
    items = [str(i) for i in text] if not isinstance(text, str) else [p for p in text.replace(" ", "").split(",") if p]
    counts = []
    for item in items:
        if not item.isdigit() or int(item) < 1:
            raise ConfigError("--nodes", f"{item!r} is not a node count", "give node counts of 1 or more, like 1,2,4,8")
        counts.append(int(item))
    if not counts:
        raise ConfigError("--nodes", "no node counts given", "give node counts like 1,2,4,8")
    return sorted(set(counts))


@dataclass
class ScalingSweep:
    """A sweep's directory, its settings and its points (one dict per node count, JSON-ready)."""

    out: Path
    settings: dict[str, Any]
    points: list[dict[str, Any]] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    """What the last :meth:`write` could not do (the chart without matplotlib)."""

    @property
    def json_path(self) -> Path:
        """``<out>/scaling.json``."""
        return self.out / RESULTS_JSON

    @property
    def csv_path(self) -> Path:
        """``<out>/scaling.csv``."""
        return self.out / RESULTS_CSV

    @property
    def chart_path(self) -> Path:
        """``<out>/scaling.png``."""
        return self.out / CHART

    @classmethod
    def open(cls, out: Path, settings: dict[str, Any], *, restart: bool = False) -> ScalingSweep:
        """The sweep in ``out``: the one recorded there (to continue), or a new one.

        :raises ConfigError: ``out`` holds a sweep of other settings (and not ``restart``), or an unreadable one.
        """
        sweep = cls(out, settings)
        if restart or not sweep.json_path.exists():
            return sweep
        try:
            recorded = json.loads(sweep.json_path.read_text())
            points, before = list(recorded["points"]), recorded["settings"]
        except (OSError, ValueError, KeyError, TypeError) as exc:
            raise ConfigError(
                "--out", f"{sweep.json_path} is not a sweep's record ({exc})", "use another --out, or --restart"
            ) from None
        if before != settings:
            changed = sorted(k for k in {*before, *settings} if before.get(k) != settings.get(k))
            raise ConfigError(
                "--out",
                f"{out} holds a sweep of other settings ({', '.join(changed)} differ)",
                "use another --out to keep both, or --restart to discard the recorded points",
            )
        sweep.points = points
        return sweep

    def point(self, nodes: int) -> dict[str, Any] | None:
        """The record of ``nodes``, if any."""
        return next((p for p in self.points if p["nodes"] == nodes), None)

    def record(self, point: dict[str, Any]) -> None:
        """Add or replace the point of its node count, recompute efficiencies, and write every file."""
        self.points = sorted(
            [p for p in self.points if p["nodes"] != point["nodes"]] + [point], key=lambda p: p["nodes"]
        )
        self._efficiencies()
        self.write()

    def _efficiencies(self) -> None:
        measured = [p for p in self.points if p["status"] == "ok" and p.get("tokens_per_s_per_gpu")]
        estimated = [p for p in self.points if p.get("estimated_tokens_per_s_per_gpu")]
        base = measured[0]["tokens_per_s_per_gpu"] if measured else None
        base_est = estimated[0]["estimated_tokens_per_s_per_gpu"] if estimated else None
        for p in self.points:
            ok = p["status"] == "ok" and base and p.get("tokens_per_s_per_gpu")
            p["efficiency"] = p["tokens_per_s_per_gpu"] / base if ok else None
            est = p.get("estimated_tokens_per_s_per_gpu")
            p["estimated_efficiency"] = est / base_est if est and base_est else None

    def to_dict(self) -> dict[str, Any]:
        """What ``scaling.json`` holds."""
        return {"format": _FORMAT, "settings": self.settings, "points": self.points}

    def write(self, chart: bool = True) -> list[str]:
        """Write ``scaling.json``, ``scaling.csv`` and (with matplotlib) ``scaling.png``; returns warnings."""
        self.out.mkdir(parents=True, exist_ok=True)
        write_atomic(self.json_path, (json.dumps(self.to_dict(), indent=1, default=str) + "\n").encode())
        buffer = io.StringIO()
        writer = csv.DictWriter(buffer, fieldnames=CSV_COLUMNS, extrasaction="ignore", lineterminator="\n")
        writer.writeheader()
        for p in self.points:
            writer.writerow({k: ("" if p.get(k) is None else p.get(k)) for k in CSV_COLUMNS})
        write_atomic(self.csv_path, buffer.getvalue().encode())
        self.warnings = []
        if chart:
            from fsdp_sdk.scaling_chart import write_chart

            self.warnings = write_chart(self, self.chart_path)
        return self.warnings


#: Why a point of a sweep on a backend that runs jobs on this machine has no estimate.
LOCAL_ESTIMATE_NOTE = (
    "not estimated: the run is measured on this machine, and the estimate models {instance_type} nodes"
)


def _sweep_settings(config: Config, client: Client) -> dict[str, Any]:
    """What makes two sweeps comparable: backend, instance type, GPUs per node, trainer settings."""
    trainer = json.loads(json.dumps(config.trainer, default=str))
    trainer.get("train", {}).pop("output_dir", None)
    return {
        "backend": config.cluster.backend,
        "instance_type": config.cluster.instance_type,
        "gpus_per_node": config.job.nproc_per_node or (1 if client.backend.runs_jobs else config.job.gpu_per_worker),
        "trainer": trainer,
    }


def _measured(summary: Mapping[str, Any], tokens_per_gpu_step: int) -> dict[str, Any]:
    per_gpu = summary.get("tokens_per_s_per_gpu")
    world = summary.get("world_size")
    return {
        "tokens_per_s": per_gpu * world if per_gpu and world else None,
        "tokens_per_s_per_gpu": per_gpu,
        "mfu": summary.get("mfu"),
        "step_time_s": tokens_per_gpu_step / per_gpu if per_gpu else None,
        "peak_mem_gib": summary.get("peak_mem_gib"),
        "final_loss": summary.get("final_loss"),
        "world_size": world,
    }


def point_estimate(client: Client, gpus_per_node: int) -> dict[str, Any]:
    """The estimate recorded beside a measured point: the ``estimated_*`` figures for ``cluster.instance_type``
    nodes, or only ``estimate_error`` saying why there is none. A backend that runs jobs on this machine (local)
    gets none: its measurement is of this machine, not of the instance type the estimate models."""
    if client.backend.runs_jobs:
        return {"estimate_error": LOCAL_ESTIMATE_NOTE.format(instance_type=client.config.cluster.instance_type)}
    try:
        est = client.estimate(gpus_per_node=gpus_per_node, scaling=False)
    except ConfigError as exc:  # no trainer here, a Hub-only model, settings the model cannot take
        return {"estimate_error": str(exc)}
    sp = est.speed
    return {
        "estimated_tokens_per_s": sp.tokens_per_s if sp else None,
        "estimated_tokens_per_s_per_gpu": sp.tokens_per_s_per_gpu if sp else None,
        "estimated_step_time_s": sp.step_s if sp else None,
        "estimated_mfu": sp.mfu if sp else None,
        "estimated_peak_gib": round(est.memory.peak_gib, 3),
        "estimated_fits": est.memory.fits,
        "estimate_basis": est.instance_type,
    }


def run_sweep(
    client: Client,
    nodes: Sequence[int],
    out: str | os.PathLike[str],
    *,
    trainer_overrides: Mapping[str, Any] | None = None,
    trainer_args: Sequence[str] = (),
    restart: bool = False,
    retry_failed: bool = False,
    force: bool = False,
    on_output: Callable[[str], None] | None = None,
) -> ScalingSweep:
    """Measure the configured job at each node count in ``nodes`` (weak scaling), writing ``out`` after each point.

    :param client: the client whose configuration and backend the sweep runs on.
    :param nodes: node counts (any order; measured smallest first).
    :param out: the sweep's directory; a sweep of the same settings recorded there is continued.
    :param trainer_overrides: trainer settings by dotted name on top of the configuration's.
    :param trainer_args: trainer options as on its command line.
    :param restart: discard the points recorded in ``out``.
    :param retry_failed: run the recorded failed points again.
    :param force: run points the estimate says will not fit.
    :param on_output: receives each line of each run's leader output.
    :raises ConfigError: bad node counts, ``--auto`` (it would change the per-GPU batch between points), or ``out``
        holds a sweep of other settings.
    :raises BackendError: a cluster backend whose cluster is not up.
    """
    from fsdp_sdk.client import Client
    from fsdp_sdk.config import parse_trainer_args

    counts = parse_node_counts(nodes)
    settings = [
        Setting(k if k.startswith("trainer.") else f"trainer.{k}", v, k, "bench scale")
        for k, v in (trainer_overrides or {}).items()
    ]
    settings += parse_trainer_args(trainer_args)
    config = resolve(client.config.with_overrides(settings), client.loaded_plugins) if settings else client.config
    auto = (config.trainer.get("auto") or {}).get("enabled")
    if str(auto).lower() in ("true", "1", "yes", "on"):
        raise ConfigError(
            "trainer.auto.enabled",
            "--auto picks the micro-batch per point, so the per-GPU batch would change between node counts",
            "set train.micro_batch_size (and ac.mode) instead; 'fsdp-sdk estimate --auto' shows what --auto picks",
        )
    sweep = ScalingSweep.open(Path(out), _sweep_settings(config, client), restart=restart)
    progress = client.progress
    if not client.backend.runs_jobs and client.status().state not in ("ready", "degraded"):
        raise BackendError(
            f"backend {client.backend.name!r}: cluster {config.cluster.name!r} is not up; run 'fsdp-sdk up' first"
        )
    todo = []
    for n in counts:
        done = sweep.point(n)
        if done is None or (retry_failed and done["status"] != "ok"):
            todo.append(n)
    kept = len(counts) - len(todo)
    if kept:
        progress(f"{sweep.json_path}: {kept} of {len(counts)} points already recorded; running the other {len(todo)}")
    for index, n in enumerate(todo, 1):
        point_settings = [Setting(p, n, "--nodes", "bench scale") for p in ("cluster.nodes", "job.num_workers")]
        if not client.backend.runs_jobs:  # one job per point: a finished job keeps its name until deleted
            name = f"{config.job.name[:36].rstrip('-')}-{n}n-{uuid.uuid4().hex[:5]}"
            point_settings.append(Setting("job.name", name, "job.name", "bench scale"))
        node_config = resolve(config.with_overrides(point_settings), client.loaded_plugins)
        point_client = Client(
            node_config,
            plugins=client.loaded_plugins,
            progress=progress,
            kubeconfig=None if client.backend.runs_jobs else client.kubeconfig(),
            kube_context=client.kube_context,
        )
        label = f"point {index}/{len(todo)} ({n} node{'s' if n > 1 else ''})"
        progress(f"{label}: starting")
        gpus = n * (sweep.settings["gpus_per_node"] or 1)
        record: dict[str, Any] = {"nodes": n, "gpus": gpus, "started": time.strftime("%Y-%m-%dT%H:%M:%S%z")}
        record.update(point_estimate(point_client, sweep.settings["gpus_per_node"] or 1))
        begin = time.monotonic()
        try:
            _scale(point_client, n, progress)
            result = point_client.run(force=force, on_output=on_output)
            t = result.summary.get("config", {}).get("train", {})
            tokens_per_gpu_step = int(t.get("micro_batch_size", 1)) * int(t.get("grad_accum_steps", 1))
            tokens_per_gpu_step *= int(result.summary.get("config", {}).get("data", {}).get("seq_len", 0) or 0)
            record.update(status="ok", run_id=result.run_id, **_measured(result.summary, tokens_per_gpu_step))
            if result.summary.get("world_size"):
                record["gpus"] = result.summary["world_size"]
            if not client.backend.runs_jobs:
                record["job"] = result.job.name
                _delete_job(point_client, result.job, progress)
        except FsdpSdkError as exc:
            record.update(status="failed", error=" ".join(str(exc).split()))
        record["duration_s"] = round(time.monotonic() - begin, 1)
        sweep.record(record)
        outcome = record["status"] if record["status"] == "ok" else f"failed: {record['error']}"
        progress(f"{label}: {outcome}; results in {sweep.out}")
    if not todo:
        sweep.write()
    return sweep


def _delete_job(client: Client, job: Any, progress: Callable[[str], None]) -> None:
    """Delete a measured point's finished job (its summary is recorded); a failure to delete is only reported."""
    try:
        client.runner.stop(job.name)
    except FsdpSdkError as exc:
        progress(f"could not delete job {job.name} ({exc}); delete it with 'fsdp-sdk job stop {job.name}'")


def _scale(client: Client, nodes: int, progress: Callable[[str], None]) -> None:
    """Make ``nodes`` nodes available: scale the GPU node group (locally, the simulated nodes of a running cluster)."""
    if client.backend.runs_jobs and client.status().state == "absent":
        return  # the local backend starts its cluster with the run's nodes
    current = client.status().nodes
    if current != nodes:
        progress(f"scaling the cluster from {current} to {nodes} nodes")
        client.scale(nodes)
