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
``fsdp-sdk plugins``; the rest of the CLI keeps working. So is a third-party
plugin whose registration hook fails: what it registers is left out.

Names are unique. A backend, instance type or settings section that two plugins
register is refused for both (a built-in plugin's own is kept), with a warning
naming both plugins and their distributions; every other name keeps working, and
``fsdp-sdk plugins`` lists the conflict and exits 1. Naming a refused instance type
or backend in the configuration is a :class:`~fsdp_sdk.errors.ConfigError` saying
which distributions disagree. A command name that two plugins register is added for
neither (see :meth:`PluginHooks.register_commands`).

Internal code calls hooks through :class:`PluginHooks` (``get_plugins().hooks``),
a typed facade over ``pm.hook.*`` that calls each implementation on its own, so an
exception or a result of the wrong type names the plugin and the hook.
"""

from __future__ import annotations

import copy
import functools
import importlib
import os
import sys
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, TypeVar

import pluggy

from fsdp_sdk import __version__, hookspecs
from fsdp_sdk._fields import FrozenFields
from fsdp_sdk.errors import FsdpSdkError, PluginError

if TYPE_CHECKING:
    import click

    from fsdp_sdk.backends.base import BackendRegistry, ClusterStatus
    from fsdp_sdk.config import ClusterConfig, Config, JobConfig, Setting, SettingsRegistry
    from fsdp_sdk.instance_types import InstanceType, InstanceTypeRegistry
    from fsdp_sdk.monitoring import MonitoringComponent
    from fsdp_sdk.preflight import PreflightResult
    from fsdp_sdk.registry import Conflict, NamedRegistry
    from fsdp_sdk.runs import JobRef

    R = TypeVar("R", bound=NamedRegistry[Any])

_Item = TypeVar("_Item")

__all__ = [
    "DEFAULT_PLUGINS",
    "DISABLE_AUTOLOAD_ENV",
    "ENTRY_POINT_GROUP",
    "PluginHooks",
    "PluginInfo",
    "Plugins",
    "Resolved",
    "build_plugins",
    "changed_paths",
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


@dataclass(frozen=True, eq=False, repr=False)
class PluginInfo(FrozenFields):
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


def _one_line(exc: BaseException) -> str:
    return " ".join(f"{type(exc).__name__}: {exc}".split())


class PluginHooks:
    """Typed calls of every hook; the rest of the SDK never touches ``pm.hook`` directly.

    Each implementation is called on its own, so whatever goes wrong names the plugin and the
    hook: an unexpected exception becomes a :class:`~fsdp_sdk.errors.PluginError`
    (``plugin 'trn' (from fsdp_sdk_plugin_trainium 0.1.0): fsdp_sdk_render_job failed: KeyError: 'Worker'``),
    and so does a result of the wrong type. An :class:`~fsdp_sdk.errors.FsdpSdkError` a plugin raises
    on purpose (a one-line message for the user) passes through unchanged. A third-party plugin whose
    registration hook fails is reported and its registrations left out; the other plugins keep working.

    :param pm: the plugin manager.
    :param plugins: the plugin set this facade belongs to (names plugins with their distribution,
        and records registration failures and conflicts); ``None`` for a bare manager.
    """

    def __init__(self, pm: pluggy.PluginManager, plugins: Plugins | None = None) -> None:
        self._pm = pm
        self._plugins = plugins

    # ------------------------------------------------------------------ calling one implementation

    def _describe(self, plugin_name: str) -> str:
        return self._plugins.describe(plugin_name) if self._plugins is not None else repr(plugin_name)

    def _impls(self, hook_name: str, *, call_order: bool = False) -> list[Any]:
        """The implementations of a hook in registration order (built-in plugins first), or in pluggy's call
        order (last registered first) with ``call_order``."""
        impls = getattr(self._pm.hook, hook_name).get_hookimpls()
        return list(reversed(impls)) if call_order else list(impls)

    def _call(self, impl: Any, hook_name: str, **kwargs: Any) -> Any:
        """Call one implementation with the arguments it asks for; an unexpected exception names the plugin."""
        try:
            return impl.function(**{name: kwargs[name] for name in impl.argnames})
        except PluginError as exc:
            if str(exc).startswith("plugin "):
                raise
            # something the plugin built refused it (a MonitoringComponent, an InstanceType...): say whose it is
            raise PluginError(f"plugin {self._describe(impl.plugin_name)}: {hook_name}: {exc}") from exc
        except FsdpSdkError:
            raise
        except Exception as exc:
            raise PluginError(
                f"plugin {self._describe(impl.plugin_name)}: {hook_name} failed: {_one_line(exc)} "
                "(a bug in the plugin: report it to its author, or uninstall the plugin)"
            ) from exc

    def _wrong(self, impl: Any, hook_name: str, problem: str) -> PluginError:
        """The error for an implementation that returned or did something its hook does not allow."""
        return PluginError(f"plugin {self._describe(impl.plugin_name)}: {hook_name} {problem}")

    # ------------------------------------------------------------------ registration hooks

    def _fill(self, hook_name: str, registry: R) -> R:
        """Let each plugin fill a registry of its own, then merge it into ``registry``.

        A name two plugins register becomes a conflict (refused for both, unless a built-in
        plugin registered it: then the built-in one is kept). A third-party plugin whose hook
        fails is reported and what it registered is left out.
        """
        builtin = self._plugins.default_plugins if self._plugins is not None else ()
        for impl in self._impls(hook_name):
            staged = type(registry)()
            staged.current_plugin = impl.plugin_name
            try:
                result = self._call(impl, hook_name, registry=staged)
                if result is not None:
                    raise self._wrong(
                        impl, hook_name, f"returned {_kind(result)}; it must call registry.add() and return None"
                    )
            except FsdpSdkError as exc:
                if self._plugins is None or impl.plugin_name in builtin:
                    raise
                self._plugins._registration_failed(impl.plugin_name, hook_name, exc)
                continue
            for conflict in registry.merge(staged, keep=builtin):
                if self._plugins is not None:
                    self._plugins._conflicted(conflict)
        return registry

    def register_backends(self) -> BackendRegistry:
        """A registry filled by every ``fsdp_sdk_register_backends``.

        :raises PluginError: a built-in plugin registered an invalid or duplicate backend.
        """
        from fsdp_sdk.backends.base import BackendRegistry

        return self._fill("fsdp_sdk_register_backends", BackendRegistry())

    def register_instance_types(self) -> InstanceTypeRegistry:
        """A registry filled by every ``fsdp_sdk_register_instance_types``.

        :raises PluginError: a built-in plugin registered an invalid or duplicate instance type.
        """
        from fsdp_sdk.instance_types import InstanceTypeRegistry

        return self._fill("fsdp_sdk_register_instance_types", InstanceTypeRegistry())

    def register_settings(self) -> SettingsRegistry:
        """A registry filled by every ``fsdp_sdk_register_settings``.

        :raises PluginError: a built-in plugin registered an invalid or duplicate section.
        """
        from fsdp_sdk.config import SettingsRegistry

        return self._fill("fsdp_sdk_register_settings", SettingsRegistry())

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
        for impl in self._impls("fsdp_sdk_register_commands"):
            group = click.Group()
            try:
                self._call(impl, "fsdp_sdk_register_commands", cli=group)
            except FsdpSdkError as exc:
                who = f"plugin {self._describe(impl.plugin_name)}"
                text = str(exc) if str(exc).startswith(who) else f"{who}: fsdp_sdk_register_commands failed: {exc}"
                _warn(f"{text}; its commands are left out")
                continue
            for name, command in group.commands.items():
                owners.setdefault(name, []).append(impl.plugin_name)
                commands[name] = command
        for name, command in commands.items():
            if len(owners[name]) == 1:
                cli.add_command(command, name)
        return {name: plugins for name, plugins in owners.items() if len(plugins) > 1}

    # ------------------------------------------------------------------ rendering and look-ups

    def _resolution(self, what: Config | Resolved, hook_name: str) -> tuple[Config, Callable[[], Resolved]]:
        """The configuration, and a function giving the :class:`~fsdp_sdk.resolved.Resolved` a hook's ``resolved``
        parameter receives: ``what`` itself, or (called with a configuration alone) ``what`` resolved with this
        plugin set, only when an implementation asks for it."""

        if isinstance(what, Resolved):
            return what.config, lambda: what
        plugins = self._plugins

        @functools.cache
        def resolve() -> Resolved:
            if plugins is None:
                raise PluginError(f"{hook_name}: a bare plugin manager cannot resolve a configuration; pass a Resolved")
            return Resolved.of(what, plugins, validate_trainer=False)

        return what, resolve

    def _arguments(self, impl: Any, resolve: Callable[[], Resolved], **kwargs: Any) -> dict[str, Any]:
        return {**kwargs, "resolved": resolve()} if "resolved" in impl.argnames else kwargs

    def render_job(
        self,
        config: Config | Resolved,
        objects: list[dict[str, Any]],
        *,
        changes: list[tuple[str, int, str]] | None = None,
    ) -> None:
        """Let plugins append to or modify the rendered Kubernetes objects in place.

        :param config: the resolved value of the job (a bare configuration is resolved with this plugin set when a
            hook implementation asks for ``resolved``).
        :param changes: when given, gets ``(plugin, object index, path)`` for every path each hook set or changed
            (``""`` for an object it added), so a check after the hooks can name the plugin behind a field
            (:func:`fsdp_sdk.k8s.validate.pruned_by_hooks`).

        :raises PluginError: a plugin's hook failed, returned something, or left an object that is not a
            Kubernetes object (a dict with ``apiVersion``, ``kind`` and ``metadata.name``).
        """
        hook_name = "fsdp_sdk_render_job"
        config, resolve = self._resolution(config, hook_name)
        for impl in self._impls(hook_name, call_order=True):
            before = copy.deepcopy(objects) if changes is not None else None
            result = self._call(impl, hook_name, **self._arguments(impl, resolve, config=config, objects=objects))
            if result is not None:
                raise self._wrong(
                    impl, hook_name, f"returned {_kind(result)}; it must change 'objects' in place and return None"
                )
            for index, obj in enumerate(objects):
                problem = _object_problem(obj)
                if problem is not None:
                    raise self._wrong(impl, hook_name, f"left objects[{index}] {problem}")
            if changes is not None and before is not None:
                who = self._describe(impl.plugin_name)
                for index, obj in enumerate(objects):
                    paths = [""] if index >= len(before) else changed_paths(before[index], obj)
                    changes += [(who, index, path) for path in paths]

    def job_image(self, config: Config) -> str:
        """The image a job runs: the first plugin answer, else ``config.image_ref``.

        :raises PluginError: a plugin's hook failed or answered something other than an image reference or None.
        """
        hook_name = "fsdp_sdk_job_image"
        for impl in self._impls(hook_name, call_order=True):
            answer = self._call(impl, hook_name, config=config)
            if answer is None:
                continue
            if not isinstance(answer, str) or not answer.strip() or any(c.isspace() for c in answer):
                raise self._wrong(
                    impl, hook_name, f"returned {_kind(answer)}; it must return an image reference string or None"
                )
            return answer
        return config.image_ref

    def monitoring_components(self, config: Config) -> list[MonitoringComponent]:
        """All components every plugin contributes, in registration order.

        :raises PluginError: a plugin's hook failed or returned something other than a list of components.
        """
        from fsdp_sdk.monitoring import MonitoringComponent

        hook_name = "fsdp_sdk_monitoring_components"
        return self._collect(hook_name, MonitoringComponent, config=config)

    def preflight(self, config: Config | Resolved, action: str = "up") -> list[PreflightResult]:
        """The results of every plugin's preflight checks, in registration order.

        :param config: the resolved value the checks are for (a bare configuration is resolved with this plugin set
            when a hook implementation asks for ``resolved``).
        :param action: what is about to happen: ``up``, ``run`` or ``submit`` (see ``fsdp_sdk_preflight``).
        :raises PluginError: a plugin's check failed unexpectedly or returned something other than a list of
            :class:`~fsdp_sdk.preflight.PreflightResult`.
        """
        from fsdp_sdk.preflight import PreflightResult

        config, resolve = self._resolution(config, "fsdp_sdk_preflight")
        return self._collect("fsdp_sdk_preflight", PreflightResult, resolve, config=config, action=action)

    def _collect(
        self, hook_name: str, item_type: type[_Item], resolve: Callable[[], Resolved] | None = None, **kwargs: Any
    ) -> list[_Item]:
        """Every implementation's list of ``item_type`` records, in registration order (None counts as none)."""
        items: list[_Item] = []
        for impl in self._impls(hook_name):
            arguments = self._arguments(impl, resolve, **kwargs) if resolve is not None else kwargs
            result = self._call(impl, hook_name, **arguments)
            if result is None:
                continue
            name = item_type.__name__
            if isinstance(result, item_type):
                raise self._wrong(impl, hook_name, f"returned one {name}, not a list; return [result]")
            if not isinstance(result, (list, tuple)):
                raise self._wrong(impl, hook_name, f"returned {_kind(result)}; it must return a list of {name}")
            for item in result:
                if not isinstance(item, item_type):
                    raise self._wrong(
                        impl, hook_name, f"returned a list holding {_kind(item)}; every item must be a {name}"
                    )
            items += result
        return items

    # ------------------------------------------------------------------ lifecycle events

    def _notify(self, hook_name: str, **kwargs: Any) -> None:
        for impl in self._impls(hook_name, call_order=True):
            self._call(impl, hook_name, **kwargs)

    def cluster_created(self, config: Config, status: ClusterStatus) -> None:
        """Announce a cluster that ``up`` brought up."""
        self._notify("fsdp_sdk_cluster_created", config=config, status=status)

    def before_cluster_delete(self, config: Config, status: ClusterStatus) -> None:
        """Announce a cluster about to be deleted; a plugin may raise an ``FsdpSdkError`` to refuse."""
        self._notify("fsdp_sdk_before_cluster_delete", config=config, status=status)

    def job_submitted(self, config: Config, job: JobRef) -> None:
        """Announce a submitted or started job."""
        self._notify("fsdp_sdk_job_submitted", config=config, job=job)

    def job_finished(self, config: Config, job: JobRef, succeeded: bool, summary: dict[str, Any] | None) -> None:
        """Announce the end of a job."""
        self._notify("fsdp_sdk_job_finished", config=config, job=job, succeeded=succeeded, summary=summary)


def _kind(value: object) -> str:
    """How a wrong value is named in messages: ``a str ('oops')``, ``a dict``."""
    text = f"a {type(value).__name__}"
    if isinstance(value, (str, int, float, bool)):
        shown = repr(value)
        text += f" ({shown[:40]}{'...' if len(shown) > 40 else ''})"
    return text


def _object_problem(obj: object) -> str | None:
    """Why ``obj`` is not a Kubernetes object as the renderer hands them on, or None."""
    if not isinstance(obj, dict):
        return f"as {_kind(obj)}, not a Kubernetes object (a dict)"
    metadata = obj.get("metadata")
    if not isinstance(obj.get("apiVersion"), str) or not isinstance(obj.get("kind"), str):
        return "without apiVersion or kind"
    if not isinstance(metadata, dict) or not metadata.get("name"):
        return f"(a {obj['kind']}) without metadata.name"
    return None


class Plugins:
    """The loaded plugins: the pluggy manager, the hook facade, the registries they fill, and what went wrong.

    Build it with :func:`build_plugins`, or use the process-wide :func:`get_plugins`.

    :param pm: the plugin manager, with the hook specifications added.
    :param default_plugins: names of the built-in plugins: their definitions win a name conflict, and a
        failure of theirs is a bug of fsdp-sdk (raised, not reported).
    """

    def __init__(self, pm: pluggy.PluginManager, *, default_plugins: Iterable[str] = DEFAULT_PLUGINS) -> None:
        self.pm = pm
        self.default_plugins: frozenset[str] = frozenset(default_plugins)
        self.hooks = PluginHooks(pm, self)
        self._broken: list[PluginInfo] = []
        self._distributions: dict[str, tuple[str, str]] = {}
        self._failures: dict[str, list[str]] = {}  # plugin -> why its registration hooks were left out

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

    def conflicts(self) -> list[Conflict]:
        """Every backend, instance type and settings section more than one plugin registers (builds the registries)."""
        return [*self.backends.conflicts, *self.instance_types.conflicts, *self.settings.conflicts]

    def explain(self, conflict: Conflict) -> tuple[str, str]:
        """``(problem, fix)``: a conflict in words, naming the plugins and the distributions they come from.

        :param conflict: a conflict from :meth:`conflicts` or a registry.
        """
        refused = sorted(set(conflict.refused))
        names = " and ".join(self.describe(p) for p in refused)
        dists = [d for d in dict.fromkeys(self._distributions.get(p, (None,))[0] for p in refused) if d]
        if conflict.kept is not None:
            problem = (
                f"plugin{'s' if len(refused) > 1 else ''} {names} also register{'' if len(refused) > 1 else 's'} "
                f"the {conflict.kind} {conflict.name!r} built into fsdp-sdk, so fsdp-sdk's own is used"
            )
            fix = f"pip uninstall {' '.join(dists)}" if dists else "unregister that plugin"
            return problem, f"{fix}, or ask its author to rename theirs"
        every = "both" if len(refused) == 2 else "all"
        problem = f"plugins {names} {every} register the {conflict.kind} {conflict.name!r}, so none of them is used"
        fix = "uninstall one of them" + (f" (pip uninstall {' or '.join(dists)})" if dists else "")
        return problem, fix

    def registration_failures(self, hook_name: str | None = None) -> dict[str, str]:
        """Third-party plugins whose registration hooks failed (what they register is left out), with why.

        :param hook_name: only this hook's failures (``fsdp_sdk_register_instance_types``...).
        """
        return {
            plugin: " | ".join(m for m in messages if hook_name is None or m.startswith(f"{hook_name} "))
            for plugin, messages in self._failures.items()
            if hook_name is None or any(m.startswith(f"{hook_name} ") for m in messages)
        }

    def failed_registrations_note(self, hook_name: str, what: str) -> str:
        """``"; plugin X failed to register its <what> (...)"`` when a plugin's ``hook_name`` failed, else ``""``: the
        end of an "unknown backend / instance type" error, which may be the one that plugin would have added."""
        failed = self.registration_failures(hook_name)
        if not failed:
            return ""
        return f"; plugin {', '.join(failed)} failed to register its {what} (fsdp-sdk plugins says why)"

    def _registration_failed(self, plugin: str, hook_name: str, error: BaseException) -> None:
        reason = " ".join(str(error).split())
        for prefix in (f"plugin {plugin}: ", f"plugin {self.describe(plugin)}: "):
            reason = reason.removeprefix(prefix)
        message = f"{hook_name} failed, so what it registers is left out: {reason}"
        self._failures.setdefault(plugin, []).append(message)
        _warn(f"plugin {self.describe(plugin)}: {message}")

    def _conflicted(self, conflict: Conflict) -> None:
        problem, fix = self.explain(conflict)
        _warn(f"{problem}; {fix}")

    def register(self, plugin: object, name: str | None = None) -> str:
        """Register one more plugin (tests, embedding applications) and reset the registries.

        :param plugin: a module, class or instance with :data:`~fsdp_sdk.hookspecs.hookimpl` functions.
        :param name: its name; defaults to pluggy's canonical name.
        :raises PluginError: the name is taken or a hook implementation does not match its spec.
        """
        try:
            registered = self.pm.register(plugin, name=name)
            self.pm.check_pending()
            _refuse_wrappers(self.pm, plugin)
        except (ValueError, pluggy.PluginValidationError) as exc:
            if self.pm.is_registered(plugin):
                self.pm.unregister(plugin)
            raise PluginError(f"plugin {name or plugin!r} was refused: {exc}") from exc
        self._forget_registries()
        return registered or self.pm.get_name(plugin) or repr(plugin)

    def unregister(self, name: str) -> None:
        """Remove a plugin by name and reset the registries."""
        self.pm.unregister(name=name)
        self._failures.pop(name, None)
        self._forget_registries()

    def _forget_registries(self) -> None:
        for registry in ("backends", "instance_types", "settings"):
            self.__dict__.pop(registry, None)
        self._failures.clear()

    def infos(self) -> list[PluginInfo]:
        """Every registered plugin, then the broken ones.

        The registries are built first, so a plugin whose registration hook failed is listed with its error.
        """
        self.conflicts()
        infos = []
        for name, plugin in self.pm.list_name_plugin():
            if plugin is None:  # blocked
                continue
            module = getattr(plugin, "__name__", None) or f"{type(plugin).__module__}:{type(plugin).__qualname__}"
            distribution, version = self._distributions.get(name, (None, None))
            hooks = tuple(sorted(caller.name for caller in (self.pm.get_hookcallers(plugin) or [])))
            failure = " | ".join(self._failures.get(name, [])) or None
            infos.append(PluginInfo(name, module, name in self.default_plugins, distribution, version, hooks, failure))
        return infos + self.broken

    def describe(self, name: str) -> str:
        """A plugin's name and where it comes from, for messages: ``'b200' (from fsdp_sdk_plugin_b200 0.1.0)``.

        :param name: the name the plugin is registered (or was refused) under.
        """
        if name in self.default_plugins:
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
                if ep.name in self.default_plugins
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
            self._distributions[ep.name] = distribution

    def _check_pending(self) -> None:
        """Unregister, one by one, plugins implementing hooks that have no specification (misspelled names)
        or implementing one as a hook wrapper."""
        while True:
            try:
                self.pm.check_pending()
                for name, plugin in self.pm.list_name_plugin():
                    if plugin is not None and name not in self.default_plugins:
                        _refuse_wrappers(self.pm, plugin)
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


@dataclass(frozen=True, eq=False)
class Resolved:
    """A resolved configuration, its instance type, and the plugin set both come from.

    Build one with :meth:`of`; never change ``config`` in place (make another with :meth:`with_overrides`).

    :param config: the resolved configuration (:func:`~fsdp_sdk.config.resolution.resolve`).
    :param instance: the instance type ``config.cluster.instance_type`` names, as ``plugins`` registers it.
    :param plugins: the plugin set the configuration was resolved with.
    """

    config: Config
    instance: InstanceType
    plugins: Plugins

    @classmethod
    def of(cls, config: Config, plugins: Plugins, *, validate_trainer: bool = True) -> Resolved:
        """Resolve ``config`` with ``plugins`` (:func:`fsdp_sdk.config.resolution.resolve`) and keep what it found.

        :param config: the configuration, resolved or not (resolving again changes nothing).
        :param plugins: the plugin set providing backends, instance types and settings sections.
        :param validate_trainer: also validate the trainer settings (see :func:`~fsdp_sdk.config.resolution.resolve`).
        :raises ConfigError: a value contradicts another or names something unknown.
        """
        from fsdp_sdk.config.resolution import find_instance_type, resolve  # here: --help imports no configuration

        done = resolve(config, plugins, validate_trainer=validate_trainer)
        return cls(done, find_instance_type(done, plugins), plugins)

    def with_overrides(
        self, overrides: Mapping[str, Any] | Iterable[Setting], *, validate_trainer: bool = True
    ) -> Resolved:
        """Another resolved value, with more settings applied on top, resolved in the same plugin set.

        :param overrides: dotted paths and values, or :class:`~fsdp_sdk.config.Setting` records.
        :param validate_trainer: also validate the trainer settings.
        :raises ConfigError: a key is unknown, a value has the wrong type, or the result does not resolve.
        """
        return Resolved.of(self.config.with_overrides(overrides), self.plugins, validate_trainer=validate_trainer)

    @property
    def cluster(self) -> ClusterConfig:
        """``config.cluster``."""
        return self.config.cluster

    @property
    def job(self) -> JobConfig:
        """``config.job``."""
        return self.config.job

    def __repr__(self) -> str:
        return f"<Resolved cluster={self.config.cluster.name!r} instance={self.instance.name!r}>"


def _warn(message: str) -> None:
    sys.stderr.write(f"fsdp-sdk: warning: {message}\n")


def _refuse_wrappers(pm: pluggy.PluginManager, plugin: object) -> None:
    """Raise ``PluginValidationError`` when ``plugin`` implements a hook as a wrapper: :class:`PluginHooks` calls
    each implementation on its own (to name the plugin when one fails), which wrappers cannot take part in."""
    for caller in pm.get_hookcallers(plugin) or []:
        for impl in caller.get_hookimpls():
            if impl.plugin is plugin and (impl.hookwrapper or impl.wrapper):
                raise pluggy.PluginValidationError(
                    plugin,
                    f"{caller.name} is implemented as a hook wrapper, which fsdp-sdk does not support; "
                    "drop wrapper=True / hookwrapper=True",
                )


def build_plugins(*, autoload: bool | None = None, default_plugins: Iterable[str] = DEFAULT_PLUGINS) -> Plugins:
    """Build a new plugin set: the hook specifications, the default plugins, then entry-point plugins.

    :param autoload: load third-party plugins from the ``fsdp_sdk`` entry-point group;
        defaults to True unless ``FSDP_SDK_DISABLE_PLUGIN_AUTOLOAD`` is set to a non-empty value other than ``0``.
    :param default_plugins: modules of the built-in plugins.
    :raises PluginError: a default plugin could not be registered (a bug in fsdp-sdk itself).
    """
    pm = pluggy.PluginManager(hookspecs.PROJECT_NAME)
    pm.add_hookspecs(hookspecs)
    default_plugins = tuple(default_plugins)
    plugins = Plugins(pm, default_plugins=default_plugins)
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


def changed_paths(before: Any, after: Any, path: str = "") -> list[str]:
    """The dotted paths where ``after`` differs from ``before``: keys and list items it adds, values it changes (what
    a render hook set, for :meth:`PluginHooks.render_job`'s ``changes``).

    An added key or item is one path (not one per leaf below it), so a hook that sets ``spec.podSpecOverrides``
    shows as that one path.
    """
    if isinstance(before, Mapping) and isinstance(after, Mapping):
        out: list[str] = []
        for key, item in after.items():
            where = f"{path}.{key}" if path else str(key)
            out += [where] if key not in before else changed_paths(before[key], item, where)
        return out
    if isinstance(before, list) and isinstance(after, list):
        out = []
        for index, item in enumerate(after):
            where = f"{path}[{index}]"
            out += [where] if index >= len(before) else changed_paths(before[index], item, where)
        return out
    return [] if before == after else [path]
