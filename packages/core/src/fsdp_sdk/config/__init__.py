"""The configuration model and how it is read.

One :class:`Config` holds every setting of a cluster, a job, the trainer and
observability. It is built from these sources, each overriding the one before:

1. the defaults below;
2. a YAML file (``-c/--config``), with the sections ``cluster``, ``job``,
   ``trainer`` and ``observability``;
3. a ``.env`` file (``--env-file``; a ``.env`` in the current directory is read by
   default) using the variable names of the original shell scripts
   (``NUM_WORKERS``, ``INSTANCE_TYPE``... see :data:`DOTENV_NAMES`) or
   ``FSDP_SDK_<SECTION>__<FIELD>`` names;
4. ``FSDP_SDK_<SECTION>__<FIELD>`` environment variables (``FSDP_SDK_JOB__NUM_WORKERS=4``;
   trainer settings nest: ``FSDP_SDK_TRAINER__MODEL__PRESET=tiny``);
5. command-line flags and ``--set section.field=value``.

Every value is converted to its field's type as it is read; a bad one raises a
one-line :class:`~fsdp_sdk.errors.ConfigError` naming the setting as the user
wrote it and where it came from. Resolving it in a plugin set
(:meth:`Resolved.of(config, plugins) <fsdp_sdk.resolved.Resolved.of>`, or
:func:`fsdp_sdk.config.resolution.resolve`) then fills the values that follow from
the instance type (GPU and EFA counts) and refuses contradictions.

The package's modules say which job is which:

* :mod:`fsdp_sdk.config.sections`: the settings' types (the sections, :class:`Setting`,
  :class:`Origin`, :class:`Secret`, :class:`SettingsRegistry`), the bottom of the package;
* :mod:`fsdp_sdk.config.conversions`: each value converted to its field's type and checked;
* :mod:`fsdp_sdk.config.sources`: the readers of the sources above;
* :mod:`fsdp_sdk.config.model`: the whole :class:`Config` and :func:`load_config`, built on the three above;
* :mod:`fsdp_sdk.config.resolution`: resolving in a plugin set (instance type, capacity, the trainer's
  settings), above the model; it reads the plugin set through :class:`~fsdp_sdk.config.resolution.PluginRegistries`,
  so the configuration never imports the plugin set.

Every name is importable from ``fsdp_sdk.config``. The package imports only the standard library at import
time; YAML and the ``.env`` reader (:mod:`fsdp_sdk.envfile`) are imported when a file is read.
"""

from __future__ import annotations

from fsdp_sdk.config.conversions import KNOWN_PLUGIN_SECTIONS, NONE_WORDS
from fsdp_sdk.config.conversions import _convert as _convert  # the conversion tests call it directly
from fsdp_sdk.config.model import Config, load_config
from fsdp_sdk.config.sections import (
    CORE_SECTIONS,
    DEFAULT_STATE_DIR,
    SECRET_ENV_NAME,
    STATE_DIR_ENV,
    ClusterConfig,
    JobConfig,
    ObservabilityConfig,
    Origin,
    Secret,
    Sections,
    Setting,
    SettingsRegistry,
    trainer_arguments,
)
from fsdp_sdk.config.sources import (
    DOTENV_NAMES,
    ENV_PREFIX,
    SEED_NOT_READ,
    parse_trainer_args,
    setting_from_pair,
)
from fsdp_sdk.errors import ConfigError

__all__ = [
    "CORE_SECTIONS",
    "DEFAULT_STATE_DIR",
    "DOTENV_NAMES",
    "ENV_PREFIX",
    "KNOWN_PLUGIN_SECTIONS",
    "NONE_WORDS",
    "SECRET_ENV_NAME",
    "SEED_NOT_READ",
    "STATE_DIR_ENV",
    "ClusterConfig",
    "Config",
    "ConfigError",
    "JobConfig",
    "ObservabilityConfig",
    "Origin",
    "Secret",
    "Sections",
    "Setting",
    "SettingsRegistry",
    "load_config",
    "parse_trainer_args",
    "setting_from_pair",
    "trainer_arguments",
]
