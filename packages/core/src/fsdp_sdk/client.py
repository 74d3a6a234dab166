"""The library API: everything the CLI does, as Python calls.

::

    from fsdp_sdk import Client

    client = Client.from_sources(config_file="cluster.yaml", env_file=".env",
                                 overrides={"cluster.backend": "local"})
    plan = client.plan()            # preflight checks, then what up() will do (no change)
    print(plan.steps)
    client.up(plan)                 # acts on exactly that plan
    result = client.run(trainer_overrides={"model.preset": "tiny", "train.steps": 20})
    print(result.summary["final_loss"])
    client.down()

The CLI is a thin layer over this class: it builds one :class:`Client` per
command from its flags (the configuration is read and resolved once) and
prints what the methods return. Data flows one way: configuration -> plan ->
rendered objects -> actions.

A platform embedding the SDK builds a hermetic client from its own data,
``Client.from_dict({...}, plugins=...)``: no file, no environment variable, no
plugin it was not given (``docs/embedding.md`` is the guide).
"""

from __future__ import annotations

import dataclasses
import functools
import os
from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from fsdp_sdk.backends.base import ClusterBackend, ClusterStatus, Plan, ProgressCallback, no_progress
from fsdp_sdk.config import Config, Setting, load_config, parse_trainer_args
from fsdp_sdk.errors import BackendError, ConfigError
from fsdp_sdk.plugins import PluginInfo, Plugins, build_plugins
from fsdp_sdk.preflight import PreflightResult, raise_for_failures
from fsdp_sdk.resolved import Resolved

if TYPE_CHECKING:
    import datetime as dt

    from fsdp_sdk.aws.capacity_block import BlockSchedule
    from fsdp_sdk.aws.checkpoint_bucket import BucketUsage, CheckpointStore
    from fsdp_sdk.aws.pricing import Price
    from fsdp_sdk.costs import ClusterCost, JobCost
    from fsdp_sdk.estimate import Estimate
    from fsdp_sdk.instance_types import InstanceType
    from fsdp_sdk.k8s.cluster_objects import Prerequisite
    from fsdp_sdk.k8s.image import ImageBuild, ImagePush
    from fsdp_sdk.k8s.jobs import JobClient, JobStatus
    from fsdp_sdk.k8s.monitoring import Monitoring
    from fsdp_sdk.k8s.prereqs import Prereqs, PrereqStatus
    from fsdp_sdk.k8s.validate import CrdSchema
    from fsdp_sdk.launch import LaunchPlan, LaunchResult
    from fsdp_sdk.monitoring import MonitoringComponent
    from fsdp_sdk.runner import DryRun, JobRunner, RunStatus
    from fsdp_sdk.runs import JobRef, RecordedRun, RunEvent, RunResult
    from fsdp_sdk.user_code import TrainHandle

__all__ = ["Client", "parse_trainer_args"]


