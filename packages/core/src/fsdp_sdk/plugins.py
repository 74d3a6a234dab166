"""The plugin manager: built-in default plugins plus third-party ones from entry points.

:func:`get_plugins` builds the manager on first use (never at import time) and
caches it. Built-in behaviour lives in :data:`DEFAULT_PLUGINS`, registered the
same way as third-party plugins, which come from the ``fsdp_sdk`` entry-point
group and are loaded once. ``FSDP_SDK_DISABLE_PLUGIN_AUTOLOAD=1`` turns the
entry-point loading off.

A third-party plugin that fails to import, that implements a hook with a
wrong name or signature, or whose entry-point name is already taken (by a
built-in plugin or by another distribution's entry point, which keeps it), is
unregistered, reported by name on stderr and listed as broken by
``fsdp-sdk plugins``; the rest of the CLI keeps working. A plugin that registers
a backend or instance type under a name that is already taken makes the
registry raise :class:`~fsdp_sdk.errors.PluginError`; a command name that two
plugins register is added for neither (see :meth:`PluginHooks.register_commands`).

Internal code calls hooks through :class:`PluginHooks` (``get_plugins().hooks``),
a typed facade over ``pm.hook.*``.
"""

from __future__ import annotations

import functools
import importlib
import os
import sys
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import pluggy

from fsdp_sdk import __version__, hookspecs
from fsdp_sdk.errors import PluginError

if TYPE_CHECKING:
    import click

    from fsdp_sdk.backends.base import BackendRegistry, ClusterStatus
    from fsdp_sdk.config import Config, SettingsRegistry
    from fsdp_sdk.instance_types import InstanceTypeRegistry
    from fsdp_sdk.monitoring import MonitoringComponent
    from fsdp_sdk.preflight import PreflightResult
    from fsdp_sdk.runs import JobRef

__all__ = [
    "DEFAULT_PLUGINS",
    "DISABLE_AUTOLOAD_ENV",
    "ENTRY_POINT_GROUP",
    "PluginHooks",
    "PluginInfo",
    "Plugins",
    "build_plugins",
    "get_plugins",
    "reset_plugins",
]

#: Entry-point group third-party plugins declare in their ``pyproject.toml``.
ENTRY_POINT_GROUP = hookspecs.PROJECT_NAME
#: Set to ``1`` to skip loading third-party plugins from entry points.
DISABLE_AUTOLOAD_ENV = "FSDP_SDK_DISABLE_PLUGIN_AUTOLOAD"

#: Modules of the built-in plugins, registered under their module name before any third-party plugin.
DEFAULT_PLUGINS: tuple[str, ...] = (
    "fsdp_sdk.instance_types",
    "fsdp_sdk.backends.builtin",
)


