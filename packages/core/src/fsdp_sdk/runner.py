"""One job runner for both places a job runs: this machine (the local backend) and a Kubernetes cluster.

A runner has TorchX's shape:

* :meth:`JobRunner.admit` ``(resolved, ...) ->`` :class:`~fsdp_sdk.resolved.Resolved`: the run's configuration
  made final and checked, once, before anything is decided (local: the memory check; a cluster: the job's name
  for ``--resume``, its checkpoint bucket, the nodes it needs, the fit check).
* :meth:`JobRunner.dryrun` ``(resolved) ->`` :class:`DryRun`: what would be started, decided before anything
  starts (pure: the commands, environment and directories of a local run; the Kubernetes objects of a job).
  ``fsdp-sdk run --dry-run`` prints it (:meth:`DryRun.lines`, or :meth:`DryRun.to_dict` with ``--json``).
* :meth:`JobRunner.schedule` ``(dryrun) ->`` :class:`RunHandle`: start exactly that, rendering nothing again (the
  agents of the dry run's plan; the dry run's objects applied as they are).
* :meth:`JobRunner.wait` ``(handle) ->`` :class:`~fsdp_sdk.runs.RunResult`: follow it to its end;
  :meth:`JobRunner.release` gives up a scheduled run this process will not follow.
* :meth:`JobRunner.status`, :meth:`JobRunner.logs`, :meth:`JobRunner.stop`, :meth:`JobRunner.wait_for` (until
  it ends, or a timeout) by handle or by name, and :meth:`JobRunner.list`, from any process: the ``fsdp-sdk job
  status|logs|stop|wait|list`` commands go through them, for local runs and cluster jobs alike.

The job workflow picks the runner (:attr:`fsdp_sdk.workflows.jobs.JobWorkflow.runner`, :attr:`fsdp_sdk.Client.runner`): the local one
(:class:`fsdp_sdk.backends.local.runner.LocalRunner`, the supervisor) for the local backend,
:class:`KubernetesRunner` (the job layer, :mod:`fsdp_sdk.k8s.jobs`) for cluster backends.
"""

from __future__ import annotations

import builtins
import shlex
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from fsdp_sdk.errors import RunError
from fsdp_sdk.runs import JobRef, RunEvent, RunResult
from fsdp_sdk.yamltext import to_yaml_documents

if TYPE_CHECKING:
    from fsdp_sdk.backends.local.plan import RunPlan
    from fsdp_sdk.config import Config
    from fsdp_sdk.k8s.jobs import JobClient, JobStatus
    from fsdp_sdk.resolved import Resolved

__all__ = [
    "ClusterSite",
    "DryRun",
    "JobRunner",
    "KubernetesRunner",
    "RunHandle",
    "RunStatus",
    "RunStopped",
    "job_ref_name",
]

#: The phases of a job that has ended (local runs: also ``Interrupted`` and ``Lost``).
ENDED_PHASES = ("Succeeded", "Failed", "Interrupted", "Lost")


def job_ref_name(job_name: str, run_id: str) -> str:
    """The name of a local run's job: its run id when that already starts with ``job.name`` (the default ids do),
    else ``<job.name>-<run id>``."""
    if run_id == job_name or run_id.startswith(f"{job_name}-"):
        return run_id
    return f"{job_name}-{run_id}"


