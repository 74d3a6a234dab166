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
wrote it and where it came from. :meth:`Config.resolved` then fills the values
that follow from the instance type (GPU and EFA counts) and refuses
contradictions.

This module imports only the standard library at import time; YAML and
python-dotenv are imported when a file is read.
"""

from __future__ import annotations

import copy
import dataclasses
import difflib
import functools
import os
import re
import types
import typing
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from fsdp_sdk.errors import ConfigError, FsdpSdkError

if TYPE_CHECKING:
    from fsdp_sdk.instance_types import InstanceType
    from fsdp_sdk.plugins import Plugins

__all__ = [
    "DOTENV_NAMES",
    "ENV_PREFIX",
    "SECRET_ENV_NAME",
    "STATE_DIR_ENV",
    "ClusterConfig",
    "Config",
    "JobConfig",
    "ObservabilityConfig",
    "Origin",
    "Secret",
    "Setting",
    "load_config",
    "trainer_arguments",
]

#: Prefix of the environment variables that set configuration fields.
ENV_PREFIX = "FSDP_SDK_"
#: Environment variable for the default of ``cluster.state_dir``.
STATE_DIR_ENV = "FSDP_SDK_STATE_DIR"
#: Sections of :class:`Config` that are dataclasses (``trainer`` is a free-form dict).
SECTIONS = ("cluster", "job", "observability")

#: Environment variable names that look like they hold secrets (``*TOKEN*``, ``*SECRET*``, ``*PASSWORD*``,
#: ``*API_KEY*``...). ``config show`` redacts such ``job.env`` values, and rendering a Kubernetes job refuses
#: them (:func:`fsdp_sdk.k8s.render.check_env`): they belong in a Kubernetes Secret.
SECRET_ENV_NAME = re.compile(r"TOKEN|SECRET|PASSWORD|PASSWD|API_?KEY|CREDENTIAL|PRIVATE_?KEY", re.IGNORECASE)

_REDACTED = "**********"
# The trainer's flag prefixes that differ from its section names (``--ac.mode`` sets activation_checkpointing).
_TRAINER_SECTION_ALIASES = {"ac": "activation_checkpointing", "activation_checkpointing": "ac"}


class Secret:
    """A string that does not show itself: ``repr``, ``str`` and :meth:`Config.to_dict` print ``**********``.

    :param value: the secret value; read it back with :meth:`get_secret_value`.
    """

    __slots__ = ("_value",)

    def __init__(self, value: str) -> None:
        self._value = value

    def get_secret_value(self) -> str:
        """The actual value."""
        return self._value

    def __repr__(self) -> str:
        return f"Secret({_REDACTED!r})"

    def __str__(self) -> str:
        return _REDACTED

    def __bool__(self) -> bool:
        return bool(self._value)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Secret) and other._value == self._value

    def __hash__(self) -> int:
        return hash(("Secret", self._value))


def _default_state_dir() -> Path:
    return Path(os.environ.get(STATE_DIR_ENV) or "~/.local/state/fsdp-sdk").expanduser()


def _dotenv(name: str) -> dict[str, str]:
    return {"dotenv": name}


# Field checks: (predicate on the converted value, problem, fix). Names of the fix use {name}.
_DNS_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
_CLUSTER_NAME = re.compile(r"^[a-zA-Z][-a-zA-Z0-9]*$")


def _check(predicate: typing.Callable[[Any], bool], problem: str, fix: str) -> dict[str, Any]:
    return {"check": (predicate, problem, fix)}


def _positive(example: int) -> dict[str, Any]:
    return _check(lambda v: v is None or v >= 1, "must be at least 1", f"set {{name}} to a whole number like {example}")


def _non_negative(example: int) -> dict[str, Any]:
    return _check(lambda v: v is None or v >= 0, "must not be negative", f"set {{name}} to 0 or more, like {example}")


_PORT = _check(lambda v: 1 <= v <= 65535, "is not a TCP port", "set {name} to a number between 1 and 65535, like 2379")
_K8S_NAME = _check(
    lambda v: len(v) <= 50 and bool(_DNS_LABEL.match(v)),
    "is not a valid Kubernetes name",
    "use at most 50 lower-case letters, digits and '-', starting and ending with a letter or digit",
)


@dataclass
class ClusterConfig:
    """Where jobs run: the cluster a backend creates and manages."""

    name: str = field(
        default="fsdp-sdk",
        metadata={
            **_dotenv("CLUSTER_NAME"),
            **_check(
                lambda v: len(v) <= 100 and bool(_CLUSTER_NAME.match(v)),
                "is not a valid cluster name",
                "use letters, digits and '-', starting with a letter",
            ),
        },
    )
    """Cluster name (EKS cluster name; the local backend uses it in its state)."""
    backend: str = "local"
    """Backend that manages the cluster; ``fsdp-sdk plugins`` lists the installed ones."""
    region: str = field(default="us-west-2", metadata=_dotenv("AWS_REGION"))
    """AWS region."""
    instance_type: str = field(default="p5.48xlarge", metadata=_dotenv("INSTANCE_TYPE"))
    """GPU instance type of the worker nodes; ``fsdp-sdk instance-types`` lists them."""
    nodes: int = field(default=2, metadata=_non_negative(2))
    """Number of GPU nodes to create."""
    min_nodes: int = field(default=0, metadata=_non_negative(0))
    """Lower bound of the node group (``scale`` refuses to go below)."""
    max_nodes: int | None = field(default=None, metadata=_non_negative(4))
    """Upper bound of the node group; defaults to ``nodes``."""
    capacity_reservation_id: str | None = None
    """EC2 capacity reservation (``cr-...``) the nodes launch into, if any."""
    availability_zones: list[str] = field(default_factory=list)
    """Availability zones to use; empty lets the backend choose."""
    kubernetes_version: str = "1.31"
    """Kubernetes version of the control plane."""
    efa: bool = True
    """Whether to enable Elastic Fabric Adapter networking on the nodes."""
    state_dir: Path = field(default_factory=_default_state_dir)
    """Where backends keep local state (``$FSDP_SDK_STATE_DIR`` or ``~/.local/state/fsdp-sdk``)."""


@dataclass
class JobConfig:
    """How a training job runs: image, workers, rendezvous, environment."""

    name: str = field(default="fsdp", metadata={**_dotenv("JOB_NAME"), **_K8S_NAME})
    """Job name (the PyTorchJob name; local runs use it as a prefix)."""
    namespace: str = field(default="default", metadata=_K8S_NAME)
    """Kubernetes namespace of the job."""
    api: Literal["pytorchjob", "trainjob"] = "pytorchjob"
    """Kubeflow API that runs the job: ``pytorchjob`` (Training Operator v1) or ``trainjob`` (Trainer v2)."""
    registry: str | None = field(default=None, metadata=_dotenv("REGISTRY"))
    """Container registry of the image, e.g. ``123456789012.dkr.ecr.us-west-2.amazonaws.com``."""
    image: str = field(default="fsdp-sdk-trainer", metadata=_dotenv("IMAGE"))
    """Image repository name."""
    tag: str = field(default="latest", metadata=_dotenv("TAG"))
    """Image tag."""
    num_workers: int = field(default=2, metadata={**_dotenv("NUM_WORKERS"), **_positive(2)})
    """Number of worker pods (one per node); locally, simulated nodes."""
    gpu_per_worker: int | None = field(default=None, metadata={**_dotenv("GPU_PER_WORKER"), **_positive(8)})
    """GPUs per worker; defaults to the instance type's GPU count."""
    efa_per_worker: int | None = field(default=None, metadata={**_dotenv("EFA_PER_WORKER"), **_non_negative(32)})
    """EFA interfaces per worker; defaults to the instance type's EFA count (0 when ``cluster.efa`` is off)."""
    nproc_per_node: int | None = field(default=None, metadata=_positive(1))
    """Trainer processes per worker; defaults to ``gpu_per_worker`` on Kubernetes and 1 on the local (CPU) backend."""
    rdzv_backend: Literal["etcd-v2", "c10d"] = "etcd-v2"
    """torchrun rendezvous backend."""
    rdzv_host: str = field(default="etcd", metadata=_dotenv("RDZV_HOST"))
    """Rendezvous host (the etcd service name in the cluster)."""
    rdzv_port: int = field(default=2379, metadata={**_dotenv("RDZV_PORT"), **_PORT})
    """Rendezvous port."""
    max_restarts: int = field(default=3, metadata=_non_negative(3))
    """torchrun ``--max-restarts`` (local runs always use 0)."""
    command: str | None = field(default=None, metadata=_dotenv("CMD"))
    """Command the workers run instead of ``torchrun ... -m fsdp_trainer``."""
    fi_provider: str = field(default="efa", metadata=_dotenv("FI_PROVIDER"))
    """libfabric provider (``FI_PROVIDER``)."""
    nccl_debug: str = "WARN"
    """``NCCL_DEBUG`` level."""
    hf_token: Secret | None = field(default=None, metadata=_dotenv("HF_TOKEN"))
    """Hugging Face token (redacted everywhere); stored in the ``hf_token_secret`` Kubernetes Secret."""
    hf_token_secret: str = field(default="hf-token", metadata=_K8S_NAME)
    """Name of the Kubernetes Secret holding the Hugging Face token."""
    env: dict[str, str] = field(default_factory=dict)
    """Extra environment variables for the workers."""