@dataclass(frozen=True)
class PluginInfo:
    """What ``fsdp-sdk plugins`` shows about one plugin.

    :param name: the name it is registered under (the entry-point name for third-party plugins).
    :param module: the module that implements it (``module:attr`` for non-module objects).
    :param builtin: whether it is one of :data:`DEFAULT_PLUGINS`.
    :param distribution: the distribution that declared it, for entry-point plugins.
    :param version: that distribution's version.
    :param hooks: the hooks it implements.
    :param error: why it could not be loaded, for broken plugins.
    """

    name: str
    module: str
    builtin: bool
    distribution: str | None = None
    version: str | None = None
    hooks: tuple[str, ...] = ()
    error: str | None = None

    @property
    def broken(self) -> bool:
        """Whether the plugin failed to load."""
        return self.error is not None

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready dict."""
        return {
            "name": self.name,
            "module": self.module,
            "builtin": self.builtin,
            "distribution": self.distribution,
            "version": self.version,
            "hooks": list(self.hooks),
            "status": "broken" if self.broken else "ok",
            "error": self.error,
        }


class PluginHooks:
    """Typed calls of every hook; the rest of the SDK never touches ``pm.hook`` directly."""

    def __init__(self, pm: pluggy.PluginManager) -> None:
        self._pm = pm

    def _each_impl(self, hook_name: str, **kwargs: Any) -> Iterable[tuple[str, Callable[[], Any]]]:
        """Yield ``(plugin name, call)`` for each implementation of a hook, in registration order."""
        hook = getattr(self._pm.hook, hook_name)
        for impl in hook.get_hookimpls():
            arguments = {name: kwargs[name] for name in impl.argnames}
            yield impl.plugin_name, functools.partial(impl.function, **arguments)

    def _register_into(self, hook_name: str, registry: Any) -> None:
        for plugin_name, call in self._each_impl(hook_name, registry=registry):
            registry.current_plugin = plugin_name
            try:
                call()
            except PluginError:
                raise
            except Exception as exc:
                raise PluginError(f"plugin {plugin_name}: {hook_name} failed: {type(exc).__name__}: {exc}") from exc
            finally:
                registry.current_plugin = None

    def register_backends(self) -> BackendRegistry:
        """A registry filled by every ``fsdp_sdk_register_backends``.

        :raises PluginError: a plugin registered an invalid or duplicate backend.
        """
        from fsdp_sdk.backends.base import BackendRegistry

        registry = BackendRegistry()
        self._register_into("fsdp_sdk_register_backends", registry)
        return registry

    def register_instance_types(self) -> InstanceTypeRegistry:
        """A registry filled by every ``fsdp_sdk_register_instance_types``.

        :raises PluginError: a plugin registered an invalid or duplicate instance type.
        """
        from fsdp_sdk.instance_types import InstanceTypeRegistry

        registry = InstanceTypeRegistry()
        self._register_into("fsdp_sdk_register_instance_types", registry)
        return registry

    def register_settings(self) -> SettingsRegistry:
        """A registry filled by every ``fsdp_sdk_register_settings``.

        :raises PluginError: a plugin registered an invalid or duplicate section.
        """
        from fsdp_sdk.config import SettingsRegistry

        registry = SettingsRegistry()
        self._register_into("fsdp_sdk_register_settings", registry)
        return registry

    def register_commands(self, cli: click.Group) -> dict[str, list[str]]:
        """Let plugins add commands to ``cli``; a plugin whose hook fails is reported and skipped.

        Each plugin fills a group of its own, whose commands are then added to ``cli``,
        so a command name that two plugins register is seen rather than silently
        replaced: such a name is added for none of them.

        :param cli: the group receiving the plugins' commands.
        :returns: each command name more than one plugin registered, with those plugins' names.
        """
        import click

        owners: dict[str, list[str]] = {}
        commands: dict[str, click.Command] = {}
        for impl in self._pm.hook.fsdp_sdk_register_commands.get_hookimpls():
            group = click.Group()
            try:
                impl.function(**({"cli": group} if "cli" in impl.argnames else {}))
            except Exception as exc:
                _warn(f"plugin {impl.plugin_name!r} failed to register its commands: {type(exc).__name__}: {exc}")
                continue
            for name, command in group.commands.items():
                owners.setdefault(name, []).append(impl.plugin_name)
                commands[name] = command
        for name, command in commands.items():
            if len(owners[name]) == 1:
                cli.add_command(command, name)
        return {name: plugins for name, plugins in owners.items() if len(plugins) > 1}

    def render_job(self, config: Config, objects: list[dict[str, Any]]) -> None:
        """Let plugins append to or modify the rendered Kubernetes objects in place."""
        self._pm.hook.fsdp_sdk_render_job(config=config, objects=objects)

    def job_image(self, config: Config) -> str:
        """The image a job runs: the first plugin answer, else ``config.image_ref``."""
        answer = self._pm.hook.fsdp_sdk_job_image(config=config)
        return answer if answer is not None else config.image_ref

    def monitoring_components(self, config: Config) -> list[MonitoringComponent]:
        """All components every plugin contributes, in registration order."""
        results = self._pm.hook.fsdp_sdk_monitoring_components(config=config)
        return [component for result in reversed(results) for component in (result or [])]

    def preflight(self, config: Config) -> list[PreflightResult]:
        """The results of every plugin's preflight checks, in registration order."""
        results = self._pm.hook.fsdp_sdk_preflight(config=config)
        return [item for result in reversed(results) for item in (result or [])]

    def cluster_created(self, config: Config, status: ClusterStatus) -> None:
        """Announce a cluster that ``up`` brought up."""
        self._pm.hook.fsdp_sdk_cluster_created(config=config, status=status)

    def before_cluster_delete(self, config: Config, status: ClusterStatus) -> None:
        """Announce a cluster about to be deleted; a plugin may raise to refuse."""
        self._pm.hook.fsdp_sdk_before_cluster_delete(config=config, status=status)

    def job_submitted(self, config: Config, job: JobRef) -> None:
        """Announce a submitted or started job."""
        self._pm.hook.fsdp_sdk_job_submitted(config=config, job=job)

    def job_finished(self, config: Config, job: JobRef, succeeded: bool, summary: dict[str, Any] | None) -> None:
        """Announce the end of a job."""
        self._pm.hook.fsdp_sdk_job_finished(config=config, job=job, succeeded=succeeded, summary=summary)


