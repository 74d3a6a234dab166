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
import uuid
from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from fsdp_sdk.backends.base import ClusterBackend, ClusterStatus, Plan, ProgressCallback, no_progress
from fsdp_sdk.config import Config, Setting, load_config, parse_trainer_args
from fsdp_sdk.errors import BackendError, ConfigError, RunError
from fsdp_sdk.plugins import PluginInfo, Plugins, get_plugins
from fsdp_sdk.preflight import PreflightResult, raise_for_failures

if TYPE_CHECKING:
    from fsdp_sdk.aws.pricing import Price
    from fsdp_sdk.estimate import Estimate
    from fsdp_sdk.instance_types import InstanceType
    from fsdp_sdk.k8s.image import ImageBuild, ImagePush
    from fsdp_sdk.k8s.jobs import JobClient
    from fsdp_sdk.k8s.monitoring import Monitoring
    from fsdp_sdk.k8s.prereqs import Prereqs, PrereqStatus
    from fsdp_sdk.monitoring import MonitoringComponent
    from fsdp_sdk.runs import JobRef, RecordedRun, RunEvent, RunResult

__all__ = ["Client", "JobLayer", "parse_trainer_args"]


class JobLayer(Protocol):
    """What :meth:`Client.run` needs from the Kubernetes job layer (:mod:`fsdp_sdk.k8s.jobs`).

    The job layer renders the job (calling the ``fsdp_sdk_render_job`` hook), applies
    it, follows the leader's log and reads the trainer's summary.
    """

    def submit(self, config: Config, *, run_id: str, dry_run: bool = False) -> JobRef:
        """Render and apply the job objects; return what identifies the job."""
        ...

    def wait(self, job: JobRef, *, on_output: Callable[[str], None] | None = None) -> dict[str, Any]:
        """Follow the job to its end, streaming the leader's log; return the trainer's summary.

        Raises :class:`~fsdp_sdk.errors.RunError` when the job fails.
        """
        ...

    def stop(self, job: JobRef) -> object:
        """Delete the job and its pods."""
        ...