@dataclass
class ObservabilityConfig:
    """Monitoring installed on the cluster."""

    enabled: bool = False
    """Whether ``up`` installs the monitoring components plugins contribute."""
    namespace: str = field(default="monitoring", metadata=_K8S_NAME)
    """Namespace of the monitoring components."""
    components: list[str] = field(default_factory=list)
    """Names of the components to install; empty installs all of them."""


@dataclass(frozen=True)
class Origin:
    """Where a setting's value came from.

    :param name: the setting as the user wrote it (``NUM_WORKERS``, ``job.num_workers``, ``--nodes``).
    :param source: the source (``.env``, ``config.yaml``, ``environment``, ``command line``).
    """

    name: str
    source: str


@dataclass(frozen=True)
class Setting:
    """One value from one source, before conversion.

    :param path: dotted configuration path, e.g. ``job.num_workers`` or ``trainer.model.preset``.
    :param value: the raw value (a string from files and environment variables).
    :param name: the setting as the user wrote it, for error messages; defaults to ``path``.
    :param source: where it came from, for error messages.
    """

    path: str
    value: Any
    name: str | None = None
    source: str = "overrides"

    @property
    def origin(self) -> Origin:
        """This setting's :class:`Origin`."""
        return Origin(self.name or self.path, self.source)