@dataclass(frozen=True)
class DryRun:
    """What a runner would start, decided before anything starts.

    :param job: the job it would be.
    :param backend: the backend it would run on.
    :param commands: the commands a local run would start (one per simulated node).
    :param objects: the Kubernetes objects a cluster job would apply (the Secret without its data).
    :param notes: what the user should know about the choices made (checkpoint period, rendezvous...).
    :param output_dir: the trainer's output directory (local).
    :param log_dir: the agents' logs (local).
    :param details: the local run's full plan (:meth:`~fsdp_sdk.backends.local.plan.RunPlan.to_dict`).
    :param finished: the run of this name has already trained every step asked for: nothing would start.
    :param config: the configuration it was made from (what :meth:`JobRunner.schedule` acts on).
    :param plan: the local run's plan (:class:`~fsdp_sdk.backends.local.plan.RunPlan`; ``None`` for a cluster job,
        whose :attr:`objects` are what is applied).
    :param trainer_args: the trainer options given on top of the configuration.
    :param resume: a local run continued with its recorded settings.
    :param replace: a cluster job that replaces the job of its name (``run --resume NAME``).
    :param finished_duration_s: how long the finished run took (its record's), when :attr:`finished`.
    :param finished_figures: the finished run's figures as ``fsdp-sdk runs`` gives them (``duration_s``,
        ``segment_duration_s``, ``run_tokens_per_s``: the whole run's, its last segment's beside them).
    """

    job: JobRef
    backend: str
    commands: tuple[tuple[str, ...], ...] = ()
    objects: tuple[dict[str, Any], ...] = ()
    notes: tuple[str, ...] = ()
    output_dir: Path | None = None
    log_dir: Path | None = None
    details: Mapping[str, Any] = field(default_factory=dict)
    finished: dict[str, Any] | None = None
    config: Config | None = field(default=None, repr=False, compare=False)
    plan: RunPlan | None = field(default=None, repr=False, compare=False)
    trainer_args: tuple[str, ...] = ()
    resume: bool = False
    replace: bool = False
    finished_duration_s: float | None = None
    finished_figures: dict[str, Any] = field(default_factory=dict)

    @property
    def run_id(self) -> str:
        """Shortcut for ``job.run_id``."""
        return self.job.run_id

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready dict: what ``run --dry-run --json`` prints."""
        return {
            "job": self.job.to_dict(),
            "run_id": self.job.run_id,
            "dry_run": True,
            "commands": [list(c) for c in self.commands],
            "objects": [dict(o) for o in self.objects],
            "notes": list(self.notes),
            "output_dir": str(self.output_dir) if self.output_dir else None,
            "log_dir": str(self.log_dir) if self.log_dir else None,
            "finished": self.finished,
            **({"plan": dict(self.details)} if self.details else {}),
        }

    def lines(self) -> list[str]:
        """What ``run --dry-run`` prints: the commands of a local run, or the objects of a job as YAML."""
        where = f" in namespace {self.job.namespace}" if self.job.namespace else ""
        if self.finished is not None:
            return [
                f"Run {self.run_id} has finished ({self.finished.get('steps')} steps); nothing would start "
                "(a larger --steps continues it)"
            ]
        lines = [f"Would run {self.job.name} (run id {self.run_id}) on backend {self.backend}{where}:"]
        lines += ["  " + shlex.join(command) for command in self.commands]
        lines += [f"  ({note})" for note in self.notes]
        if self.objects:
            lines += to_yaml_documents(list(self.objects)).rstrip("\n").splitlines()
        return lines

    def result(self) -> RunResult:
        """The dry run as the :class:`~fsdp_sdk.runs.RunResult` ``Client.run(dry_run=True)`` returns."""
        extra: dict[str, Any] = {}
        if self.details:
            extra["plan"] = dict(self.details)
        if self.objects:
            extra["objects"] = [dict(o) for o in self.objects]
        return RunResult(
            self.job, {}, self.output_dir, self.log_dir, self.commands, dry_run=True, extra=extra, plan=self
        )

    def finished_result(self) -> RunResult:
        """The recorded result of a run that has :attr:`finished` (nothing starts)."""
        extra = {"finished": True, "duration_s": self.finished_duration_s, **self.finished_figures}
        return RunResult(self.job, dict(self.finished or {}), self.output_dir, self.log_dir, extra=extra)


@dataclass
class RunHandle:
    """A scheduled job, for :meth:`JobRunner.wait` / ``status`` / ``logs`` / ``stop``.

    :param job: the job.
    :param dryrun: what was scheduled.
    :param state: the runner's own state of the job while this process follows it (local: the supervisor).
    """

    job: JobRef
    dryrun: DryRun
    state: Any = field(default=None, repr=False)


@dataclass(frozen=True)
class RunStatus:
    """The state of a job as ``job status`` shows it.

    :param name: the job's (local: the run's) name.
    :param backend: where it runs.
    :param phase: ``Running``, ``Succeeded``, ``Failed``, ``Interrupted``, ``Lost``, or the Kubernetes job's phase
        (``Pending``, ``Created``, ``Running``, ``Restarting``, ``Suspended``, ``Succeeded``, ``Failed``).
    :param message: the cause of a failure, when known.
    :param details: everything else known (the local run's record; the job's replica counts).
    """

    name: str
    backend: str
    phase: str
    message: str | None = None
    details: Mapping[str, Any] = field(default_factory=dict)

    @property
    def finished(self) -> bool:
        """Whether it has ended (a suspended Kubernetes job has not)."""
        return self.phase in ENDED_PHASES

    @property
    def succeeded(self) -> bool:
        """Whether it ended successfully."""
        return self.phase == "Succeeded"

    @property
    def label(self) -> str:
        """How a status line names it: ``PyTorchJob default/fsdp``, or ``run fsdp-1a2b`` for a local run."""
        kind, namespace = self.details.get("kind"), self.details.get("namespace")
        if kind and namespace:
            return f"{kind} {namespace}/{self.name}"
        return f"run {self.name}"

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready dict."""
        return {
            "name": self.name,
            "backend": self.backend,
            "phase": self.phase,
            "message": self.message,
            **dict(self.details),
        }


