"""``fsdp_sdk.report`` (this module: ``fsdp_sdk.step_report``): your own training code reports its steps the way the built-in trainer does.

A script run with ``fsdp-sdk run --script`` (or a function run by :meth:`fsdp_sdk.Client.train`) calls it once
per optimizer step, on every rank::

    import fsdp_sdk

    for step in range(1, steps + 1):
        loss = train_one_step()
        fsdp_sdk.report(step=step, loss=loss.item(), tokens=batch_tokens)

It imports nothing but the standard library (no torch, no click): cheap in every rank. On rank 0 (``RANK``
unset or ``0``) each call writes one line in the trainer's JSON-lines format, so the step shows wherever the
trainer's steps show (``run``'s progress display, ``fsdp-sdk runs``, ``job report``, the leader's log on a
cluster):

* one JSON object on stdout, flushed;
* the same line appended to ``$FSDP_SDK_OUTPUT_DIR/metrics.jsonl`` (the run's output directory; not written
  when the variable is unset).

The line's fields are the trainer's: ``step`` (int, required), ``loss``, ``lr``, ``grad_norm``,
``tokens`` (tokens this process consumed in the step), ``step_time_s`` (seconds since the previous
report, or since the process started), ``tokens_per_s_per_gpu`` (``tokens / step_time_s``),
``tflops_per_gpu``, ``mfu``, ``peak_mem_gib``, ``time`` (the Unix time the step was reported: ``job report``
plots the run against it); any other keyword is written as given (a number, string,
bool or null). Writing the same lines yourself (``print(json.dumps({"step": 3, "loss": 2.1}))`` on rank 0)
works as well: that is the whole format.

The first report of a process drops the lines of ``metrics.jsonl`` at or after its step: a run resumed from
a checkpoint at step 40 reports 41 onwards, and the steps the killed attempt had reported after 40 are not
counted twice.

With ``FSDP_SDK_METRICS_PORT`` set (the rendered job sets it when Prometheus scrapes the cluster), the values
are also served for Prometheus as the trainer serves them (``fsdp_trainer_step``, ``fsdp_trainer_loss``,
...; :mod:`fsdp_trainer.prometheus_export`, which the trainer image has): by rank 0, and by the first process
of every other node where the port is free.
"""

from __future__ import annotations

import atexit
import json
import math
import os
import sys
import threading
import time
from pathlib import Path
from typing import Any

__all__ = ["METRICS_FILE", "METRICS_LINGER_ENV", "METRICS_PORT_ENV", "report"]

#: The run's metrics file, in ``$FSDP_SDK_OUTPUT_DIR`` (the trainer's name for it).
METRICS_FILE = "metrics.jsonl"
#: The port of the Prometheus endpoint (unset: none).
METRICS_PORT_ENV = "FSDP_SDK_METRICS_PORT"
#: Seconds the endpoint waits at exit for a scrape of the last step (the trainer's ``prometheus_linger_s``).
METRICS_LINGER_ENV = "FSDP_SDK_METRICS_LINGER_S"
_OUTPUT_DIR_ENV = "FSDP_SDK_OUTPUT_DIR"
_lock = threading.Lock()
_last_time: float | None = None
_trimmed = False
#: Set by :mod:`fsdp_sdk.code_entry`, which appends the printed lines to ``metrics.jsonl`` itself.
FILE_WRITTEN_BY_ENTRY = False
_exporter: Any = None
_exporter_tried = False
_started = time.monotonic()


def _number(name: str, value: Any) -> float | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        try:
            value = float(value)  # a 0-d tensor, a numpy scalar
        except (TypeError, ValueError):
            raise TypeError(f"fsdp_sdk.report: {name} must be a number, got {type(value).__name__}") from None
    value = float(value)
    return value if math.isfinite(value) else None


def _rank() -> int:
    try:
        return int(os.environ.get("RANK", "0"))
    except ValueError:
        return 0


def trim(path: Path, step: int) -> None:
    """Drop the lines of ``path`` at or after ``step`` (a resumed run reports them again)."""
    try:
        lines = path.read_text(encoding="utf-8", errors="replace").splitlines()
    except OSError:
        return
    kept = []
    for line in lines:
        try:
            record = json.loads(line)
        except ValueError:
            continue  # a line cut short by a kill
        if isinstance(record, dict) and isinstance(record.get("step"), int) and record["step"] < step:
            kept.append(line)
    tmp = path.with_name(f"{path.name}.tmp-{os.getpid()}")
    tmp.write_text("".join(line + "\n" for line in kept), encoding="utf-8")
    os.replace(tmp, path)


