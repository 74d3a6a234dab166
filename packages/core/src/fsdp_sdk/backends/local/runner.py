""":class:`LocalRunner`: the job runner of the local backend (see :mod:`fsdp_sdk.runner`).

``dryrun`` renders the run's plan (:func:`~fsdp_sdk.backends.local.plan.render_run`); ``schedule`` brings the
local cluster up when needed, takes the run's lock, writes its record and starts the agents
(:class:`~fsdp_sdk.backends.local.supervisor.Supervisor`); ``wait`` follows them to the end in this process.
``status``, ``logs``, ``stop``, ``wait_for`` and ``list`` work from any process, by run id: they read
``runs/<id>/run.json`` and ``logs/agent-*.log`` (``wait_for`` until the record leaves ``running``); ``stop`` interrupts the run's supervising ``fsdp-sdk`` process as Ctrl-C would, after
checking it is still that process (:class:`~fsdp_sdk.processes.ProcessIdentity`: pid, creation time and
command line, recorded in ``run.json``).

A named run that has already trained every step asked for is not started again: ``dryrun`` says it is
finished, ``Client.run`` returns its recorded summary, and its record is kept.
"""

from __future__ import annotations

import builtins
import contextlib
import dataclasses
import json
import os
import signal
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from fsdp_sdk.backends.base import ProgressCallback, no_progress
from fsdp_sdk.backends.local.records import RunLock, RunRecord, list_runs, read_record, validate_run_id
from fsdp_sdk.errors import BackendError, ConfigError, RunError
from fsdp_sdk.runner import DryRun, RunHandle, RunStatus, RunStopped, job_ref_name
from fsdp_sdk.runs import JobRef, RunEvent, RunResult

if TYPE_CHECKING:
    from fsdp_sdk.backends.local.backend import LocalBackend
    from fsdp_sdk.backends.local.plan import RunPlan
    from fsdp_sdk.config import Config
    from fsdp_sdk.resolved import Resolved

__all__ = ["LocalRunner"]

#: Seconds ``stop`` waits for the run's processes to end after interrupting it.
STOP_TIMEOUT_S = 60.0
_PHASES = {"running": "Running", "succeeded": "Succeeded", "failed": "Failed", "interrupted": "Interrupted"}


