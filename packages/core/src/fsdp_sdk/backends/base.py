"""The interface every cluster backend implements, and the records it returns.

A backend turns a :class:`~fsdp_sdk.config.Config` into a running cluster and
back, in two stages: :meth:`ClusterBackend.plan` is pure (a
:class:`~fsdp_sdk.contracts.ResolvedConfig` in: the resolved configuration and its instance
type; :class:`Plan` out: the documents it would apply and the steps in order), and
:meth:`ClusterBackend.apply` acts on exactly that plan. ``fsdp-sdk up --dry-run``
prints the plan; ``fsdp-sdk up`` applies the plan it printed. ``down``/``scale``
act and report progress through a callback; ``status()`` only reads.
"""

from __future__ import annotations

import dataclasses
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar, Literal

from fsdp_sdk._fields import FrozenFields
from fsdp_sdk.errors import ConfigError, PluginError
from fsdp_sdk.registry import NamedRegistry

if TYPE_CHECKING:
    from fsdp_sdk.config import Config
    from fsdp_sdk.contracts import ResolvedConfig
    from fsdp_sdk.preflight import PreflightResult
    from fsdp_sdk.runs import RecordedRun

__all__ = [
    "BackendRegistry",
    "ClusterBackend",
    "ClusterState",
    "ClusterStatus",
    "Plan",
    "ProgressCallback",
    "no_progress",
]

#: Backends of plugin packages the SDK knows of: ``--backend eksctl`` without the package says what to install.
KNOWN_BACKEND_PACKAGES = {"eksctl": "fsdp-sdk-eksctl", "terraform": "fsdp-sdk-terraform"}

#: Receives one human-readable line per step of a long operation (the CLI prints them on stderr).
ProgressCallback = Callable[[str], None]

#: ``absent``: nothing exists; ``ready``: usable; ``degraded``: exists but not usable as is
#: (a process died, a node group is unhealthy); ``pending``: being created, scaled or deleted.
ClusterState = Literal["absent", "pending", "ready", "degraded"]


def no_progress(message: str) -> None:
    """A :data:`ProgressCallback` that discards every message."""


@dataclass(frozen=True, eq=False, repr=False)
class Plan(FrozenFields):
    """What ``up`` will do, computed without side effects; ``apply`` acts on exactly this.

    A backend's :meth:`ClusterBackend.plan` fills ``backend``, ``cluster``, ``steps``,
    ``resources``, ``details`` and ``hourly_cost_usd``. :meth:`fsdp_sdk.Client.plan` then
    adds what core does once the cluster is up (``kubernetes``: etcd, monitoring; more
    ``steps``), the values the preflight checks filled in (``filled``), and the
    preflight results.

    :param backend: name of the backend that made the plan.
    :param cluster: the cluster name.
    :param steps: the actions, in order, as sentences (``start etcd on 127.0.0.1:2379``).
    :param resources: rendered documents the backend applies (an eksctl ``ClusterConfig``, Terraform variables).
    :param hourly_cost_usd: on-demand cost per hour of the planned nodes, when known.
    :param details: backend facts its ``apply`` needs (file paths, node group names...), JSON-ready.
    :param kubernetes: Kubernetes objects core applies once the cluster is up (server-side apply).
    :param filled: configuration values the preflight checks filled in because the user left them unset,
        by dotted path (``cluster.availability_zones``); the plan was made with them.
    :param preflight: the preflight results the plan was made after.
    :param estimate: the memory, speed and cost estimate of the configured job, when a model is given.
    """

    backend: str
    cluster: str
    steps: Sequence[str]
    resources: Sequence[Mapping[str, Any]] = ()
    hourly_cost_usd: float | None = None
    details: Mapping[str, Any] = field(default_factory=dict)
    kubernetes: Sequence[Mapping[str, Any]] = ()
    filled: Mapping[str, Any] = field(default_factory=dict)
    preflight: Sequence[PreflightResult] = ()
    estimate: Mapping[str, Any] | None = None

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready dict."""
        return {
            "backend": self.backend,
            "cluster": self.cluster,
            "steps": list(self.steps),
            "resources": [dict(r) for r in self.resources],
            "hourly_cost_usd": self.hourly_cost_usd,
            "details": dict(self.details),
            "kubernetes": [dict(o) for o in self.kubernetes],
            "filled": dict(self.filled),
            "preflight": [r.to_dict() for r in self.preflight],
            "estimate": dict(self.estimate) if self.estimate is not None else None,
        }


@dataclass(frozen=True, eq=False, repr=False)
class ClusterStatus(FrozenFields):
    """The observed state of a cluster.

    :param backend: name of the backend that reported it.
    :param cluster: the cluster name.
    :param state: see :data:`ClusterState`.
    :param nodes: nodes (or simulated nodes) currently available for jobs.
    :param endpoint: where jobs reach the cluster (an API server URL, an etcd endpoint), if any.
    :param details: backend-specific facts (pids, ports, node group names).
    """

    backend: str
    cluster: str
    state: ClusterState
    nodes: int = 0
    endpoint: str | None = None
    details: Mapping[str, Any] = field(default_factory=dict)

    @property
    def ready(self) -> bool:
        """Whether jobs can run now."""
        return self.state == "ready"

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready dict."""
        data = dataclasses.asdict(self)
        data["details"] = dict(self.details)
        return data


