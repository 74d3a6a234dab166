"""The job workflow: render, submit and run jobs through the job runner (:mod:`fsdp_sdk.runner`) of the context's
backend, build and push the image, and estimate what a job needs and costs."""

from __future__ import annotations

import contextlib
import functools
import os
from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from fsdp_sdk.config import Setting, parse_trainer_args
from fsdp_sdk.errors import BackendError, ConfigError
from fsdp_sdk.resolved import Resolved
from fsdp_sdk.workflows.cluster import ClusterWorkflow
from fsdp_sdk.workflows.context import OnContext

if TYPE_CHECKING:
    import datetime as dt

    from fsdp_sdk.clusters import ClusterSnapshot
    from fsdp_sdk.costs import JobCost
    from fsdp_sdk.estimate import Estimate
    from fsdp_sdk.k8s.image import ImageBuild, ImagePush
    from fsdp_sdk.k8s.jobs import JobClient, JobStatus
    from fsdp_sdk.k8s.validate import CrdSchema
    from fsdp_sdk.runner import DryRun, JobRunner, KubernetesRunner, RunStatus
    from fsdp_sdk.runs import JobRef, RecordedRun, RunEvent, RunResult
    from fsdp_sdk.workflows.context import Context

__all__ = ["JobWorkflow"]