#: Variable names of the original ``.env`` files and the field each sets.
DOTENV_NAMES: dict[str, str] = {
    f.metadata["dotenv"]: f"{section}.{f.name}"
    for section, cls in (("cluster", ClusterConfig), ("job", JobConfig))
    for f in dataclasses.fields(cls)
    if "dotenv" in f.metadata
}
DOTENV_NAMES["MODEL_NAME"] = "trainer.model.name_or_path"


@dataclass
class Config:
    """The whole configuration: cluster, job, trainer and observability settings.

    Build one with :func:`load_config` (all sources) or directly; call
    :meth:`resolved` before use to fill derived values and validate across fields.
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
    origins: dict[str, Origin] = field(default_factory=dict, repr=False, compare=False)
    """Where each non-default value came from, by dotted path."""

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
    def from_dict(cls, data: Mapping[str, Any], *, source: str = "dict") -> Config:
        """Build from a nested dict like the YAML file (unknown keys are errors).

        :param data: ``{"cluster": {...}, "job": {...}, "trainer": {...}, "observability": {...}}``.
        :param source: name of the source, for error messages.
        """
        config = cls()
        for setting in _flatten_document(data, source):
            _apply(config, setting)
        return config

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

    def instance(self, plugins: Plugins | None = None) -> InstanceType:
        """The :class:`~fsdp_sdk.instance_types.InstanceType` named by ``cluster.instance_type``.

        :param plugins: the plugin set to look it up in; defaults to :func:`fsdp_sdk.plugins.get_plugins`.
        :raises ConfigError: no registered instance type has that name.
        """
        if plugins is None:
            from fsdp_sdk.plugins import get_plugins

            plugins = get_plugins()
        registry = plugins.instance_types
        found = registry.get(self.cluster.instance_type)
        if found is None:
            name = self.cluster.instance_type
            close = difflib.get_close_matches(name, registry.names(), n=1)
            hint = f"did you mean {close[0]}? " if close else ""
            raise self._error(
                "cluster.instance_type",
                f"unknown instance type {name!r}",
                f"{hint}choose one of {', '.join(registry.names())} (fsdp-sdk instance-types lists them)",
            )
        return found

    def resolved(self, plugins: Plugins | None = None, *, validate_trainer: bool = True) -> Config:
        """A copy with derived values filled in and cross-field rules checked.

        Fills ``job.gpu_per_worker`` and ``job.efa_per_worker`` from the instance
        type and ``cluster.max_nodes`` from ``cluster.nodes``; refuses an unknown
        backend or instance type, more GPUs or EFA interfaces per worker than the
        instance type has, node bounds out of order; validates the trainer
        section with ``fsdp_trainer.config.TrainerConfig.from_dict`` when the
        trainer is installed. Calling it again changes nothing.

        :param plugins: the plugin set providing backends and instance types.
        :param validate_trainer: set to False to skip the trainer validation.
        :raises ConfigError: a value contradicts another or names something unknown.
        """
        if plugins is None:
            from fsdp_sdk.plugins import get_plugins

            plugins = get_plugins()
        new = copy.deepcopy(self)
        cluster, job = new.cluster, new.job

        if cluster.backend not in plugins.backends:
            known = ", ".join(plugins.backends.names())
            raise new._error("cluster.backend", f"unknown backend {cluster.backend!r}", f"use one of: {known}")
        instance = new.instance(plugins)

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

        if cluster.max_nodes is None:
            cluster.max_nodes = max(cluster.nodes, cluster.min_nodes)
        if not cluster.min_nodes <= cluster.nodes <= cluster.max_nodes:
            raise new._error(
                "cluster.nodes",
                f"{cluster.nodes} is outside min_nodes..max_nodes ({cluster.min_nodes}..{cluster.max_nodes})",
                "make cluster.min_nodes <= cluster.nodes <= cluster.max_nodes",
            )
        if validate_trainer:
            new._validate_trainer()
        return new

    def _validate_trainer(self) -> None:
        try:
            from fsdp_trainer.config import ConfigError as TrainerConfigError
            from fsdp_trainer.config import TrainerConfig
        except ImportError:
            return  # the trainer is not installed here (e.g. a laptop that only submits to EKS)
        try:
            TrainerConfig.from_dict(copy.deepcopy(self.trainer))
        except TrainerConfigError as exc:
            message = " ".join(str(exc).split())
            # The trainer names its flag ("--train.steps: must be positive"); name it as the user set it.
            match = re.match(r"^--([\w.]+): (.*)$", message)
            if match:
                flag, problem = match.group(1), match.group(2)
                section, _, rest = flag.partition(".")
                paths = [f"trainer.{flag}", f"trainer.{_TRAINER_SECTION_ALIASES.get(section, section)}.{rest}"]
                origin = next((self.origins[p] for p in paths if p in self.origins), None)
                if origin is not None:
                    raise ConfigError(origin.name, problem, source=origin.source) from None
                raise ConfigError(f"trainer.{flag}", problem) from None
            raise ConfigError("trainer", message) from None

    def _error(self, path: str, problem: str, fix: str) -> ConfigError:
        """A ConfigError naming ``path`` as the user wrote it, with its source."""
        origin = self.origins.get(path)
        if origin is None:
            return ConfigError(path, problem, fix, source="defaults")
        return ConfigError(origin.name, problem, fix.replace(path, origin.name), source=origin.source)

    # ----------------------------------------------------------------- output

    def to_dict(self, *, redact: bool = True) -> dict[str, Any]:
        """The configuration as plain data (what ``fsdp-sdk config show`` prints).

        :param redact: replace secrets by ``**********`` (the default): ``job.hf_token``, and the ``job.env``
            values named like secrets (:data:`SECRET_ENV_NAME`) or equal to the token; ``False`` reveals them.
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
        return out

    def trainer_args(self) -> list[str]:
        """The trainer section as ``--section.field value`` arguments (see :func:`trainer_arguments`)."""
        return trainer_arguments(self.trainer)


