"""The resolution: what follows from the instance type and the plugin set, and the rules across fields.

:func:`resolve` fills ``job.gpu_per_worker``, ``job.efa_per_worker`` and ``cluster.max_nodes``, derives the
capacity type from a reservation, lets plugin sections validate, and validates the trainer section; each refusal is
a one-line :class:`~fsdp_sdk.errors.ConfigError`. :meth:`Resolved.of <fsdp_sdk.resolved.Resolved.of>` runs it and
keeps what it found.

It reads a plugin set through :class:`PluginRegistries`, the registries resolving looks things up in
(:class:`fsdp_sdk.plugins.Plugins` is one): the configuration sits below the plugin set, which names it in its hooks,
so nothing here imports the plugin set.
"""

from __future__ import annotations

import copy
from typing import TYPE_CHECKING, Any, Protocol

from fsdp_sdk.config.conversions import close_matches
from fsdp_sdk.config.model import Config, _add_sections
from fsdp_sdk.errors import ConfigError

if TYPE_CHECKING:
    from fsdp_sdk.backends.base import BackendRegistry
    from fsdp_sdk.config.sections import SettingsRegistry
    from fsdp_sdk.instance_types import InstanceType, InstanceTypeRegistry
    from fsdp_sdk.registry import Conflict

__all__ = ["PluginRegistries", "check_trainer", "find_instance_type", "resolve", "resolve_capacity"]


class PluginRegistries(Protocol):
    """What resolving reads of a plugin set: its registries, and how it explains a name two plugins claim or a
    registration that failed (:class:`fsdp_sdk.plugins.Plugins` has all of it)."""

    @property
    def backends(self) -> BackendRegistry: ...

    @property
    def instance_types(self) -> InstanceTypeRegistry: ...

    @property
    def settings(self) -> SettingsRegistry: ...

    def explain(self, conflict: Conflict) -> tuple[str, str]: ...

    def failed_registrations_note(self, hook_name: str, what: str) -> str: ...


# The trainer's flag prefixes that differ from its section names (``--ac.mode`` sets activation_checkpointing).
_TRAINER_SECTION_ALIASES = {"ac": "activation_checkpointing", "activation_checkpointing": "ac"}


def find_instance_type(config: Config, plugins: PluginRegistries) -> InstanceType:
    """The :class:`~fsdp_sdk.instance_types.InstanceType` named by ``cluster.instance_type``.

    :param plugins: the plugin set to look it up in (``fsdp_sdk.plugins.get_plugins()`` for the process's).
    :raises ConfigError: no registered instance type has that name.
    """
    registry = plugins.instance_types
    found = registry.get(config.cluster.instance_type)
    if found is None:
        name = config.cluster.instance_type
        conflict = registry.conflict(name)
        if conflict is not None:
            raise config._error("cluster.instance_type", *plugins.explain(conflict))
        close = close_matches(name, registry.names(), n=1)
        hint = f"did you mean {close[0]}? " if close else ""
        also = plugins.failed_registrations_note("fsdp_sdk_register_instance_types", "types")
        raise config._error(
            "cluster.instance_type",
            f"unknown instance type {name!r}",
            f"{hint}choose one of {', '.join(registry.names())} (fsdp-sdk instance-types lists them){also}",
        )
    return found


