"""The metrics of one training run, from whichever source, and the figures a report shows.

Training metrics are step records like the trainer's ``metrics.jsonl`` lines (``step``, ``loss``,
``tokens_per_s_per_gpu``, ``tflops_per_gpu``, ``mfu``, ``step_time_s``, ``peak_mem_gib``,
``grad_norm``), each with ``t``: seconds on the clock :attr:`RunMetrics.time_axis` names (a local run: the run's
running time since its start). GPU telemetry is one series per GPU and DCGM field, on the same clock.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

__all__ = ["GPU_FIELDS", "TRAINING_FIELDS", "RunMetrics"]

#: The step record fields a report uses.
TRAINING_FIELDS = (
    "step",
    "loss",
    "tokens_per_s_per_gpu",
    "tflops_per_gpu",
    "mfu",
    "step_time_s",
    "peak_mem_gib",
    "grad_norm",
)
#: Report name -> DCGM field of the GPU telemetry a report uses.
GPU_FIELDS = {
    "utilisation_pct": "DCGM_FI_DEV_GPU_UTIL",
    "memory_copy_utilisation_pct": "DCGM_FI_DEV_MEM_COPY_UTIL",
    "power_w": "DCGM_FI_DEV_POWER_USAGE",
    "temperature_c": "DCGM_FI_DEV_GPU_TEMP",
    "sm_clock_mhz": "DCGM_FI_DEV_SM_CLOCK",
    "xid": "DCGM_FI_DEV_XID_ERRORS",
}


def _mean(values: Iterable[float | None]) -> float | None:
    finite = [v for v in values if v is not None and math.isfinite(v)]
    return statistics.fmean(finite) if finite else None


@dataclass
class RunMetrics:
    """A run's metrics.

    :param run: what identifies the run (a local run id, or a job name and its run id).
    :param source: where they were read (``prometheus http://...``, ``metrics.jsonl <path>``, ``log of pod X``).
    :param records: the step records, in step order, each with ``t``.
    :param gpus: per report field of :data:`GPU_FIELDS`, per GPU (``node GPU 0``): ``(t, value)`` samples.
    :param job: the job name, when known.
    :param started: the unix time of ``t == 0``, when known (a local run: its start).
    :param warmup_steps: first steps left out of the averages, as the trainer's summary does.
    """

    run: str
    source: str
    records: list[dict[str, Any]]
    gpus: dict[str, dict[str, list[tuple[float, float]]]] = field(default_factory=dict)
    job: str | None = None
    started: float | None = None
    warmup_steps: int = 2
    duration_s: float | None = None
    """The whole run's duration as its record has it (a local run: every segment's, what ``fsdp-sdk runs`` and
    ``run`` show); without one, the span of its steps."""
    segment_duration_s: float | None = None
    """The latest segment's duration, when the run was continued (a local run's record)."""
    run_dir: Path | None = None
    """A local run's directory (where its report goes unless told otherwise)."""
    time_axis: str = "seconds since the run's first record"
    """What the records' and samples' ``t`` is (the plots' x axis says it): the run's running time since its start,
    the wall clock since the first step, Prometheus's sample times, or the sum of step times."""

    def measured(self) -> list[dict[str, Any]]:
        """The records after the warm-up steps (all of them when that leaves none), one per step."""
        by_step: dict[int, dict[str, Any]] = {}
        for record in self.records:  # a step run again after a resume counts as its last run, as in 'runs'
            by_step[int(record.get("step") or 0)] = record
        records = [by_step[s] for s in sorted(by_step)]
        return [r for r in records if r.get("step", 0) > self.warmup_steps] or records

    def summary(self) -> dict[str, Any]:
        """The report's figures: training averages over the measured steps, and GPU means."""
        measured = self.measured()
        last = self.records[-1] if self.records else {}
        mems = [r["peak_mem_gib"] for r in self.records if r.get("peak_mem_gib") is not None]
        training = {
            "steps": max((int(r.get("step") or 0) for r in self.records), default=0),
            "measured_steps": len(measured),
            "duration_s": self.duration_s
            if self.duration_s is not None
            else max((float(r["t"]) for r in self.records), default=0.0),
            "duration_of": "the whole run" if self.duration_s is not None else "the span of its steps",
            "segment_duration_s": self.segment_duration_s,
            "tokens_per_s_per_gpu": _mean([r.get("tokens_per_s_per_gpu") for r in measured]),
            "tflops_per_gpu": _mean([r.get("tflops_per_gpu") for r in measured]),
            "mfu": _mean([r.get("mfu") for r in measured]),
            "step_time_s": _mean([r.get("step_time_s") for r in measured]),
            "peak_mem_gib": max(mems) if mems else None,
            "first_loss": self.records[0].get("loss") if self.records else None,
            "final_loss": last.get("loss"),
        }
        gpu: dict[str, Any] = {"gpus": sorted({g for per in self.gpus.values() for g in per})}
        for name in ("utilisation_pct", "memory_copy_utilisation_pct", "power_w", "temperature_c", "sm_clock_mhz"):
            values = [v for series in self.gpus.get(name, {}).values() for _, v in series]
            gpu[f"mean_{name}"] = _mean(values)
        temps = [v for series in self.gpus.get("temperature_c", {}).values() for _, v in series]
        gpu["max_temperature_c"] = max(temps) if temps else None
        xids = {g: sorted({int(v) for _, v in series if v}) for g, series in self.gpus.get("xid", {}).items()}
        gpu["xid_errors"] = {g: codes for g, codes in sorted(xids.items()) if codes}
        gpu["xid_error_count"] = sum(len(codes) for codes in gpu["xid_errors"].values())
        gpu["telemetry"] = bool(gpu["gpus"])
        return {
            "run": self.run,
            "job": self.job,
            "source": self.source,
            "started": self.started,
            "training": training,
            "gpu": gpu,
        }
