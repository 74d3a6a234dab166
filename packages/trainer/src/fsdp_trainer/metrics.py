"""Per-step metrics (JSON lines) and the end-of-run summary.

Each step the leader prints one JSON object on stdout and appends it to
``metrics.file``: ``step, loss, lr, grad_norm, tokens_per_s_per_gpu,
tflops_per_gpu, mfu, peak_mem_gib, step_time_s, tokens, time``. ``time`` is the Unix time the
line is written (on GPUs up to a step after the step's end, see below): ``fsdp-sdk job report``
places the step on the run's clock by it. Throughput is per process
("per GPU"; on CPU, per process). ``mfu`` is a fraction (0.42 = 42 %) of
``metrics.peak_tflops`` or the GPU's looked-up peak, and null when neither is
known (CPU). ``peak_mem_gib`` is CUDA's peak allocated memory in the step, null on
CPU. ``step_time_s`` is the wall time on the device from the previous step's end
(CUDA events; ``perf_counter`` on CPU). On GPUs a step's line is written once the
next step is queued (the trainer does not stop the host at each step), at the
latest at a checkpoint and at the end. The summary averages over steps after
``metrics.warmup_steps``, leaving out steps traced by ``metrics.profile_steps`` (their
records carry ``"profiled": true``).
"""

from __future__ import annotations

import json
import os
import platform
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

from .flops import peak_tflops


def device_name(device: torch.device) -> str:
    """GPU model name, or the CPU's."""
    if device.type == "cuda":
        return torch.cuda.get_device_name(device)
    return platform.processor() or platform.machine() or "cpu"


def _step_of(line: str) -> int | None:
    """The step of one metrics line; None for a line that does not parse (a run killed mid-write leaves a truncated last line)."""
    try:
        record = json.loads(line)
    except ValueError:
        return None
    step = record.get("step") if isinstance(record, dict) else None
    return step if isinstance(step, int) else None


class Metrics:
    """Collects step records on every rank; only the leader writes them."""

    def __init__(
        self,
        file: str | None,
        is_leader: bool,
        log_every: int,
        flops_per_token: int,
        device: torch.device,
        peak: float | None,
        fp8: bool,
    ):
        self.is_leader, self.log_every, self.flops_per_token, self.device = (
            is_leader,
            log_every,
            flops_per_token,
            device,
        )
        self.name = device_name(device)
        self.peak = peak if peak is not None else (peak_tflops(self.name, fp8) if device.type == "cuda" else None)
        self.records: list[dict[str, Any]] = []
        self.path = Path(file) if is_leader and file else None
        self._file: Any = None
        #: Called with every step's record on every rank (the Prometheus endpoint, ``prometheus_export``).
        self.sinks: list[Callable[[dict[str, Any]], None]] = []
        #: Called by :meth:`close`.
        self.on_close: list[Callable[[], None]] = []
        self.resumed_step = 0
        self.last_kept: dict[str, Any] | None = None  # the last record before a resume (leader only)

    def open(self, start_step: int) -> None:
        """Start the metrics file: keep the records up to ``start_step`` (a resume), drop any later ones."""
        self.resumed_step = start_step
        if self.path is None:
            return
        self.path.parent.mkdir(parents=True, exist_ok=True)
        kept = []
        if start_step and self.path.is_file():
            kept = [
                line
                for line in self.path.read_text(encoding="utf-8", errors="replace").splitlines()
                if _step_of(line) is not None and _step_of(line) <= start_step
            ]
        # Rewrite through a temporary file and a rename: a kill here leaves the old file or the new one, never half of one.
        tmp = self.path.with_name(self.path.name + f".tmp-{os.getpid()}")
        with open(tmp, "w", encoding="utf-8") as f:
            f.write("".join(line + "\n" for line in kept))
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, self.path)
        self.last_kept = json.loads(kept[-1]) if kept else None
        self._file = open(self.path, "a", encoding="utf-8")  # noqa: SIM115 - open for the run; close() closes it

    def start_step(self) -> None:
        if self.device.type == "cuda":
            torch.cuda.reset_peak_memory_stats(self.device)

    def peak_mem_gib(self) -> float | None:
        """CUDA's peak allocated memory since ``start_step`` (the caching allocator counts on the host: no sync); None on CPU."""
        return torch.cuda.max_memory_allocated(self.device) / 2**30 if self.device.type == "cuda" else None

    def end_step(
        self,
        step: int,
        loss: float,
        lr: float,
        grad_norm: float,
        tokens: int,
        step_time: float,
        peak_mem_gib: float | None = None,
        profiled: bool = False,
    ) -> dict[str, Any]:
        """Record one optimizer step; ``tokens`` is what this process consumed in it, ``peak_mem_gib`` its peak (default: now).

        ``profiled``: the step ran under the profiler (marked ``"profiled": true``, left out of the summary's averages).
        """
        tps = tokens / step_time if step_time > 0 else 0.0
        tflops = self.flops_per_token * tps / 1e12
        record = {
            "step": step,
            "loss": loss,
            "lr": lr,
            "grad_norm": grad_norm,
            "tokens_per_s_per_gpu": tps,
            "tflops_per_gpu": tflops,
            "mfu": tflops / self.peak if self.peak else None,
            "peak_mem_gib": peak_mem_gib if peak_mem_gib is not None else self.peak_mem_gib(),
            "step_time_s": step_time,
            "tokens": tokens,
            "time": round(time.time(), 3),
        }
        if profiled:
            record["profiled"] = True
        self.records.append(record)
        for sink in self.sinks:
            sink(record)
        if self.is_leader:
            line = json.dumps(record)
            if self._file:
                self._file.write(line + "\n")
                self._file.flush()
            if step % self.log_every == 0:
                print(line, flush=True)
        return record

    def summary(self, warmup_steps: int, **extra: Any) -> dict[str, Any]:
        """Averages over the steps after ``warmup_steps``, profiled steps left out (all steps when that leaves none)."""
        measured = [r for r in self.records[warmup_steps:] if not r.get("profiled")] or self.records
        seconds = sum(r["step_time_s"] for r in measured)
        tps = sum(r["tokens"] for r in measured) / seconds if seconds > 0 else 0.0
        tflops = self.flops_per_token * tps / 1e12
        mems = [r["peak_mem_gib"] for r in self.records if r["peak_mem_gib"] is not None]
        # Nothing ran (a finished run relaunched): report where the run stands, from before the resume.
        last = self.records[-1] if self.records else self.last_kept
        return {
            "steps": self.records[-1]["step"] if self.records else self.resumed_step,
            "steps_run": len(self.records),
            "measured_steps": len(measured),
            "tokens_per_s_per_gpu": tps,
            "tflops_per_gpu": tflops,
            "mfu": tflops / self.peak if self.peak else None,
            "peak_tflops": self.peak,
            "peak_mem_gib": max(mems) if mems else None,
            "final_loss": last["loss"] if last else None,
            "flops_per_token": self.flops_per_token,
            "device": self.device.type,
            "gpu_name": self.name if self.device.type == "cuda" else None,
            "torch_version": torch.__version__,
            "python_version": sys.version.split()[0],
            **extra,
        }

    def close(self) -> None:
        if self._file:
            self._file.close()
            self._file = None
        while self.on_close:
            self.on_close.pop(0)()
