"""The cluster's workflow: plan, up, status, scale and down, with what core adds to a backend's part (the EKS
checkpoint bucket, the cost ledger, the Kubernetes prerequisites, monitoring, the idle controller); and the cluster's
side of a job (:class:`fsdp_sdk.runner.ClusterSite`: its checkpoint bucket, nodes and fit check)."""

from __future__ import annotations

import contextlib
import dataclasses
import datetime as dt
import functools
import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from fsdp_sdk.config import Config, Setting
from fsdp_sdk.config.resolution import resolve
from fsdp_sdk.errors import BackendError, ConfigError
from fsdp_sdk.preflight import raise_for_failures
from fsdp_sdk.resolved import Resolved
from fsdp_sdk.workflows.context import OnContext

if TYPE_CHECKING:
    from fsdp_sdk.aws.capacity_block import BlockSchedule
    from fsdp_sdk.aws.checkpoint_bucket import BucketUsage
    from fsdp_sdk.aws.checkpoint_plan import CheckpointBucket
    from fsdp_sdk.backends.base import ClusterStatus, Plan
    from fsdp_sdk.clusters import ClusterSnapshot
    from fsdp_sdk.costs import ClusterCost
    from fsdp_sdk.estimate import Estimate
    from fsdp_sdk.k8s.cluster_objects import Prerequisite
    from fsdp_sdk.k8s.monitoring import Monitoring
    from fsdp_sdk.k8s.prereqs import Prereqs, PrereqStatus

__all__ = ["ClusterWorkflow"]