def resolve(config: Config, plugins: PluginRegistries, *, validate_trainer: bool = True) -> Config:
    """A copy with derived values filled in and cross-field rules checked.

    Fills ``job.gpu_per_worker`` and ``job.efa_per_worker`` from the instance
    type, whichever of ``cluster.nodes`` and ``job.num_workers`` is unset from the
    other, and ``cluster.max_nodes`` from ``cluster.nodes``; refuses an unknown
    backend or instance type, more GPUs or EFA interfaces per worker than the
    instance type has, node bounds out of order; validates the trainer
    section with ``fsdp_trainer.config.TrainerConfig.from_dict`` when the
    trainer is installed. Calling it again changes nothing.

    :param plugins: the plugin set providing backends, instance types and settings sections
        (``fsdp_sdk.plugins.get_plugins()`` for the process's).
    :param validate_trainer: set to False to skip the trainer validation.
    :raises ConfigError: a value contradicts another or names something unknown.
    """
    new = copy.deepcopy(config)
    _add_sections(new, plugins.settings)
    cluster, job = new.cluster, new.job

    if cluster.backend not in plugins.backends:
        conflict = plugins.backends.conflict(cluster.backend)
        if conflict is not None:
            raise new._error("cluster.backend", *plugins.explain(conflict))
        problem, fix = plugins.backends.unknown(cluster.backend)
        fix += plugins.failed_registrations_note("fsdp_sdk_register_backends", "backends")
        raise new._error("cluster.backend", problem, fix)
    instance = find_instance_type(new, plugins)

    if job.gpu_per_worker is None:
        job.gpu_per_worker = instance.gpu_count
    elif job.gpu_per_worker > instance.gpu_count:
        raise new._error(
            "job.gpu_per_worker",
            f"{job.gpu_per_worker} GPUs per worker but {instance.name} has {instance.gpu_count}",
            f"set it to {instance.gpu_count} or less, or choose an instance type with more GPUs",
        )
    efa_available = instance.efa_interfaces if cluster.efa else 0
    if job.efa_per_worker is None:
        job.efa_per_worker = efa_available
    elif job.efa_per_worker > efa_available:
        why = "cluster.efa is off" if not cluster.efa else f"{instance.name} has {instance.efa_interfaces}"
        raise new._error(
            "job.efa_per_worker",
            f"{job.efa_per_worker} EFA interfaces per worker but {why}",
            f"set it to {efa_available} or less" + (", or turn cluster.efa on" if not cluster.efa else ""),
        )

    # One node count: the job runs one worker per node of its cluster; whichever of the two is set, the other
    # follows it (both set: render refuses more workers than cluster.max_nodes). Derived values are derived
    # again on each resolution, so a resolved configuration with other settings on top stays consistent.
    set_max = cluster.max_nodes if "cluster.max_nodes" in new.origins else None
    if "job.num_workers" in new.origins and "cluster.nodes" not in new.origins:
        cluster.nodes = max(min(job.num_workers, set_max or job.num_workers), cluster.min_nodes)
    elif "cluster.nodes" in new.origins and "job.num_workers" not in new.origins:
        job.num_workers = max(cluster.nodes, 1)
    if set_max is None:
        set_max = cluster.max_nodes = max(cluster.nodes, cluster.min_nodes)
    if not cluster.min_nodes <= cluster.nodes <= set_max:
        raise new._error(
            "cluster.nodes",
            f"{cluster.nodes} is outside min_nodes..max_nodes ({cluster.min_nodes}..{cluster.max_nodes})",
            "make cluster.min_nodes <= cluster.nodes <= cluster.max_nodes",
        )
    resolve_capacity(new)
    if cluster.availability_zones and not all(z.startswith(cluster.region) for z in cluster.availability_zones):
        other = next(z for z in cluster.availability_zones if not z.startswith(cluster.region))
        raise new._error(
            "cluster.availability_zones",
            f"zone {other} is not in region {cluster.region}",
            f"use zones of {cluster.region} (like {cluster.region}a), or change cluster.region",
        )
    for section in new.sections.values():
        validate = getattr(section, "validate", None)
        if callable(validate):
            validate(new)
    if validate_trainer and not new.job.command:  # with job.command, the trainer's settings reach no trainer
        check_trainer(new)
    return new


def resolve_capacity(config: Config) -> None:
    """Derive ``cluster.capacity_type`` from a reservation id, and refuse the combinations AWS refuses."""
    cluster = config.cluster
    explicit = "cluster.capacity_type" in config.origins
    if cluster.capacity_reservation_id and cluster.capacity_type == "on-demand" and not explicit:
        cluster.capacity_type = "capacity-reservation"
    reserved = cluster.capacity_type in ("capacity-reservation", "capacity-block")
    if reserved and not cluster.capacity_reservation_id:
        raise config._error(
            "cluster.capacity_type",
            f"is {cluster.capacity_type} but no cluster.capacity_reservation_id is set",
            "set cluster.capacity_reservation_id to the cr-... id of the reservation or Capacity Block",
        )
    if cluster.capacity_reservation_id and not reserved:
        raise config._error(
            "cluster.capacity_reservation_id",
            f"is set but cluster.capacity_type is {cluster.capacity_type}",
            "set cluster.capacity_type to capacity-reservation or capacity-block, or unset the reservation id",
        )


