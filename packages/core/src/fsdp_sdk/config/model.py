"""The whole configuration, :class:`Config`: its sections, how it is built from its sources, how it is shown.

The settings' types are in :mod:`fsdp_sdk.config.sections`, each value's conversion in
:mod:`fsdp_sdk.config.conversions`, the readers of YAML, ``.env``, the environment and flags in
:mod:`fsdp_sdk.config.sources`; this module puts them together (:func:`load_config`, :meth:`Config.from_dict`,
:meth:`Config.with_overrides`). What a plugin set adds (the instance type, derived values, cross-field rules) is
:mod:`fsdp_sdk.config.resolution`'s, above this one: a :class:`Config` never names a plugin set.
"""

from __future__ import annotations

import copy
import dataclasses
import os
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from fsdp_sdk import secrets
from fsdp_sdk._fields import Fields
from fsdp_sdk.config.conversions import (
    _convert,
    _field_metadata,
    _field_names,
    _field_types,
    _register_secrets,
    _show,
    _unknown_key,
)
from fsdp_sdk.config.sections import (
    _REDACTED,
    CORE_SECTIONS,
    SECRET_ENV_NAME,
    STATE_DIR_ENV,
    ClusterConfig,
    JobConfig,
    ObservabilityConfig,
    Origin,
    Secret,
    Sections,
    Setting,
    trainer_arguments,
)
from fsdp_sdk.config.sources import _flatten_document, _read_dotenv, _read_environ, _read_yaml
from fsdp_sdk.errors import ConfigError

__all__ = ["Config", "load_config"]


