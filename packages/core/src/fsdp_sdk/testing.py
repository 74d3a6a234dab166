"""Conformance tests for plugin authors: subclass, set a few attributes, and pytest runs the suite.

A backend plugin proves itself like this::

    # tests/test_conformance.py of fsdp-sdk-mycloud
    from fsdp_sdk.testing import BackendConformance
    from fsdp_sdk_mycloud import plugin
    from fsdp_sdk_mycloud.backend import MyCloudBackend

    class TestMyCloudBackend(BackendConformance):
        backend_class = MyCloudBackend
        plugin = plugin
        config_overrides = {"cluster.region": "us-east-1"}

and an instance-type plugin::

    from fsdp_sdk.testing import InstanceTypePluginConformance
    from fsdp_sdk_b200 import plugin

    class TestB200Types(InstanceTypePluginConformance):
        plugin = plugin
        expected_names = ("p6-b200.48xlarge",)
        entry_point_name = "b200"

The base classes' names do not start with ``Test``, so pytest collects only the
subclasses. Every test gets a fresh plugin set without third-party autoload and
a state directory under ``tmp_path``, so nothing touches the user's state.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import re
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any, ClassVar, Protocol

import pytest

from fsdp_sdk.backends.base import BackendRegistry, ClusterBackend, ClusterStatus, Plan
from fsdp_sdk.config import Config
from fsdp_sdk.config.resolution import resolve
from fsdp_sdk.errors import BackendError, ConfigError
from fsdp_sdk.instance_types import InstanceType, InstanceTypeRegistry
from fsdp_sdk.markers import hookimpl
from fsdp_sdk.plugins import DEFAULT_PLUGINS, ENTRY_POINT_GROUP, Plugins, build_plugins
from fsdp_sdk.resolved import Resolved

__all__ = ["BackendConformance", "InstanceTypePlugin", "InstanceTypePluginConformance", "snapshot"]

_STATES = {"absent", "pending", "ready", "degraded"}


def snapshot(root: Path) -> dict[str, tuple[int, int]]:
    """Every file under ``root`` with its size and modification time (empty when ``root`` does not exist)."""
    if not root.exists():
        return {}
    return {
        str(p.relative_to(root)): (p.stat().st_size, p.stat().st_mtime_ns)
        for p in sorted(root.rglob("*"))
        if p.is_file()
    }


class BackendConformance:
    """What every :class:`~fsdp_sdk.backends.base.ClusterBackend` must do.

    Set :attr:`backend_class`; set :attr:`plugin` to the module whose
    ``fsdp_sdk_register_backends`` registers it (checked, and used to build the
    plugin set); add :attr:`config_overrides` for settings the backend needs.
    Set :attr:`lifecycle` to run ``up``/``scale``/``down`` for real (for
    backends whose tests can create clusters, e.g. against moto or locally).
    """

    #: The backend under test.
    backend_class: ClassVar[type[ClusterBackend]]
    #: The plugin (usually a module) that registers :attr:`backend_class`; None when it is a default plugin.
    plugin: ClassVar[object | None] = None
    #: Settings on top of the defaults, by dotted path (``cluster.backend`` and ``cluster.state_dir`` are set for you).
    config_overrides: ClassVar[Mapping[str, Any]] = {}
    #: Run the real lifecycle test (up, status, scale, down).
    lifecycle: ClassVar[bool] = False
    #: Nodes to scale to in the lifecycle test.
    scale_to: ClassVar[int] = 1

    # ------------------------------------------------------------------ fixtures

    @pytest.fixture
    def plugins(self) -> Plugins:
        """A fresh plugin set: the default plugins plus :attr:`plugin`, no entry-point autoload."""
        plugins = build_plugins(autoload=False)
        if self.plugin is not None and not plugins.pm.is_registered(self.plugin):
            plugins.register(self.plugin)
        if self.backend_class.name not in plugins.backends:
            backend_class = self.backend_class

            class _Register:
                @hookimpl
                def fsdp_sdk_register_backends(self, registry: BackendRegistry) -> None:
                    registry.add(backend_class)

            plugins.register(_Register(), name=f"conformance-{backend_class.name}")
        return plugins

    @pytest.fixture
    def state_dir(self, tmp_path: Path) -> Path:
        """The backend's ``cluster.state_dir`` (not created)."""
        return tmp_path / "state"

    @pytest.fixture
    def resolved(self, plugins: Plugins, state_dir: Path) -> Resolved:
        """The resolved value :meth:`~fsdp_sdk.backends.base.ClusterBackend.plan` receives: the configuration every
        test uses, its instance type and the plugin set."""
        overrides = {
            "cluster.backend": self.backend_class.name,
            "cluster.state_dir": str(state_dir),
            **self.config_overrides,
        }
        base = Config.from_dict({}, sections=plugins.settings)  # the plugins' own settings sections too
        return Resolved.of(base.with_overrides(overrides), plugins, validate_trainer=False)

    @pytest.fixture
    def config(self, resolved: Resolved) -> Config:
        """The resolved configuration every test uses (``resolved.config``)."""
        return resolved.config

    @pytest.fixture
    def backend(self) -> Iterator[ClusterBackend]:
        """An instance of :attr:`backend_class`."""
        yield self.backend_class()

    # ------------------------------------------------------------------ declaration

    def test_is_a_concrete_backend_class(self) -> None:
        assert issubclass(self.backend_class, ClusterBackend)
        assert not getattr(self.backend_class, "__abstractmethods__", None), "abstract methods left unimplemented"

    def test_name_is_a_command_line_word(self) -> None:
        assert re.fullmatch(r"[a-z][a-z0-9-]*", self.backend_class.name), "name must be lower-case letters, digits, '-'"
        assert isinstance(self.backend_class.description, str)

    def test_plugin_registers_the_backend(self) -> None:
        if self.plugin is None:
            pytest.skip("no plugin attribute: the backend is registered by a default plugin")
        plugins = build_plugins(autoload=False, default_plugins=())
        plugins.register(self.plugin)
        assert plugins.backends.get(self.backend_class.name) is self.backend_class

    def test_jobs_run_somewhere(self, backend: ClusterBackend, config: Config) -> None:
        # jobs go through a runner (fsdp_sdk.runner): Kubernetes' for a backend with a kubeconfig
        kubeconfig = backend.kubeconfig(config)
        assert kubeconfig is None or isinstance(kubeconfig, Path)

    # ------------------------------------------------------------------ read-only and dry-run calls

    def test_plan_is_pure_and_serialisable(
        self, backend: ClusterBackend, resolved: Resolved, config: Config, state_dir: Path
    ) -> None:
        plan = backend.plan(resolved)
        assert isinstance(plan, Plan)
        assert plan.backend == backend.name and plan.cluster == config.cluster.name
        assert plan.steps and all(isinstance(step, str) for step in plan.steps)
        json.dumps(plan.to_dict())
        assert not state_dir.exists(), "plan() must not create the state directory"

    def test_status_reads_only(self, backend: ClusterBackend, config: Config, state_dir: Path) -> None:
        status = backend.status(config)
        assert isinstance(status, ClusterStatus)
        assert status.state in _STATES and status.backend == backend.name
        json.dumps(status.to_dict())
        assert not state_dir.exists(), "status() must not create the state directory"

    def test_dry_run_changes_nothing(
        self, backend: ClusterBackend, resolved: Resolved, config: Config, state_dir: Path
    ) -> None:
        messages: list[str] = []
        before = backend.status(config)
        backend.plan(resolved)  # what 'up --dry-run' asks of a backend: its plan, then its status
        up = backend.status(config)
        down = backend.down(config, dry_run=True, progress=messages.append)
        with contextlib.suppress(BackendError):  # no cluster to scale: refusing is fine
            backend.scale(config, self.scale_to, dry_run=True, progress=messages.append)
        assert isinstance(up, ClusterStatus) and isinstance(down, ClusterStatus)
        assert backend.status(config).state == before.state
        assert not state_dir.exists(), "a dry run must not create the state directory"
        assert all(isinstance(m, str) for m in messages)

    def test_scale_refuses_a_negative_count(self, backend: ClusterBackend, config: Config) -> None:
        with pytest.raises((ConfigError, BackendError)):
            backend.scale(config, -1, dry_run=True)

    # ------------------------------------------------------------------ lifecycle

    def test_lifecycle(self, backend: ClusterBackend, resolved: Resolved, config: Config, state_dir: Path) -> None:
        if not self.lifecycle:
            pytest.skip("lifecycle = False: this backend's tests do not create clusters")
        messages: list[str] = []
        try:
            plan = backend.plan(resolved)
            status = backend.apply(config, plan, progress=messages.append)
            assert status.ready, status
            assert messages, "apply() should report progress"
            again = backend.apply(config, backend.plan(resolved), progress=messages.append)
            assert again.ready and again.endpoint == status.endpoint, "apply() on a ready cluster must change nothing"
            scaled = backend.scale(config, self.scale_to, progress=messages.append)
            assert scaled.nodes == self.scale_to
        finally:
            gone = backend.down(config, progress=messages.append)
        assert gone.state == "absent"
        assert backend.status(config).state == "absent"
        assert backend.down(config).state == "absent", "down() on an absent cluster is not an error"