class Client:
    """A resolved configuration bound to its backend and plugins.

    Build one with :meth:`from_sources` (files, ``.env``, ``FSDP_SDK_*`` variables, like the CLI) or,
    for a platform embedding the SDK, :meth:`from_dict` (hermetic: nothing but the given data and plugins).

    :param config: the configuration; it is resolved here, once (:attr:`resolved`: the configuration, its
        instance type and the plugin set, what the backend, the preflight hooks, the renderers and the estimate
        receive).
    :param plugins: the plugin set; defaults to the installed plugins (:func:`~fsdp_sdk.plugins.build_plugins`,
        a set of this client's own; the CLI passes its process-wide one).
    :param progress: receives one line per step of long operations (the CLI prints them on stderr).
    :param kubeconfig: the kubeconfig of the cluster jobs go to; defaults to ``cluster.kubeconfig``, the
        backend's, then ``$KUBECONFIG``, then ``~/.kube/config``.
    :param kube_context: the kubeconfig context (default: its current one).
    :param hermetic: never fall back to ``$KUBECONFIG`` or ``~/.kube/config`` (see :meth:`from_dict`).
    :raises ConfigError: the configuration is invalid.
    """

    def __init__(
        self,
        config: Config,
        *,
        plugins: Plugins | None = None,
        progress: ProgressCallback | None = None,
        kubeconfig: str | os.PathLike[str] | None = None,
        kube_context: str | None = None,
        hermetic: bool = False,
    ) -> None:
        self.loaded_plugins = plugins if plugins is not None else build_plugins()
        #: The configuration resolved once, with its instance type and the plugin set.
        self.resolved = Resolved.of(config, self.loaded_plugins)
        self.config = self.resolved.config
        self.progress: ProgressCallback = progress or no_progress
        self.kube_context = kube_context
        self.hermetic = hermetic
        self._kubeconfig = Path(kubeconfig) if kubeconfig else None

    @classmethod
    def from_dict(
        cls,
        data: Mapping[str, Any],
        *,
        plugins: Plugins | None = None,
        progress: ProgressCallback | None = None,
        kubeconfig: str | os.PathLike[str] | None = None,
        kube_context: str | None = None,
    ) -> Client:
        """A hermetic client: its configuration is ``data`` and nothing else.

        Unlike :meth:`from_sources`, it reads no file (no YAML, no ``./.env``), no environment variable
        (no ``FSDP_SDK_*``, not even ``$FSDP_SDK_STATE_DIR``: ``cluster.state_dir`` is ``data``'s or
        ``~/.local/state/fsdp-sdk``), loads no third-party plugin unless given one in ``plugins``, and never
        falls back to ``$KUBECONFIG`` or ``~/.kube/config``: jobs go to the cluster of ``kubeconfig``,
        ``cluster.kubeconfig`` or the backend's kubeconfig. What runs underneath keeps its own environment:
        boto3 finds AWS credentials as it always does, and local runs' processes inherit this process's.

        :param data: the configuration as nested dicts, like the YAML file:
            ``{"cluster": {...}, "job": {...}, "trainer": {"model": {"preset": "tiny"}}}``, plus plugin sections.
        :param plugins: the plugin set; defaults to the built-in plugins alone
            (``build_plugins(autoload=False)``), never the process-wide set.
        :param progress: progress callback (default: none; the client prints nothing).
        :param kubeconfig: see :class:`Client`.
        :param kube_context: see :class:`Client`.
        :raises ConfigError: a key is unknown or a value invalid (the message names it as ``data`` spells it).
        """
        from fsdp_sdk.config import DEFAULT_STATE_DIR
        from fsdp_sdk.plugins import build_plugins

        plugins = plugins if plugins is not None else build_plugins(autoload=False)
        config = Config.from_dict(data, source="Client.from_dict", sections=plugins.settings)
        if "cluster.state_dir" not in config.origins:
            config.cluster.state_dir = Path(DEFAULT_STATE_DIR).expanduser()
        return cls(
            config, plugins=plugins, progress=progress, kubeconfig=kubeconfig, kube_context=kube_context, hermetic=True
        )

    @classmethod
    def from_sources(
        cls,
        config_file: str | os.PathLike[str] | None = None,
        env_file: str | os.PathLike[str] | None = None,
        overrides: Mapping[str, Any] | Iterable[Setting] | None = None,
        *,
        environ: Mapping[str, str] | None = None,
        read_default_env_file: bool = True,
        plugins: Plugins | None = None,
        progress: ProgressCallback | None = None,
        kubeconfig: str | os.PathLike[str] | None = None,
        kube_context: str | None = None,
    ) -> Client:
        """Read the configuration from every source (see :mod:`fsdp_sdk.config`) and build a client.

        :param config_file: a YAML file.
        :param env_file: a ``.env`` file; without one, ``./.env`` is read when present.
        :param overrides: highest-priority settings, e.g. ``{"cluster.backend": "local"}``.
        :param environ: where ``FSDP_SDK_*`` variables are read; defaults to ``os.environ``.
        :param read_default_env_file: read ``./.env`` when ``env_file`` is not given.
        :param plugins: the plugin set (its settings sections are read from the sources too).
        :param progress: progress callback.
        :param kubeconfig: see :class:`Client`.
        :param kube_context: see :class:`Client`.
        """
        plugins = plugins if plugins is not None else build_plugins()
        config = load_config(
            config_file,
            env_file,
            overrides,
            environ=environ,
            read_default_env_file=read_default_env_file,
            sections=plugins.settings,
        )
        return cls(config, plugins=plugins, progress=progress, kubeconfig=kubeconfig, kube_context=kube_context)

    def __repr__(self) -> str:
        return f"<Client backend={self.config.cluster.backend!r} cluster={self.config.cluster.name!r}>"

    # ------------------------------------------------------------------ cluster

    @functools.cached_property
    def backend(self) -> ClusterBackend:
        """The backend named by ``cluster.backend``."""
        return self.loaded_plugins.backends.get(self.config.cluster.backend)()

    def preflight(self, action: str = "up") -> list[PreflightResult]:
        """Run every plugin's preflight checks for this configuration (they read, never change).

        :param action: what the checks are for: ``up``, ``run`` or ``submit`` (see ``fsdp_sdk_preflight``).
        """
        return self.loaded_plugins.hooks.preflight(self.resolved, action)

    def _checked(self, action: str = "up", *, collect: bool = False) -> list[PreflightResult]:
        """Run the checks, show the failed warnings as progress, and raise for the failed errors (unless
        ``collect``: then they stay in the results, for a dry run to show beside the plan)."""
        results = self.preflight(action)
        for result in results:
            if not result.ok and not result.blocking:
                self.progress(result.line())
        if not collect:
            raise_for_failures(results)
        return results

    def _pending_block(self) -> BlockSchedule | None:
        """The cluster's Capacity Block when it has not started yet (an EKS backend's; reads only)."""
        if not self.backend.eks_cluster:
            return None
        from fsdp_sdk.aws.capacity_block import pending_block

        return pending_block(self.config)

    def _filled(self, results: Sequence[PreflightResult]) -> dict[str, Any]:
        """The values preflight checks suggest for fields the user left unset."""
        filled: dict[str, Any] = {}
        for result in results:
            for path, value in result.suggested.items():
                if path not in self.config.origins and path not in filled:
                    filled[path] = value
        return filled

    def _config_with(self, filled: Mapping[str, Any]) -> Config:
        return self._resolved_with(filled).config

    def _resolved_with(self, filled: Mapping[str, Any]) -> Resolved:
        if not filled:
            return self.resolved
        settings = [Setting(path, value, path, "preflight") for path, value in filled.items()]
        return self.resolved.with_overrides(settings, validate_trainer=False)

    def _kubernetes_support(self) -> dict[str, Any]:
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
        """What :meth:`up` will do; changes nothing.

        Runs the preflight checks first (reads only; a failed check raises), fills in the values
        they suggest for settings left unset (the plan's ``filled``), then asks the backend for
        its plan and adds what core does once the cluster is up: the kubeconfig, etcd and the
        Training Operator, and the monitoring components when ``observability.enabled``.

        :param preflight: run the preflight checks (off: plan from the configuration alone).
        :param preview: also ask the backend's tool what the plan would change, reading only
            (:meth:`~fsdp_sdk.backends.base.ClusterBackend.preview`: ``terraform plan``); ``up --dry-run`` does.
        :param collect: keep failed checks in the plan's ``preflight`` instead of raising, and plan anyway
            (``up --dry-run``: the whole plan shows even without the backend's tool or credentials); the
            backend's read-only preview is skipped when a check blocks.
        :raises PreflightError: a check failed (unless ``collect``).
        """
        support = None if self.backend.runs_jobs else self._kubernetes_support()
        results = self._checked(collect=collect) if preflight else []
        if any(r.blocking for r in results):
            preview = False
        filled = self._filled(results)
        filled.update(self._discovered())
        # a Capacity Block not started yet is the one warning of that check with nothing else wrong
        waiting = any(r.check == "capacity-reservation" and not r.ok and not r.blocking for r in results)
        block = self._pending_block() if waiting and not any(r.blocking for r in results) else None
        if block is not None:
            filled.update(block.filled(self.config))  # created empty, scaled when the block starts
        store = self._planned_store(filled, inspect=preflight, collect=collect) if self.backend.eks_cluster else None
        if store is not None and not store.named:
            filled["cluster.checkpoint_bucket"] = store.bucket
        resolved = self._resolved_with(filled)
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
            prerequisites = self._prerequisites(config, plan.kubernetes)
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
            price = self.hourly_price(resolved)
            table = resolved.instance.on_demand_usd_per_hour
            if price.source == "price-list-api" and price.usd_per_hour is not None and cost is not None and table:
                cost = cost - table * config.cluster.nodes + price.usd_per_hour * config.cluster.nodes
                details["price"] = price.describe()
        estimate = self._side_estimate(resolved)
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

    def up(self, plan: Plan | None = None, *, dry_run: bool = False) -> ClusterStatus:
        """Bring the cluster up as ``plan`` says (by default :meth:`plan`), ready for jobs.

        The backend applies its part of the plan; then, for clusters with Kubernetes, core
        applies the plan's Kubernetes objects (etcd, monitoring) and installs the Training
        Operator, and plugins hear ``fsdp_sdk_cluster_created``.

        :param plan: a plan from :meth:`plan` (what ``up --dry-run`` showed).
        :param dry_run: plan only; return the current status.
        :raises PreflightError: a preflight check failed (nothing was created).
        :raises BackendError: the backend could not create the cluster.
        """
        plan = plan or self.plan()
        config = self._config_with(plan.filled)
        if dry_run:
            return self.backend.status(config)
        if plan.backend != self.backend.name or plan.cluster != config.cluster.name:
            raise ConfigError(
                "plan", f"was made for {plan.backend}/{plan.cluster}", "make the plan with this client's plan()"
            )
        status = self.backend.apply(config, plan, progress=self.progress)
        if "capacity_block" in plan.details and self.backend.eks_cluster:
            from fsdp_sdk.aws.capacity_block import BlockSchedule, schedule_scaling
            from fsdp_sdk.k8s.idle import gpu_nodegroup

            block = BlockSchedule.from_dict(plan.details["capacity_block"])
            schedule_scaling(config, block, gpu_nodegroup(config), progress=self.progress)
        if "checkpoints" in plan.details and self.backend.eks_cluster:
            self._make_checkpoint_store(config, plan)
        if not self.backend.runs_jobs:
            self._prepare(config, plan)
            if config.cluster.idle_scale_to_zero_minutes:
                from fsdp_sdk.k8s.idle import install_identity

                install_identity(config, progress=self.progress)
            self._record_cost("up", config, status.nodes, plan)
        self.loaded_plugins.hooks.cluster_created(config, status)
        self._remember(status)
        return status

    # ------------------------------------------------------------------ checkpoint bucket

    @functools.cached_property
    def _account(self) -> str:
        from fsdp_sdk.aws.checkpoint_bucket import account_id

        return account_id(self.config.cluster.region)

    def _checkpoint_store(self, config: Config, *, inspect: bool = False) -> CheckpointStore | None:
        """The checkpoint bucket and access of an EKS backend's cluster (:mod:`fsdp_sdk.aws.checkpoint_bucket`);
        ``None`` for other backends. The bucket is ``cluster.checkpoint_bucket``, else named after the account.

        :param inspect: look at the bucket (reads only): refuses one in another region, or one these credentials
            cannot use, before anything is created.
        """
        if not self.backend.eks_cluster:
            return None
        from fsdp_sdk.aws.checkpoint_bucket import inspect_bucket, plan_store

        account = None if config.cluster.checkpoint_bucket else self._account
        store = plan_store(config, account=account)
        return inspect_bucket(store) if inspect else store

    def _planned_store(self, filled: Mapping[str, Any], *, inspect: bool, collect: bool) -> CheckpointStore | None:
        """The checkpoint store a plan shows; when collecting (``up --dry-run``), a store that cannot be found
        without credentials is left out of the plan with a warning instead of stopping it."""
        from fsdp_sdk.errors import FsdpSdkError

        try:
            return self._checkpoint_store(self._config_with(filled), inspect=inspect)
        except FsdpSdkError as error:
            if not collect:
                raise
            self.progress(f"warning: the checkpoint bucket is left out of the plan: {error}")
            return None

    def _make_checkpoint_store(self, config: Config, plan: Plan) -> None:
        """Create or adopt the plan's checkpoint bucket, then the pods' role and Pod Identity association."""
        from fsdp_sdk.aws.checkpoint_bucket import CheckpointStore, ensure_access, ensure_bucket

        store = CheckpointStore.from_dict(plan.details["checkpoints"])
        ensure_bucket(store, progress=self.progress)
        ensure_access(store, progress=self.progress)

    def _job_resolved(self, resolved: Resolved, *, strict: bool = True) -> Resolved:
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
        from fsdp_sdk.aws.checkpoint_bucket import plan_store
        from fsdp_sdk.errors import FsdpSdkError

        try:
            account = self._account
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

    def checkpoint_usage(self) -> tuple[CheckpointStore, list[BucketUsage] | None] | None:
        """The checkpoint bucket (as found: absent, ours, adopted) and what ``down(delete_checkpoints=True)`` would
        delete from it, by job prefix (``None`` when the bucket does not exist); ``None`` for backends without one."""
        from fsdp_sdk.aws.checkpoint_bucket import bucket_usage, inspect_bucket

        store = self._checkpoint_store(self.config)
        if store is None:
            return None
        store = inspect_bucket(store)
        return store, bucket_usage(store) if store.found != "absent" else None

    def _prerequisites(self, config: Config, backend_objects: Sequence[Mapping[str, Any]] = ()) -> list[Prerequisite]:
        """What core applies to a new Kubernetes cluster (pure): the backend's objects, etcd, the Training
        Operator, monitoring (:func:`fsdp_sdk.k8s.cluster_objects.cluster_prerequisites`)."""
        from fsdp_sdk.k8s.cluster_objects import cluster_prerequisites

        return cluster_prerequisites(config, backend_objects, self.monitoring_components(config))

    def _prepare(self, config: Config, plan: Plan) -> None:
        """Make a new Kubernetes cluster ready for jobs: the plan's objects, as shown, then the rest of the
        prerequisites rendered from the same configuration (the job controller of ``job.api``: the Training
        Operator, or Kubeflow Trainer v2 and fsdp-sdk's runtime; EKS add-ons)."""
        from fsdp_sdk.k8s.kube import Kube
        from fsdp_sdk.k8s.prereqs import install_prerequisites

        path = self._kubeconfig or config.cluster.kubeconfig or self.backend.kubeconfig(config)
        if path is None:
            return
        kube = Kube.from_kubeconfig(path, context=self.kube_context, progress=self.progress)
        install_prerequisites(
            self._prerequisites(config),
            kube,
            objects=plan.kubernetes,
            kubeconfig=str(path),
            context=self.kube_context,
            eks_cluster=(config.cluster.name, config.cluster.region),
            progress=self.progress,
        )

    def down(self, *, dry_run: bool = False, delete_checkpoints: bool = False) -> ClusterStatus:
        """Delete the cluster and the state kept for it; deleting an absent cluster is not an error.

        On EKS backends the pods' checkpoint role goes with the cluster (its Pod Identity associations with the
        EKS cluster); the checkpoint bucket stays, unless ``delete_checkpoints``.

        :param dry_run: change nothing.
        :param delete_checkpoints: also empty and delete the checkpoint bucket (of an adopted bucket, only the
            objects under the job namespace's prefix: the bucket stays). :meth:`checkpoint_usage` says what that is.
        """
        current = self.backend.status(self.config)
        if not dry_run and current.state != "absent":
            self.loaded_plugins.hooks.before_cluster_delete(self.config, current)
        status = self.backend.delete(self.resolved, dry_run=dry_run, progress=self.progress)
        if not dry_run and current.state != "absent" and not self.backend.runs_jobs:
            self._record_cost("down", self.config, 0)
        if not dry_run:
            self._remember(status)
        if self.backend.eks_cluster and not dry_run:
            from fsdp_sdk.k8s.idle import remove_identity

            remove_identity(self.config, progress=self.progress)  # the idle controller's role, policy, association
        store = self._checkpoint_store(self.config)
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
        """Change the number of nodes.

        :param nodes: the wanted number of nodes, within ``cluster.min_nodes..cluster.max_nodes``.
        :param dry_run: validate only.
        :raises ConfigError: ``nodes`` is negative.
        """
        if nodes < 0:
            raise ConfigError("nodes", f"{nodes} is negative", "pass a number of nodes of 0 or more")
        cluster = self.config.cluster
        if not self.backend.runs_jobs and not cluster.min_nodes <= nodes <= (cluster.max_nodes or nodes):
            raise ConfigError(
                "nodes",
                f"{nodes} is outside cluster.min_nodes..cluster.max_nodes ({cluster.min_nodes}..{cluster.max_nodes})",
                "pick a number in that range, or change cluster.min_nodes / cluster.max_nodes",
            )
        if not self.backend.runs_jobs and nodes > self.backend.status(self.config).nodes:
            # More nodes: the checks of 'up' (quota, reservation) for the cluster at its new size.
            target = self.resolved.with_overrides(
                [Setting("cluster.nodes", nodes, "nodes", "scale")], validate_trainer=False
            )
            results = self.loaded_plugins.hooks.preflight(target, "up")
            for result in results:
                if not result.ok and not result.blocking:
                    self.progress(result.line())
            raise_for_failures(results)
        status = self.backend.scale(self.config, nodes, dry_run=dry_run, progress=self.progress)
        if not dry_run and not self.backend.runs_jobs:
            self._record_cost("scale", self.config, nodes)
            from fsdp_sdk.k8s.queue import scale_quota

            scale_quota(self, nodes)  # Kueue's ClusterQueue follows the node group (issue 42)
        if not dry_run:
            self._remember(status)
        return status

    def status(self) -> ClusterStatus:
        """The cluster's current state; for an EKS cluster, also when its Kubernetes version leaves standard
        support (``details["kubernetes_support"]``, from the pins table's calendar), and its checkpoint bucket
        (``details["checkpoint_bucket"]``)."""
        status = self.backend.status(self.config)
        self._remember(status)
        if self.backend.runs_jobs:
            return status
        details = dict(status.details)
        if status.state != "absent":
            details["kubernetes_support"] = self._kubernetes_support_line(status)
        if self.backend.eks_cluster:
            from fsdp_sdk.aws.checkpoint_bucket import bucket_summary
            from fsdp_sdk.errors import FsdpSdkError

            try:
                store = self._checkpoint_store(self.config)
                details["checkpoint_bucket"] = bucket_summary(store) if store is not None else None
            except FsdpSdkError as error:
                details["checkpoint_bucket"] = f"unknown: {error}"
        return dataclasses.replace(status, details=details)

    def _remember(self, status: ClusterStatus) -> None:
        """Record what was just seen of the cluster, for ``fsdp-sdk clusters`` (:mod:`fsdp_sdk.clusters`)."""
        from fsdp_sdk.clusters import record_status

        record_status(self, status)

    def _kubernetes_support_line(self, status: ClusterStatus) -> str:
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

    def _record_cost(self, event: str, config: Config, nodes: int, plan: Plan | None = None) -> None:
        """Add a line to the cluster's cost ledger (:mod:`fsdp_sdk.costs`): the nodes from now on, at which prices."""
        import datetime as dt

        from fsdp_sdk.costs import LedgerEntry, read_ledger, record

        cluster, state_dir = config.cluster.name, config.cluster.state_dir
        previous = read_ledger(state_dir, cluster)
        if plan is not None:
            price = self.hourly_price().usd_per_hour if "price" in plan.details else None
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
        """What the cluster has cost since ``up`` (GPU node-hours x the plan's price, plus the control plane and
        system nodes), and per hour now; see :mod:`fsdp_sdk.costs`.

        :param now: the time to count to (default: now).
        :param nodes_now: the GPU nodes observed now (``status().nodes``), for the hourly rate: the idle controller
            may have scaled them to 0 since the ledger's last entry.
        """
        import datetime as dt

        from fsdp_sdk.costs import ClusterCost, cluster_cost, read_ledger

        if self.backend.runs_jobs:
            return ClusterCost(0.0, 0.0, 0.0, None, 0.0)
        entries = read_ledger(self.config.cluster.state_dir, self.config.cluster.name)
        return cluster_cost(entries, now=now or dt.datetime.now(dt.timezone.utc), nodes_now=nodes_now)

    def job_cost(
        self, job: JobStatus | RunStatus, *, now: dt.datetime | None = None, usd_per_node_hour: float | None = None
    ) -> JobCost:
        """What a job has cost: its nodes x its hours (creation to end, or now) x the price of a node-hour
        (:meth:`hourly_price`, the plan's source); a local run costs nothing.

        :param job: the job's status (``client.jobs.status(name)``, or the runner's ``status(name)``).
        :param now: the time to count to for a job still running (default: now).
        :param usd_per_node_hour: the price to use (default: :meth:`hourly_price`'s; pass it to price many jobs).
        """
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
            usd_per_node_hour=usd_per_node_hour if usd_per_node_hour is not None else self.hourly_price().usd_per_hour,
            now=now,
        )

    def kubeconfig(self) -> Path | None:
        """The kubeconfig jobs use: the one given to the client, else ``cluster.kubeconfig``, else the backend's (when
        it exists), else ``$KUBECONFIG``; ``None`` leaves the choice to the Kubernetes client (``~/.kube/config``)."""
        if self._kubeconfig is not None:
            return self._kubeconfig
        if self.config.cluster.kubeconfig is not None:
            return Path(self.config.cluster.kubeconfig)
        path = self.backend.kubeconfig(self.config)
        if path is not None and Path(path).exists():
            return Path(path)
        if self.hermetic:
            return None
        environ = os.environ.get("KUBECONFIG", "").split(os.pathsep)[0]
        return Path(environ) if environ else None

    def _kubeconfig_or_fail(self) -> Path | None:
        """:meth:`kubeconfig`; a hermetic client without one refuses rather than read ``~/.kube/config``."""
        path = self.kubeconfig()
        if path is None and self.hermetic:
            raise ConfigError(
                "kubeconfig",
                "this client is hermetic (Client.from_dict), so it reads neither $KUBECONFIG nor ~/.kube/config",
                "pass kubeconfig= to Client.from_dict(), or set cluster.kubeconfig",
            )
        return path

    def hourly_price(self, resolved: Resolved | None = None) -> Price:
        """The on-demand price of ``cluster.instance_type`` in ``cluster.region``: the AWS Price List's when
        credentials allow it (cached for a day under the state directory), else the instance type's dated table.

        :param resolved: another resolved value than the client's (a plan's, with the values preflight filled).
        """
        from fsdp_sdk.aws.pricing import hourly_price

        resolved = resolved or self.resolved
        config = resolved.config
        return hourly_price(resolved.instance, config.cluster.region, state_dir=Path(config.cluster.state_dir))

    def merge_kubeconfig(self, target: str | os.PathLike[str] | None = None) -> Path:
        """Add the cluster's kubeconfig to ``target`` (default ``~/.kube/config``) and make it the current context.

        :raises BackendError: the backend has no kubeconfig for this cluster (not up, or no Kubernetes).
        """
        from fsdp_sdk.aws.kubeconfig import merge_kubeconfig

        path = self.backend.kubeconfig(self.config)
        if path is None or not Path(path).exists():
            raise BackendError(
                f"backend {self.backend.name!r} has no kubeconfig for cluster {self.config.cluster.name!r}; "
                "run 'fsdp-sdk up' first"
            )
        return merge_kubeconfig(Path(path), Path(target).expanduser() if target else None)

    # ------------------------------------------------------------------ preparing a cluster

    def prereqs(self, *, connect: bool = True) -> Prereqs:
        """The cluster prerequisites (etcd, the Training Operator) of this configuration.

        :param connect: connect to the cluster (off: rendering and dry runs only).
        """
        from fsdp_sdk.k8s.kube import Kube
        from fsdp_sdk.k8s.prereqs import Prereqs

        path = self._kubeconfig_or_fail() if connect else self.kubeconfig()
        kube = Kube.from_kubeconfig(path, context=self.kube_context, progress=self.progress) if connect else None
        return Prereqs(
            self.config,
            kube,
            kubeconfig=str(path) if path else None,
            context=self.kube_context,
            plugins=self.loaded_plugins,
        )

    def install_prereqs(
        self, *, operator: bool = True, operator_version: str | None = None, api: str | None = None, queue: bool = False
    ) -> list[dict[str, Any]]:
        """Apply etcd and install the job controller on the cluster (idempotent).

        :param operator: install the job controller too.
        :param operator_version: its release tag (default: the pinned one).
        :param api: ``pytorchjob`` (the Training Operator) or ``trainjob`` (Kubeflow Trainer v2); default ``job.api``.
        :param queue: also Kueue and fsdp-sdk's queues sized to the GPU node group (:mod:`fsdp_sdk.k8s.queue`).
        """
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

    def monitoring_components(self, config: Config | None = None) -> list[MonitoringComponent]:
        """The monitoring components plugins render for this configuration (pure), filtered by
        ``observability.components``; none when ``observability.enabled`` is off."""
        config = config or self.config
        if not config.observability.enabled:
            return []
        components = self.loaded_plugins.hooks.monitoring_components(config)
        wanted = set(config.observability.components)
        unknown = wanted - {c.name for c in components}
        if unknown:
            known = ", ".join(sorted(c.name for c in components)) or "none (is fsdp-sdk-observability installed?)"
            raise ConfigError(
                "observability.components", f"unknown component {sorted(unknown)[0]!r}", f"choose from: {known}"
            )
        return [c for c in components if c.name in wanted or (not wanted and c.default)]

    def _discovered(self) -> dict[str, Any]:
        """Facts rendering needs from the cluster, when it is already up and reachable through its own kubeconfig:
        whether it runs the Prometheus Operator (``observability.prometheus_operator``, unless the user set it)."""
        obs = self.config.observability
        if self.backend.runs_jobs or not obs.enabled or obs.prometheus_operator is not None:
            return {}
        path = self._kubeconfig or self.config.cluster.kubeconfig or self.backend.kubeconfig(self.config)
        if path is None or not Path(path).exists():
            return {}
        from fsdp_sdk.errors import FsdpSdkError
        from fsdp_sdk.k8s.kube import Kube
        from fsdp_sdk.k8s.monitoring import serves_prometheus_operator

        try:
            return {"observability.prometheus_operator": serves_prometheus_operator(Kube.from_kubeconfig(path))}
        except FsdpSdkError:
            return {}  # not reachable (yet): render for a cluster without the operator

    def monitoring(self, *, connect: bool = True, aws_clients: Mapping[str, Any] | None = None) -> Monitoring:
        """The monitoring components of this configuration on its cluster (:mod:`fsdp_sdk.k8s.monitoring`).

        Components are rendered as if ``observability.enabled`` were on (the commands that ask for them mean
        it). When connected and ``observability.prometheus_operator`` is unset, the cluster is asked whether it
        runs the Prometheus Operator first, and the components are rendered with the answer.

        :param connect: connect to the cluster (off: rendering and dry runs only).
        :param aws_clients: boto3 clients by service (``eks``, ``iam``) for EKS add-ons, instead of the cached ones.
        """
        from fsdp_sdk.k8s.kube import Kube
        from fsdp_sdk.k8s.monitoring import Monitoring, serves_prometheus_operator

        path = self.kubeconfig()
        kube = Kube.from_kubeconfig(path, context=self.kube_context) if connect else None
        settings = [] if self.config.observability.enabled else [Setting("observability.enabled", True)]
        if kube is not None and self.config.observability.prometheus_operator is None:
            found = serves_prometheus_operator(kube)
            settings.append(
                Setting("observability.prometheus_operator", found, "observability.prometheus_operator", "discovery")
            )
        config = self.config
        if settings:
            config = config.with_overrides(settings).resolved(self.loaded_plugins, validate_trainer=False)
        self.monitoring_components(config)  # refuses unknown names in observability.components
        return Monitoring(
            config,
            self.loaded_plugins.hooks.monitoring_components(config),
            kube,
            kubeconfig=str(path) if path else None,
            context=self.kube_context,
            aws_clients=aws_clients,
        )

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

    # ------------------------------------------------------------------ jobs

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
        """The job's Kubernetes objects, exactly as ``job submit`` would apply them (pure; any backend).

        :param rdzv_id: the rendezvous id (default: one derived from the configuration,
            :func:`~fsdp_sdk.k8s.render.stable_rdzv_id`: the same input renders the same objects).
        :param create_secret: include the Hugging Face token Secret (without its data).
        :param api: ``pytorchjob`` or ``trainjob`` (default: ``job.api``).
        :param preview: for reading only: a missing ``job.registry`` becomes a placeholder and a
            :class:`~fsdp_sdk.k8s.render.RenderWarning` instead of an error.
        :param fresh_id: without ``rdzv_id``, a fresh random one (as each submission gets) instead.
        :param crds: CRDs (:func:`~fsdp_sdk.k8s.validate.load_crd_schema`) to check what the plugins' render hooks
            set against: a :class:`~fsdp_sdk.k8s.render.RenderWarning` names the plugin and each field pruned.
        """
        from fsdp_sdk.k8s.render import new_rdzv_id, render_job, stable_rdzv_id

        if rdzv_id is None:
            rdzv_id = (
                new_rdzv_id(self.config.job.name)
                if fresh_id
                else stable_rdzv_id(self.config, api=api, create_secret=create_secret)
            )
        from fsdp_sdk.user_code import for_cluster

        return render_job(
            for_cluster(self._job_resolved(self.resolved, strict=not preview), build=False),
            rdzv_id=rdzv_id,
            create_secret=create_secret,
            api=api,
            preview=preview,
            crds=crds,
        )

    @functools.cached_property
    def jobs(self) -> JobClient:
        """The Kubernetes job layer for this cluster (imported on first use).

        :raises BackendError: the backend runs jobs itself (``local``) and no kubeconfig was given.
        """
        if self.backend.runs_jobs and self.kubeconfig() is None:
            raise BackendError(
                f"backend {self.backend.name!r} runs jobs itself, without Kubernetes; use Client.run(), "
                "or give the client a kubeconfig (--kubeconfig) to reach a cluster"
            )
        from fsdp_sdk.k8s.jobs import JobClient

        path = self._kubeconfig_or_fail()
        return JobClient(
            self.resolved,
            kubeconfig=path,
            context=self.kube_context,
            plugins=self.loaded_plugins,
            progress=self.progress,
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
        """Check, render and submit the job to the cluster (what ``fsdp-sdk job submit`` does); returns at once.

        The preflight checks run first (action ``submit``: a plugin's quota check can refuse the job
        before anything is sent); then the job is rendered (:meth:`render_job`) and applied with
        server-side apply, and plugins hear ``fsdp_sdk_job_submitted``. Follow it with
        ``client.jobs.wait(job, on_output=...)``, ``client.jobs.logs(job, ...)``, ``client.jobs.status(job)``.

        :param run_id: the rendezvous id (default: a fresh one).
        :param create_secret: also apply the Hugging Face token Secret (default: when ``job.hf_token`` is set).
        :param api: ``pytorchjob`` or ``trainjob`` (default: ``job.api``).
        :param dry_run: the API server validates the objects and stores nothing (``dryRun=All``); no hook hears it.
        :param force: submit even when the estimate says the job will not fit in its GPUs' memory.
        :param replace: a job of the same name is deleted first (with its pods); the new one resumes
            from the checkpoints it left (see :meth:`fsdp_sdk.k8s.jobs.JobClient.submit`).
        :param unique: submit under ``job.name`` plus a fresh suffix, next to the jobs already there.
        :raises PreflightError: a check failed (nothing was sent).
        :raises ConfigError: the configuration cannot make a valid job, or will not fit (nothing was sent).
        :raises KubernetesError: the job exists already, or the server refused an object.
        """
        from fsdp_sdk.runner import KubernetesRunner

        self._checked("submit")
        self._check_reservation(self.config)
        if not force:
            self.check_fits()
        from fsdp_sdk.user_code import for_cluster

        runner = KubernetesRunner(self.jobs)  # on the local backend too: a kubeconfig was given
        resolved = for_cluster(self._job_resolved(self.resolved), build=True, dry_run=dry_run, progress=self.progress)
        plan = runner.dryrun(resolved, run_id=run_id, api=api, create_secret=create_secret, unique=unique)
        job = runner.schedule(plan, server_dry_run=dry_run, replace=replace).job
        if not dry_run:
            self.loaded_plugins.hooks.job_submitted(plan.config or self.config, job)
        return job

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
        """Run the trainer to completion on this cluster and return its summary.

        On the ``local`` backend this starts torchrun agents on this machine
        (and etcd, if ``up`` was not run); on other backends the job goes through
        the Kubernetes job layer (:attr:`jobs`).

        :param trainer_overrides: trainer settings by dotted name, e.g. ``{"model.preset": "tiny", "train.steps": 20}``.
        :param trainer_args: trainer options as on its command line, e.g. ``["--train.steps", "20"]``.
        :param run_id: the run's id (a name); a fresh one by default. Locally, an id used before continues that
            run from its latest checkpoint (its directory is reused; each launch gets a fresh rendezvous id).
        :param dry_run: return the commands or objects that would run; start nothing.
        :param on_output: receives each line of the leader's output.
        :param force: run even when the estimate says the job will not fit in the GPUs' memory.
        :param on_event: receives :class:`~fsdp_sdk.runs.RunEvent` s: phases, steps and restarts from backends
            that run jobs themselves; the leader's steps and lines from a Kubernetes job (unless ``on_output``).
        :param on_started: called with the job once its processes are started (before the hooks hear of it).
        :param resume: continue the local run of that id with its recorded settings (settings given here win); on a
            Kubernetes cluster, submit the job of that name again, replacing the one there: it resumes from the
            newest complete checkpoint it left (the checkpoint bucket, the shared claim, or the node's disk).
        :param scale: on a cluster with fewer nodes now than the job's workers, scale it to that many first
            (without: refused). Backends that run jobs themselves start their simulated nodes as they need.
        :raises ConfigError: a trainer setting is invalid, ``resume`` names no run, the job will not fit (see
            :meth:`check_fits`), or it needs more nodes than the cluster has and ``scale`` is off.
        :raises RunError: the run failed.
        """
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
        self._checked("run")
        from fsdp_sdk.aws.checkpoints import check_s3_locations

        check_s3_locations(config.trainer)  # s3:// checkpoints, export, weights: reachable, before anything starts
        hooks = self.loaded_plugins.hooks
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

    def _run_resolved(
        self,
        trainer_overrides: Mapping[str, Any] | None = None,
        trainer_args: Sequence[str] = (),
    ) -> Resolved:
        """This client's resolved configuration with trainer settings given to one run on top."""
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
        """What :meth:`run` would start (changes nothing): a local run's commands and plan, or a cluster job's
        objects; what ``fsdp-sdk run --dry-run`` prints and, given to the runner's ``schedule``, exactly what
        :meth:`run` starts. Arguments as :meth:`run`; the same checks refuse the same runs."""
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
        """The run's configuration resolved once (this client's, the run's trainer settings on top), made final
        and checked by the runner, then its dry run: what :meth:`run` schedules."""
        resolved = self._run_resolved(trainer_overrides, trainer_args)
        resolved = runner.admit(resolved, resume=resume, scale=scale, dry_run=dry_run, force=force)
        return runner.dryrun(resolved, run_id=run_id, resume=resume)

    def train(
        self,
        func: Callable[..., Any],
        *,
        nodes: int | None = None,
        nproc_per_node: int | None = None,
        kwargs: Mapping[str, Any] | None = None,
        run_id: str | None = None,
        on_event: Callable[[RunEvent], None] | None = None,
        on_output: Callable[[str], None] | None = None,
    ) -> TrainHandle:
        """Run ``func`` on every rank of a job, as the Kubeflow SDK's ``CustomTrainer`` does: only its source
        travels, so it imports what it uses inside itself (see :mod:`fsdp_sdk.user_code`); it gets what a
        ``--script`` gets (rendezvous, ``FSDP_SDK_CHECKPOINT_DIR``, :func:`fsdp_sdk.report`).

        On a backend that runs jobs itself (``local``) the run goes to its end here; on a cluster (or with the
        client's ``kubeconfig``) the job is submitted (the code layer built and pushed when new) and the handle
        follows it (:meth:`~fsdp_sdk.user_code.TrainHandle.wait`).

        :param func: a function defined with ``def`` at a module's top level.
        :param nodes: workers (``job.num_workers``; locally, simulated nodes).
        :param nproc_per_node: processes per worker (``job.nproc_per_node``).
        :param kwargs: its keyword arguments (JSON values).
        :returns: the job's handle; ``handle.result()`` is rank 0's return value.
        :raises ConfigError: ``func`` cannot travel (a lambda, a closure, a global it reads), or ``kwargs`` are not JSON.
        :raises RunError: the run failed.
        """
        from fsdp_sdk.user_code import train

        return train(
            self,
            func,
            nodes=nodes,
            nproc_per_node=nproc_per_node,
            kwargs=kwargs,
            run_id=run_id,
            on_event=on_event,
            on_output=on_output,
        )

    @functools.cached_property
    def runner(self) -> JobRunner:
        """The job runner (:mod:`fsdp_sdk.runner`): the local one for a backend that runs jobs itself, else the
        Kubernetes job layer's."""
        if self.backend.runs_jobs:
            from fsdp_sdk.backends.local.backend import LocalBackend
            from fsdp_sdk.backends.local.runner import LocalRunner

            if not isinstance(self.backend, LocalBackend):
                raise BackendError(f"backend {self.backend.name!r} runs jobs itself but has no job runner")
            return LocalRunner(self.backend, self.config, progress=self.progress)
        from fsdp_sdk.runner import KubernetesRunner

        return KubernetesRunner(self.jobs, site=_ClientSite(self))

    def _check_reservation(self, config: Config) -> None:
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

    def _ensure_nodes(self, config: Config, *, scale: bool, dry_run: bool) -> None:
        """Refuse a job with more workers than the running cluster has nodes, or with ``scale`` scale it first."""
        from fsdp_sdk.k8s.render import check_node_count

        check_node_count(config)  # more than the cluster can ever have: scaling would not help
        workers, name = config.job.num_workers, config.cluster.name
        self._check_reservation(config)
        status = self.backend.status(config)
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

    def launch_plan(
        self,
        *,
        trainer_args: Sequence[str] = (),
        down: bool = False,
        force: bool = False,
        tokens: float | None = None,
        trainer_src: str | os.PathLike[str] | None = None,
        build_args: Mapping[str, str] | None = None,
        collect: bool = False,
    ) -> LaunchPlan:
        """What :meth:`launch` will do, and at what cost (see :func:`fsdp_sdk.launch.plan_launch`); changes nothing.

        :param collect: plan what cannot be read too (``launch --dry-run`` without credentials or tools): failed
            checks in the plan's ``blocked``, what could not be read in its ``unknown``.
        """
        from fsdp_sdk.launch import plan_launch

        return plan_launch(
            self,
            trainer_args=trainer_args,
            down=down,
            force=force,
            tokens=tokens,
            trainer_src=Path(trainer_src) if trainer_src else None,
            build_args=build_args,
            collect=collect,
        )

    def launch(
        self,
        plan: LaunchPlan | None = None,
        *,
        trainer_src: str | os.PathLike[str] | None = None,
        build_args: Mapping[str, str] | None = None,
        tool: str | None = None,
        force: bool = False,
        on_output: Callable[[str], None] | None = None,
        on_event: Callable[[RunEvent], None] | None = None,
        on_submitted: Callable[[JobRef], None] | None = None,
        on_finished: Callable[[RunResult | None, BaseException | None], None] | None = None,
    ) -> LaunchResult:
        """From zero to a finished job: the cluster (``up``, or its GPU nodes scaled back up), the prerequisites,
        the image (built and pushed only when its content changed), the job submitted and followed, and the cluster
        deleted after it when the plan says ``down`` (see :func:`fsdp_sdk.launch.launch`).

        :param plan: from :meth:`launch_plan` (default: a fresh one).
        """
        from fsdp_sdk.launch import launch

        plan = plan or self.launch_plan(force=force, trainer_src=trainer_src, build_args=build_args)
        return launch(
            self,
            plan,
            trainer_src=Path(trainer_src) if trainer_src else None,
            build_args=build_args,
            tool=tool,
            force=force,
            on_output=on_output,
            on_event=on_event,
            on_submitted=on_submitted,
            on_finished=on_finished,
        )

    # ------------------------------------------------------------------ estimates

    def _estimate_config(self, nodes: int | None, gpus_per_node: int | None, instance_type: str | None) -> Resolved:
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
        """Memory per GPU, speed, cost and weak scaling of the configured training job (pure: nothing starts).

        :param model: a preset name or a Hugging Face ``config.json`` (file or directory); default: the
            configuration's ``trainer.model``.
        :param nodes: nodes of the job (default ``job.num_workers``).
        :param gpus_per_node: GPUs (trainer processes) per node (default: all of the instance type's).
        :param instance_type: any registered instance type (default ``cluster.instance_type``).
        :param trainer_overrides: trainer settings by dotted name, e.g. ``{"parallel.sharding": "hybrid_shard"}``.
        :param mfu: the MFU compute runs at (default: the trainer's measured one, scaled to the settings).
        :param tokens: tokens the time and cost to train are for (default 1e9).
        :param scaling: node counts of the scaling table (True: 1, 2, 4, ... up to ``nodes``).
        :param network_efficiency: share of the nominal network bandwidth collectives reach (default 0.8).
        :raises ConfigError: an unknown model or instance type, impossible settings, or no trainer installed.
        """
        from fsdp_sdk.estimate import DEFAULT_TOKENS, estimate_job

        resolved = self._estimate_config(nodes, gpus_per_node, instance_type)
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
        """The sharding / activation checkpointing / micro-batch combinations that fit, fastest first
        (arguments as :meth:`estimate`)."""
        from fsdp_sdk.estimate import DEFAULT_TOKENS, recommend

        resolved = self._estimate_config(nodes, gpus_per_node, instance_type)
        return recommend(
            resolved.config,
            resolved.instance,
            model=model,
            trainer_overrides=trainer_overrides,
            mfu=mfu,
            tokens=DEFAULT_TOKENS if tokens is None else tokens,
            network_efficiency=network_efficiency,
        )

    def check_fits(self, resolved: Resolved | None = None) -> Estimate | None:
        """Refuse a job the estimate says will not fit in its GPUs' memory; the estimate, or None when none can be
        made here (no trainer installed, or a model only on the Hugging Face Hub).

        :raises ConfigError: the estimated peak exceeds the usable memory, or ``--auto`` would find nothing that fits.
        """
        from fsdp_sdk.estimate import EstimateUnavailable, estimate_job, fit_problem
        from fsdp_sdk.user_code import active

        resolved = resolved or self.resolved
        if active(resolved.config) is not None:
            return None  # your own code: no model the estimate knows
        try:
            est = estimate_job(resolved.config, resolved.instance, scaling=False)
        except EstimateUnavailable as exc:
            self.progress(f"fit check skipped: {exc}")
            return None
        problem = fit_problem(est)
        if problem:
            raise ConfigError(
                "estimate",
                problem,
                "use more nodes, a smaller micro batch or activation checkpointing ('fsdp-sdk estimate --recommend' "
                "lists what fits), or run it anyway with --force",
            )
        return est

    def _side_estimate(self, resolved: Resolved) -> Estimate | None:
        """The configured job's estimate for ``up --dry-run``: None without a model in the configuration or where
        none can be made here (said on the progress stream)."""
        from fsdp_sdk.estimate import EstimateUnavailable, estimate_job, model_is_given

        if not model_is_given(resolved.config):
            return None
        try:
            return estimate_job(resolved.config, resolved.instance)
        except EstimateUnavailable as exc:
            self.progress(f"estimate skipped: {exc}")
            return None

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

    # ------------------------------------------------------------------ catalogue

    def instance_types(self) -> list[InstanceType]:
        """Every registered instance type, sorted by name."""
        return list(self.loaded_plugins.instance_types)

    def plugins(self) -> list[PluginInfo]:
        """Every plugin, the built-in ones first, then the broken ones."""
        return self.loaded_plugins.infos()


class _ClientSite:
    """A client's side of :meth:`fsdp_sdk.runner.KubernetesRunner.admit` (:class:`fsdp_sdk.runner.ClusterSite`)."""

    def __init__(self, client: Client) -> None:
        self.client = client

    def job_resolved(self, resolved: Resolved, *, strict: bool = True) -> Resolved:
        return self.client._job_resolved(resolved, strict=strict)

    def ensure_nodes(self, config: Config, *, scale: bool, dry_run: bool) -> None:
        self.client._ensure_nodes(config, scale=scale, dry_run=dry_run)

    def check_fits(self, resolved: Resolved | None = None) -> Estimate | None:
        return self.client.check_fits(resolved)