@dataclass(frozen=True)
class RunStopped:
    """What :meth:`JobRunner.stop` did.

    :param name: the job's (local: the run's) name.
    :param stopped: something was stopped (``False``: the job did not exist or was not running).
    :param message: the line that says what was done.
    :param details: the runner's own facts (Kubernetes: ``deleted``, ``rendezvous_keys``, ``rendezvous_error``;
        local: the run's ``status`` after it).
    :param warning: what went wrong without undoing the stop (the rendezvous keys could not be cleared).
    """

    name: str
    stopped: bool
    message: str
    details: Mapping[str, Any] = field(default_factory=dict)
    warning: str | None = None

    def __str__(self) -> str:
        return self.message

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready dict."""
        return {"name": self.name, "stopped": self.stopped, "message": self.message, **dict(self.details)}


class JobRunner(Protocol):
    """What runs a training job: see the module docstring."""

    kind: str

    def admit(
        self,
        resolved: Resolved,
        *,
        resume: str | None = None,
        scale: bool = False,
        dry_run: bool = False,
        force: bool = False,
    ) -> Resolved:
        """The run's configuration made final and checked, before its dry run (see the module docstring).

        :param resume: the run (local) or job (cluster) to continue.
        :param scale: scale a cluster with too few nodes first (without: refused).
        :param dry_run: for a dry run (nothing is changed; what cannot be known without credentials is warned of).
        :param force: skip the memory / fit check.
        :raises ConfigError: the run will not fit, or needs more nodes than there are.
        """
        ...

    def dryrun(
        self,
        resolved: Resolved,
        *,
        run_id: str | None = None,
        trainer_args: Sequence[str] = (),
        resume: str | None = None,
    ) -> DryRun:
        """What would be started for ``resolved`` (pure).

        :param run_id: the run's id (local) or rendezvous id (cluster); a fresh one by default.
        :param resume: the run (local: its id, its recorded settings) or job (cluster: replaced) to continue.
        """
        ...

    def schedule(
        self,
        dryrun: DryRun,
        *,
        on_event: Callable[[RunEvent], None] | None = None,
        on_output: Callable[[str], None] | None = None,
    ) -> RunHandle:
        """Start what ``dryrun`` describes; return at once with its handle."""
        ...

    def wait(self, handle: RunHandle) -> RunResult:
        """Follow the job to its end and return the trainer's summary.

        :raises RunError: the job failed.
        """
        ...

    def release(self, handle: RunHandle) -> None:
        """Give up a scheduled run this process will not :meth:`wait` for (local: its processes and record are
        ended, as ``wait`` would have; a cluster job keeps running on the cluster)."""
        ...

    def status(self, job: RunHandle | str | None = None) -> RunStatus:
        """The job's state (by handle, by name, or the latest/configured one)."""
        ...

    def logs(
        self,
        job: RunHandle | str | None = None,
        *,
        out: Callable[[str], None],
        follow: bool = False,
        all_workers: bool = False,
    ) -> None:
        """Print the leader's log (every worker's with ``all_workers``) through ``out``."""
        ...

    def stop(self, job: RunHandle | str | None = None, *, keep_rendezvous: bool = False) -> RunStopped:
        """Stop the job (and clear its rendezvous keys unless ``keep_rendezvous``); what was done."""
        ...

    def wait_for(
        self,
        job: RunHandle | str | None = None,
        *,
        timeout: float | None = None,
        on_change: Callable[[RunStatus], None] | None = None,
    ) -> RunStatus:
        """Block until the job ends or ``timeout`` seconds pass (``None``: no limit); its last status (check
        :attr:`RunStatus.finished` to tell a timeout from an end).

        :param on_change: called with the status at the start and at each change of phase.
        """
        ...

    def list(self) -> builtins.list[RunStatus]:
        """Every job this runner knows of: the local runs' records, or the jobs of the configured kind in the
        namespace."""
        ...