def _serve(record: dict[str, Any]) -> None:
    """Hand the record to the Prometheus endpoint (started on first use when ``FSDP_SDK_METRICS_PORT`` is set)."""
    global _exporter, _exporter_tried
    if not _exporter_tried:
        _exporter_tried = True
        port = os.environ.get(METRICS_PORT_ENV)
        if port and (_rank() == 0 or os.environ.get("LOCAL_RANK", "0") == "0"):
            try:
                from fsdp_trainer.prometheus_export import PrometheusExporter
            except ImportError:
                print(
                    f"fsdp_sdk.report: {METRICS_PORT_ENV} is set but fsdp-trainer[prometheus] is not installed",
                    file=sys.stderr,
                    flush=True,
                )
            else:
                info = {
                    "rank": str(_rank()),
                    "world_size": os.environ.get("WORLD_SIZE", "1"),
                    "leader": "true" if _rank() == 0 else "false",
                    "device": "",
                    "gpu": "",
                }
                try:
                    _exporter = PrometheusExporter(int(port), info)
                    try:
                        linger = float(os.environ.get(METRICS_LINGER_ENV) or 0)
                    except ValueError:
                        linger = 0.0
                    atexit.register(_exporter.close, linger)  # the last step is scraped before the process ends
                except (OSError, ValueError) as error:
                    if _rank() == 0:
                        print(
                            f"fsdp_sdk.report: cannot serve metrics on port {port} ({error})",
                            file=sys.stderr,
                            flush=True,
                        )
    if _exporter is not None:
        _exporter.observe(record)


def report(
    step: int,
    *,
    loss: float | None = None,
    tokens: int | None = None,
    lr: float | None = None,
    grad_norm: float | None = None,
    step_time_s: float | None = None,
    **metrics: Any,
) -> dict[str, Any] | None:
    """Report one finished optimizer step (call it on every rank; rank 0 writes it).

    :param step: the step number, counting from 1.
    :param loss: the step's loss.
    :param tokens: tokens this process consumed in the step (gives ``tokens_per_s_per_gpu``).
    :param lr: the learning rate.
    :param grad_norm: the gradient norm.
    :param step_time_s: the step's seconds (default: since the previous report, or since the process started).
    :param metrics: more fields, written as given (``mfu=0.4``, ``peak_mem_gib=12.5``, ``phase="eval"``).
    :returns: the record written (rank 0), or ``None`` on the other ranks.
    :raises TypeError: ``step`` is not an int, or a named number is not a number.
    """
    global _last_time, _trimmed
    if isinstance(step, bool) or not isinstance(step, int):
        raise TypeError(f"fsdp_sdk.report: step must be an int, got {type(step).__name__}")
    now = time.monotonic()
    with _lock:
        elapsed = step_time_s if step_time_s is not None else now - (_last_time if _last_time is not None else _started)
        _last_time = now
        record: dict[str, Any] = {"step": step, "loss": _number("loss", loss)}
        if lr is not None:
            record["lr"] = _number("lr", lr)
        if grad_norm is not None:
            record["grad_norm"] = _number("grad_norm", grad_norm)
        seconds = _number("step_time_s", elapsed)
        record["step_time_s"] = seconds
        if tokens is not None:
            count = int(_number("tokens", tokens) or 0)
            record["tokens"] = count
            record["tokens_per_s_per_gpu"] = count / seconds if seconds else 0.0
        for name, value in metrics.items():
            record[name] = value if value is None or isinstance(value, (str, bool)) else _number(name, value)
        record.setdefault("time", round(time.time(), 3))  # when the step ended: job report's plots place it by it
        _serve(record)
        if _rank() != 0:
            return None
        line = json.dumps(record)
        output = os.environ.get(_OUTPUT_DIR_ENV)
        if output and not FILE_WRITTEN_BY_ENTRY:
            path = Path(output) / METRICS_FILE
            path.parent.mkdir(parents=True, exist_ok=True)
            if not _trimmed:
                _trimmed = True
                trim(path, step)
            with open(path, "a", encoding="utf-8") as f:
                f.write(line + "\n")
        print(line, flush=True)
        return record