class Plugins:
    """The loaded plugins: the pluggy manager, the hook facade, the registries they fill, and the broken ones.

    Build it with :func:`build_plugins`, or use the process-wide :func:`get_plugins`.
    """

    def __init__(self, pm: pluggy.PluginManager) -> None:
        self.pm = pm
        self.hooks = PluginHooks(pm)
        self._broken: list[PluginInfo] = []
        self._distributions: dict[str, tuple[str, str]] = {}

    @functools.cached_property
    def backends(self) -> BackendRegistry:
        """The backends every plugin registered (built on first access)."""
        return self.hooks.register_backends()

    @functools.cached_property
    def instance_types(self) -> InstanceTypeRegistry:
        """The instance types every plugin registered (built on first access)."""
        return self.hooks.register_instance_types()

    @functools.cached_property
    def settings(self) -> SettingsRegistry:
        """The configuration sections every plugin registered (built on first access)."""
        return self.hooks.register_settings()

    @property
    def broken(self) -> list[PluginInfo]:
        """Plugins that failed to load."""
        return list(self._broken)

    def register(self, plugin: object, name: str | None = None) -> str:
        """Register one more plugin (tests, embedding applications) and reset the registries.

        :param plugin: a module, class or instance with :data:`~fsdp_sdk.hookspecs.hookimpl` functions.
        :param name: its name; defaults to pluggy's canonical name.
        :raises PluginError: the name is taken or a hook implementation does not match its spec.
        """
        try:
            registered = self.pm.register(plugin, name=name)
            self.pm.check_pending()
        except (ValueError, pluggy.PluginValidationError) as exc:
            if self.pm.is_registered(plugin):
                self.pm.unregister(plugin)
            raise PluginError(f"plugin {name or plugin!r} was refused: {exc}") from exc
        self._forget_registries()
        return registered or self.pm.get_name(plugin) or repr(plugin)

    def unregister(self, name: str) -> None:
        """Remove a plugin by name and reset the registries."""
        self.pm.unregister(name=name)
        self._forget_registries()

    def _forget_registries(self) -> None:
        for registry in ("backends", "instance_types", "settings"):
            self.__dict__.pop(registry, None)

    def infos(self) -> list[PluginInfo]:
        """Every registered plugin, then the broken ones."""
        infos = []
        for name, plugin in self.pm.list_name_plugin():
            if plugin is None:  # blocked
                continue
            module = getattr(plugin, "__name__", None) or f"{type(plugin).__module__}:{type(plugin).__qualname__}"
            distribution, version = self._distributions.get(name, (None, None))
            hooks = tuple(sorted(caller.name for caller in (self.pm.get_hookcallers(plugin) or [])))
            infos.append(PluginInfo(name, module, name in DEFAULT_PLUGINS, distribution, version, hooks))
        return infos + self.broken

    def describe(self, name: str) -> str:
        """A plugin's name and where it comes from, for messages: ``'b200' (from fsdp_sdk_plugin_b200 0.1.0)``.

        :param name: the name the plugin is registered (or was refused) under.
        """
        if name in DEFAULT_PLUGINS:
            return f"{name!r} (built into fsdp-sdk)"
        distribution, version = self._distributions.get(name, (None, None))
        if distribution is None:
            distribution, version = next(
                ((i.distribution, i.version) for i in self._broken if i.name == name), (None, None)
            )
        return f"{name!r} (from {distribution} {version})" if distribution else repr(name)

    def _load_entry_points(self) -> None:
        from fsdp_sdk.entry_points import entry_points

        claimed: dict[str, tuple[str, str]] = {}  # entry-point name -> the distribution that declared it first
        for ep in entry_points(ENTRY_POINT_GROUP):
            if self.pm.is_blocked(ep.name):
                continue
            distribution = (ep.distribution, ep.version)
            taken_by = (
                f"the built-in plugin of fsdp-sdk {__version__}"
                if ep.name in DEFAULT_PLUGINS
                else f"{claimed[ep.name][0]} {claimed[ep.name][1]}"
                if ep.name in claimed
                else "the plugin registered before it"
                if self.pm.has_plugin(ep.name)
                else None
            )
            if taken_by is not None:
                self._mark_broken(
                    ep.name,
                    ep.value,
                    distribution,
                    f"the name {ep.name!r} is already taken by {taken_by}, which is kept; rename the entry point "
                    f"in {ep.distribution}'s [project.entry-points.{ENTRY_POINT_GROUP}] or uninstall one of the two",
                    verb="is not loaded",
                )
                continue
            claimed[ep.name] = distribution
            try:
                plugin = ep.load()
                self.pm.register(plugin, name=ep.name)
            except Exception as exc:
                self._mark_broken(ep.name, ep.value, distribution, exc)
                continue
            self._distributions[ep.name] = distribution  # type: ignore[assignment]

    def _check_pending(self) -> None:
        """Unregister, one by one, plugins implementing hooks that have no specification (misspelled names)."""
        while True:
            try:
                self.pm.check_pending()
                return
            except pluggy.PluginValidationError as exc:
                name = self.pm.get_name(exc.plugin) or repr(exc.plugin)
                self.pm.unregister(exc.plugin)
                module = getattr(exc.plugin, "__name__", repr(exc.plugin))
                self._mark_broken(name, module, self._distributions.pop(name, (None, None)), exc)

    def _mark_broken(
        self,
        name: str,
        module: str,
        distribution: tuple[str | None, str | None],
        problem: BaseException | str,
        *,
        verb: str = "failed to load and is disabled",
    ) -> None:
        """List a plugin as broken and say so on stderr.

        :param problem: the exception that stopped it, or a sentence saying why it was not loaded.
        :param verb: what happened to it, for the warning.
        """
        text = problem if isinstance(problem, str) else f"{type(problem).__name__}: {problem}"
        reason = " ".join(text.split())
        dist_name, version = distribution
        self._broken.append(PluginInfo(name, module, False, dist_name, version, (), reason))
        origin = f" (from {dist_name} {version})" if dist_name else ""
        _warn(f"plugin {name!r}{origin} {verb}: {reason}")