def trainer_arguments(trainer: Mapping[str, Any]) -> list[str]:
    """Trainer settings by section as the trainer's ``--section.field value`` arguments, in insertion order.

    :param trainer: ``{"model": {"preset": "tiny"}, "train": {"steps": 20}}``.
    """
    args: list[str] = []
    for path, value in _flatten_mapping(trainer):
        if isinstance(value, bool):
            value = "true" if value else "false"
        elif isinstance(value, (list, tuple)):
            value = ",".join(str(v) for v in value)
        args += [f"--{path}", str(value)]
    return args


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


def _flatten_mapping(data: Mapping[str, Any], prefix: str = "") -> list[tuple[str, Any]]:
    items: list[tuple[str, Any]] = []
    for key, value in data.items():
        path = f"{prefix}{key}"
        if isinstance(value, Mapping):
            items += _flatten_mapping(value, path + ".")
        else:
            items.append((path, value))
    return items


# --------------------------------------------------------------------- loading


def load_config(
    config_file: str | os.PathLike[str] | None = None,
    env_file: str | os.PathLike[str] | None = None,
    overrides: Mapping[str, Any] | Iterable[Setting] | None = None,
    *,
    environ: Mapping[str, str] | None = None,
    read_default_env_file: bool = True,
    cwd: str | os.PathLike[str] | None = None,
) -> Config:
    """Read the configuration from all sources (see the module docstring); not yet :meth:`~Config.resolved`.

    :param config_file: a YAML file; it must exist.
    :param env_file: a ``.env`` file; it must exist. Without one, ``.env`` in ``cwd`` is read if present.
    :param overrides: the highest-priority values: a mapping of dotted paths
        (``{"job.num_workers": 4}``) or :class:`Setting` records (the CLI passes these, naming its flags).
    :param environ: the environment to read ``FSDP_SDK_*`` variables from; defaults to ``os.environ``.
    :param read_default_env_file: read ``./.env`` when ``env_file`` is not given.
    :param cwd: directory holding the default ``.env``; defaults to the current directory.
    :raises ConfigError: a file is missing or malformed, a key is unknown, or a value has the wrong type.
    """
    environ = os.environ if environ is None else environ
    config = Config()
    if environ.get(STATE_DIR_ENV):
        config.cluster.state_dir = Path(environ[STATE_DIR_ENV]).expanduser()

    settings: list[Setting] = []
    if config_file is not None:
        settings += _read_yaml(Path(config_file))
    if env_file is not None:
        settings += _read_dotenv(Path(env_file))
    elif read_default_env_file:
        default = Path(cwd or ".") / ".env"
        if default.is_file():
            settings += _read_dotenv(default)
    settings += _read_environ(environ)
    if overrides:
        if isinstance(overrides, Mapping):
            settings += [Setting(path, value) for path, value in overrides.items()]
        else:
            settings += list(overrides)

    for setting in settings:
        _apply(config, setting)
    return config