class ClusterBackend(ABC):
    """Creates, scales, inspects and deletes the cluster a configuration describes.

    A backend plugin is two files. The distribution's ``pyproject.toml`` names the
    plugin module in the ``fsdp_sdk`` entry-point group::

        [project]
        name = "fsdp-sdk-mycloud"
        dependencies = ["fsdp-sdk"]

        [project.entry-points.fsdp_sdk]
        mycloud = "fsdp_sdk_mycloud.plugin"

    and the plugin module implements this class and registers it::

        # fsdp_sdk_mycloud/plugin.py
        from pathlib import Path

        from fsdp_sdk import hookimpl
        from fsdp_sdk.backends.base import ClusterBackend, ClusterStatus, Plan

        class MyCloudBackend(ClusterBackend):
            name = "mycloud"
            description = "GPU clusters on MyCloud"

            def plan(self, resolved):  # pure: what apply() will do
                config, instance = resolved.config, resolved.instance
                return Plan(backend=self.name, cluster=config.cluster.name, steps=[f"create {instance.name} nodes"])

            def apply(self, config, plan, *, progress=no_progress): ...  # acts on exactly that plan
            def down(self, config, *, dry_run=False, progress=no_progress): ...
            def scale(self, config, nodes, *, dry_run=False, progress=no_progress): ...
            def status(self, config): ...
            def kubeconfig(self, config) -> Path | None: ...

        @hookimpl
        def fsdp_sdk_register_backends(registry):
            registry.add(MyCloudBackend)

    Its tests subclass :class:`fsdp_sdk.testing.BackendConformance`.

    Backends are instantiated without arguments. :meth:`plan` receives a
    :class:`~fsdp_sdk.contracts.ResolvedConfig` (core passes a :class:`~fsdp_sdk.resolved.Resolved`):
    the resolved configuration (``resolved.config``) and the
    :class:`~fsdp_sdk.instance_types.InstanceType` it names (``resolved.instance``). Read the instance
    type there, never look it up again: an application embedding the SDK may resolve with a plugin set of its
    own, holding instance types the process-wide set does not know. The other methods act on
    the plan or on a cluster that exists and receive the resolved configuration
    (``resolved.config``). With ``dry_run=True`` a method validates what it can
    and changes nothing (no cloud resource, no file, no directory).

    A backend whose clusters run Kubernetes returns a kubeconfig path and its jobs
    go through :mod:`fsdp_sdk.k8s` (:class:`fsdp_sdk.runner.KubernetesRunner`). A backend that runs the
    trainer itself (the built-in ``local`` backend) sets :attr:`runs_jobs`; its jobs go through its own
    runner (:class:`fsdp_sdk.backends.local.runner.LocalRunner`, the contract of :mod:`fsdp_sdk.runner`).
    """

    #: The name users pass to ``--backend``; unique among registered backends.
    name: ClassVar[str]
    #: One line shown by ``fsdp-sdk plugins``.
    description: ClassVar[str] = ""
    #: True when the backend runs training jobs itself instead of through Kubernetes.
    runs_jobs: ClassVar[bool] = False
    #: True when the backend's cluster is the EKS cluster ``cluster.name`` in ``cluster.region`` of the caller's
    #: AWS account: ``up`` then gives it a checkpoint bucket and the pods' access to it
    #: (:mod:`fsdp_sdk.aws.checkpoint_bucket`), which ``down`` removes (the bucket stays unless asked).
    eks_cluster: ClassVar[bool] = False

    @abstractmethod
    def plan(self, resolved: ResolvedConfig) -> Plan:
        """Describe what :meth:`apply` will do, without side effects (no network, no file).

        :param resolved: the resolved configuration (``resolved.config``) and its instance type
            (``resolved.instance``).
        """

    @abstractmethod
    def apply(self, config: Config, plan: Plan, *, progress: ProgressCallback = no_progress) -> ClusterStatus:
        """Create the cluster as ``plan`` says, or bring the existing one in line with it, and say which.

        Idempotent: applying the same plan to a ready cluster changes nothing. Act on what the
        plan holds (its ``resources`` and ``details``), not on a plan made anew, so what
        ``up --dry-run`` showed is what happens.

        :param config: the resolved configuration the plan was made from.
        :param plan: what :meth:`plan` returned for ``config``.
        :param progress: receives a line per step.
        :return: the status after the call.
        :raises BackendError: the cluster could not be created.
        """

    def preview(self, config: Config, plan: Plan, *, progress: ProgressCallback = no_progress) -> Plan:
        """Ask the provisioning tool what applying ``plan`` would change, reading only; ``up --dry-run`` calls it.

        For tools with a plan of their own (``terraform plan``) the backend runs it without changing the
        cluster or its state, and returns ``plan`` with the answer added (in ``details`` and its steps).
        The default returns ``plan`` as it is.

        :param config: the resolved configuration the plan was made from.
        :param plan: what :meth:`plan` returned for ``config``.
        :param progress: receives a line per step.
        """
        return plan

    @abstractmethod
    def down(self, config: Config, *, dry_run: bool = False, progress: ProgressCallback = no_progress) -> ClusterStatus:
        """Delete the cluster and the state this backend keeps for it.

        Deleting an absent cluster is not an error.

        :param config: the resolved configuration.
        :param dry_run: validate only; change nothing.
        :param progress: receives a line per step.
        :return: the status after the call (``absent`` unless ``dry_run``).
        """

    def delete(
        self, resolved: ResolvedConfig, *, dry_run: bool = False, progress: ProgressCallback = no_progress
    ) -> ClusterStatus:
        """Delete the cluster of ``resolved``: what :meth:`fsdp_sdk.Client.down` calls, with the configuration it
        resolved once. The default is :meth:`down` with ``resolved.config``; a backend that renders again to
        delete (terraform with its state in S3 and no working directory here) overrides it and reads the instance
        type and plugin set from ``resolved``, never building a plugin set of its own.

        :param resolved: the resolved configuration, its instance type and plugin set.
        :param dry_run: validate only; change nothing.
        :param progress: receives a line per step.
        """
        return self.down(resolved.config, dry_run=dry_run, progress=progress)

    def create(
        self, resolved: ResolvedConfig, plan: Plan, *, progress: ProgressCallback = no_progress
    ) -> ClusterStatus:
        """Apply ``plan`` with the configuration it was made from: what :meth:`fsdp_sdk.Client.up` calls, with the
        configuration it resolved once (the values preflight filled in on top). The default is :meth:`apply` with
        ``resolved.config``; a backend that needs the instance type or the plugin set to act reads them here."""
        return self.apply(resolved.config, plan, progress=progress)

    def resize(
        self, resolved: ResolvedConfig, nodes: int, *, dry_run: bool = False, progress: ProgressCallback = no_progress
    ) -> ClusterStatus:
        """:meth:`scale` with the resolved configuration: what :meth:`fsdp_sdk.Client.scale` calls. The default is
        :meth:`scale` with ``resolved.config``."""
        return self.scale(resolved.config, nodes, dry_run=dry_run, progress=progress)

    def describe(self, resolved: ResolvedConfig) -> ClusterStatus:
        """:meth:`status` with the resolved configuration: what :meth:`fsdp_sdk.Client.status` (and every command
        that looks at the cluster first) calls. The default is :meth:`status` with ``resolved.config``."""
        return self.status(resolved.config)

    @abstractmethod
    def scale(
        self, config: Config, nodes: int, *, dry_run: bool = False, progress: ProgressCallback = no_progress
    ) -> ClusterStatus:
        """Change the number of nodes of an existing cluster.

        :param config: the resolved configuration.
        :param nodes: the wanted number of nodes, between ``cluster.min_nodes`` and ``cluster.max_nodes``.
        :param dry_run: validate only; change nothing.
        :param progress: receives a line per step.
        :raises ConfigError: ``nodes`` is out of range.
        :raises BackendError: there is no cluster to scale, or scaling failed.
        """

    @abstractmethod
    def status(self, config: Config) -> ClusterStatus:
        """Report the state of the cluster; reads only.

        :param config: the resolved configuration.
        """

    @abstractmethod
    def kubeconfig(self, config: Config) -> Path | None:
        """Path of a kubeconfig file that reaches the cluster, or ``None`` when the backend has no Kubernetes.

        :param config: the resolved configuration.
        """

    def runs(self, config: Config) -> Sequence[RecordedRun]:
        """The runs this backend keeps records of, oldest first; only for backends with :attr:`runs_jobs`.

        Each has ``run_id``, ``state``, ``steps``, ``total_steps``, ``final_loss``, ``tokens_per_s``,
        ``duration_s`` and ``output_dir``, and ``to_dict()`` with at least those.
        """
        raise NotImplementedError(f"backend {self.name!r} keeps no run records; use 'fsdp-sdk job list'")

    def __repr__(self) -> str:
        return f"<{type(self).__name__} {self.name!r}>"