class ClusterWorkflow(OnContext):
    """The cluster of a :class:`~fsdp_sdk.workflows.context.Context` (what :class:`fsdp_sdk.Client`'s cluster
    methods do; their docstrings say what each returns and raises)."""

    # ------------------------------------------------------------------ plan and up

    def kubernetes_support(self) -> dict[str, Any]:
        """The EKS support state of ``cluster.kubernetes_version`` today (``fsdp_sdk.pins.today``), said as a warning
        in extended support.

        :raises ConfigError: EKS creates no cluster of that version any more (or never did).
        """
        from fsdp_sdk import pins

        version, on = self.config.cluster.kubernetes_version, pins.today()
        warning = pins.check_kubernetes_version(version, on)
        if warning:
            self.progress(f"warning: {warning}")
        release = pins.kubernetes_release(version)
        assert release is not None  # check_kubernetes_version refused a version the calendar lacks
        return {
            "version": version,
            "support": release.state(on),
            "end_of_standard_support": release.end_of_standard,
            "end_of_extended_support": release.end_of_extended,
            "control_plane_usd_per_hour": pins.control_plane_usd_per_hour(version, on),
        }

    def plan(self, *, preflight: bool = True, preview: bool = False, collect: bool = False) -> Plan:
        """What :meth:`up` will do; changes nothing (see :meth:`fsdp_sdk.Client.plan`)."""
        ctx = self.ctx
        support = None if self.backend.runs_jobs else self.kubernetes_support()
        results = ctx.checked(collect=collect) if preflight else []
        if any(r.blocking for r in results):
            preview = False
        filled = ctx.filled(results)
        filled.update(self.discovered())
        # a Capacity Block not started yet is the one warning of that check with nothing else wrong
        waiting = any(r.check == "capacity-reservation" and not r.ok and not r.blocking for r in results)
        block = self.pending_block() if waiting and not any(r.blocking for r in results) else None
        if block is not None:
            filled.update(block.filled(self.config))  # created empty, scaled when the block starts
        store = self.planned_store(filled, inspect=preflight, collect=collect) if self.backend.eks_cluster else None
        if store is not None and not store.named:
            filled["cluster.checkpoint_bucket"] = store.bucket
        resolved = ctx.resolved_with(filled)
        config = resolved.config
        plan = self.backend.plan(resolved)
        if plan.backend != self.backend.name or plan.cluster != config.cluster.name:
            raise BackendError(f"backend {self.backend.name!r} returned a plan for {plan.backend}/{plan.cluster}")
        if preview:
            plan = self.backend.preview(config, plan, progress=self.progress)
        steps, objects = list(plan.steps), list(plan.kubernetes)
        if block is not None:
            from fsdp_sdk.k8s.idle import gpu_nodegroup

            steps += block.steps(gpu_nodegroup(config))
        if not self.backend.runs_jobs:
            prerequisites = self.prerequisites(config, plan.kubernetes)
            steps.append(f"write the cluster's kubeconfig under {config.cluster.state_dir}")
            steps += store.steps() if store is not None else []
            steps += [step for p in prerequisites for step in p.steps]
            objects = [dict(o) for p in prerequisites for o in p.objects]
            from fsdp_sdk.k8s.idle import identity_steps, render_idle_controller

            idle = render_idle_controller(config)
            if idle:
                objects += idle
                steps.append(
                    "install the idle scale-to-zero controller: the GPU nodes go to 0 after "
                    f"{config.cluster.idle_scale_to_zero_minutes} minutes without a training pod"
                )
                steps += identity_steps(config) if self.backend.eks_cluster else []
        cost, details = plan.hourly_cost_usd, dict(plan.details)
        if store is not None:
            details["checkpoints"] = store.to_dict()
        if block is not None:
            details["capacity_block"] = block.to_dict()
        if any(r.check == "aws-credentials" and r.ok for r in results):
            # The backend priced the GPU nodes from the table (us-east-1, dated); AWS answers for this region.
            price = ctx.hourly_price(resolved)
            table = resolved.instance.on_demand_usd_per_hour
            if price.source == "price-list-api" and price.usd_per_hour is not None and cost is not None and table:
                cost = cost - table * config.cluster.nodes + price.usd_per_hour * config.cluster.nodes
                details["price"] = price.describe()
        estimate = ctx.side_estimate(resolved)
        if support is not None:
            details["kubernetes"] = support
        return dataclasses.replace(
            plan,
            steps=steps,
            kubernetes=objects,
            filled=filled,
            preflight=results,
            hourly_cost_usd=cost,
            details=details,
            estimate=estimate.to_dict() if estimate else None,
        )

    def pending_block(self) -> BlockSchedule | None:
        """The cluster's Capacity Block when it has not started yet (an EKS backend's; reads only)."""
        if not self.backend.eks_cluster:
            return None
        from fsdp_sdk.aws.capacity_block import pending_block

        return pending_block(self.config)

    def up(self, plan: Plan | None = None, *, dry_run: bool = False) -> ClusterStatus:
        """Bring the cluster up as ``plan`` says (see :meth:`fsdp_sdk.Client.up`)."""
        plan = plan or self.plan()
        resolved = self.ctx.resolved_with(plan.filled)
        config = resolved.config
        if dry_run:
            return self.backend.describe(resolved)
        if plan.backend != self.backend.name or plan.cluster != config.cluster.name:
            raise ConfigError(
                "plan", f"was made for {plan.backend}/{plan.cluster}", "make the plan with this client's plan()"
            )
        status = self.backend.create(resolved, plan, progress=self.progress)
        if "capacity_block" in plan.details and self.backend.eks_cluster:
            from fsdp_sdk.aws.capacity_block import BlockSchedule, schedule_scaling
            from fsdp_sdk.k8s.idle import gpu_nodegroup

            block = BlockSchedule.from_dict(plan.details["capacity_block"])
            schedule_scaling(config, block, gpu_nodegroup(config), progress=self.progress)
        if "checkpoints" in plan.details and self.backend.eks_cluster:
            self.make_checkpoint_store(config, plan)
        if not self.backend.runs_jobs:
            self.prepare(config, plan)
            if config.cluster.idle_scale_to_zero_minutes:
                from fsdp_sdk.aws.idle_identity import install_identity

                install_identity(config, progress=self.progress)
            self.record_cost("up", config, status.nodes, plan)
        self.ctx.plugins.hooks.cluster_created(config, status)
        self.remember(status)
        return status

    # ------------------------------------------------------------------ checkpoint bucket

    @functools.cached_property
    def account(self) -> str:
        from fsdp_sdk.aws.checkpoint_bucket import account_id

        return account_id(self.config.cluster.region)

    def checkpoint_store(self, config: Config, *, inspect: bool = False) -> CheckpointBucket | None:
        """The checkpoint bucket and access of an EKS backend's cluster (:mod:`fsdp_sdk.aws.checkpoint_bucket`);
        ``None`` for other backends. The bucket is ``cluster.checkpoint_bucket``, else named after the account.

        :param inspect: look at the bucket (reads only): refuses one in another region, or one these credentials
            cannot use, before anything is created.
        """
        if not self.backend.eks_cluster:
            return None
        from fsdp_sdk.aws.checkpoint_bucket import inspect_bucket
        from fsdp_sdk.aws.checkpoint_plan import plan_store

        account = None if config.cluster.checkpoint_bucket else self.account
        store = plan_store(config, account=account)
        return inspect_bucket(store) if inspect else store

    def planned_store(self, filled: Mapping[str, Any], *, inspect: bool, collect: bool) -> CheckpointBucket | None:
        """The checkpoint store a plan shows; when collecting (``up --dry-run``), a store that cannot be found
        without credentials is left out of the plan with a warning instead of stopping it."""
        from fsdp_sdk.errors import FsdpSdkError

        try:
            return self.checkpoint_store(self.ctx.config_with(filled), inspect=inspect)
        except FsdpSdkError as error:
            if not collect:
                raise
            self.progress(f"warning: the checkpoint bucket is left out of the plan: {error}")
            return None

    def make_checkpoint_store(self, config: Config, plan: Plan) -> None:
        """Create or adopt the plan's checkpoint bucket, then the pods' role and Pod Identity association."""
        from fsdp_sdk.aws.checkpoint_bucket import ensure_access, ensure_bucket
        from fsdp_sdk.aws.checkpoint_plan import CheckpointBucket

        store = CheckpointBucket.from_dict(plan.details["checkpoints"])
        ensure_bucket(store, progress=self.progress)
        ensure_access(store, progress=self.progress)

    def checkpoint_usage(self) -> tuple[CheckpointBucket, list[BucketUsage] | None] | None:
        """The checkpoint bucket (as found) and what ``down(delete_checkpoints=True)`` would delete from it."""
        from fsdp_sdk.aws.checkpoint_bucket import bucket_usage, inspect_bucket

        store = self.checkpoint_store(self.config)
        if store is None:
            return None
        store = inspect_bucket(store)
        return store, bucket_usage(store) if store.found != "absent" else None

    # ------------------------------------------------------------------ prerequisites

    def prerequisites(self, config: Config, backend_objects: Sequence[Mapping[str, Any]] = ()) -> list[Prerequisite]:
        """What core applies to a new Kubernetes cluster (pure): the backend's objects, etcd, the Training
        Operator, monitoring (:func:`fsdp_sdk.k8s.cluster_objects.cluster_prerequisites`)."""
        from fsdp_sdk.k8s.cluster_objects import cluster_prerequisites

        return cluster_prerequisites(config, backend_objects, self.ctx.monitoring_components(config))

    def prepare(self, config: Config, plan: Plan) -> None:
        """Make a new Kubernetes cluster ready for jobs: the plan's objects, as shown, then the rest of the
        prerequisites rendered from the same configuration (the job controller of ``job.api``: the Training
        Operator, or Kubeflow Trainer v2 and fsdp-sdk's runtime; EKS add-ons)."""
        from fsdp_sdk.k8s.kube import Kube
        from fsdp_sdk.k8s.prereqs import install_prerequisites

        path = self.ctx.cluster_kubeconfig(config)
        if path is None:
            return
        kube = Kube.from_kubeconfig(path, context=self.ctx.kube_context, progress=self.progress)
        install_prerequisites(
            self.prerequisites(config),
            kube,
            objects=plan.kubernetes,
            kubeconfig=str(path),
            context=self.ctx.kube_context,
            eks_cluster=(config.cluster.name, config.cluster.region),
            progress=self.progress,
        )

    def prereqs(self, *, connect: bool = True) -> Prereqs:
        """The cluster prerequisites (etcd, the Training Operator) of this configuration."""
        from fsdp_sdk.k8s.kube import Kube
        from fsdp_sdk.k8s.prereqs import Prereqs

        ctx = self.ctx
        path = ctx.kubeconfig_or_fail() if connect else ctx.kubeconfig()
        kube = Kube.from_kubeconfig(path, context=ctx.kube_context, progress=self.progress) if connect else None
        return Prereqs(
            self.config,
            kube,
            kubeconfig=str(path) if path else None,
            context=ctx.kube_context,
            instance=self.resolved.instance,
        )

    def install_prereqs(
        self, *, operator: bool = True, operator_version: str | None = None, api: str | None = None, queue: bool = False
    ) -> list[dict[str, Any]]:
        """Apply etcd and install the job controller on the cluster (idempotent); with ``queue``, Kueue too."""
        return self.prereqs().install(
            operator=operator,
            operator_version=operator_version,
            api=api or self.config.job.api,
            queue=queue,  # Kueue and its queues (issue 42)
            progress=self.progress,
        )

    def prereq_status(self, *, api: str | None = None) -> PrereqStatus:
        """What is installed on the cluster for the job API ``api`` (default ``job.api``), and what is missing."""
        return self.prereqs().status(api=api)

    # ------------------------------------------------------------------ monitoring

    def discovered(self) -> dict[str, Any]:
        """Facts rendering needs from the cluster, when it is already up and reachable through its own kubeconfig:
        whether it runs the Prometheus Operator (``observability.prometheus_operator``, unless the user set it)."""
        obs = self.config.observability
        if self.backend.runs_jobs or not obs.enabled or obs.prometheus_operator is not None:
            return {}
        path = self.ctx.cluster_kubeconfig(self.config)
        if path is None or not path.exists():
            return {}
        from fsdp_sdk.errors import FsdpSdkError
        from fsdp_sdk.k8s.kube import Kube
        from fsdp_sdk.k8s.monitoring import serves_prometheus_operator

        try:
            return {"observability.prometheus_operator": serves_prometheus_operator(Kube.from_kubeconfig(path))}
        except FsdpSdkError:
            return {}  # not reachable (yet): render for a cluster without the operator

    def monitoring(self, *, connect: bool = True, aws_clients: Mapping[str, Any] | None = None) -> Monitoring:
        """The monitoring components of this configuration on its cluster (see :meth:`fsdp_sdk.Client.monitoring`)."""
        from fsdp_sdk.k8s.kube import Kube
        from fsdp_sdk.k8s.monitoring import Monitoring, serves_prometheus_operator

        ctx = self.ctx
        path = ctx.kubeconfig()
        kube = Kube.from_kubeconfig(path, context=ctx.kube_context) if connect else None
        settings = [] if self.config.observability.enabled else [Setting("observability.enabled", True)]
        if kube is not None and self.config.observability.prometheus_operator is None:
            found = serves_prometheus_operator(kube)
            settings.append(
                Setting("observability.prometheus_operator", found, "observability.prometheus_operator", "discovery")
            )
        config = self.config
        if settings:
            config = resolve(config.with_overrides(settings), ctx.plugins, validate_trainer=False)
        ctx.monitoring_components(config)  # refuses unknown names in observability.components
        return Monitoring(
            config,
            ctx.plugins.hooks.monitoring_components(config),
            kube,
            kubeconfig=str(path) if path else None,
            context=ctx.kube_context,
            aws_clients=aws_clients,
        )

    # ------------------------------------------------------------------ down, scale, status

    def down(self, *, dry_run: bool = False, delete_checkpoints: bool = False) -> ClusterStatus:
        """Delete the cluster and the state kept for it (see :meth:`fsdp_sdk.Client.down`)."""
        current = self.backend.describe(self.resolved)
        if not dry_run and current.state != "absent":
            self.ctx.plugins.hooks.before_cluster_delete(self.config, current)
        status = self.backend.delete(self.resolved, dry_run=dry_run, progress=self.progress)
        if not dry_run and current.state != "absent" and not self.backend.runs_jobs:
            self.record_cost("down", self.config, 0)
        if not dry_run:
            self.remember(status)
        if self.backend.eks_cluster and not dry_run:
            from fsdp_sdk.aws.idle_identity import remove_identity

            remove_identity(self.config, progress=self.progress)  # the idle controller's role, policy, association
        store = self.checkpoint_store(self.config)
        if store is None:
            return status
        from fsdp_sdk.aws.checkpoint_bucket import delete_checkpoints as delete_bucket
        from fsdp_sdk.aws.checkpoint_bucket import remove_access

        where = f"s3://{store.bucket}"
        if dry_run:
            kept = "deleted" if delete_checkpoints else "kept"
            return dataclasses.replace(status, details={**status.details, "checkpoint_bucket": f"{where} ({kept})"})
        remove_access(store.cluster, store.region, progress=self.progress)
        if delete_checkpoints:
            gone = delete_bucket(store, progress=self.progress)
            shown = f"{where} (deleted)" if gone else f"{where} (emptied under {store.prefix}, kept: adopted)"
        else:
            shown = f"{where} (kept; 'down --delete-checkpoints' deletes it)"
            self.progress(f"kept the checkpoint bucket {where}")
        return dataclasses.replace(status, details={**status.details, "checkpoint_bucket": shown})

    def scale(self, nodes: int, *, dry_run: bool = False) -> ClusterStatus:
        """Change the number of nodes (see :meth:`fsdp_sdk.Client.scale`)."""
        if nodes < 0:
            raise ConfigError("nodes", f"{nodes} is negative", "pass a number of nodes of 0 or more")
        cluster = self.config.cluster
        if not self.backend.runs_jobs and not cluster.min_nodes <= nodes <= (cluster.max_nodes or nodes):
            raise ConfigError(
                "nodes",
                f"{nodes} is outside cluster.min_nodes..cluster.max_nodes ({cluster.min_nodes}..{cluster.max_nodes})",
                "pick a number in that range, or change cluster.min_nodes / cluster.max_nodes",
            )
        if not self.backend.runs_jobs and nodes > self.backend.describe(self.resolved).nodes:
            # More nodes: the checks of 'up' (quota, reservation) for the cluster at its new size.
            target = self.resolved.with_overrides(
                [Setting("cluster.nodes", nodes, "nodes", "scale")], validate_trainer=False
            )
            results = self.ctx.preflight("up", target)
            for result in results:
                if not result.ok and not result.blocking:
                    self.progress(result.line())
            raise_for_failures(results)
        status = self.backend.resize(self.resolved, nodes, dry_run=dry_run, progress=self.progress)
        if not dry_run and not self.backend.runs_jobs:
            self.record_cost("scale", self.config, nodes)
            self.scale_queue(nodes)  # Kueue's ClusterQueue follows the node group (issue 42)
        if not dry_run:
            self.remember(status)
        return status

    def scale_queue(self, nodes: int) -> None:
        """Size fsdp-sdk's Kueue ClusterQueue to ``nodes`` after a scale (:func:`fsdp_sdk.k8s.queue.scale_quota`:
        nothing without a kubeconfig or a queue, a warning when the cluster cannot be reached)."""
        from fsdp_sdk.k8s.jobs import resolve_kubeconfig
        from fsdp_sdk.k8s.kube import Kube
        from fsdp_sdk.k8s.queue import scale_quota

        ctx = self.ctx

        def connect() -> Kube:
            path = resolve_kubeconfig(ctx.kubeconfig_or_fail())
            return Kube.from_kubeconfig(path, context=ctx.kube_context, progress=self.progress)

        scale_quota(connect, self.config, self.resolved.instance, nodes, progress=self.progress)

    def status(self) -> ClusterStatus:
        """The cluster's current state (see :meth:`fsdp_sdk.Client.status`)."""
        status = self.backend.describe(self.resolved)
        self.remember(status)
        if self.backend.runs_jobs:
            return status
        details = dict(status.details)
        if status.state != "absent":
            details["kubernetes_support"] = self.kubernetes_support_line(status)
        if self.backend.eks_cluster:
            from fsdp_sdk.aws.checkpoint_bucket import bucket_summary
            from fsdp_sdk.errors import FsdpSdkError

            try:
                store = self.checkpoint_store(self.config)
                details["checkpoint_bucket"] = bucket_summary(store) if store is not None else None
            except FsdpSdkError as error:
                details["checkpoint_bucket"] = f"unknown: {error}"
        return dataclasses.replace(status, details=details)

    def remember(self, status: ClusterStatus) -> None:
        """Record what a command just saw of the cluster (``status``, ``up``, ``scale``, ``down``), for ``fsdp-sdk
        clusters`` (:mod:`fsdp_sdk.clusters`), without asking the backend anything more; never fails the command (a
        record is a convenience; the command's result matters).

        An absent cluster is recorded only over an earlier record (a cluster torn down): looking at a cluster that
        never existed leaves the state directory as it was."""
        from fsdp_sdk.clusters import remember, snapshot_path

        config = self.config.cluster
        region = "local" if self.backend.runs_jobs else str(status.details.get("region") or config.region)
        if (
            status.state == "absent"
            and not snapshot_path(config.state_dir, self.backend.name, region, config.name).exists()
        ):
            return
        with contextlib.suppress(Exception):
            remember(config.state_dir, self.snapshot(status))

    def snapshot(
        self,
        status: ClusterStatus,
        *,
        jobs: Sequence[Any] | None = None,
        now: dt.datetime | None = None,
        source: str = "live",
    ) -> ClusterSnapshot:
        """The snapshot of what ``status`` (the backend's) says, with the configuration's facts beside it.

        :param jobs: the cluster's jobs (``RunStatus`` or ``JobStatus``: anything with a ``phase``), when listed.
        """
        from fsdp_sdk import pins
        from fsdp_sdk.clusters import QUEUED_PHASES, RUNNING_PHASES, ClusterSnapshot

        config = self.config
        cluster = config.cluster
        now = now or dt.datetime.now(dt.timezone.utc)
        local = self.backend.runs_jobs
        instance = self.resolved.instance if not local else None
        version = None if local else str(status.details.get("kubernetes_version") or cluster.kubernetes_version)
        release = pins.kubernetes_release(version) if version else None
        usd_per_hour = cost_usd = since = None
        if local:
            usd_per_hour, cost_usd = 0.0, 0.0
        else:
            cost = self.cost(nodes_now=status.nodes if status.state != "absent" else 0, now=now)
            usd_per_hour = 0.0 if status.state == "absent" else cost.usd_per_hour
            cost_usd, since = cost.usd, cost.since
        minutes = cluster.idle_scale_to_zero_minutes or None
        phases = [str(getattr(job, "phase", "")) for job in jobs] if jobs is not None else None
        return ClusterSnapshot(
            name=cluster.name,
            backend=self.backend.name,
            region="local" if local else str(status.details.get("region") or cluster.region),
            state=status.state,
            observed_at=now,
            nodes=status.nodes,
            max_nodes=None if local else cluster.max_nodes,
            instance_type=None if local else cluster.instance_type,
            gpu=f"{instance.gpu_count}x {instance.gpu_model} {instance.gpu_memory_gib:g} GiB" if instance else None,
            kubernetes_version=version,
            standard_support_until=str(release.end_of_standard) if release is not None else None,
            usd_per_hour=usd_per_hour,
            cost_usd=cost_usd,
            since=since,
            idle_minutes=None if local else minutes,
            jobs_running=sum(phase in RUNNING_PHASES for phase in phases) if phases is not None else None,
            jobs_queued=sum(phase in QUEUED_PHASES for phase in phases) if phases is not None else None,
            source=source,
        )

    def kubernetes_support_line(self, status: ClusterStatus) -> str:
        """When the cluster's Kubernetes version leaves (or left) EKS standard support, in one line."""
        from fsdp_sdk import pins

        version = str(status.details.get("kubernetes_version") or self.config.cluster.kubernetes_version)
        release, on = pins.kubernetes_release(version), pins.today()
        if release is None:
            return f"Kubernetes {version}: not in the EKS calendar of fsdp-sdk's pins table ({pins.table_date()})"
        if release.state(on) == "standard":
            return f"Kubernetes {version}: standard support until {release.end_of_standard}"
        if release.state(on) == "extended":
            return (
                f"Kubernetes {version}: extended support (${pins.control_plane_usd_per_hour(version, on):.2f}/h) "
                f"since {release.end_of_standard}, until {release.end_of_extended}; upgrade the cluster"
            )
        return f"Kubernetes {version}: past EKS extended support since {release.end_of_extended}; upgrade the cluster"

    def merge_kubeconfig(self, target: str | os.PathLike[str] | None = None) -> Path:
        """Add the cluster's kubeconfig to ``target`` (default ``~/.kube/config``) and make it the current context."""
        from fsdp_sdk.aws.kubeconfig import merge_kubeconfig

        path = self.backend.kubeconfig(self.config)
        if path is None or not Path(path).exists():
            raise BackendError(
                f"backend {self.backend.name!r} has no kubeconfig for cluster {self.config.cluster.name!r}; "
                "run 'fsdp-sdk up' first"
            )
        return merge_kubeconfig(Path(path), Path(target).expanduser() if target else None)

    # ------------------------------------------------------------------ cost

    def record_cost(self, event: str, config: Config, nodes: int, plan: Plan | None = None) -> None:
        """Add a line to the cluster's cost ledger (:mod:`fsdp_sdk.costs`): the nodes from now on, at which prices."""
        import datetime as dt

        from fsdp_sdk.costs import LedgerEntry, read_ledger, record

        cluster, state_dir = config.cluster.name, config.cluster.state_dir
        previous = read_ledger(state_dir, cluster)
        if plan is not None:
            price = self.ctx.hourly_price().usd_per_hour if "price" in plan.details else None
            if price is None:
                price = self.resolved.instance.on_demand_usd_per_hour
            total = plan.hourly_cost_usd
            fixed = total - price * config.cluster.nodes if total is not None and price is not None else 0.0
        elif previous:
            price, fixed = previous[-1].usd_per_node_hour, previous[-1].fixed_usd_per_hour
        else:
            price, fixed = self.resolved.instance.on_demand_usd_per_hour, 0.0
        entry = LedgerEntry(
            dt.datetime.now(dt.timezone.utc), event, nodes, price, max(0.0, fixed), config.cluster.instance_type
        )
        try:
            record(state_dir, cluster, entry)
        except OSError as error:
            self.progress(f"could not record the cost ledger: {error}")

    def cost(self, *, now: dt.datetime | None = None, nodes_now: int | None = None) -> ClusterCost:
        """What the cluster has cost since ``up``, and per hour now (see :meth:`fsdp_sdk.Client.cost`)."""
        import datetime as dt

        from fsdp_sdk.costs import ClusterCost, cluster_cost, read_ledger

        if self.backend.runs_jobs:
            return ClusterCost(0.0, 0.0, 0.0, None, 0.0)
        entries = read_ledger(self.config.cluster.state_dir, self.config.cluster.name)
        return cluster_cost(entries, now=now or dt.datetime.now(dt.timezone.utc), nodes_now=nodes_now)

    # ------------------------------------------------------------------ the cluster's side of a job (ClusterSite)

    def job_resolved(self, resolved: Resolved, *, strict: bool = True) -> Resolved:
        """``resolved`` with ``cluster.checkpoint_bucket`` filled in (the derived name) where an EKS backend's job
        would checkpoint to it: what ``up`` created, found again from the account id.

        :param strict: raise when the account cannot be found (no credentials); off, warn and render without it.
        """
        config = resolved.config
        if not self.backend.eks_cluster or config.cluster.checkpoint_bucket:
            return resolved
        from fsdp_sdk.k8s.render import checkpoint_dir

        trial = config.with_overrides([Setting("cluster.checkpoint_bucket", "fsdp-sdk")])
        if checkpoint_dir(trial) is None:
            return resolved
        from fsdp_sdk.aws.checkpoint_plan import plan_store
        from fsdp_sdk.errors import FsdpSdkError

        try:
            account = self.account
        except FsdpSdkError as error:
            if strict:
                raise
            import warnings

            from fsdp_sdk.k8s.render import RenderWarning

            warnings.warn(
                RenderWarning(
                    f"the checkpoint bucket is unknown ({error}): the preview keeps checkpoints on the nodes"
                ),
                stacklevel=3,
            )
            return resolved
        bucket = plan_store(config, account=account).bucket
        return resolved.with_overrides(
            [Setting("cluster.checkpoint_bucket", bucket, "cluster.checkpoint_bucket", "up")], validate_trainer=False
        )

    def check_reservation(self, config: Config) -> None:
        """Refuse a job with more workers than the capacity reservation of an EKS cluster's GPU node group holds:
        the group targets that reservation alone, so the nodes beyond it never launch (one ``DescribeCapacityReservations``)."""
        workers, name = config.job.num_workers, config.cluster.name
        if self.backend.eks_cluster and config.cluster.capacity_reservation_id:
            from fsdp_sdk.aws.preflight import reservation_kind, reservation_size

            held = reservation_size(config)
            if held is not None and workers > held:
                kind = reservation_kind(config)
                origin = config.origins.get("job.num_workers")
                raise ConfigError(
                    origin.name if origin else "job.num_workers",
                    f"the job needs {workers} nodes but the {kind} {config.cluster.capacity_reservation_id} of "
                    f"cluster {name} holds {held} instances",
                    f"run fewer workers (--workers {held}) or move the cluster to a reservation of {workers} or more "
                    "(cluster.capacity_reservation_id)",
                    source=origin.source if origin else None,
                )

    def ensure_nodes(self, resolved: Resolved, *, scale: bool, dry_run: bool) -> None:
        """Refuse a job with more workers than the running cluster has nodes, or with ``scale`` scale it first."""
        from fsdp_sdk.k8s.render import check_node_count

        config = resolved.config
        check_node_count(config)  # more than the cluster can ever have: scaling would not help
        workers, name = config.job.num_workers, config.cluster.name
        self.check_reservation(config)
        status = self.backend.describe(resolved)
        if status.state == "absent" or status.nodes >= workers:
            return
        if status.state == "ready" and status.nodes == 0 and not dry_run:
            # scaled to 0 by the idle controller: back to cluster.nodes (at least the job's), from the CLI and here
            wanted = max(self.config.cluster.nodes, workers)
            self.progress(f"the GPU nodes of cluster {status.cluster!r} are at 0: scaling them to {wanted}")
            self.scale(wanted)
            return
        have = f"the job needs {workers} nodes but cluster {name} has {status.nodes}"
        if not scale:
            fewer = f", or run fewer workers (--workers {status.nodes})" if status.nodes else ""
            raise ConfigError("cluster.nodes", have, f"add --scale to scale it to {workers} nodes first{fewer}")
        if dry_run:
            self.progress(f"{have}: it would be scaled to {workers} nodes first (dry run: not scaled)")
            return
        self.progress(f"{have}: scaling it to {workers} nodes first")
        self.scale(workers)

    def check_fits(self, resolved: Resolved | None = None) -> Estimate | None:
        """Refuse a job the estimate says will not fit in its GPUs' memory (:meth:`Context.check_fits`)."""
        return self.ctx.check_fits(resolved)