def _read_yaml(path: Path) -> list[Setting]:
    if not path.is_file():
        raise ConfigError("--config", f"file {str(path)!r} does not exist", "pass the path of an existing YAML file")
    import yaml  # imported here: the CLI must start without it

    try:
        data = yaml.safe_load(path.read_text(encoding="utf-8"))
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" at line {mark.line + 1}" if mark is not None else ""
        problem = getattr(exc, "problem", None) or "syntax error"
        raise ConfigError(str(path), f"invalid YAML{where}: {problem}", "fix the file's syntax") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(str(path), f"cannot be read ({exc})", "check the file") from None
    if data is None:
        return []
    if not isinstance(data, Mapping):
        raise ConfigError(str(path), "the top level must be a mapping", "write sections like 'cluster:' and 'job:'")
    return _flatten_document(data, path.name)


def _flatten_document(data: Mapping[str, Any], source: str) -> list[Setting]:
    settings: list[Setting] = []
    for section, body in data.items():
        section = str(section)
        if section not in (*SECTIONS, "trainer"):
            raise _unknown_key(section, [*SECTIONS, "trainer"], source)
        if body is None:
            continue
        if not isinstance(body, Mapping):
            raise ConfigError(
                section, "must be a mapping of settings", f"write '{section}:' followed by indented keys", source=source
            )
        if section == "trainer":
            for key, value in _flatten_mapping(body):
                settings.append(Setting(f"trainer.{key}", value, f"trainer.{key}", source))
            continue
        names = _field_names(section)
        for key, value in body.items():
            path = f"{section}.{key}"
            if key not in names:
                raise _unknown_key(path, [f"{section}.{n}" for n in names], source)
            settings.append(Setting(path, value, path, source))
    return settings