def check_trainer(config: Config) -> None:
    """Validate the trainer section with ``fsdp_trainer.config.TrainerConfig.from_dict`` when the trainer is
    installed, naming the setting as the user wrote it."""
    if not config.trainer:
        return  # the trainer's defaults: nothing set, nothing to refuse (and its module is not imported)
    try:
        from fsdp_trainer.config import ConfigError as TrainerConfigError
        from fsdp_trainer.config import TrainerConfig
    except ImportError:
        return  # the trainer is not installed here (e.g. a laptop that only submits to EKS)
    try:
        TrainerConfig.from_dict(copy.deepcopy(config.trainer))
    except TrainerConfigError as exc:
        # The trainer names its flag (--train.steps); name the setting as the user wrote it, where.
        flag, problem = getattr(exc, "flag", None), getattr(exc, "problem", str(exc))
        problem = _with_closest_choice(problem)
        if not flag:
            raise ConfigError("trainer", " ".join(str(exc).split())) from None
        section, _, rest = flag.removeprefix("--").partition(".")
        paths = [f"trainer.{section}.{rest}" if rest else f"trainer.{section}"]
        paths.append(f"trainer.{_TRAINER_SECTION_ALIASES.get(section, section)}" + (f".{rest}" if rest else ""))
        origin = next((config.origins[p] for p in paths if p in config.origins), None)
        if origin is None:  # a section the trainer does not know: the first setting under it
            origin = next(
                (o for p, o in config.origins.items() if any(p.startswith(prefix + ".") for prefix in paths)), None
            )
        if origin is not None:
            if origin.source.endswith((".yaml", ".yml")):  # a key of a YAML file: said as the file has it
                return _yaml_terms(origin, problem)
            raise ConfigError(origin.name, problem, source=origin.source) from None
        raise ConfigError(paths[0], problem) from None


def _with_closest_choice(problem: str) -> str:
    """``'tiy' is not one of tiny, tiny-gqa, ...`` with ``; did you mean tiny?`` when one is close (a preset, a
    parallel API...)."""
    import re

    from fsdp_sdk.config.conversions import close_matches

    match = re.fullmatch(r"'(?P<value>[^']*)' is not one of (?P<choices>.+)", problem.strip())
    if match is None:
        return problem
    close = close_matches(match.group("value"), [c.strip() for c in match.group("choices").split(",")], n=1)
    return f"{problem}; did you mean {close[0]}?" if close else problem


def _section_typo_fix(path: str) -> str | None:
    """For ``trainer.modle.preset``: ``did you mean trainer.model.preset?`` (``None`` when the section exists or
    nothing is close)."""
    from fsdp_sdk.config.conversions import close_matches

    try:
        from fsdp_trainer.config import known_flags
    except ImportError:
        return None
    parts = path.split(".")
    if len(parts) < 3:
        return None
    flags = {flag.removeprefix("--") for flag in known_flags()}
    sections = sorted({flag.split(".", 1)[0] for flag in flags})
    section, field = parts[1], ".".join(parts[2:])
    if section in sections:
        return None
    for close in close_matches(section, sections, n=3):
        if f"{close}.{field}" in flags:
            return f"did you mean trainer.{close}.{field}?"
    return None


def _yaml_terms(origin: Any, problem: str) -> None:
    """Raise the trainer's complaint about a key of a YAML file in that file's terms: key paths for its flags
    (``--model.preset`` -> ``trainer.model.preset``), "unknown key" for "unknown option", and a mistyped key's line.

    :raises ConfigError: always.
    """
    import re

    text = re.sub(r"(?<![\w-])--([a-z_]+\.[a-z_.]+)", r"trainer.\1", problem)
    text = text.replace("unknown option", "unknown key")
    close = re.search(r" \(did you mean (trainer\.[\w.]+)\?\)$", text)
    fix = None
    if close:  # "did you mean" is the fix: after the problem, as every other one-line error has it
        text, fix = text[: close.start()], f"did you mean {close.group(1)}?"
    typo = "unknown key" in text
    if typo:  # a mistyped section: the same field in the closest section, rather than the closest flag overall
        fix = _section_typo_fix(origin.name) or fix
    where = f"{origin.source}, line {origin.line}" if origin.line and typo else origin.source  # a typo: where
    raise ConfigError(origin.name, text, fix, source=where) from None