@dataclass(eq=False, repr=False)
class Config(Fields):
    """The whole configuration: cluster, job, trainer and observability settings.

    Build one with :func:`load_config` (all sources) or directly; resolve it in a plugin set before use
    (:meth:`Resolved.of <fsdp_sdk.resolved.Resolved.of>`) to fill derived values and validate across fields.
    """

    cluster: ClusterConfig = field(default_factory=ClusterConfig)
    """The cluster."""
    job: JobConfig = field(default_factory=JobConfig)
    """The training job."""
    trainer: dict[str, Any] = field(default_factory=dict)
    """Trainer settings by section (``{"model": {"preset": "tiny"}, "train": {"steps": 20}}``),
    passed to the trainer as ``--section.field value`` and validated by ``fsdp_trainer.config``."""
    observability: ObservabilityConfig = field(default_factory=ObservabilityConfig)
    """Monitoring."""
    sections: dict[str, Any] = field(default_factory=dict)
    """Sections plugins add (:class:`SettingsRegistry`), by name: each an instance of its dataclass.
    Read one with :meth:`section`."""
    origins: dict[str, Origin] = field(default_factory=dict, repr=False, compare=False)
    """Where each non-default value came from, by dotted path."""
    warnings: list[str] = field(default_factory=list, repr=False, compare=False)
    """What the sources held that fsdp-sdk does not use (the CLI prints these on stderr)."""

    # ----------------------------------------------------------------- building

    @classmethod
    def from_sources(
        cls,
        config_file: str | os.PathLike[str] | None = None,
        env_file: str | os.PathLike[str] | None = None,
        overrides: Mapping[str, Any] | Iterable[Setting] | None = None,
        **kwargs: Any,
    ) -> Config:
        """Same as :func:`load_config`."""
        return load_config(config_file, env_file, overrides, **kwargs)

    @classmethod
    def from_dict(cls, data: Mapping[str, Any], *, source: str = "dict", sections: Sections | None = None) -> Config:
        """Build from a nested dict like the YAML file (unknown keys are errors).

        :param data: ``{"cluster": {...}, "job": {...}, "trainer": {...}, "observability": {...}}`` and plugin sections.
        :param source: name of the source, for error messages.
        :param sections: the plugins' settings sections (``plugins.settings``) the dict may use.
        """
        config = cls()
        _add_sections(config, sections)
        for setting in _flatten_document(data, source, _classes(config)):
            _apply(config, setting)
        return config

    def section(self, name: str) -> Any:
        """The settings of plugin section ``name`` (an instance of the dataclass its plugin registered).

        :raises ConfigError: no installed plugin registers that section.
        """
        try:
            return self.sections[name]
        except KeyError:
            known = ", ".join(sorted(self.sections)) or "none"
            raise ConfigError(
                name, "is not a settings section of an installed plugin", f"sections here: {known}"
            ) from None

    def with_overrides(self, overrides: Mapping[str, Any] | Iterable[Setting]) -> Config:
        """A copy with more settings applied on top (not yet :meth:`resolved`).

        :param overrides: dotted paths and values, or :class:`Setting` records.
        :raises ConfigError: a key is unknown or a value has the wrong type.
        """
        new = copy.deepcopy(self)
        items = [Setting(k, v) for k, v in overrides.items()] if isinstance(overrides, Mapping) else list(overrides)
        for setting in items:
            _apply(new, setting)
        return new

    # ----------------------------------------------------------------- derived

    @property
    def image_ref(self) -> str:
        """The job image as ``registry/image:tag`` (``image:tag`` without a registry)."""
        ref = f"{self.job.image}:{self.job.tag}"
        return f"{self.job.registry.rstrip('/')}/{ref}" if self.job.registry else ref

    def _error(self, path: str, problem: str, fix: str) -> ConfigError:
        """A ConfigError naming ``path`` as the user wrote it, with its source."""
        origin = self.origins.get(path)
        if origin is None:
            return ConfigError(path, problem, fix, source="defaults")
        return ConfigError(origin.name, problem, fix.replace(path, origin.name), source=origin.source)

    # ----------------------------------------------------------------- output

    def to_dict(self, *, redact: bool = True) -> dict[str, Any]:
        """The configuration as plain data (what ``fsdp-sdk config show`` prints).

        :param redact: replace secrets by ``**********`` (the default): ``job.hf_token`` and every ``Secret``
            field, the ``job.env`` values named like secrets (:data:`SECRET_ENV_NAME`), and every secret's value
            wherever else it occurs (:func:`fsdp_sdk.secrets.redact`); ``False`` reveals them.
        """
        out: dict[str, Any] = {}
        for section in ("cluster", "job"):
            out[section] = _section_to_dict(getattr(self, section), redact)
        if redact:
            token = self.job.hf_token.get_secret_value() if self.job.hf_token else None
            out["job"]["env"] = {
                name: _REDACTED if SECRET_ENV_NAME.search(name) or (token and value == token) else value
                for name, value in out["job"]["env"].items()
            }
        out["trainer"] = copy.deepcopy(self.trainer)
        out["observability"] = _section_to_dict(self.observability, redact)
        for name, section in sorted(self.sections.items()):
            out[name] = _section_to_dict(section, redact)
        # A secret's value is masked wherever it occurs (inside job.command, a trainer setting...).
        return secrets.redact_data(out) if redact else out

    def trainer_args(self) -> list[str]:
        """The trainer section as ``--section.field value`` arguments (see :func:`trainer_arguments`)."""
        return trainer_arguments(self.trainer)


def _section_to_dict(section: Any, redact: bool) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for f in dataclasses.fields(section):
        value = getattr(section, f.name)
        if isinstance(value, Secret):
            value = str(value) if redact else value.get_secret_value()
        elif isinstance(value, Path):
            value = str(value)
        elif isinstance(value, (list, dict)):
            value = copy.deepcopy(value)
        out[f.name] = value
    return out


def _add_sections(config: Config, sections: Sections | None) -> None:
    """Give ``config`` a default instance of every registered plugin section it lacks."""
    for name, cls in sections.items() if sections is not None else ():
        if name not in config.sections:
            config.sections[name] = cls()


def _classes(config: Config) -> dict[str, type]:
    """The dataclass of every section ``config`` has: the core's, then the plugins'."""
    return {**CORE_SECTIONS, **{name: type(value) for name, value in config.sections.items()}}