def _unknown_key(key: str, known: list[str], source: str) -> ConfigError:
    close = difflib.get_close_matches(key, known, n=1)
    fix = f"did you mean {close[0]}?" if close else f"known keys: {', '.join(known)}"
    return ConfigError(key, "unknown setting", fix, source=source)


def _read_dotenv(path: Path) -> list[Setting]:
    if not path.is_file():
        raise ConfigError("--env-file", f"file {str(path)!r} does not exist", "pass the path of an existing .env file")
    from dotenv import dotenv_values  # does not touch os.environ

    source = path.name
    settings: list[Setting] = []
    for name, value in dotenv_values(path).items():
        if value is None or value == "":
            continue  # `NAME` or `NAME=`: unset
        if name in DOTENV_NAMES:
            settings.append(Setting(DOTENV_NAMES[name], value, name, source))
        elif name.startswith(ENV_PREFIX) and "__" in name:
            settings.append(_env_setting(name, value, source))
        # anything else belongs to the user's scripts, not to us
    return settings


def _read_environ(environ: Mapping[str, str]) -> list[Setting]:
    settings = []
    for name in sorted(environ):
        if name.startswith(ENV_PREFIX) and "__" in name and environ[name] != "":
            settings.append(_env_setting(name, environ[name], "environment"))
    return settings


def _env_setting(name: str, value: str, source: str) -> Setting:
    parts = [p.lower() for p in name[len(ENV_PREFIX) :].split("__")]
    section = parts[0]
    if section == "trainer" and len(parts) >= 3 and all(parts):
        return Setting(".".join(parts), value, name, source)
    if section in SECTIONS and len(parts) == 2 and parts[1] in _field_names(section):
        return Setting(".".join(parts), value, name, source)
    known = [f"{ENV_PREFIX}{s.upper()}__{n.upper()}" for s in SECTIONS for n in _field_names(s)]
    close = difflib.get_close_matches(name, known, n=1)
    fix = (
        f"did you mean {close[0]}?"
        if close
        else f"use {ENV_PREFIX}<SECTION>__<FIELD>, e.g. {ENV_PREFIX}JOB__NUM_WORKERS"
    )
    raise ConfigError(name, "is not a configuration setting", fix, source=source)


# --------------------------------------------------------------------- conversion


@functools.cache
def _field_types(section: str) -> dict[str, Any]:
    cls = {"cluster": ClusterConfig, "job": JobConfig, "observability": ObservabilityConfig}[section]
    return typing.get_type_hints(cls)


@functools.cache
def _field_names(section: str) -> tuple[str, ...]:
    cls = {"cluster": ClusterConfig, "job": JobConfig, "observability": ObservabilityConfig}[section]
    return tuple(f.name for f in dataclasses.fields(cls))


@functools.cache
def _field_metadata(section: str, name: str) -> Mapping[str, Any]:
    cls = {"cluster": ClusterConfig, "job": JobConfig, "observability": ObservabilityConfig}[section]
    return {f.name: f.metadata for f in dataclasses.fields(cls)}[name]


