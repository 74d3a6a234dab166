"""Records that describe training jobs: :class:`JobRef` (what identifies one), :class:`RunEvent` (what happens
while it runs), :class:`RunResult` (how it ended) and :class:`RecordedRun` (what a backend that keeps run records
lists)."""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

__all__ = ["JobRef", "RecordedRun", "RunEvent", "RunResult", "format_duration", "is_leader_line", "leader_line_event"]

#: The line rank 0 of the trainer (and of ``fsdp_sdk.code_entry``) prints first, ``master_addr=ADDR host=FQDN``: the
#: leader's output is found by it. torchrun's own rendezvous result (``  master_addr=ADDR`` on a line of its own, logged
#: by every agent at ``LOGLEVEL=INFO``) has no ``host=`` and is not it.
_LEADER_LINE = re.compile(r"(?:^|[\s:\]])master_addr=\S* host=")


@dataclass(frozen=True)
class JobRef:
    """What identifies a submitted or started training job.

    :param name: the job name (``job.name``, or ``<job.name>-<run id>`` locally).
    :param backend: the backend it runs on.
    :param run_id: the unique identifier of this run (the rendezvous id locally).
    :param namespace: the Kubernetes namespace; ``None`` for the local backend.
    """

    name: str
    backend: str
    run_id: str
    namespace: str | None = None

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready dict (the ``job`` of ``run --json`` and ``run --dry-run --json``)."""
        return {"name": self.name, "backend": self.backend, "run_id": self.run_id, "namespace": self.namespace}


@dataclass(frozen=True)
class RunEvent:
    """Something that happened during a run, for a progress display.

    Kinds:

    * ``phase``: what the run is doing now (``message``: "waiting for 2 agents at the rendezvous", ...);
    * ``step``: the leader finished a step (``record``: the trainer's metrics line, parsed; ``message``: the line);
    * ``output``: a line of the leader's log (``message``), without its step and summary lines;
    * ``restart``: the workers are restarted after a failure (``message`` says why and what is left);
    * ``warning``: something went wrong and was handled (etcd restarted, ...).

    :param kind: one of the kinds above.
    :param message: the line to show.
    :param record: the step's metrics (``step`` only).
    :param total_steps: the run's ``train.steps``, when known.
    """

    kind: str
    message: str = ""
    record: dict[str, Any] | None = None
    total_steps: int | None = None


def is_leader_line(line: str) -> bool:
    """Whether ``line`` is the leader's ``master_addr=... host=...`` line (under any log or torchrun prefix)."""
    return _LEADER_LINE.search(line) is not None


def leader_line_event(line: str, total_steps: int | None = None) -> RunEvent | None:
    """The event for one line of the leader's output: ``step`` for a metrics line, ``output`` otherwise, and
    ``None`` for the trainer's summary line (a run returns the summary rather than showing it)."""
    text = line.strip()
    if text.startswith("{"):
        try:
            record = json.loads(text)
        except ValueError:
            record = None
        if isinstance(record, dict) and "steps_run" in record:
            return None
        if isinstance(record, dict) and isinstance(record.get("step"), int):
            return RunEvent("step", line, record, total_steps)
    return RunEvent("output", line, None, total_steps)


@dataclass(frozen=True)
class RunResult:
    """The outcome of :meth:`fsdp_sdk.Client.run`.

    :param job: the job that ran.
    :param summary: the trainer's ``summary.json`` (empty on ``dry_run``).
    :param output_dir: where the trainer wrote its outputs, when local.
    :param log_dir: where the per-node logs are, when local.
    :param commands: the commands that were (or, on ``dry_run``, would be) started.
    :param dry_run: whether nothing was actually started.
    """

    job: JobRef
    summary: dict[str, Any]
    output_dir: Path | None = None
    log_dir: Path | None = None
    commands: tuple[tuple[str, ...], ...] = ()
    dry_run: bool = False
    extra: dict[str, Any] = field(default_factory=dict)
    plan: Any = field(default=None, repr=False, compare=False)
    """On ``dry_run``: the :class:`~fsdp_sdk.runner.DryRun` (what ``run --dry-run`` prints)."""

    @property
    def run_id(self) -> str:
        """Shortcut for ``job.run_id``."""
        return self.job.run_id

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready dict."""
        return {
            "job": self.job.to_dict(),
            "run_id": self.job.run_id,
            "summary": self.summary,
            "output_dir": str(self.output_dir) if self.output_dir else None,
            "log_dir": str(self.log_dir) if self.log_dir else None,
            "commands": [list(c) for c in self.commands],
            "dry_run": self.dry_run,
            **({"extra": self.extra} if self.extra else {}),
        }


class RecordedRun(Protocol):
    """One run that a backend keeps a record of (:meth:`fsdp_sdk.backends.base.ClusterBackend.runs`,
    :meth:`fsdp_sdk.Client.runs`): the fields ``fsdp-sdk runs`` lists.

    The local backend's :class:`~fsdp_sdk.backends.local.records.RunRecord` is one.
    """

    @property
    def run_id(self) -> str:
        """The run's id."""
        ...

    @property
    def state(self) -> str:
        """``running``, ``succeeded``, ``failed``, ``interrupted`` or ``lost``."""
        ...

    @property
    def steps(self) -> int | None:
        """The last finished step."""
        ...

    @property
    def total_steps(self) -> int | None:
        """``train.steps``."""
        ...

    @property
    def final_loss(self) -> float | None:
        """The loss of the last finished step."""
        ...

    @property
    def tokens_per_s(self) -> float | None:
        """Training throughput."""
        ...

    @property
    def duration_s(self) -> float:
        """Seconds from the latest start to the end (or to now while running)."""
        ...

    @property
    def output_dir(self) -> str:
        """The trainer's output directory."""
        ...

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready dict with at least the fields above."""
        ...


def format_duration(seconds: float | None) -> str:
    """``1:02:03`` or ``2:03``; ``-`` when unknown."""
    if seconds is None or seconds != seconds or seconds < 0:
        return "-"
    s = int(seconds + 0.5)  # half up, as a person rounds (round() would make 24.5 s 0:24 beside 24.53 s as 0:25)
    hours, rest = divmod(s, 3600)
    minutes, secs = divmod(rest, 60)
    return f"{hours}:{minutes:02d}:{secs:02d}" if hours else f"{minutes}:{secs:02d}"