def _warn(message: str) -> None:
    sys.stderr.write(f"fsdp-sdk: warning: {message}\n")


def build_plugins(*, autoload: bool | None = None, default_plugins: Iterable[str] = DEFAULT_PLUGINS) -> Plugins:
    """Build a new plugin set: the hook specifications, the default plugins, then entry-point plugins.

    :param autoload: load third-party plugins from the ``fsdp_sdk`` entry-point group;
        defaults to True unless ``FSDP_SDK_DISABLE_PLUGIN_AUTOLOAD`` is set to a non-empty value other than ``0``.
    :param default_plugins: modules of the built-in plugins.
    :raises PluginError: a default plugin could not be registered (a bug in fsdp-sdk itself).
    """
    pm = pluggy.PluginManager(hookspecs.PROJECT_NAME)
    pm.add_hookspecs(hookspecs)
    plugins = Plugins(pm)
    for module_name in default_plugins:
        try:
            pm.register(importlib.import_module(module_name), name=module_name)
        except (ImportError, ValueError, pluggy.PluginValidationError) as exc:
            raise PluginError(f"built-in plugin {module_name} could not be registered: {exc}") from exc
    if autoload is None:
        autoload = os.environ.get(DISABLE_AUTOLOAD_ENV, "") in ("", "0")
    if autoload:
        plugins._load_entry_points()
    plugins._check_pending()
    return plugins


@functools.cache
def get_plugins() -> Plugins:
    """The process-wide plugin set, built by :func:`build_plugins` on the first call."""
    return build_plugins()


def reset_plugins() -> None:
    """Forget the process-wide plugin set; the next :func:`get_plugins` builds a new one."""
    get_plugins.cache_clear()