class LocalRunner:
    """Runs jobs on this machine through the local backend.

    :param backend: the local backend.
    :param config: the configuration (its state directory holds the runs).
    :param progress: receives progress lines.
    """

    kind = "local"
    #: What :meth:`check_memory` estimated beside the limit (said again should the run run out of memory).
    memory_estimate: str | None = None
    #: Whether :meth:`dryrun` checks the run against this machine's memory (:meth:`admit` without ``force``).
    _check_memory = False

    def __init__(self, backend: LocalBackend, config: Config, *, progress: ProgressCallback = no_progress) -> None:
        self.backend, self.config, self.progress = backend, config, progress

    @property
    def runs_dir(self) -> Path:
        """``<state dir>/local/runs``."""
        return self.backend.state(self.config).runs_dir

    # ------------------------------------------------------------------ before

    def check_memory(self, resolved: Resolved) -> None:
        """Refuse a run the estimate says will not fit in this machine's memory (host RAM on CPU, each GPU's
        memory with GPUs); says on the progress stream when no estimate can be made.

        :raises ConfigError: it will not fit (the numbers, and ``--force``).
        """
        import copy

        from fsdp_sdk.backends.local.memory import gpu_memory_gib, host_memory
        from fsdp_sdk.backends.local.settings import LocalSettings
        from fsdp_sdk.estimate import EstimateUnavailable, estimate_job
        from fsdp_sdk.user_code import active

        config = resolved.config
        if active(config) is not None:
            return  # your own code: no model the estimate knows
        nproc = config.job.nproc_per_node or 1
        sized = copy.deepcopy(config)
        sized.job.nproc_per_node = nproc
        try:
            est = estimate_job(sized, resolved.instance, scaling=False)
        except EstimateUnavailable as exc:
            self.progress(f"memory check skipped: {exc}")
            return
        processes = config.job.num_workers * nproc
        name = est.model.name
        fix = "use a smaller model or micro batch, activation checkpointing, or run it anyway with --force"
        gpus = gpu_memory_gib()
        if gpus:
            smallest = min(gpus)
            self.memory_estimate = (
                f"the estimate: {_gib(est.memory.peak_gib)} GiB per GPU of the "
                f"{_gib(smallest * est.memory.memory_fraction)} GiB usable"
            )
            if est.memory.peak_gib > smallest * est.memory.memory_fraction:
                raise ConfigError(
                    "estimate",
                    f"{name} needs about {_gib(est.memory.peak_gib)} GiB per GPU, over the "
                    f"{_gib(smallest * est.memory.memory_fraction)} GiB usable ({est.memory.memory_fraction:.0%} of "
                    f"{_gib(smallest)} GiB, nvidia-smi)",
                    fix,
                )
            return
        settings = config.sections.get("local") or LocalSettings()
        available = host_memory(settings.memory_limit_gib)
        if available is None:
            self.progress("memory check skipped: this machine's available memory is unknown")
            return
        need = est.memory.peak_gib * processes
        self.memory_estimate = (
            f"the estimate: {_gib(est.memory.peak_gib)} GiB per process x {processes} processes = {_gib(need)} GiB "
            f"of the {_gib(available.gib)} GiB available ({available.source})"
        )
        if need > available.gib:
            raise ConfigError(
                "estimate",
                f"{name} needs about {_gib(need)} GiB of host memory ({_gib(est.memory.peak_gib)} GiB per process x "
                f"{processes} processes), over the {_gib(available.gib)} GiB available ({available.source})",
                fix,
            )

    def admit(
        self,
        resolved: Resolved,
        *,
        resume: str | None = None,
        scale: bool = False,
        dry_run: bool = False,
        force: bool = False,
    ) -> Resolved:
        """``resolved`` as it is, to be checked against this machine's memory unless ``force``
        (:meth:`check_memory`): by :meth:`dryrun`, once a named run's recorded settings are in (the model it
        continues is the one that must fit); the local cluster starts the simulated nodes a run needs, so ``scale``
        changes nothing."""
        self._check_memory = not force
        return resolved

    def dryrun(
        self,
        resolved: Resolved,
        *,
        run_id: str | None = None,
        trainer_args: Sequence[str] = (),
        resume: str | None = None,
    ) -> DryRun:
        """The run's plan on the local cluster as it is now (pure but for reading the state and choosing a c10d
        port): commands, environment, directories; or, for a named run that has finished, that it has.

        :param resume: the id of the run to continue with its recorded settings (the run's id, over ``run_id``).
        :raises ConfigError: the run id cannot name a run, or ``resume`` names no run.
        """
        from fsdp_sdk.backends.local.backend import new_run_id

        config = resolved.config
        named = run_id is not None or resume is not None
        if resume is not None:
            run_id = resume
        run_id = run_id if run_id is not None else new_run_id(config.job.name)
        validate_run_id(run_id, "--resume" if resume is not None else "--name")
        if named:  # a name used before continues that run, with the settings it was started with
            config = self.backend._resumed_config(config, run_id, required=resume is not None)
        if self._check_memory:  # admitted without --force: what runs must fit (the continued run's settings)
            self.check_memory(dataclasses.replace(resolved, config=config))
        local = self.backend.state(config)
        state, _ = local.read_or_none()
        plan = self.backend.render(config, run_id=run_id, state=state, trainer_args=trainer_args)
        job = JobRef(name=job_ref_name(config.job.name, run_id), backend=self.backend.name, run_id=run_id)
        finished = self._finished(plan)
        return DryRun(
            job=job,
            backend=self.backend.name,
            commands=plan.commands,
            notes=plan.notes,
            output_dir=plan.output_dir,
            log_dir=plan.log_dir,
            details=plan.to_dict(),
            finished=finished,
            config=config,
            plan=plan,
            trainer_args=tuple(trainer_args),
            resume=resume is not None,
            finished_duration_s=self.record(run_id).run_duration_s if finished is not None else None,  # every segment
            # the same figures as 'runs' and the end of the run gave (the whole run's throughput, not the trainer's own)
            finished_figures=_figures(plan.run_dir, self.record(run_id)) if finished is not None else {},
        )

    @staticmethod
    def _finished(plan: RunPlan) -> dict[str, Any] | None:
        """The recorded summary of run ``plan.run_id`` when it succeeded with at least the steps asked for."""
        record = read_record(plan.run_dir)
        if record is None or record.state != "succeeded":
            return None
        try:
            summary = json.loads((plan.output_dir / "summary.json").read_text())
        except (OSError, ValueError):
            return None
        done = summary.get("steps") if isinstance(summary, dict) else None
        if not isinstance(done, int) or plan.total_steps is None or done < plan.total_steps:
            return None
        return dict(summary)

    # ------------------------------------------------------------------ act

    def schedule(
        self,
        dryrun: DryRun,
        *,
        on_event: Callable[[RunEvent], None] | None = None,
        on_output: Callable[[str], None] | None = None,
    ) -> RunHandle:
        """Bring the cluster up when needed, take the run's lock, write its record and start the agents.

        :raises BackendError: the trainer is not installed, or the run is going on elsewhere.
        :raises ConfigError: the run's directories are not writable, or the cluster has too few nodes.
        """
        import importlib.util

        from fsdp_sdk.backends.local.backend import _EventRouter
        from fsdp_sdk.backends.local.continuation import unused_checkpoint_note
        from fsdp_sdk.backends.local.supervisor import Supervisor, disk_check
        from fsdp_sdk.processes import ProcessIdentity

        if dryrun.finished is not None:
            raise RunError(f"run {dryrun.run_id} has finished; nothing to start")
        config, draft = dryrun.config, dryrun.plan
        assert config is not None and draft is not None
        if draft.code is None and importlib.util.find_spec("fsdp_trainer") is None:
            raise BackendError(
                "local: the trainer is not installed (no module fsdp_trainer); pip install -e packages/trainer"
            )
        problem = disk_check([draft.run_dir, draft.output_dir, *(d for d in [draft.checkpoint_dir] if d)])
        if problem:
            raise ConfigError("train.output_dir", problem, "choose a writable directory with free space")
        backend, local, run_id = self.backend, self.backend.state(config), dryrun.run_id
        run_lock = RunLock(draft.run_dir)
        started_cluster = local.read_or_none()[0] is None
        before = read_record(draft.run_dir)
        plan = backend._register(config, local, run_id, run_lock, dryrun.trainer_args, self.progress, draft)
        unused = unused_checkpoint_note(run_id, plan.trainer, plan.run_dir, _known_locations(before, plan.run_dir))
        if unused is not None:
            self.progress(unused)
        record = backend._start_record(config, plan)
        identity = ProcessIdentity.of(os.getpid())
        record.supervisor = identity.to_dict() if identity is not None else None
        with contextlib.suppress(OSError):
            record.save()
        events = _EventRouter(on_event, on_output)
        for note in plan.notes:
            self.progress(note)
        self.progress(
            f"run {run_id}: {plan.nodes} agents x {plan.nproc_per_node} processes, {plan.rdzv_backend} rendezvous at "
            f"{plan.rdzv_endpoint}, outputs in {plan.output_dir}"
        )
        launches = [plan]

        def relaunch() -> RunPlan:
            backend._clear_keys(local, launches[-1])
            state, _ = local.read_or_none()
            launches.append(backend.render(config, run_id=run_id, state=state, trainer_args=dryrun.trainer_args))
            record.settings["rdzv_ids"] = [*record.settings.get("rdzv_ids", []), launches[-1].rdzv_id][-20:]
            record.restarts = list(run.supervisor.restart_causes)  # why: the same cause as the restart line
            with contextlib.suppress(OSError):
                record.save()
            return launches[-1]

        run = _LocalRun(config, plan, record, run_lock, started_cluster, events)
        run.supervisor = Supervisor(plan, {**os.environ, **plan.env}, events, relaunch=relaunch)
        run.supervisor.memory_estimate = self.memory_estimate
        run.guard = backend._guard(config, local, plan, events)
        try:
            if run.guard is not None:
                run.guard.start()
            run.supervisor.start()
        except BaseException:
            self._finish(run, "failed", "the agents could not be started")
            raise
        return RunHandle(dryrun.job, dryrun, state=run)

    def wait(self, handle: RunHandle) -> RunResult:
        """Follow the agents to the end in this process; the trainer's summary.

        :raises RunError: the run failed.
        :raises KeyboardInterrupt: Ctrl-C, SIGTERM or ``job stop`` (every process of the run is stopped first).
        """
        run: _LocalRun = handle.state
        outcome, error = "failed", None
        try:
            assert run.supervisor is not None
            run.supervisor.run()
            outcome = "succeeded"
        except KeyboardInterrupt:
            outcome = "interrupted"
            raise
        except RunError as exc:
            error = str(exc)
            raise
        finally:
            self._finish(run, outcome, error)
        plan = run.plan
        summary_path = plan.output_dir / "summary.json"
        try:
            summary = json.loads(summary_path.read_text())
        except (OSError, ValueError) as exc:
            run.record.state, run.record.error = "failed", f"{summary_path} is missing or invalid"
            run.record.save()
            raise RunError(
                f"run {plan.run_id}: the trainer exited successfully but {summary_path} is missing or invalid ({exc})"
            ) from exc
        return RunResult(
            handle.job,
            summary,
            plan.output_dir,
            plan.log_dir,
            plan.commands,
            extra={
                "rdzv_backend": plan.rdzv_backend,
                "endpoint": plan.rdzv_endpoint,
                "plan": plan.to_dict(),
                **_figures(plan.run_dir, run.record),
            },
        )

    def release(self, handle: RunHandle) -> None:
        """End a scheduled run this process will not follow: its processes are stopped and its record closed,
        as :meth:`wait` would have done."""
        self.stop(handle)

    def _finish(self, run: _LocalRun, outcome: str, error: str | None) -> None:
        if run.ended:
            return
        run.ended = True
        backend, local = self.backend, self.backend.state(run.config)
        if run.guard is not None:
            run.guard.stop()
        backend._clear_keys(local, run.supervisor.plan if run.supervisor is not None else run.plan)
        record = run.record
        record.state, record.ended_at, record.error = outcome, time.time(), error
        with contextlib.suppress(OSError):
            record.save()
        run.lock.release()
        if run.started_cluster and outcome != "succeeded":
            backend._stop_what_the_run_started(run.config, self.progress)

    # ------------------------------------------------------------------ by name

    def record(self, job: RunHandle | str | None = None) -> RunRecord:
        """The record of run ``job`` (a run id or its job name; default: the latest run).

        :raises ConfigError: there is no such run (the message lists the latest ones).
        """
        name = job.job.run_id if isinstance(job, RunHandle) else job
        runs = list_runs(self.runs_dir)
        if name is None:
            if not runs:
                raise ConfigError("NAME", f"no local run in {self.runs_dir} yet", "start one with 'fsdp-sdk run'")
            return runs[-1]
        for candidate in runs:
            if name in (candidate.run_id, job_ref_name(candidate.job_name, candidate.run_id)):
                return candidate
        known = ", ".join(r.run_id for r in runs[-5:]) or "none yet"
        raise ConfigError("NAME", f"no local run {name!r} in {self.runs_dir}", f"'fsdp-sdk runs' lists them ({known})")

    def saved(self, job: RunHandle | str | None = None) -> str:
        """What a stopped run has saved, in one line: ``stopped at step 27; the last checkpoint is step 20
        (s3://...): a resume continues from step 21``, or ``...; no checkpoint yet: a resume starts at step 1``.

        :raises ConfigError: there is no such run.
        """
        from fsdp_sdk.backends.local.continuation import complete_checkpoints
        from fsdp_sdk.backends.local.records import last_step

        record = self.record(job)
        step = last_step(record)
        stopped = f"stopped at step {step}" if step else "stopped before its first step"
        locations = _known_locations(record, Path(record.run_dir))
        if not locations:
            return f"{stopped}; it saves no checkpoints: a resume starts at step 1"
        steps = complete_checkpoints(locations[-1])
        if not steps:
            return f"{stopped}; no checkpoint yet: a resume starts at step 1"
        where = f"{locations[-1].rstrip('/')}/step_{steps[-1]:08d}"
        return f"{stopped}; the last checkpoint is step {steps[-1]} ({where}): a resume continues from step {steps[-1] + 1}"

    def status(self, job: RunHandle | str | None = None) -> RunStatus:
        """The run's state from its record (``Lost``: its ``fsdp-sdk`` process died without recording an end)."""
        return self._status(self.record(job))

    def list(self) -> builtins.list[RunStatus]:
        """Every local run with a record, oldest first."""
        return [self._status(record) for record in list_runs(self.runs_dir)]

    def wait_for(
        self,
        job: RunHandle | str | None = None,
        *,
        timeout: float | None = None,
        on_change: Callable[[RunStatus], None] | None = None,
        poll_s: float = 0.5,
    ) -> RunStatus:
        """Block until the run's record leaves ``running`` (succeeded, failed, interrupted, or lost when its
        ``fsdp-sdk`` process died) or ``timeout`` seconds pass; its last status.

        :raises ConfigError: there is no such run.
        """
        record = self.record(job)  # the latest run is the one asked about, even if another starts meanwhile
        run_dir = Path(record.run_dir)
        deadline = None if timeout is None else time.monotonic() + timeout
        last: RunStatus | None = None
        while True:
            record = read_record(run_dir) or record
            status = self._status(record)
            if on_change is not None and (last is None or last.phase != status.phase):
                on_change(status)
            last = status
            if status.finished or (deadline is not None and time.monotonic() >= deadline):
                return status
            wait = poll_s if deadline is None else max(0.0, min(poll_s, deadline - time.monotonic()))
            time.sleep(wait)

    @staticmethod
    def _status(record: RunRecord) -> RunStatus:
        phase = _PHASES.get(record.state, record.state.capitalize())
        details = {**record.to_dict(), "logs": str(Path(record.run_dir) / "logs")}
        details.pop("settings", None)
        details.pop("supervisor", None)
        return RunStatus(record.run_id, "local", phase, record.error, details)

    @staticmethod
    def _log_files(record: RunRecord, all_workers: bool) -> builtins.list[Path]:
        """Every agent's log, or the leader's (none while no trainer has printed ``master_addr=`` yet)."""
        logs = sorted((Path(record.run_dir) / "logs").glob("agent-*.log"), key=lambda p: p.name)
        return logs if all_workers else [log for log in logs if _has_leader(log)][:1]

    def logs(
        self,
        job: RunHandle | str | None = None,
        *,
        out: Callable[[str], None],
        follow: bool = False,
        all_workers: bool = False,
        poll_s: float = 0.2,
    ) -> None:
        """Print the leader's log (the agent whose trainer printed ``master_addr=``), or every agent's with
        ``all_workers`` (lines prefixed ``[agent-<i>] ``); with ``follow``, keep printing until the run ends."""
        record = self.record(job)
        run_dir = Path(record.run_dir)
        offsets: dict[Path, int] = {}
        files: list[Path] = []
        while True:
            running = RunLock(run_dir).held_elsewhere()
            files = self._log_files(record, all_workers) if all_workers or not files else files
            if not files and not (follow and running):  # no leader (yet): the first agent's log, as it is
                files = sorted((run_dir / "logs").glob("agent-*.log"), key=lambda p: p.name)[:1]
            for path in files:
                offsets[path] = _print_new(path, offsets.get(path, 0), out, f"[{path.stem}] " if all_workers else "")
            if not follow or not running:
                return
            time.sleep(poll_s)

    def stop(
        self, job: RunHandle | str | None = None, *, keep_rendezvous: bool = False, timeout: float = STOP_TIMEOUT_S
    ) -> RunStopped:
        """Stop a running run as Ctrl-C in its terminal would: interrupt its supervising ``fsdp-sdk`` process (which
        stops every agent and rank, clears the run's rendezvous keys and records the run ``interrupted``), once
        checked to be that very process.

        :param keep_rendezvous: refused: a local run's keys are cleared by the run itself as it stops.
        :raises ConfigError: ``keep_rendezvous``.
        :raises BackendError: the recorded process is not the run's any more, or the run did not end in time.
        """
        from fsdp_sdk.processes import ProcessIdentity

        if keep_rendezvous:
            raise ConfigError(
                "--keep-rendezvous",
                "a local run clears its own rendezvous keys as it stops; the option is for cluster jobs",
                "leave --keep-rendezvous out",
            )
        if isinstance(job, RunHandle) and isinstance(job.state, _LocalRun):  # scheduled by this process
            run = job.state
            if run.supervisor is not None:
                run.supervisor.stop()
            if run.ended:
                return self._stopped(
                    job.job.run_id, False, f"run {job.job.run_id} is not running ({run.record.state}); nothing to stop"
                )
            self._finish(run, "interrupted", None)
            saved = self.saved(job.job.run_id)
            return self._stopped(job.job.run_id, True, f"stopped run {job.job.run_id}: interrupted, {saved}")
        record = self.record(job)
        run_dir = Path(record.run_dir)
        if not RunLock(run_dir).held_elsewhere():
            return self._stopped(
                record.run_id, False, f"run {record.run_id} is not running ({record.state}); nothing to stop"
            )
        identity = ProcessIdentity.from_dict(record.supervisor)
        if identity is None:
            raise BackendError(
                f"run {record.run_id}: its record names no supervising process (started by an older fsdp-sdk); "
                "stop it with Ctrl-C in its terminal"
            )
        mismatch = identity.mismatch()
        if mismatch is not None:
            raise BackendError(
                f"run {record.run_id}: its supervising process is gone or replaced ({mismatch}); nothing signalled"
            )
        os.kill(identity.pid, signal.SIGINT)
        deadline = time.monotonic() + timeout
        while RunLock(run_dir).held_elsewhere():
            if time.monotonic() > deadline:
                raise BackendError(
                    f"run {record.run_id} (fsdp-sdk pid {identity.pid}) is still stopping after {timeout:.0f} s"
                )
            time.sleep(0.1)
        after = read_record(run_dir)
        state = after.state if after is not None else "?"
        saved = self.saved(record.run_id)
        return self._stopped(
            record.run_id, True, f"stopped run {record.run_id} (fsdp-sdk pid {identity.pid}): {state}, {saved}"
        )

    def _stopped(self, run_id: str, stopped: bool, message: str) -> RunStopped:
        """The outcome of :meth:`stop`, with the run's status after it."""
        status = self.status(run_id)
        return RunStopped(run_id, stopped, message, {"status": status.to_dict()})


