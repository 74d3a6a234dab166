"""The record of each local run (``runs/<run id>/run.json``) and what ``fsdp-sdk runs`` lists.

A run's directory holds ``run.json`` (written atomically when the run starts and when it ends),
``.lock`` (held by the ``fsdp-sdk run`` process for as long as the run goes on: the kernel
releases it however that process ends) and the trainer's outputs. A record that says
``running`` while nobody holds the lock belongs to a run whose ``fsdp-sdk`` process was killed:
it is listed as ``lost``. Steps, loss and throughput come from ``summary.json`` once the run has
one, else from the last line of ``metrics.jsonl``.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import re
import time
from collections.abc import Iterator
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from fsdp_sdk.backends.local.state import atomic_write_json
from fsdp_sdk.errors import BackendError, ConfigError

__all__ = [
    "RUN_ID",
    "STATES",
    "RunLock",
    "RunRecord",
    "active_runs",
    "last_step",
    "list_runs",
    "mean_tokens_per_s",
    "read_record",
    "require_existing",
    "step_records",
    "validate_run_id",
]

#: What a run id (or name) may look like: it names a directory and appears in process arguments.
RUN_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,62}$")
#: States a run can be in.
STATES = ("running", "succeeded", "failed", "interrupted", "lost")


def validate_run_id(run_id: str, flag: str = "--name") -> str:
    """Return ``run_id`` when it can name a run.

    :raises ConfigError: it is empty, too long, or has characters other than letters, digits, ``_ . -``.
    """
    if not RUN_ID.match(run_id) or run_id in (".", ".."):
        raise ConfigError(
            flag,
            f"{run_id!r} cannot name a run",
            "use 1-63 letters, digits, '_', '.' or '-', starting with a letter or digit",
        )
    return run_id


@dataclass
class RunRecord:
    """What ``run.json`` holds about one run.

    :param run_id: the run's id (its directory name).
    :param state: ``running``, ``succeeded``, ``failed``, ``interrupted`` or ``lost``.
    :param job_name: ``job.name`` of the run.
    :param run_dir: the run's directory (logs, record).
    :param output_dir: the trainer's output directory (summary, metrics, checkpoints).
    :param nodes: simulated nodes (agents).
    :param nproc_per_node: trainer processes per agent.
    :param total_steps: ``train.steps``.
    :param started_at: Unix time of the latest start (this segment's: a continued run starts a new one).
    :param run_started_at: Unix time of the run's first start (``None`` in records of older fsdp-sdk versions).
    :param earlier_s: seconds the run's earlier segments (starts before the latest) ran, in all.
    :param segments: ``[start, end]`` Unix times of each earlier segment, oldest first (empty in records of older
        fsdp-sdk versions): what places a step's time on the run's own clock (:meth:`running_time`).
    :param ended_at: Unix time of the end, once ended.
    :param attempts: how many times the run was started (re-running it by name continues it).
    :param error: the one-line cause of a failure.
    :param restarts: why the run was launched again, each time: ``{"at", "cause", "hang"}`` (``hang``: the hung
        rank, its step, phase and silence, and the ranks that waited, when a hang was the cause).
    :param settings: what ``fsdp-sdk run --resume`` reuses: trainer settings, trainer arguments, worker counts.
    :param supervisor: the supervising ``fsdp-sdk`` process while it runs (``ProcessIdentity.to_dict()``), which
        ``fsdp-sdk job stop`` interrupts.
    :param steps: the last finished step (from the outputs).
    :param final_loss: the loss of that step.
    :param tokens_per_s: the summary's tokens/s per process, or the last step's.
    """

    run_id: str
    state: str
    job_name: str
    run_dir: str
    output_dir: str
    nodes: int
    nproc_per_node: int
    total_steps: int | None
    started_at: float
    ended_at: float | None = None
    run_started_at: float | None = None
    earlier_s: float = 0.0
    segments: list[list[float]] = field(default_factory=list)
    attempts: int = 1
    error: str | None = None
    restarts: list[dict[str, Any]] = field(default_factory=list)
    settings: dict[str, Any] = field(default_factory=dict)
    supervisor: dict[str, Any] | None = None
    steps: int | None = None
    final_loss: float | None = None
    tokens_per_s: float | None = None

    @property
    def duration_s(self) -> float:
        """Seconds of this segment: from the latest start to the end (or to now while running)."""
        return (self.ended_at or time.time()) - self.started_at

    @property
    def run_duration_s(self) -> float:
        """Seconds of the whole run: every segment's, this one's included (what ``runs``, ``job report`` and the
        summary call the run's duration)."""
        return self.earlier_s + self.duration_s

    @property
    def first_started_at(self) -> float:
        """Unix time of the run's start (its first segment's)."""
        return self.run_started_at or self.started_at

    def running_time(self, at: float) -> float:
        """Seconds the run had run by the Unix time ``at``: its earlier segments' time before ``at`` and the time
        into the segment ``at`` falls in; the time it was stopped between segments is left out, so the run's last
        moment is :attr:`run_duration_s` after its start (the clock of ``job report``'s plots)."""
        earlier = [(a, b) for a, b in self.segments if b >= a] or (
            [(self.first_started_at, self.first_started_at + self.earlier_s)] if self.earlier_s else []
        )
        ran = 0.0
        for start, end in earlier:
            if at < end:
                return ran + max(0.0, at - start)
            ran += end - start
        return self.earlier_s + max(0.0, min(at, self.ended_at or at) - self.started_at)

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready dict, with ``duration_s`` (this segment) and ``run_duration_s`` (the whole run)."""
        return {
            **asdict(self),
            "duration_s": round(self.duration_s, 1),
            "run_duration_s": round(self.run_duration_s, 1),
        }

    def save(self) -> None:
        """Write ``run.json`` atomically (without the figures read from the outputs)."""
        data = asdict(self)
        for key in ("steps", "final_loss", "tokens_per_s"):
            data.pop(key)
        atomic_write_json(Path(self.run_dir) / "run.json", data)


def read_record(run_dir: Path) -> RunRecord | None:
    """The record of the run in ``run_dir`` with its figures filled from the outputs; ``None`` without one.

    A ``running`` record whose lock nobody holds is reported ``lost``.
    """
    try:
        data = json.loads((run_dir / "run.json").read_text())
        record = RunRecord(**{k: v for k, v in data.items() if k in RunRecord.__dataclass_fields__})
    except (OSError, ValueError, TypeError):
        return None
    if record.state == "running" and not RunLock(run_dir).held_elsewhere():
        record.state = "lost"
    _fill_figures(record)
    return record


#: First steps left out of a run's mean throughput (warm-up), as the trainer's ``metrics.warmup_steps`` default and
#: ``job report`` (:class:`~fsdp_sdk.reports.run_metrics.RunMetrics`) leave them out.
WARMUP_STEPS = 2


def step_records(metrics: Path) -> list[dict[str, Any]]:
    """The per-step records of a run's ``metrics.jsonl``, one per step in step order: a step run again after a
    resume counts as its last run (the one the run's result comes from)."""
    by_step: dict[int, dict[str, Any]] = {}
    try:
        text = metrics.read_text(errors="replace")
    except OSError:
        return []
    for line in text.splitlines():
        with contextlib.suppress(ValueError):
            data = json.loads(line)
            if isinstance(data, dict) and isinstance(data.get("step"), int):
                by_step[data["step"]] = data
    return [by_step[step] for step in sorted(by_step)]


def mean_tokens_per_s(records: list[dict[str, Any]], warmup_steps: int = WARMUP_STEPS) -> float | None:
    """The run's throughput: the mean tokens/s per process over its steps after the warm-up (all of them when that
    leaves none); the one figure ``runs``, ``job report`` and the summary give as the whole run's."""
    measured = [r for r in records if int(r.get("step") or 0) > warmup_steps] or records
    values = [float(v) for r in measured if isinstance(v := r.get("tokens_per_s_per_gpu"), (int, float))]
    return sum(values) / len(values) if values else None


def _fill_figures(record: RunRecord) -> None:
    """Steps, final loss and tokens/s of the whole run: from its per-step records (every segment), else from the
    summary of a run that kept none."""
    out = Path(record.output_dir)
    records = step_records(out / "metrics.jsonl")
    if records:
        record.steps = records[-1].get("step")
        record.final_loss = records[-1].get("loss")
        record.tokens_per_s = mean_tokens_per_s(records)
        return
    try:
        summary = json.loads((out / "summary.json").read_text())
    except (OSError, ValueError):
        summary = None
    if isinstance(summary, dict) and record.state != "running":
        record.steps = summary.get("steps")
        record.final_loss = summary.get("final_loss")
        record.tokens_per_s = summary.get("tokens_per_s_per_gpu")


def last_step(record: RunRecord) -> int | None:
    """The last step the run finished, in any of its segments (the last line of its ``metrics.jsonl``)."""
    last = _last_json_line(Path(record.output_dir) / "metrics.jsonl")
    step = last.get("step") if last else None
    return step if isinstance(step, int) else record.steps


def _last_json_line(path: Path) -> dict[str, Any] | None:
    try:
        with open(path, "rb") as f:
            f.seek(0, os.SEEK_END)
            f.seek(max(0, f.tell() - 8192))
            lines = f.read().decode(errors="replace").splitlines()
    except OSError:
        return None
    for line in reversed(lines):
        with contextlib.suppress(ValueError):
            data = json.loads(line)
            if isinstance(data, dict) and "step" in data:
                return data
    return None


def list_runs(runs_dir: Path) -> list[RunRecord]:
    """Every run under ``runs_dir`` that has a record, oldest first."""
    if not runs_dir.is_dir():
        return []
    records = [r for d in runs_dir.iterdir() if d.is_dir() and (r := read_record(d)) is not None]
    return sorted(records, key=lambda r: r.started_at)


class RunLock:
    """The lock a running run holds on ``<run dir>/.lock`` for as long as its ``fsdp-sdk`` process lives.

    :param run_dir: the run's directory.
    """

    def __init__(self, run_dir: Path) -> None:
        self.path = run_dir / ".lock"
        self._fd: int | None = None

    def acquire(self, run_id: str) -> None:
        """Take the lock.

        :raises BackendError: another process runs this run now.
        """
        self.path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = self.path.read_text(errors="replace").strip() or "?"
            os.close(fd)
            raise BackendError(
                f"run {run_id} is already running (fsdp-sdk pid {holder}); wait for it to end, or stop it "
                "(Ctrl-C in its terminal), then run it again to continue it"
            ) from None
        os.ftruncate(fd, 0)
        os.pwrite(fd, str(os.getpid()).encode(), 0)
        self._fd = fd

    def release(self) -> None:
        """Release the lock (closing the descriptor)."""
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None

    def held_elsewhere(self) -> bool:
        """Whether another process holds the lock now (its run is going on)."""
        if self._fd is not None:
            return False
        try:
            fd = os.open(self.path, os.O_RDONLY)
        except OSError:
            return False
        try:
            fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
        except BlockingIOError:
            return True
        finally:
            os.close(fd)
        return False

    @contextlib.contextmanager
    def held(self, run_id: str) -> Iterator[None]:
        """Hold the lock for a block."""
        self.acquire(run_id)
        try:
            yield
        finally:
            self.release()


def active_runs(runs_dir: Path) -> list[RunRecord]:
    """Runs going on now (their ``fsdp-sdk run`` process holds their lock)."""
    return [r for r in list_runs(runs_dir) if r.state == "running"]


def require_existing(runs_dir: Path, run_id: str) -> RunRecord:
    """The record of run ``run_id``.

    :raises ConfigError: there is no such run (the message lists the latest ones).
    """
    record = read_record(runs_dir / validate_run_id(run_id, "--resume"))
    if record is None:
        latest = [r.run_id for r in list_runs(runs_dir)][-5:]
        known = ", ".join(latest) if latest else "none yet"
        raise ConfigError("--resume", f"no local run {run_id!r} in {runs_dir}", f"'fsdp-sdk runs' lists them ({known})")
    return record