def load_config(
    config_file: str | os.PathLike[str] | None = None,
    env_file: str | os.PathLike[str] | None = None,
    overrides: Mapping[str, Any] | Iterable[Setting] | None = None,
    *,
    environ: Mapping[str, str] | None = None,
    read_default_env_file: bool = True,
    cwd: str | os.PathLike[str] | None = None,
    sections: Sections | None = None,
) -> Config:
    """Read the configuration from all sources (see :mod:`fsdp_sdk.config`); not yet resolved.

    :param config_file: a YAML file; it must exist.
    :param env_file: a ``.env`` file; it must exist. Without one, ``.env`` in ``cwd`` is read if present.
    :param overrides: the highest-priority values: a mapping of dotted paths
        (``{"job.num_workers": 4}``) or :class:`Setting` records (the CLI passes these, naming its flags).
    :param environ: the environment to read ``FSDP_SDK_*`` variables from; defaults to ``os.environ``.
    :param read_default_env_file: read ``./.env`` when ``env_file`` is not given.
    :param cwd: directory holding the default ``.env``; defaults to the current directory.
    :param sections: the plugins' settings sections (``plugins.settings``): without them, a plugin's section in a
        source is an unknown key.
    :raises ConfigError: a file is missing or malformed, a key is unknown, or a value has the wrong type.
    """
    environ = os.environ if environ is None else environ
    config = Config()
    _add_sections(config, sections)
    classes = _classes(config)
    if environ.get(STATE_DIR_ENV):
        config.cluster.state_dir = Path(environ[STATE_DIR_ENV]).expanduser()

    settings: list[Setting] = []
    if config_file is not None:
        settings += _read_yaml(Path(config_file), classes)
    if env_file is not None:
        settings += _read_dotenv(Path(env_file), classes, config.warnings)
    elif read_default_env_file:
        default = Path(cwd or ".") / ".env"
        if default.is_file():
            settings += _read_dotenv(default, classes, config.warnings)
    settings += _read_environ(environ, classes)
    if overrides:
        if isinstance(overrides, Mapping):
            settings += [Setting(path, value) for path, value in overrides.items()]
        else:
            settings += list(overrides)

    for setting in settings:
        _apply(config, setting)
    return config


def _apply(config: Config, setting: Setting) -> None:
    """Convert one setting and store it in ``config``."""
    _register_secrets(setting)
    path = setting.path.strip()
    parts = path.split(".")
    origin = setting.origin
    if parts[0] == "trainer":
        if len(parts) < 3 or not all(parts):
            raise ConfigError(
                origin.name,
                "trainer settings have the form trainer.<section>.<field>",
                "e.g. trainer.model.preset=tiny",
                source=origin.source,
            )
        node = config.trainer
        for part in parts[1:-1]:
            child = node.setdefault(part, {})
            if not isinstance(child, dict):
                raise ConfigError(
                    origin.name, f"{part!r} is a value, not a section", "check the key", source=origin.source
                )
            node = child
        node[parts[-1]] = setting.value.get_secret_value() if isinstance(setting.value, Secret) else setting.value
        config.origins[path] = origin
        return
    classes = _classes(config)
    if len(parts) != 2 or parts[0] not in classes:
        known = [f"{s}.{n}" for s, cls in classes.items() for n in _field_names(cls)]
        raise _unknown_key(origin.name, known, origin.source)
    section, name = parts
    cls = classes[section]
    if name not in _field_names(cls):
        raise _unknown_key(origin.name, [f"{section}.{n}" for n in _field_names(cls)], origin.source)
    value = _convert(setting.value, _field_types(cls)[name], origin)
    rule = _field_metadata(cls, name).get("rule")
    if rule is not None and value is not None:
        problem_of, fix = rule
        problem = problem_of(value)
        if problem:
            shown = (
                "the value"
                if isinstance(value, (Secret, Mapping)) or secrets.SECRET_NAME.search(path)
                else _show(value)
            )
            raise ConfigError(origin.name, f"{secrets.redact(shown)} {problem}", fix, source=origin.source)
    check = _field_metadata(cls, name).get("check")
    if check is not None and value is not None:
        predicate, problem, fix = check
        if not predicate(value):
            raise ConfigError(
                origin.name, f"{_show(value)} {problem}", fix.format(name=origin.name), source=origin.source
            )
    target = config.sections[section] if section in config.sections else getattr(config, section)
    setattr(target, name, value)
    config.origins[path] = origin