class JobWorkflow(OnContext):
    """The jobs of a :class:`~fsdp_sdk.workflows.context.Context` on its cluster (what :class:`fsdp_sdk.Client`'s
    job methods do; their docstrings say what each returns and raises).

    :param cluster: the cluster's workflow over the same context (the cluster's side of a job: its checkpoint
        bucket, nodes and reservation).
    """

    def __init__(self, ctx: Context, cluster: ClusterWorkflow | None = None) -> None:
        super().__init__(ctx)
        self.cluster = cluster or ClusterWorkflow(ctx)

    def derived(self, settings: Sequence[Setting]) -> JobWorkflow:
        """The job workflow of this context with ``settings`` on top (this one when there are none)."""
        return self if not settings else JobWorkflow(self.ctx.derived(settings))

    # ------------------------------------------------------------------ runners

    @functools.cached_property
    def jobs(self) -> JobClient:
        """The Kubernetes job layer for this cluster (imported on first use).

        :raises BackendError: the backend runs jobs itself (``local``) and no kubeconfig was given.
        """
        ctx = self.ctx
        if self.backend.runs_jobs and ctx.kubeconfig() is None:
            raise BackendError(
                f"backend {self.backend.name!r} runs jobs itself, without Kubernetes; use Client.run(), "
                "or give the client a kubeconfig (--kubeconfig) to reach a cluster"
            )
        from fsdp_sdk.k8s.jobs import JobClient

        path = ctx.kubeconfig_or_fail()
        return JobClient(
            self.resolved, kubeconfig=path, context=ctx.kube_context, plugins=ctx.plugins, progress=self.progress
        )

    @functools.cached_property
    def runner(self) -> JobRunner:
        """The job runner (:mod:`fsdp_sdk.runner`): the local one for a backend that runs jobs itself, else the
        Kubernetes job layer's, with the cluster workflow as its :class:`~fsdp_sdk.runner.ClusterSite`."""
        if self.backend.runs_jobs:
            from fsdp_sdk.backends.local.backend import LocalBackend
            from fsdp_sdk.backends.local.runner import LocalRunner

            if not isinstance(self.backend, LocalBackend):
                raise BackendError(f"backend {self.backend.name!r} runs jobs itself but has no job runner")
            return LocalRunner(self.backend, self.config, progress=self.progress)
        from fsdp_sdk.runner import KubernetesRunner

        return KubernetesRunner(self.jobs, site=self.cluster)

    def cluster_runner(self) -> KubernetesRunner:
        """The Kubernetes job layer's runner, on the local backend too when the client was given a kubeconfig."""
        from fsdp_sdk.runner import KubernetesRunner

        runner = None if self.backend.runs_jobs else self.runner
        return runner if isinstance(runner, KubernetesRunner) else KubernetesRunner(self.jobs)

    def runner_for(self, name: str | None) -> JobRunner:
        """The runner a job command is about: the local backend's (its runs) when the backend runs jobs itself and
        either no kubeconfig reaches a cluster or ``name`` is a local run; else the Kubernetes job layer's."""
        if not self.backend.runs_jobs:
            return self.runner
        if self.ctx.kubeconfig() is None:
            return self.runner
        if name is not None:
            with contextlib.suppress(ConfigError):
                self.runner.status(name)  # a local run of that name
                return self.runner
        return self.cluster_runner()  # a kubeconfig was given: a cluster job

    # ------------------------------------------------------------------ render and submit

    def render_job(
        self,
        *,
        rdzv_id: str | None = None,
        create_secret: bool | None = None,
        api: str | None = None,
        preview: bool = False,
        fresh_id: bool = False,
        crds: Sequence[CrdSchema] = (),
    ) -> list[dict[str, Any]]:
        """The job's Kubernetes objects, exactly as ``job submit`` would apply them (see :meth:`fsdp_sdk.Client.render_job`)."""
        from fsdp_sdk.k8s.render import new_rdzv_id, render_job, stable_rdzv_id

        if rdzv_id is None:
            rdzv_id = (
                new_rdzv_id(self.config.job.name)
                if fresh_id
                else stable_rdzv_id(self.config, api=api, create_secret=create_secret)
            )
        from fsdp_sdk.code_layer import for_cluster

        return render_job(
            for_cluster(self.cluster.job_resolved(self.resolved, strict=not preview), build=False),
            rdzv_id=rdzv_id,
            create_secret=create_secret,
            api=api,
            preview=preview,
            crds=crds,
        )

    def submit_job(
        self,
        *,
        run_id: str | None = None,
        create_secret: bool | None = None,
        api: str | None = None,
        dry_run: bool = False,
        force: bool = False,
        replace: bool = False,
        unique: bool = False,
    ) -> JobRef:
        """Check, render and submit the job to the cluster (see :meth:`fsdp_sdk.Client.submit_job`)."""
        self.ctx.checked("submit")
        self.cluster.check_reservation(self.config)
        if not force:
            self.ctx.check_fits()
        from fsdp_sdk.code_layer import for_cluster

        runner = self.cluster_runner()  # on the local backend too: a kubeconfig was given
        resolved = for_cluster(
            self.cluster.job_resolved(self.resolved), build=True, dry_run=dry_run, progress=self.progress
        )
        plan = runner.dryrun(resolved, run_id=run_id, api=api, create_secret=create_secret, unique=unique)
        job = runner.schedule(plan, server_dry_run=dry_run, replace=replace).job
        if not dry_run:
            self.ctx.plugins.hooks.job_submitted(plan.config or self.config, job)
        return job

    # ------------------------------------------------------------------ run

    def run(
        self,
        *,
        trainer_overrides: Mapping[str, Any] | None = None,
        trainer_args: Sequence[str] = (),
        run_id: str | None = None,
        dry_run: bool = False,
        on_output: Callable[[str], None] | None = None,
        force: bool = False,
        on_event: Callable[[RunEvent], None] | None = None,
        on_started: Callable[[JobRef], None] | None = None,
        resume: str | None = None,
        scale: bool = False,
    ) -> RunResult:
        """Run the trainer to completion on this cluster (see :meth:`fsdp_sdk.Client.run`)."""
        runner = self.runner
        plan = self._dryrun(runner, trainer_overrides, trainer_args, run_id, resume, scale, dry_run, force)
        if dry_run:
            return plan.result()
        if plan.finished is not None:
            self.progress(
                f"run {plan.run_id} has finished ({plan.finished.get('steps')} steps): nothing started, its record "
                "is kept (a larger --steps continues it)"
            )
            return plan.finished_result()
        config = plan.config or self.config
        self.ctx.checked("run")
        from fsdp_sdk.aws.checkpoints import check_s3_locations

        check_s3_locations(config.trainer)  # s3:// checkpoints, export, weights: reachable, before anything starts
        hooks = self.ctx.plugins.hooks
        handle = runner.schedule(plan, on_event=on_event, on_output=on_output)
        waiting = False
        try:
            if on_started is not None:
                on_started(handle.job)
            hooks.job_submitted(config, handle.job)
            waiting = True
            result = runner.wait(handle)
        except BaseException:
            if not waiting:
                runner.release(handle)  # a local run's processes and record end, as wait() would have ended them
            hooks.job_finished(config, handle.job, False, None)
            raise
        hooks.job_finished(config, handle.job, True, result.summary)
        return result

    def run_resolved(
        self,
        trainer_overrides: Mapping[str, Any] | None = None,
        trainer_args: Sequence[str] = (),
    ) -> Resolved:
        """This context's resolved configuration with trainer settings given to one run on top."""
        settings = [
            Setting(key if key.startswith("trainer.") else f"trainer.{key}", value, key, "run()")
            for key, value in (trainer_overrides or {}).items()
        ]
        from fsdp_sdk.user_code import code_args

        settings += code_args(self.resolved.config, trainer_args) or parse_trainer_args(trainer_args)
        return self.resolved.with_overrides(settings) if settings else self.resolved

    def dryrun(
        self,
        *,
        trainer_overrides: Mapping[str, Any] | None = None,
        trainer_args: Sequence[str] = (),
        run_id: str | None = None,
        resume: str | None = None,
        scale: bool = False,
        force: bool = False,
    ) -> DryRun:
        """What :meth:`run` would start (changes nothing; see :meth:`fsdp_sdk.Client.dryrun`)."""
        return self._dryrun(self.runner, trainer_overrides, trainer_args, run_id, resume, scale, True, force)

    def _dryrun(
        self,
        runner: JobRunner,
        trainer_overrides: Mapping[str, Any] | None,
        trainer_args: Sequence[str],
        run_id: str | None,
        resume: str | None,
        scale: bool,
        dry_run: bool,
        force: bool,
    ) -> DryRun:
        """The run's configuration resolved once (this context's, the run's trainer settings on top), made final
        and checked by the runner, then its dry run: what :meth:`run` schedules."""
        resolved = self.run_resolved(trainer_overrides, trainer_args)
        resolved = runner.admit(resolved, resume=resume, scale=scale, dry_run=dry_run, force=force)
        return runner.dryrun(resolved, run_id=run_id, resume=resume)

    def runs(self) -> Sequence[RecordedRun]:
        """The runs of this cluster's backend that it keeps records of, oldest first (the local backend's).

        :raises ConfigError: the backend keeps no run records (Kubernetes jobs: ``jobs.list()``).
        """
        if not self.backend.runs_jobs:
            raise ConfigError(
                "cluster.backend",
                f"backend {self.backend.name!r} keeps no run records",
                "list its jobs with 'fsdp-sdk job list'",
            )
        return self.backend.runs(self.config)

    def job_cost(
        self, job: JobStatus | RunStatus, *, now: dt.datetime | None = None, usd_per_node_hour: float | None = None
    ) -> JobCost:
        """What a job has cost (see :meth:`fsdp_sdk.Client.job_cost`)."""
        import datetime as dt

        from fsdp_sdk.costs import job_cost, parse_time
        from fsdp_sdk.runner import RunStatus

        facts = dict(job.details) if isinstance(job, RunStatus) else job.to_dict()
        nodes = int(facts.get("nodes") or self.config.job.num_workers)
        now = now or dt.datetime.now(dt.timezone.utc)
        if isinstance(job, RunStatus) and job.backend == "local":
            started, ended = facts.get("started_at"), facts.get("ended_at")
            return job_cost(
                nodes=nodes,
                started=dt.datetime.fromtimestamp(started, dt.timezone.utc) if started else None,
                ended=dt.datetime.fromtimestamp(ended, dt.timezone.utc) if ended else None,
                usd_per_node_hour=None,
                now=now,
                local=True,
            )
        return job_cost(
            nodes=nodes,
            started=parse_time(facts.get("created")),
            ended=parse_time(facts.get("completed")),
            usd_per_node_hour=usd_per_node_hour
            if usd_per_node_hour is not None
            else self.ctx.hourly_price().usd_per_hour,
            now=now,
        )

    def observe(self, *, now: dt.datetime | None = None) -> ClusterSnapshot:
        """Ask the backend for the cluster's state and jobs now; record and return the snapshot (``fsdp-sdk
        clusters``, :mod:`fsdp_sdk.clusters`).

        Listing jobs is best effort (a cluster that is not up has none; an unreachable API server leaves the counts
        unknown). Errors of the status itself propagate: the caller decides to fall back to the record.
        """
        from fsdp_sdk.clusters import remember
        from fsdp_sdk.errors import FsdpSdkError

        status = self.cluster.status()
        jobs: list[Any] | None = None
        if status.state in {"ready", "degraded"} or self.backend.runs_jobs:
            try:
                jobs = list(self.runner.list())
            except (FsdpSdkError, OSError):
                jobs = None
        elif status.state == "absent":
            jobs = []
        snapshot = self.cluster.snapshot(status, jobs=jobs, now=now)
        with contextlib.suppress(OSError):
            remember(self.config.cluster.state_dir, snapshot)
        return snapshot

    # ------------------------------------------------------------------ images

    def build_image(
        self,
        *,
        context: Path,
        trainer_src: str | os.PathLike[str] | None = None,
        tool: str | None = None,
        build_args: Mapping[str, str] | None = None,
        dry_run: bool = False,
    ) -> ImageBuild:
        """Write the build context and build ``<job.image>:<job.tag>`` (see :func:`fsdp_sdk.k8s.image.build_image`)."""
        from fsdp_sdk.k8s.image import build_image

        return build_image(
            self.config,
            context=context,
            trainer_src=trainer_src,
            tool=tool,
            build_args=build_args,
            dry_run=dry_run,
            progress=self.progress,
        )

    def push_image(self, *, tool: str | None = None, dry_run: bool = False) -> ImagePush:
        """Push the image to Amazon ECR (see :func:`fsdp_sdk.k8s.image.push_image`)."""
        from fsdp_sdk.k8s.image import push_image

        return push_image(self.config, tool=tool, dry_run=dry_run, progress=self.progress)

    # ------------------------------------------------------------------ estimates

    def estimate_resolved(self, nodes: int | None, gpus_per_node: int | None, instance_type: str | None) -> Resolved:
        """The resolved configuration an estimate is made for: this one with the asked nodes, GPUs and type."""
        config = self.config
        settings = []
        if nodes is not None:
            if nodes < 1:
                raise ConfigError("nodes", f"{nodes} is not a number of nodes", "use 1 or more")
            settings.append(Setting("job.num_workers", nodes, "nodes"))
        if gpus_per_node is not None:
            settings.append(Setting("job.nproc_per_node", gpus_per_node, "gpus per node"))
        if instance_type is not None:
            settings.append(Setting("cluster.instance_type", instance_type, "instance type"))
            # counts derived from the configured type are derived again from this one
            settings += [
                Setting(p, None) for p in ("job.gpu_per_worker", "job.efa_per_worker") if p not in config.origins
            ]
        if not settings:
            return self.resolved
        return self.resolved.with_overrides(settings, validate_trainer=False)

    def estimate(
        self,
        *,
        model: str | None = None,
        nodes: int | None = None,
        gpus_per_node: int | None = None,
        instance_type: str | None = None,
        trainer_overrides: Mapping[str, Any] | None = None,
        mfu: float | None = None,
        tokens: float | None = None,
        scaling: Iterable[int] | bool = True,
        network_efficiency: float | None = None,
    ) -> Estimate:
        """Memory per GPU, speed, cost and weak scaling of the configured job (see :meth:`fsdp_sdk.Client.estimate`)."""
        from fsdp_sdk.estimate import DEFAULT_TOKENS, estimate_job

        resolved = self.estimate_resolved(nodes, gpus_per_node, instance_type)
        return estimate_job(
            resolved.config,
            resolved.instance,
            model=model,
            trainer_overrides=trainer_overrides,
            mfu=mfu,
            tokens=DEFAULT_TOKENS if tokens is None else tokens,
            scaling=scaling,
            network_efficiency=network_efficiency,
        )

    def recommend(
        self,
        *,
        model: str | None = None,
        nodes: int | None = None,
        gpus_per_node: int | None = None,
        instance_type: str | None = None,
        trainer_overrides: Mapping[str, Any] | None = None,
        mfu: float | None = None,
        tokens: float | None = None,
        network_efficiency: float | None = None,
    ) -> list[Estimate]:
        """The combinations that fit, fastest first (see :meth:`fsdp_sdk.Client.recommend`)."""
        from fsdp_sdk.estimate import DEFAULT_TOKENS, recommend

        resolved = self.estimate_resolved(nodes, gpus_per_node, instance_type)
        return recommend(
            resolved.config,
            resolved.instance,
            model=model,
            trainer_overrides=trainer_overrides,
            mfu=mfu,
            tokens=DEFAULT_TOKENS if tokens is None else tokens,
            network_efficiency=network_efficiency,
        )