def _apply(config: Config, setting: Setting) -> None:
    """Convert one setting and store it in ``config``."""
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
    if len(parts) != 2 or parts[0] not in SECTIONS:
        known = [f"{s}.{n}" for s in SECTIONS for n in _field_names(s)]
        raise _unknown_key(origin.name, known, origin.source)
    section, name = parts
    if name not in _field_names(section):
        raise _unknown_key(origin.name, [f"{section}.{n}" for n in _field_names(section)], origin.source)
    value = _convert(setting.value, _field_types(section)[name], origin)
    check = _field_metadata(section, name).get("check")
    if check is not None and value is not None:
        predicate, problem, fix = check
        if not predicate(value):
            raise ConfigError(
                origin.name, f"{_show(value)} {problem}", fix.format(name=origin.name), source=origin.source
            )
    setattr(getattr(config, section), name, value)
    config.origins[path] = origin


def _show(value: Any) -> str:
    return repr(value) if isinstance(value, str) else str(value)


_TRUE = {"true", "yes", "on", "1"}
_FALSE = {"false", "no", "off", "0"}


def _convert(value: Any, tp: Any, origin: Origin) -> Any:
    """Convert ``value`` to type ``tp`` or raise a ConfigError naming ``origin``."""
    name, source = origin.name, origin.source

    def fail(problem: str, fix: str) -> ConfigError:
        return ConfigError(name, f"{_show(value)} {problem}", fix, source=source)

    args = typing.get_args(tp)
    if typing.get_origin(tp) in (typing.Union, types.UnionType):
        inner = [a for a in args if a is not type(None)]
        if value is None or (isinstance(value, str) and value.strip().lower() in ("", "none", "null")):
            return None
        return _convert(value, inner[0], origin)
    if tp is str:
        if isinstance(value, str):
            return value
        if isinstance(value, int) and not isinstance(value, bool):
            return str(value)
        raise fail("is not a string", f'write {name} as text in quotes, e.g. "{value}"')
    if tp is bool:
        if isinstance(value, bool):
            return value
        if isinstance(value, (str, int)) and str(value).strip().lower() in _TRUE | _FALSE:
            return str(value).strip().lower() in _TRUE
        raise fail("is not a boolean", f"set {name} to true or false")
    if tp is int:
        if isinstance(value, int) and not isinstance(value, bool):
            return value
        if isinstance(value, str) and re.fullmatch(r"\s*[-+]?\d+\s*", value):
            return int(value)
        raise fail("is not an integer", f"set {name} to a whole number like 2")
    if tp is float:
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            return float(value)
        try:
            return float(value)
        except (TypeError, ValueError):
            raise fail("is not a number", f"set {name} to a number like 0.5") from None
    if tp is Path:
        if isinstance(value, (str, os.PathLike)) and str(value):
            return Path(value).expanduser()
        raise fail("is not a path", f"set {name} to a directory path")
    if tp is Secret:
        if isinstance(value, Secret):
            return value
        if isinstance(value, str):
            return Secret(value)
        raise ConfigError(name, "is not a string", f"set {name} to the token text", source=source)
    if typing.get_origin(tp) is Literal:
        if isinstance(value, str) and value in args:
            return value
        raise fail("is not one of " + ", ".join(args), f"set {name} to one of: {', '.join(args)}")
    if typing.get_origin(tp) is list:
        if isinstance(value, str):
            return [item.strip() for item in value.split(",") if item.strip()]
        if isinstance(value, (list, tuple)) and all(isinstance(v, (str, int)) for v in value):
            return [str(v) for v in value]
        raise fail("is not a list of strings", f"write {name} as a list, or as comma-separated text (a,b)")
    if typing.get_origin(tp) is dict:
        if isinstance(value, Mapping):
            return {str(k): "" if v is None else str(v) for k, v in value.items()}
        if isinstance(value, str):
            pairs = [item for item in value.split(",") if item.strip()]
            if all("=" in item for item in pairs):
                return dict(item.strip().split("=", 1) for item in pairs)
        raise fail("is not a mapping", f"write {name} as a mapping, or as KEY=VALUE pairs separated by commas")
    raise FsdpSdkError(f"{name}: no conversion to {tp!r}")  # a field type this module does not handle: a bug