class InstanceTypePlugin(Protocol):
    """A plugin that registers instance types: a module (or object) with this hook implementation."""

    def fsdp_sdk_register_instance_types(self, registry: InstanceTypeRegistry) -> None:
        """Add the plugin's instance types to ``registry``."""
        ...


class InstanceTypePluginConformance:
    """What every plugin implementing ``fsdp_sdk_register_instance_types`` must do.

    Set :attr:`plugin` to the plugin (usually a module); optionally list the
    :attr:`expected_names` it registers and the :attr:`entry_point_name` it is
    installed under in the ``fsdp_sdk`` entry-point group.
    """

    #: The plugin under test.
    plugin: ClassVar[InstanceTypePlugin]
    #: Names the plugin must register.
    expected_names: ClassVar[tuple[str, ...]] = ()
    #: The plugin's entry-point name; when set, the installed entry point must load :attr:`plugin`.
    entry_point_name: ClassVar[str | None] = None

    def registered(self) -> list[InstanceType]:
        """The types the plugin registers into an empty registry."""
        registry = InstanceTypeRegistry()
        self.plugin.fsdp_sdk_register_instance_types(registry=registry)
        return list(registry)

    def test_registers_instance_types(self) -> None:
        types = self.registered()
        assert types, "the plugin registers no instance type"
        assert all(isinstance(t, InstanceType) for t in types)
        assert set(self.expected_names) <= {t.name for t in types}

    def test_instance_types_are_frozen(self) -> None:
        for instance_type in self.registered():
            with pytest.raises(dataclasses.FrozenInstanceError):
                # writing a frozen field on purpose: the test expects the refusal mypy also sees
                instance_type.gpu_count = 0  # type: ignore[misc]

    def test_figures_are_plausible(self) -> None:
        for t in self.registered():
            assert t.vcpus >= t.gpu_count, t.name
            assert t.gpu_memory_gib <= 1024, f"{t.name}: gpu_memory_gib is per GPU"
            assert t.intra_node_gbytes_per_s < 10_000, (
                f"{t.name}: intra_node_gbytes_per_s is GB/s per GPU, one direction"
            )
            assert t.bf16_tflops_per_gpu < 20_000, f"{t.name}: bf16_tflops_per_gpu is per GPU, dense, in TFLOP/s"
            if t.on_demand_usd_per_hour is not None:
                assert t.on_demand_usd_per_hour / t.gpu_count < 100, f"{t.name}: price is USD per instance-hour"
            json.dumps(t.to_dict())

    def plugins(self) -> Plugins:
        """The built-in plugins (but the one under test, when it is one) plus :attr:`plugin`, no autoload."""
        plugins = build_plugins(
            autoload=False,
            default_plugins=tuple(name for name in DEFAULT_PLUGINS if name != getattr(self.plugin, "__name__", None)),
        )
        if not plugins.pm.is_registered(self.plugin):
            plugins.register(self.plugin)
        return plugins

    def test_names_do_not_clash_with_other_plugins(self) -> None:
        plugins = self.plugins()
        registry = plugins.instance_types
        name = plugins.pm.get_name(self.plugin)
        clashes = [c.name for c in registry.conflicts if name in c.plugins]
        assert not clashes, f"names also registered by fsdp-sdk or another plugin: {', '.join(clashes)}"
        assert {t.name for t in self.registered()} <= set(registry.names())
        assert not plugins.registration_failures(), plugins.registration_failures()

    @pytest.mark.parametrize("api", ["pytorchjob", "trainjob"])
    def test_jobs_on_each_type_request_its_accelerators(self, api: str) -> None:
        from fsdp_sdk.k8s.render import render_job, worker_environment, worker_pods

        plugins = self.plugins()
        for t in self.registered():
            data = {"cluster": {"instance_type": t.name}, "job": {"registry": "registry.example.com/team", "api": api}}
            config = resolve(Config.from_dict(data, sections=plugins.settings), plugins, validate_trainer=False)
            objects = render_job(config, rdzv_id="conformance", plugins=plugins)  # the plugin's render hook too
            job = objects[0]
            resources = (
                job["spec"]["trainer"]["resourcesPerNode"]
                if api == "trainjob"
                else job["spec"]["pytorchReplicaSpecs"]["Worker"]["template"]["spec"]["containers"][0]["resources"]
            )
            assert resources["limits"][t.accelerator_resource] == t.gpu_count, t.name
            if t.accelerator_resource != "nvidia.com/gpu":
                assert "nvidia.com/gpu" not in resources["limits"], f"{t.name}: requests NVIDIA GPUs"
            env = {e["name"]: e.get("value") for e in worker_environment(config, t)}
            assert (env.get("FI_EFA_USE_DEVICE_RDMA") == "1") == (t.gpudirect_rdma and t.efa_interfaces > 0), t.name
            assert list(worker_pods(objects)), "the job has no worker pods"

    def test_entry_point_loads_the_plugin(self) -> None:
        if self.entry_point_name is None:
            pytest.skip("no entry_point_name: the plugin is not installed through an entry point")
        from importlib.metadata import entry_points

        found = [ep for ep in entry_points(group=ENTRY_POINT_GROUP) if ep.name == self.entry_point_name]
        assert found, (
            f"no entry point {self.entry_point_name!r} in group {ENTRY_POINT_GROUP!r}; is the package installed?"
        )
        assert found[0].load() is self.plugin