class ClusterSite(Protocol):
    """What :meth:`KubernetesRunner.admit` asks of the cluster a job goes to (:class:`fsdp_sdk.workflows.cluster.ClusterWorkflow` is one)."""

    def job_resolved(self, resolved: Resolved, *, strict: bool = True) -> Resolved:
        """``resolved`` with what the cluster fills in (an EKS cluster's checkpoint bucket)."""
        ...

    def ensure_nodes(self, resolved: Resolved, *, scale: bool, dry_run: bool) -> None:
        """Refuse a job with more workers than the cluster has nodes (with ``scale``: scale it first)."""
        ...

    def check_fits(self, resolved: Resolved | None = None) -> object:
        """Refuse a job the estimate says will not fit in its GPUs' memory."""
        ...


class KubernetesRunner:
    """The runner of cluster backends: the Kubernetes job layer (:class:`~fsdp_sdk.k8s.jobs.JobClient`).

    :param jobs: the job layer of the cluster.
    :param site: the cluster's side of :meth:`admit` (its checkpoint bucket, nodes and fit check); without one,
        ``admit`` only names the job for ``resume``.
    """

    kind = "kubernetes"

    def __init__(self, jobs: JobClient, site: ClusterSite | None = None) -> None:
        self.jobs = jobs
        self.site = site

    def admit(
        self,
        resolved: Resolved,
        *,
        resume: str | None = None,
        scale: bool = False,
        dry_run: bool = False,
        force: bool = False,
    ) -> Resolved:
        """The job's configuration: named ``resume`` when given (its checkpoints live under its name: the
        checkpoint bucket, the shared claim, the disk), with the cluster's checkpoint bucket, refused when the
        cluster has too few nodes (unless ``scale``) or the job will not fit (unless ``force``)."""
        from fsdp_sdk.code_layer import for_cluster
        from fsdp_sdk.config import Setting

        if resume is not None:
            resolved = resolved.with_overrides([Setting("job.name", resume, "--resume", "command line")])
        if self.site is None:
            return for_cluster(resolved, build=not dry_run, progress=self.jobs.progress)
        resolved = self.site.job_resolved(resolved, strict=not dry_run)
        self.site.ensure_nodes(resolved, scale=scale, dry_run=dry_run)
        if not force:
            self.site.check_fits(resolved)
        # your own code (--script): its layer's content tag, the layer built and pushed first when ECR lacks it
        return for_cluster(resolved, build=not dry_run, progress=self.jobs.progress)

    def dryrun(
        self,
        resolved: Resolved,
        *,
        run_id: str | None = None,
        trainer_args: Sequence[str] = (),
        resume: str | None = None,
        api: str | None = None,
        create_secret: bool | None = None,
        unique: bool = False,
    ) -> DryRun:
        """The job's objects as they will be applied (pure: nothing is sent).

        :param resolved: the job's resolved configuration (rendered as it is: not resolved again).
        :param run_id: the rendezvous id (default: a fresh one).
        :param resume: the job of that name is replaced (``resolved`` names it: see :meth:`admit`).
        :param api: ``pytorchjob`` or ``trainjob`` (default: ``job.api``).
        :param create_secret: include the Hugging Face token Secret (default: when ``job.hf_token`` is set).
        :param unique: name the job ``job.name`` plus a fresh suffix (a new job next to the others).
        """
        from fsdp_sdk.k8s.render import new_rdzv_id, render_job

        if unique:
            import secrets

            from fsdp_sdk.config import Setting
            from fsdp_sdk.k8s.jobs import _SUFFIX_ALPHABET

            suffix = "".join(secrets.choice(_SUFFIX_ALPHABET) for _ in range(5))
            resolved = resolved.with_overrides(
                [Setting("job.name", f"{resolved.config.job.name}-{suffix}", "--unique", "command line")],
                validate_trainer=False,
            )
        config = resolved.config
        rdzv_id = run_id or new_rdzv_id(config.job.name)
        objects = render_job(resolved, rdzv_id=rdzv_id, create_secret=create_secret, api=api)
        job = JobRef(
            name=objects[0]["metadata"]["name"],
            backend=config.cluster.backend,
            run_id=rdzv_id,
            namespace=config.job.namespace,
        )
        return DryRun(
            job=job,
            backend=config.cluster.backend,
            objects=tuple(objects),
            config=config,
            trainer_args=tuple(trainer_args),
            replace=resume is not None,
        )

    def schedule(
        self,
        dryrun: DryRun,
        *,
        on_event: Callable[[RunEvent], None] | None = None,
        on_output: Callable[[str], None] | None = None,
        server_dry_run: bool = False,
        replace: bool | None = None,
    ) -> RunHandle:
        """Apply exactly the dry run's objects (server-side apply; nothing is rendered again).

        :param server_dry_run: the API server validates them and stores nothing (``dryRun=All``).
        :param replace: delete a job of the same name first (see :meth:`~fsdp_sdk.k8s.jobs.JobClient.submit`);
            default: the dry run's :attr:`~DryRun.replace`.
        """
        jobs = self.jobs._with(dryrun.config)
        replace = dryrun.replace if replace is None else replace
        job = jobs.apply(dryrun.objects, dry_run=server_dry_run, replace=replace)
        self.jobs.last_objects = jobs.last_objects
        return RunHandle(job, dryrun, state=(on_event, on_output))

    def release(self, handle: RunHandle) -> None:
        """Nothing: the job runs on the cluster whether this process follows it or not."""

    def wait(self, handle: RunHandle) -> RunResult:
        """Follow the leader's log to the job's end; the trainer's summary.

        :raises RunError: the job failed or finished without a summary.
        """
        on_event, on_output = handle.state if handle.state else (None, None)
        if on_output is None and on_event is not None and handle.dryrun.config is not None:
            on_output = _events_from_lines(on_event, handle.dryrun.config)
        summary = self.jobs.wait(handle.job, on_output=on_output)
        if not isinstance(summary, dict):
            raise RunError(f"job {handle.job.name}: finished without a trainer summary")
        return RunResult(handle.job, summary)

    def run_status(self, status: JobStatus) -> RunStatus:
        """A job layer's :class:`~fsdp_sdk.k8s.jobs.JobStatus` as a :class:`RunStatus` (its facts in ``details``)."""
        data = status.to_dict()
        return RunStatus(status.name, self.jobs.config.cluster.backend, status.phase, status.message or None, data)

    def status(self, job: RunHandle | str | None = None) -> RunStatus:
        """The job's phase and replica counts."""
        return self.run_status(self.jobs.status(job.job if isinstance(job, RunHandle) else job))

    def list(self) -> builtins.list[RunStatus]:
        """Every job of the configured kind (``job.api``) in the namespace."""
        return [self.run_status(status) for status in self.jobs.list()]

    def wait_for(
        self,
        job: RunHandle | str | None = None,
        *,
        timeout: float | None = None,
        on_change: Callable[[RunStatus], None] | None = None,
    ) -> RunStatus:
        """Follow the job's status through the API's watch (resumed across API server failures) until it succeeds
        or fails, or ``timeout`` passes.

        :raises KubernetesError: the job does not exist or was deleted meanwhile.
        """
        changed: Callable[[JobStatus], None] | None = None
        if on_change is not None:
            said = on_change

            def changed(status: JobStatus) -> None:
                said(self.run_status(status))

        ref = job.job if isinstance(job, RunHandle) else job
        return self.run_status(self.jobs.wait_for_completion(ref, timeout=timeout, on_change=changed))

    def logs(
        self,
        job: RunHandle | str | None = None,
        *,
        out: Callable[[str], None],
        follow: bool = False,
        all_workers: bool = False,
    ) -> None:
        """The leader's log (or every worker's)."""
        self.jobs.logs(job.job if isinstance(job, RunHandle) else job, follow=follow, all_workers=all_workers, out=out)

    def stop(self, job: RunHandle | str | None = None, *, keep_rendezvous: bool = False) -> RunStopped:
        """Delete the job (its pods go in the background) and clear its rendezvous keys in etcd unless
        ``keep_rendezvous``; a cleanup that fails is the outcome's :attr:`~RunStopped.warning`."""
        name = job.job.name if isinstance(job, RunHandle) else job or self.jobs.config.job.name
        result = self.jobs.stop(name, clear_rendezvous=not keep_rendezvous)
        details = {
            "deleted": result.deleted,
            "rendezvous_keys": result.rendezvous_keys,
            "rendezvous_error": result.rendezvous_error,
        }
        warning = (
            f"the rendezvous keys were not cleared: {result.rendezvous_error}" if result.rendezvous_error else None
        )
        if not result.deleted:
            message = f"job {self.jobs.namespace}/{name} does not exist; nothing to stop"
        else:
            message = (
                f"deleted job {self.jobs.namespace}/{name}; cleared {len(result.rendezvous_keys)} rendezvous key(s)"
            )
        return RunStopped(name, result.deleted, message, details, warning)


def _events_from_lines(on_event: Callable[[RunEvent], None], config: Config) -> Callable[[str], None]:
    """Turn the leader's log lines of a Kubernetes job into the run events a local run gives."""
    from fsdp_sdk.runs import leader_line_event

    steps = (config.trainer.get("train") or {}).get("steps")
    total = steps if isinstance(steps, int) else None

    def line(text: str) -> None:
        event = leader_line_event(text, total)
        if event is not None:
            on_event(event)

    return line