class Client:
    """A resolved configuration bound to its backend and plugins.

    Build one with :meth:`from_sources` (files, ``.env``, ``FSDP_SDK_*`` variables, like the CLI) or,
    for a platform embedding the SDK, :meth:`from_dict` (hermetic: nothing but the given data and plugins).

    :param config: the configuration; it is :meth:`~fsdp_sdk.config.Config.resolved` here.
    :param plugins: the plugin set; defaults to the process-wide :func:`~fsdp_sdk.plugins.get_plugins`.
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
        self.loaded_plugins = plugins or get_plugins()
        self.config = config.resolved(self.loaded_plugins)
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
        plugins = plugins or get_plugins()
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
        return self.loaded_plugins.hooks.preflight(self.config, action)

    def _checked(self, action: str = "up") -> list[PreflightResult]:
        """Run the checks, show the failed warnings as progress, and raise for the failed errors."""
        results = self.preflight(action)
        for result in results:
            if not result.ok and not result.blocking:
                self.progress(result.line())
        raise_for_failures(results)
        return results

    def _filled(self, results: Sequence[PreflightResult]) -> dict[str, Any]:
        """The values preflight checks suggest for fields the user left unset."""
        filled: dict[str, Any] = {}
        for result in results:
            for path, value in result.suggested.items():
                if path not in self.config.origins and path not in filled:
                    filled[path] = value
        return filled

    def _config_with(self, filled: Mapping[str, Any]) -> Config:
        if not filled:
            return self.config
        settings = [Setting(path, value, path, "preflight") for path, value in filled.items()]
        return self.config.with_overrides(settings).resolved(self.loaded_plugins, validate_trainer=False)

    def plan(self, *, preflight: bool = True, preview: bool = False) -> Plan:
        """What :meth:`up` will do; changes nothing.

        Runs the preflight checks first (reads only; a failed check raises), fills in the values
        they suggest for settings left unset (the plan's ``filled``), then asks the backend for
        its plan and adds what core does once the cluster is up: the kubeconfig, etcd and the
        Training Operator, and the monitoring components when ``observability.enabled``.

        :param preflight: run the preflight checks (off: plan from the configuration alone).
        :param preview: also ask the backend's tool what the plan would change, reading only
            (:meth:`~fsdp_sdk.backends.base.ClusterBackend.preview`: ``terraform plan``); ``up --dry-run`` does.
        :raises PreflightError: a check failed.
        """
        results = self._checked() if preflight else []
        filled = self._filled(results)
        filled.update(self._discovered())
        config = self._config_with(filled)
        plan = self.backend.plan(config)
        if plan.backend != self.backend.name or plan.cluster != config.cluster.name:
            raise BackendError(f"backend {self.backend.name!r} returned a plan for {plan.backend}/{plan.cluster}")
        if preview:
            plan = self.backend.preview(config, plan, progress=self.progress)
        steps, objects = list(plan.steps), list(plan.kubernetes)
        if not self.backend.runs_jobs:
            from fsdp_sdk.k8s.prereqs import TRAINING_OPERATOR_VERSION, render_etcd

            objects += render_etcd(config)
            steps += [
                f"write the cluster's kubeconfig under {config.cluster.state_dir}",
                f"apply etcd (v2 API) for the rendezvous in namespace {config.job.namespace}",
                f"install the Kubeflow Training Operator {TRAINING_OPERATOR_VERSION}",
            ]
            components = self.monitoring_components(config)
            for component in components:
                objects += [dict(o) for o in component.objects]
            if components:
                steps.append("apply monitoring: " + ", ".join(c.name for c in components))
            steps += [f"enable the EKS add-on {c.eks_addon.name}" for c in components if c.eks_addon is not None]
        cost, details = plan.hourly_cost_usd, dict(plan.details)
        if any(r.check == "aws-credentials" and r.ok for r in results):
            # The backend priced the GPU nodes from the table (us-east-1, dated); AWS answers for this region.
            price = self.hourly_price(config)
            table = self.config.instance(self.loaded_plugins).on_demand_usd_per_hour
            if price.source == "price-list-api" and price.usd_per_hour is not None and cost is not None and table:
                cost = cost - table * config.cluster.nodes + price.usd_per_hour * config.cluster.nodes
                details["price"] = price.describe()
        estimate = self._side_estimate(config)
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
        if not self.backend.runs_jobs:
            self._prepare(config, plan)
        self.loaded_plugins.hooks.cluster_created(config, status)
        return status

    def _prepare(self, config: Config, plan: Plan) -> None:
        """Make a new Kubernetes cluster ready for jobs: the plan's objects, then the Training Operator."""
        from fsdp_sdk.k8s.kube import Kube
        from fsdp_sdk.k8s.prereqs import Prereqs

        path = self._kubeconfig or config.cluster.kubeconfig or self.backend.kubeconfig(config)
        if path is None:
            return
        from fsdp_sdk.k8s.monitoring import Monitoring, apply_objects

        kube = Kube.from_kubeconfig(path, context=self.kube_context, progress=self.progress)
        prereqs = Prereqs(config, kube, kubeconfig=str(path), context=self.kube_context)
        apply_objects(kube, plan.kubernetes, progress=self.progress)  # generated Secret keys filled on the way
        prereqs.install_operator(progress=self.progress)
        addons = [c for c in self.monitoring_components(config) if c.eks_addon is not None]
        if addons:
            Monitoring(config, addons, kube).install(progress=self.progress)

    def down(self, *, dry_run: bool = False) -> ClusterStatus:
        """Delete the cluster and the state kept for it; deleting an absent cluster is not an error.

        :param dry_run: change nothing.
        """
        current = self.backend.status(self.config)
        if not dry_run and current.state != "absent":
            self.loaded_plugins.hooks.before_cluster_delete(self.config, current)
        return self.backend.down(self.config, dry_run=dry_run, progress=self.progress)

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
            target = self.config.with_overrides([Setting("cluster.nodes", nodes, "nodes", "scale")])
            results = self.loaded_plugins.hooks.preflight(
                target.resolved(self.loaded_plugins, validate_trainer=False), "up"
            )
            for result in results:
                if not result.ok and not result.blocking:
                    self.progress(result.line())
            raise_for_failures(results)
        return self.backend.scale(self.config, nodes, dry_run=dry_run, progress=self.progress)

    def status(self) -> ClusterStatus:
        """The cluster's current state."""
        return self.backend.status(self.config)

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

    def hourly_price(self, config: Config | None = None) -> Price:
        """The on-demand price of ``cluster.instance_type`` in ``cluster.region``: the AWS Price List's when
        credentials allow it (cached for a day under the state directory), else the instance type's dated table."""
        from fsdp_sdk.aws.pricing import hourly_price

        config = config or self.config
        instance = config.instance(self.loaded_plugins)
        return hourly_price(instance, config.cluster.region, state_dir=Path(config.cluster.state_dir))

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
        return Prereqs(self.config, kube, kubeconfig=str(path) if path else None, context=self.kube_context)

    def install_prereqs(self, *, operator: bool = True, operator_version: str | None = None) -> list[dict[str, Any]]:
        """Apply etcd and install the Training Operator on the cluster (idempotent).

        :param operator: install the Training Operator too.
        :param operator_version: its release tag (default: the pinned one).
        """
        return self.prereqs().install(operator=operator, operator_version=operator_version, progress=self.progress)

    def prereq_status(self) -> PrereqStatus:
        """What is installed on the cluster, and what is missing."""
        return self.prereqs().status()

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
    ) -> list[dict[str, Any]]:
        """The job's Kubernetes objects, exactly as ``job submit`` would apply them (pure; any backend).

        :param rdzv_id: the rendezvous id (default: a fresh one).
        :param create_secret: include the Hugging Face token Secret (without its data).
        :param api: ``pytorchjob`` or ``trainjob`` (default: ``job.api``).
        :param preview: for reading only: a missing ``job.registry`` becomes a placeholder and a
            :class:`~fsdp_sdk.k8s.render.RenderWarning` instead of an error.
        """
        from fsdp_sdk.k8s.render import render_job

        return render_job(
            self.config,
            rdzv_id=rdzv_id,
            create_secret=create_secret,
            api=api,
            plugins=self.loaded_plugins,
            preview=preview,
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
            self.config, kubeconfig=path, context=self.kube_context, plugins=self.loaded_plugins, progress=self.progress
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
        self._checked("submit")
        if not force:
            self.check_fits()
        jobs = self.jobs
        job = jobs.submit(
            run_id=run_id, create_secret=create_secret, api=api, dry_run=dry_run, replace=replace, unique=unique
        )
        if not dry_run:
            self.loaded_plugins.hooks.job_submitted(jobs.config, job)
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
        :param resume: continue the local run of that id with its recorded settings; settings given here win.
        :raises ConfigError: a trainer setting is invalid, ``resume`` names no run, or the job will not fit (see
            :meth:`check_fits`).
        :raises RunError: the run failed.
        """
        settings = [
            Setting(key if key.startswith("trainer.") else f"trainer.{key}", value, key, "run()")
            for key, value in (trainer_overrides or {}).items()
        ]
        settings += parse_trainer_args(trainer_args)
        config = self.config.with_overrides(settings).resolved(self.loaded_plugins) if settings else self.config
        if resume is not None and not self.backend.runs_jobs:
            raise ConfigError(
                "--resume", f"backend {self.backend.name!r} does not keep run records", "re-submit the job instead"
            )
        if self.backend.runs_jobs:
            from fsdp_sdk.backends.local.backend import new_run_id

            run_id = resume if resume is not None else run_id if run_id is not None else new_run_id(config.job.name)
        else:
            run_id = run_id or uuid.uuid4().hex[:12]
        hooks = self.loaded_plugins.hooks
        if not self.backend.runs_jobs and not force:
            self.check_fits(config)
        if not dry_run:
            self._checked("run")
            from fsdp_sdk.aws.checkpoints import check_s3_locations

            check_s3_locations(config.trainer)  # s3:// checkpoints, export, weights: reachable, before anything starts

        if self.backend.runs_jobs:
            job_ref: list[JobRef] = []

            def started(job: JobRef) -> None:
                job_ref.append(job)
                if on_started is not None:
                    on_started(job)
                hooks.job_submitted(config, job)

            try:
                result = self.backend.run_job(
                    config,
                    run_id=run_id,
                    dry_run=dry_run,
                    on_output=on_output,
                    on_started=started,
                    progress=self.progress,
                    on_event=on_event,
                    resume=resume is not None,
                )
            except BaseException:
                if job_ref:
                    hooks.job_finished(config, job_ref[0], False, None)
                raise
            if not dry_run:
                hooks.job_finished(config, result.job, True, result.summary)
            return result

        from fsdp_sdk.runs import RunResult

        jobs = self.jobs
        job = jobs.submit(config, run_id=run_id, dry_run=dry_run)
        if dry_run:
            return RunResult(job, {}, dry_run=True)
        if on_started is not None:
            on_started(job)
        hooks.job_submitted(config, job)
        if on_output is None and on_event is not None:
            on_output = _events_from_lines(on_event, config)
        try:
            summary = jobs.wait(job, on_output=on_output)
        except BaseException:
            hooks.job_finished(config, job, False, None)
            raise
        if not isinstance(summary, dict):
            raise RunError(f"job {job.name}: finished without a trainer summary")
        hooks.job_finished(config, job, True, summary)
        return RunResult(job, summary)

    # ------------------------------------------------------------------ estimates

    def _estimate_config(
        self, nodes: int | None, gpus_per_node: int | None, instance_type: str | None, config: Config | None = None
    ) -> Config:
        config = config or self.config
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
            return config
        return config.with_overrides(settings).resolved(self.loaded_plugins, validate_trainer=False)

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

        config = self._estimate_config(nodes, gpus_per_node, instance_type)
        return estimate_job(
            config,
            config.instance(self.loaded_plugins),
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

        config = self._estimate_config(nodes, gpus_per_node, instance_type)
        return recommend(
            config,
            config.instance(self.loaded_plugins),
            model=model,
            trainer_overrides=trainer_overrides,
            mfu=mfu,
            tokens=DEFAULT_TOKENS if tokens is None else tokens,
            network_efficiency=network_efficiency,
        )

    def check_fits(self, config: Config | None = None) -> Estimate | None:
        """Refuse a job the estimate says will not fit in its GPUs' memory; the estimate, or None when none can be
        made here (no trainer installed, or a model only on the Hugging Face Hub).

        :raises ConfigError: the estimated peak exceeds the usable memory, or ``--auto`` would find nothing that fits.
        """
        from fsdp_sdk.estimate import EstimateUnavailable, estimate_job, fit_problem

        config = config or self.config
        try:
            est = estimate_job(config, config.instance(self.loaded_plugins), scaling=False)
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

    def _side_estimate(self, config: Config) -> Estimate | None:
        """The configured job's estimate for ``up --dry-run``: None without a model in the configuration or where
        none can be made here (said on the progress stream)."""
        from fsdp_sdk.estimate import EstimateUnavailable, estimate_job, model_is_given

        if not model_is_given(config):
            return None
        try:
            return estimate_job(config, config.instance(self.loaded_plugins))
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