class _LocalRun:
    """What this process holds of a scheduled local run."""

    def __init__(
        self,
        config: Config,
        plan: RunPlan,
        record: RunRecord,
        lock: RunLock,
        started_cluster: bool,
        events: Callable[[RunEvent], None],
    ) -> None:
        self.config, self.plan, self.record, self.lock = config, plan, record, lock
        self.started_cluster, self.events = started_cluster, events
        self.supervisor: Any = None
        self.guard: Any = None
        self.ended = False


def _known_locations(record: RunRecord | None, run_dir: Path) -> list[str]:
    """Where run ``record`` has kept checkpoints: its record's list, or (a record of an older fsdp-sdk) where its
    recorded trainer settings put them."""
    from fsdp_sdk.backends.local.continuation import checkpoint_location

    if record is None:
        return []
    settings = record.settings or {}
    if "checkpoint_locations" in settings:
        return list(settings["checkpoint_locations"])
    here = checkpoint_location(settings.get("trainer") or {}, run_dir)
    return [here] if here else []


def _figures(run_dir: Path, record: RunRecord) -> dict[str, Any]:
    """The whole run's figures as ``fsdp-sdk runs`` and ``job report`` give them (its record, every segment), and
    this segment's duration beside them."""
    full = read_record(run_dir) or record
    return {
        "duration_s": full.run_duration_s,
        "segment_duration_s": full.duration_s,
        "run_tokens_per_s": full.tokens_per_s,
    }


def _gib(value: float) -> str:
    return f"{value:.3f}" if value < 1 else f"{value:.1f}"


def _has_leader(path: Path) -> bool:
    from fsdp_sdk.runs import is_leader_line

    try:
        return any(is_leader_line(line) for line in path.read_text(encoding="utf-8", errors="replace").splitlines())
    except OSError:
        return False


def _print_new(path: Path, offset: int, out: Callable[[str], None], prefix: str) -> int:
    """Print the complete lines of ``path`` after ``offset``; the offset after them."""
    try:
        with open(path, "rb") as f:
            f.seek(offset)
            data = f.read()
    except OSError:
        return offset
    end = data.rfind(b"\n") + 1
    for line in data[:end].decode("utf-8", errors="replace").splitlines():
        out(prefix + line)
    return offset + end