class BackendRegistry(NamedRegistry["type[ClusterBackend] | str"]):
    """The cluster backends known to this process, filled by ``fsdp_sdk_register_backends``.

    An entry is the backend class, or its ``"package.module:Class"`` path until first used
    (:meth:`add_lazy`). A name two plugins register is refused for both (:attr:`conflicts`).
    """

    kind = "backend"

    def add(self, cls: type[ClusterBackend]) -> None:
        """Register a backend class under its ``name``.

        :param cls: a concrete :class:`ClusterBackend` subclass.
        :raises PluginError: ``cls`` is not a concrete backend class, has no name, or the name is taken.
        """
        name = self._check_class(cls, self.current_plugin or "?")
        self._claim(name, cls)

    def add_lazy(self, name: str, target: str) -> None:
        """Register backend ``name`` by import path, imported only when :meth:`get` first asks for it.

        Commands that only need the backend's name (``config show``, ``--help``) then never import
        its module: use this for backends whose module imports much.

        :param name: the backend's name; the class's ``name`` must match it.
        :param target: ``"package.module:ClassName"``.
        :raises PluginError: the name is empty or taken, or ``target`` is not ``module:Class``.
        """
        who = self.current_plugin or "?"
        if not isinstance(name, str) or not name:
            raise PluginError(f"plugin {who}: registry.add_lazy() needs a backend name, got {name!r}")
        if not isinstance(target, str) or target.count(":") != 1:
            raise PluginError(f"plugin {who}: backend {name!r}: target {target!r} is not 'package.module:ClassName'")
        self._claim(name, target)

    @staticmethod
    def _check_class(cls: object, who: str) -> str:
        if not (isinstance(cls, type) and issubclass(cls, ClusterBackend)):
            raise PluginError(f"plugin {who}: registry.add() takes a ClusterBackend subclass, got {cls!r}")
        name = getattr(cls, "name", None)
        if not isinstance(name, str) or not name:
            raise PluginError(f"plugin {who}: backend class {cls.__qualname__} has no 'name' string")
        missing = sorted(getattr(cls, "__abstractmethods__", ()))
        if missing:
            raise PluginError(f"plugin {who}: backend {name!r} does not implement {', '.join(missing)}")
        return name

    def _load(self, name: str, target: str) -> type[ClusterBackend]:
        import importlib

        who = self._owners[name]
        module_name, _, attr = target.partition(":")
        try:
            cls: type[ClusterBackend] = getattr(importlib.import_module(module_name), attr)  # checked below
        except (ImportError, AttributeError) as exc:
            raise PluginError(f"plugin {who}: backend {name!r}: cannot import {target} ({exc})") from exc
        if self._check_class(cls, who) != name:
            raise PluginError(f"plugin {who}: {target} is backend {cls.name!r}, registered as {name!r}")
        self._entries[name] = cls
        return cls

    def get(self, name: str) -> type[ClusterBackend]:
        """The backend class called ``name`` (a lazily registered one is imported here).

        :raises ConfigError: no backend has that name (the message lists the known ones).
        """
        try:
            entry = self._entries[name]
        except KeyError:
            problem, fix = self.unknown(name)
            raise ConfigError("cluster.backend", problem, fix) from None
        return self._load(name, entry) if isinstance(entry, str) else entry

    def unknown(self, name: str) -> tuple[str, str]:
        """``(problem, fix)`` for a backend name nobody registered: the package that provides a known backend,
        else the closest registered name (case-insensitively), else the list."""
        import difflib

        known = self.names()
        lowered = {n.lower(): n for n in known}
        if name.lower() in lowered:
            return f"unknown backend {name!r}", f"did you mean {lowered[name.lower()]}? (backend names are lower-case)"
        package = KNOWN_BACKEND_PACKAGES.get(name.lower())
        if package is not None:
            return (
                f"backend {name.lower()!r} comes with the {package} package, which is not installed",
                f"pip install {package}",
            )
        close = difflib.get_close_matches(name.lower(), [*known, *KNOWN_BACKEND_PACKAGES], n=1, cutoff=0.6)
        hint = f"did you mean {close[0]}? " if close else ""
        return (
            f"unknown backend {name!r}",
            f"{hint}use one of: {', '.join(known) or 'none'} (fsdp-sdk plugins lists them)",
        )

    def __iter__(self) -> Iterator[type[ClusterBackend]]:
        """Every backend class (lazily registered ones are imported here)."""
        return iter([self.get(n) for n in self.names()])
