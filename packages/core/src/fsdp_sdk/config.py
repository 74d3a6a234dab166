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
the ``.env`` reader (:mod:`fsdp_sdk.envfile`) are imported when a file is read.
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
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from fsdp_sdk import grammar, secrets
from fsdp_sdk._fields import Fields, FrozenFields
from fsdp_sdk.errors import ConfigError, FsdpSdkError
from fsdp_sdk.registry import NamedRegistry

if TYPE_CHECKING:
    from fsdp_sdk.instance_types import InstanceType
    from fsdp_sdk.plugins import Plugins

__all__ = [
    "DEFAULT_STATE_DIR",
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
    "SettingsRegistry",
    "load_config",
    "parse_trainer_args",
    "setting_from_pair",
    "trainer_arguments",
]

#: Prefix of the environment variables that set configuration fields.
ENV_PREFIX = "FSDP_SDK_"
#: Environment variable for the default of ``cluster.state_dir``.
STATE_DIR_ENV = "FSDP_SDK_STATE_DIR"

#: Environment variable names that look like they hold secrets (``*TOKEN*``, ``*SECRET*``, ``*PASSWORD*``,
#: ``*API_KEY*``, ``*ACCESS_KEY*``...). Their values are masked in every output (:mod:`fsdp_sdk.secrets`), and
#: rendering a Kubernetes job refuses them (:func:`fsdp_sdk.k8s.render.check_env`): they belong in a Secret.
SECRET_ENV_NAME = secrets.SECRET_NAME

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
        secrets.register(value)  # masked in everything the SDK prints from now on

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


#: ``cluster.state_dir`` when ``$FSDP_SDK_STATE_DIR`` is not set (or not read: ``Client.from_dict``).
DEFAULT_STATE_DIR = "~/.local/state/fsdp-sdk"


def _default_state_dir() -> Path:
    return Path(os.environ.get(STATE_DIR_ENV) or DEFAULT_STATE_DIR).expanduser()


def _dotenv(name: str) -> dict[str, str]:
    return {"dotenv": name}


# Field checks: (predicate on the converted value, problem, fix). Names of the fix use {name}.
_DNS_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
_CLUSTER_NAME = re.compile(r"^[a-zA-Z][-a-zA-Z0-9]*$")


def _check(predicate: typing.Callable[[Any], bool], problem: str, fix: str) -> dict[str, Any]:
    return {"check": (predicate, problem, fix)}


def _rule(problem_of: typing.Callable[[Any], str | None], fix: str) -> dict[str, Any]:
    """Field metadata: ``problem_of(value)`` returns what is wrong (a phrase from :mod:`fsdp_sdk.grammar`) or ``None``."""
    return {"rule": (problem_of, fix)}


def _env_names_problem(env: Mapping[str, str]) -> str | None:
    for name, value in env.items():
        problem = grammar.env_name_problem(name)
        if problem:
            return f"has {name!r}, which {problem}"
        if "\x00" in value:
            return f"has {name} with a NUL character in its value"
    return None


def _token_problem(token: Secret) -> str | None:
    value = token.get_secret_value()
    if not value or any(ch.isspace() or not ch.isprintable() for ch in value):
        return "holds whitespace or control characters (a token is one word)"
    return None


def _positive(example: int) -> dict[str, Any]:
    return _check(lambda v: v is None or v >= 1, "must be at least 1", f"set {{name}} to a whole number like {example}")


def _non_negative(example: int) -> dict[str, Any]:
    return _check(lambda v: v is None or v >= 0, "must not be negative", f"set {{name}} to 0 or more, like {example}")


_REGION = re.compile(r"^[a-z]{2}(-gov|-iso[a-z]?)?-[a-z]+-\d+$")
_ZONE = re.compile(r"^[a-z]{2}(-gov|-iso[a-z]?)?-[a-z]+-\d+[a-z]$")
_INSTANCE_NAME = re.compile(r"^[a-z][a-z0-9-]*\.[a-z0-9]+$")
_RESERVATION_ID = re.compile(r"^cr-[0-9a-f]{8,17}$")
_K8S_VERSION = re.compile(r"^1\.\d{2}$")

_PORT = _check(lambda v: 1 <= v <= 65535, "is not a TCP port", "set {name} to a number between 1 and 65535, like 2379")
_K8S_NAME = _check(
    lambda v: len(v) <= 50 and bool(_DNS_LABEL.match(v)),
    "is not a valid Kubernetes name",
    "use at most 50 lower-case letters, digits and '-', starting and ending with a letter or digit",
)


@dataclass(eq=False, repr=False)
class ClusterConfig(Fields):
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
    region: str = field(
        default="us-west-2",
        metadata={
            **_dotenv("AWS_REGION"),
            **_check(
                lambda v: bool(_REGION.match(v)),
                "is not an AWS region name",
                "use a region like us-west-2 or eu-central-1",
            ),
        },
    )
    """AWS region."""
    instance_type: str = field(default="p5.48xlarge", metadata=_dotenv("INSTANCE_TYPE"))
    """GPU instance type of the worker nodes; ``fsdp-sdk instance-types`` lists them."""
    nodes: int = field(default=2, metadata=_non_negative(2))
    """Number of GPU nodes to create."""
    min_nodes: int = field(default=0, metadata=_non_negative(0))
    """Lower bound of the node group (``scale`` refuses to go below)."""
    max_nodes: int | None = field(default=None, metadata=_non_negative(4))
    """Upper bound of the node group; defaults to ``nodes``."""
    capacity_type: Literal["on-demand", "capacity-reservation", "capacity-block", "spot"] = "on-demand"
    """How the GPU nodes are bought: ``on-demand``, an On-Demand Capacity Reservation (``capacity-reservation``),
    an EC2 Capacity Block for ML (``capacity-block``), or ``spot``. Setting ``capacity_reservation_id`` alone
    means ``capacity-reservation``."""
    capacity_reservation_id: str | None = field(
        default=None,
        metadata={
            **_dotenv("CAPACITY_RESERVATION_ID"),
            **_check(
                lambda v: bool(_RESERVATION_ID.match(v)),
                "is not a capacity reservation id",
                "use the id of the reservation or Capacity Block, like cr-0123456789abcdef0",
            ),
        },
    )
    """EC2 capacity reservation or Capacity Block (``cr-...``) the GPU nodes launch into."""
    availability_zones: list[str] = field(
        default_factory=list,
        metadata=_check(
            lambda v: all(_ZONE.match(z) for z in v),
            "is not a list of availability zone names",
            "use zones like us-west-2a,us-west-2b (the GPU nodes go to the first)",
        ),
    )
    """Availability zones of the cluster; the GPU nodes go to the first. Empty: the zone of the capacity
    reservation, else one that offers the instance type (chosen by the preflight checks), plus two more."""
    placement_group: bool = False
    """Launch the GPU nodes in a cluster placement group (lower latency between nodes). Leave it off with a
    capacity reservation: an enforced placement group is a known cause of partially fulfilled launches."""
    node_volume_size_gib: int = field(default=500, metadata=_positive(500))
    """Root volume of each GPU node, in GiB (container images and datasets live there)."""
    system_instance_type: str = field(
        default="m5.xlarge",
        metadata=_check(
            lambda v: bool(_INSTANCE_NAME.match(v)), "is not an instance type name", "use a name like m5.xlarge"
        ),
    )
    """Instance type of the system node group (etcd, the Training Operator, monitoring)."""
    system_nodes: int = field(default=2, metadata=_positive(2))
    """Nodes of the system node group."""
    kubernetes_version: str = field(
        default="1.31",
        metadata=_check(
            lambda v: bool(_K8S_VERSION.match(v)), "is not a Kubernetes minor version", "use a version like 1.31"
        ),
    )
    """Kubernetes version of the control plane."""
    efa: bool = True
    """Whether to enable Elastic Fabric Adapter networking on the nodes."""
    checkpoint_bucket: str | None = field(
        default=None,
        metadata=_check(
            lambda v: bool(re.fullmatch(r"(s3://)?[a-z0-9][a-z0-9.\-]{1,61}[a-z0-9]/?", v)),
            "is not an S3 bucket name",
            "use the bucket's name, 3-63 lower-case letters, digits, '.' or '-'",
        ),
    )
    """S3 bucket for the jobs' checkpoints (``s3://<bucket>/<job>/checkpoints``), in the cluster's region: adopted as
    it is; unset: ``up`` creates ``fsdp-sdk-<account>-<cluster>`` (``fsdp_sdk.aws.checkpoint_bucket``)."""
    kubeconfig: Path | None = None
    """A kubeconfig file to reach the cluster with, instead of the one the backend writes (behind a proxy, with
    your own authentication, or a cluster the backend did not create)."""
    state_dir: Path = field(default_factory=_default_state_dir)
    """Where backends keep local state (``$FSDP_SDK_STATE_DIR`` or ``~/.local/state/fsdp-sdk``)."""


@dataclass(eq=False, repr=False)
class JobConfig(Fields):
    """How a training job runs: image, workers, rendezvous, environment."""

    name: str = field(default="fsdp", metadata={**_dotenv("JOB_NAME"), **_K8S_NAME})
    """Job name (the PyTorchJob name; local runs use it as a prefix)."""
    namespace: str = field(default="default", metadata=_K8S_NAME)
    """Kubernetes namespace of the job."""
    api: Literal["pytorchjob", "trainjob"] = "pytorchjob"
    """Kubeflow API that runs the job: ``pytorchjob`` (Training Operator v1) or ``trainjob`` (Trainer v2)."""
    registry: str | None = field(
        default=None,
        metadata={
            **_dotenv("REGISTRY"),
            **_rule(grammar.registry_problem, "use a registry host like 123456789012.dkr.ecr.us-west-2.amazonaws.com"),
        },
    )
    """Container registry of the image, e.g. ``123456789012.dkr.ecr.us-west-2.amazonaws.com``."""
    image: str = field(
        default="fsdp-sdk-trainer",
        metadata={**_dotenv("IMAGE"), **_rule(grammar.image_name_problem, "use an image name like fsdp-sdk-trainer")},
    )
    """Image repository name."""
    tag: str = field(
        default="latest", metadata={**_dotenv("TAG"), **_rule(grammar.tag_problem, "use a tag like v1 or 2026-12-01")}
    )
    """Image tag."""
    num_workers: int = field(default=2, metadata={**_dotenv("NUM_WORKERS"), **_positive(2)})
    """Number of worker pods (one per node); locally, simulated nodes."""
    gpu_per_worker: int | None = field(default=None, metadata={**_dotenv("GPU_PER_WORKER"), **_positive(8)})
    """GPUs per worker; defaults to the instance type's GPU count."""
    efa_per_worker: int | None = field(default=None, metadata={**_dotenv("EFA_PER_WORKER"), **_non_negative(32)})
    """EFA interfaces per worker; defaults to the instance type's EFA count (0 when ``cluster.efa`` is off)."""
    nproc_per_node: int | None = field(default=None, metadata={**_dotenv("NPROC_PER_WORKER"), **_positive(1)})
    """Trainer processes per worker; defaults to ``gpu_per_worker`` on Kubernetes and 1 on the local (CPU) backend."""
    rdzv_backend: Literal["etcd-v2", "c10d"] = "etcd-v2"
    """torchrun rendezvous backend."""
    rdzv_host: str = field(
        default="etcd",
        metadata={
            **_dotenv("RDZV_HOST"),
            **_rule(grammar.host_problem, "use the etcd service name (etcd) or a host name"),
        },
    )
    """Rendezvous host (the etcd service name in the cluster)."""
    rdzv_port: int = field(default=2379, metadata={**_dotenv("RDZV_PORT"), **_PORT})
    """Rendezvous port."""
    max_restarts: int = field(default=3, metadata=_non_negative(3))
    """torchrun ``--max-restarts`` (local runs always use 0)."""
    command: str | None = field(
        default=None, metadata={**_dotenv("CMD"), **_rule(grammar.command_problem, "fix the quoting of the command")}
    )
    """Command the workers run instead of ``torchrun ... -m fsdp_trainer``."""
    fi_provider: str = field(
        default="efa",
        metadata={**_dotenv("FI_PROVIDER"), **_rule(grammar.fi_provider_problem, "use efa (EFA instances) or sockets")},
    )
    """libfabric provider (``FI_PROVIDER``)."""
    nccl_debug: Literal["VERSION", "WARN", "INFO", "TRACE", "ABORT"] = "WARN"
    """``NCCL_DEBUG`` level."""
    hf_token: Secret | None = field(
        default=None,
        metadata={**_dotenv("HF_TOKEN"), **_rule(_token_problem, "paste the token alone, as huggingface.co shows it")},
    )
    """Hugging Face token (redacted everywhere); stored in the ``hf_token_secret`` Kubernetes Secret."""
    hf_token_secret: str = field(default="hf-token", metadata=_K8S_NAME)
    """Name of the Kubernetes Secret holding the Hugging Face token."""
    env: dict[str, str] = field(
        default_factory=dict, metadata=_rule(_env_names_problem, "name variables with letters, digits and _")
    )
    """Extra environment variables for the workers."""
    shared_storage_claim: str | None = field(default=None, metadata=_K8S_NAME)
    """PersistentVolumeClaim of a shared filesystem (ReadWriteMany: FSx for Lustre, EFS) in ``job.namespace``, mounted
    at ``/shared`` on every worker; the trainer's outputs and checkpoints then go to
    ``/shared/fsdp-sdk/<namespace>/<job name>``, so restarted pods resume wherever they run. Unset: the node's disk
    (``/local``), which keeps them across restarts on the same node."""


@dataclass(eq=False, repr=False)
class ObservabilityConfig(Fields):
    """Monitoring installed on the cluster."""

    enabled: bool = False
    """Whether ``up`` installs the monitoring components plugins contribute."""
    namespace: str = field(default="monitoring", metadata=_K8S_NAME)
    """Namespace of the monitoring components."""
    components: list[str] = field(default_factory=list)
    """Names of the components to install; empty installs all of them but those that cost money (cloudwatch)."""
    prometheus_operator: bool | None = None
    """Whether the cluster runs the Prometheus Operator (serves ``monitoring.coreos.com/v1``): then plugins render
    ServiceMonitor/PodMonitor objects for it instead of a Prometheus of their own. Unset: core finds out from the
    cluster when it installs the components (false when it cannot ask)."""


@dataclass(frozen=True, eq=False, repr=False)
class Origin(FrozenFields):
    """Where a setting's value came from.

    :param name: the setting as the user wrote it (``NUM_WORKERS``, ``job.num_workers``, ``--nodes``).
    :param source: the source (``.env``, ``config.yaml``, ``environment``, ``command line``).
    """

    name: str
    source: str


@dataclass(frozen=True, eq=False, repr=False)
class Setting(FrozenFields):
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


#: The dataclass of each core section.
CORE_SECTIONS: dict[str, type] = {"cluster": ClusterConfig, "job": JobConfig, "observability": ObservabilityConfig}
_SECTION_NAME = re.compile(r"^[a-z][a-z0-9_]*$")


class SettingsRegistry(NamedRegistry[type]):
    """Configuration sections that plugins add, filled by the ``fsdp_sdk_register_settings`` hook.

    A section is a dataclass whose fields have defaults (and docstrings: ``config show`` and the docs
    read them). It is read from every source like the core's sections: ``eksctl:`` in YAML,
    ``FSDP_SDK_EKSCTL__<FIELD>`` in ``.env`` or the environment, ``--set eksctl.<field>=VALUE``, with
    the same one-line errors. Field metadata may carry ``dotenv`` (a seed ``.env`` name) and ``check``
    (see the core's fields). A section may define ``validate(self, config)``, called by
    :meth:`Config.resolved`, raising :class:`~fsdp_sdk.errors.ConfigError` on a contradiction.
    A section name two plugins register is refused for both (:attr:`conflicts`).
    """

    kind = "settings section"

    def add(self, name: str, cls: type) -> None:
        """Register section ``name`` with dataclass ``cls``.

        :raises PluginError: the name is not a lower-case word, is a core section or taken, or ``cls`` is not a
            dataclass whose fields all have defaults.
        """
        from fsdp_sdk.errors import PluginError

        who = self.current_plugin or "?"
        if not isinstance(name, str) or not _SECTION_NAME.match(name) or name in (*CORE_SECTIONS, "trainer"):
            raise PluginError(
                f"plugin {who}: settings section {name!r} must be a lower-case word other than "
                f"{', '.join([*CORE_SECTIONS, 'trainer'])}"
            )
        if not (isinstance(cls, type) and dataclasses.is_dataclass(cls)):
            raise PluginError(f"plugin {who}: settings section {name!r} must be a dataclass, got {cls!r}")
        try:
            cls()
        except TypeError as error:
            raise PluginError(
                f"plugin {who}: every field of settings section {name!r} needs a default ({error})"
            ) from None
        self._claim(name, cls)

    def get(self, name: str) -> type | None:
        """The dataclass of section ``name``, or ``None``."""
        return self._entries.get(name)

    def items(self) -> list[tuple[str, type]]:
        """``(name, dataclass)`` of every section, sorted by name."""
        return sorted(self._entries.items())


Sections = SettingsRegistry | Mapping[str, type]


def _dotenv_names(classes: Mapping[str, type]) -> dict[str, str]:
    return {
        f.metadata["dotenv"]: f"{section}.{f.name}"
        for section, cls in classes.items()
        for f in dataclasses.fields(cls)
        if "dotenv" in f.metadata
    }


#: Variable names of the original ``.env`` files and the field each sets.
DOTENV_NAMES: dict[str, str] = {
    f.metadata["dotenv"]: f"{section}.{f.name}"
    for section, cls in (("cluster", ClusterConfig), ("job", JobConfig))
    for f in dataclasses.fields(cls)
    if "dotenv" in f.metadata
}
DOTENV_NAMES["MODEL_NAME"] = "trainer.model.name_or_path"


@dataclass(eq=False, repr=False)
class Config(Fields):
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

    def instance(self, plugins: Plugins) -> InstanceType:
        """The :class:`~fsdp_sdk.instance_types.InstanceType` named by ``cluster.instance_type``.

        :param plugins: the plugin set to look it up in (``fsdp_sdk.plugins.get_plugins()`` for the process's).
        :raises ConfigError: no registered instance type has that name.
        """
        registry = plugins.instance_types
        found = registry.get(self.cluster.instance_type)
        if found is None:
            name = self.cluster.instance_type
            conflict = registry.conflict(name)
            if conflict is not None:
                raise self._error("cluster.instance_type", *plugins.explain(conflict))
            close = difflib.get_close_matches(name, registry.names(), n=1)
            hint = f"did you mean {close[0]}? " if close else ""
            also = plugins.failed_registrations_note("fsdp_sdk_register_instance_types", "types")
            raise self._error(
                "cluster.instance_type",
                f"unknown instance type {name!r}",
                f"{hint}choose one of {', '.join(registry.names())} (fsdp-sdk instance-types lists them){also}",
            )
        return found

    def resolved(self, plugins: Plugins, *, validate_trainer: bool = True) -> Config:
        """A copy with derived values filled in and cross-field rules checked.

        Fills ``job.gpu_per_worker`` and ``job.efa_per_worker`` from the instance
        type and ``cluster.max_nodes`` from ``cluster.nodes``; refuses an unknown
        backend or instance type, more GPUs or EFA interfaces per worker than the
        instance type has, node bounds out of order; validates the trainer
        section with ``fsdp_trainer.config.TrainerConfig.from_dict`` when the
        trainer is installed. Calling it again changes nothing.

        :param plugins: the plugin set providing backends, instance types and settings sections
            (``fsdp_sdk.plugins.get_plugins()`` for the process's).
        :param validate_trainer: set to False to skip the trainer validation.
        :raises ConfigError: a value contradicts another or names something unknown.
        """
        new = copy.deepcopy(self)
        _add_sections(new, plugins.settings)
        cluster, job = new.cluster, new.job

        if cluster.backend not in plugins.backends:
            conflict = plugins.backends.conflict(cluster.backend)
            if conflict is not None:
                raise new._error("cluster.backend", *plugins.explain(conflict))
            problem, fix = plugins.backends.unknown(cluster.backend)
            fix += plugins.failed_registrations_note("fsdp_sdk_register_backends", "backends")
            raise new._error("cluster.backend", problem, fix)
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
        new._resolve_capacity()
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
            new._validate_trainer()
        return new

    def _resolve_capacity(self) -> None:
        """Derive ``cluster.capacity_type`` from a reservation id, and refuse the combinations AWS refuses."""
        cluster = self.cluster
        explicit = "cluster.capacity_type" in self.origins
        if cluster.capacity_reservation_id and cluster.capacity_type == "on-demand" and not explicit:
            cluster.capacity_type = "capacity-reservation"
        reserved = cluster.capacity_type in ("capacity-reservation", "capacity-block")
        if reserved and not cluster.capacity_reservation_id:
            raise self._error(
                "cluster.capacity_type",
                f"is {cluster.capacity_type} but no cluster.capacity_reservation_id is set",
                "set cluster.capacity_reservation_id to the cr-... id of the reservation or Capacity Block",
            )
        if cluster.capacity_reservation_id and not reserved:
            raise self._error(
                "cluster.capacity_reservation_id",
                f"is set but cluster.capacity_type is {cluster.capacity_type}",
                "set cluster.capacity_type to capacity-reservation or capacity-block, or unset the reservation id",
            )

    def _validate_trainer(self) -> None:
        if not self.trainer:
            return  # the trainer's defaults: nothing set, nothing to refuse (and its module is not imported)
        try:
            from fsdp_trainer.config import ConfigError as TrainerConfigError
            from fsdp_trainer.config import TrainerConfig
        except ImportError:
            return  # the trainer is not installed here (e.g. a laptop that only submits to EKS)
        try:
            TrainerConfig.from_dict(copy.deepcopy(self.trainer))
        except TrainerConfigError as exc:
            # The trainer names its flag (--train.steps); name the setting as the user wrote it, where.
            flag, problem = getattr(exc, "flag", None), getattr(exc, "problem", str(exc))
            if not flag:
                raise ConfigError("trainer", " ".join(str(exc).split())) from None
            section, _, rest = flag.removeprefix("--").partition(".")
            paths = [f"trainer.{section}.{rest}" if rest else f"trainer.{section}"]
            paths.append(f"trainer.{_TRAINER_SECTION_ALIASES.get(section, section)}" + (f".{rest}" if rest else ""))
            origin = next((self.origins[p] for p in paths if p in self.origins), None)
            if origin is None:  # a section the trainer does not know: the first setting under it
                origin = next(
                    (o for p, o in self.origins.items() if any(p.startswith(prefix + ".") for prefix in paths)), None
                )
            if origin is not None:
                raise ConfigError(origin.name, problem, source=origin.source) from None
            raise ConfigError(paths[0], problem) from None

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


# --------------------------------------------------------------------- settings from the command line


def setting_from_pair(item: str, *, source: str = "--set") -> Setting:
    """One ``KEY=VALUE`` of ``--set`` as a setting; the key is the dotted path as typed (``job.num_workers``,
    ``model.preset``): the caller decides which keys are trainer settings, once it knows the plugins' sections.

    :raises ConfigError: ``item`` is not ``KEY=VALUE``.
    """
    key, sep, value = item.partition("=")
    if not sep or not key.strip():
        raise ConfigError(
            source, f"{item!r} is not KEY=VALUE", "e.g. --set job.num_workers=4 or --set model.preset=tiny"
        )
    return Setting(key.strip(), value, key.strip(), source)


def parse_trainer_args(args: Sequence[str]) -> list[Setting]:
    """Turn trailing trainer arguments (``--train.steps 20``, ``--model.preset=tiny``, ``--auto``) into settings.

    :param args: arguments as given after ``--`` on the command line; ``--auto`` is the trainer's
        shorthand for ``--auto.enabled true``.
    :raises ConfigError: an argument is not ``--section.field VALUE``.
    """
    settings: list[Setting] = []
    i = 0
    while i < len(args):
        arg = args[i]
        if arg == "--auto":
            settings.append(Setting("trainer.auto.enabled", "true", "--auto", "trainer arguments"))
            i += 1
            continue
        key = arg[2:] if arg.startswith("--") else ""
        if "=" in key:
            key, value = key.split("=", 1)
            i += 1
        elif key and i + 1 < len(args):
            value = args[i + 1]
            i += 2
        elif key.count(".") >= 1 and all(key.split(".")):
            raise ConfigError(arg, "needs a value", f"give one: {arg} VALUE (or {arg}=VALUE)")
        else:
            raise ConfigError(arg, "is not a trainer option", "pass trainer options as --section.field VALUE after --")
        if key.count(".") < 1 or not all(key.split(".")):
            raise ConfigError(arg, "is not a trainer option", "trainer options look like --train.steps 20")
        settings.append(Setting(f"trainer.{key}", value, f"--{key}", "trainer arguments"))
    return settings


# --------------------------------------------------------------------- loading


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
    """Read the configuration from all sources (see the module docstring); not yet :meth:`~Config.resolved`.

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


def _add_sections(config: Config, sections: Sections | None) -> None:
    """Give ``config`` a default instance of every registered plugin section it lacks."""
    for name, cls in sections.items() if sections is not None else ():
        if name not in config.sections:
            config.sections[name] = cls()


def _classes(config: Config) -> dict[str, type]:
    """The dataclass of every section ``config`` has: the core's, then the plugins'."""
    return {**CORE_SECTIONS, **{name: type(value) for name, value in config.sections.items()}}


def _read_yaml(path: Path, classes: Mapping[str, type]) -> list[Setting]:
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
    return _flatten_document(data, path.name, classes)


def _flatten_document(data: Mapping[str, Any], source: str, classes: Mapping[str, type]) -> list[Setting]:
    settings: list[Setting] = []
    for section, body in data.items():
        section = str(section)
        if section not in (*classes, "trainer"):
            raise _unknown_key(section, [*classes, "trainer"], source)
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
        names = _field_names(classes[section])
        for key, value in body.items():
            path = f"{section}.{key}"
            if key not in names:
                raise _unknown_key(path, [f"{section}.{n}" for n in names], source)
            settings.append(Setting(path, value, path, source))
    return settings


#: Sections of plugins the SDK knows of, with the distribution that provides them.
KNOWN_PLUGIN_SECTIONS = {
    "eksctl": "fsdp-sdk-eksctl",
    "terraform": "fsdp-sdk-terraform",
    "monitoring": "fsdp-sdk-observability",
}


def _unknown_key(key: str, known: list[str], source: str) -> ConfigError:
    section = key.split(".", 1)[0]
    installed = {k.split(".", 1)[0] for k in known}
    if section in KNOWN_PLUGIN_SECTIONS and section not in installed:
        package = KNOWN_PLUGIN_SECTIONS[section]
        return ConfigError(
            key,
            f"is a setting of the {package} plugin, which is not installed",
            f"pip install {package}",
            source=source,
        )
    close = difflib.get_close_matches(key, known, n=1)
    fix = f"did you mean {close[0]}?" if close else f"known keys: {', '.join(known)}"
    return ConfigError(key, "unknown setting", fix, source=source)


#: Variables of the seed scripts' ``.env`` files that fsdp-sdk does not read, and why. ``ACCOUNT`` is read only
#: through the variables that use it (``REGISTRY=${ACCOUNT}.dkr.ecr...``).
SEED_NOT_READ: dict[str, str | None] = {
    "ACCOUNT": None,
    "DOCKERFILE_EXT": "fsdp-sdk builds its own trainer image ('fsdp-sdk image build'): the seed's Dockerfile "
    "variants do not apply",
}
# nanoGPT model sizes of the seed's example (MODEL_NAME=10.5M ... 20B): not models the trainer can load.
_NANOGPT_SIZE = re.compile(r"^\d+(\.\d+)?[MB]$")


def _seed_value(name: str, value: str, source: str, line: int) -> str:
    """The seed conventions fsdp-sdk translates: ``TAG=":v1"`` (the scripts join ``$IMAGE$TAG``)."""
    if name == "TAG" and value.startswith(":"):
        return value[1:]
    if name == "MODEL_NAME" and _NANOGPT_SIZE.match(value):
        raise ConfigError(
            name,
            f"{value!r} is a nanoGPT size of the seed's example, not a Llama model",
            "set MODEL_NAME to a Hugging Face Llama model id (meta-llama/Llama-2-7b-hf) or a local model "
            "directory, or use a preset (--preset llama2-7b)",
            source=f"{source} line {line}",
        )
    return value


def _read_dotenv(path: Path, classes: Mapping[str, type], warnings: list[str]) -> list[Setting]:
    if not path.is_file():
        raise ConfigError("--env-file", f"file {str(path)!r} does not exist", "pass the path of an existing .env file")
    from fsdp_sdk.envfile import read_env_file

    source = path.name
    names = {**DOTENV_NAMES, **_dotenv_names(classes)}
    settings: list[Setting] = []
    for entry in read_env_file(path, os.environ):
        name = entry.name
        read = name in names or (name.startswith(ENV_PREFIX) and "__" in name)
        if not read:
            if name in SEED_NOT_READ:
                if SEED_NOT_READ[name]:
                    warnings.append(f"{name} (from {source} line {entry.line}) is not read: {SEED_NOT_READ[name]}")
                continue
            close = difflib.get_close_matches(name, [*names, *SEED_NOT_READ], n=1, cutoff=0.85)
            if close:
                warnings.append(
                    f"{name} (from {source} line {entry.line}) is not read by fsdp-sdk; did you mean {close[0]}?"
                )
            continue  # anything else belongs to the user's scripts, not to us
        if entry.value is None:
            culprit = entry.culprit
            fix = (
                f"set {culprit} to its value in {source} (fsdp-sdk runs no commands), or write {name} itself"
                if culprit and culprit != name
                else f"write the value itself in {source} (fsdp-sdk runs no commands)"
            )
            raise ConfigError(name, f"{entry.problem}", fix, source=f"{source} line {entry.line}")
        if entry.value == "":
            continue  # `NAME=`: unset
        value = _seed_value(name, entry.value, source, entry.line)
        if name in names:
            settings.append(Setting(names[name], value, name, source))
        else:
            settings.append(_env_setting(name, value, source, classes))
    return settings


def _read_environ(environ: Mapping[str, str], classes: Mapping[str, type]) -> list[Setting]:
    settings = []
    for name in sorted(environ):
        if name.startswith(ENV_PREFIX) and "__" in name and environ[name] != "":
            secrets.register_named(name, environ[name])
            settings.append(_env_setting(name, environ[name], "environment", classes))
    return settings


def _env_setting(name: str, value: str, source: str, classes: Mapping[str, type]) -> Setting:
    parts = [p.lower() for p in name[len(ENV_PREFIX) :].split("__")]
    section = parts[0]
    if section == "trainer" and len(parts) >= 3 and all(parts):
        return Setting(".".join(parts), value, name, source)
    if section in classes and len(parts) == 2 and parts[1] in _field_names(classes[section]):
        return Setting(".".join(parts), value, name, source)
    if section in KNOWN_PLUGIN_SECTIONS and section not in classes:
        raise _unknown_key(".".join(parts), [], source)
    known = [f"{ENV_PREFIX}{s.upper()}__{n.upper()}" for s, cls in classes.items() for n in _field_names(cls)]
    close = difflib.get_close_matches(name, known, n=1)
    fix = (
        f"did you mean {close[0]}?"
        if close
        else f"use {ENV_PREFIX}<SECTION>__<FIELD>, e.g. {ENV_PREFIX}JOB__NUM_WORKERS"
    )
    raise ConfigError(name, "is not a configuration setting", fix, source=source)


# --------------------------------------------------------------------- conversion


@functools.cache
def _field_types(cls: type) -> dict[str, Any]:
    return typing.get_type_hints(cls)


@functools.cache
def _field_names(cls: type) -> tuple[str, ...]:
    return tuple(f.name for f in dataclasses.fields(cls))


@functools.cache
def _field_metadata(cls: type, name: str) -> Mapping[str, Any]:
    return {f.name: f.metadata for f in dataclasses.fields(cls)}[name]


def _register_secrets(setting: Setting) -> None:
    """Remember the values of secret-named settings before they are converted (a refused one is masked too)."""
    value = setting.value
    for name in (setting.path, setting.origin.name):
        secrets.register_named(name, value)
    if isinstance(value, Mapping):
        for key, item in value.items():
            secrets.register_named(str(key), item)
    elif isinstance(value, str) and setting.path.endswith(".env"):
        for pair in value.split(","):
            key, _, item = pair.partition("=")
            secrets.register_named(key.strip(), item.strip())


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


def _show(value: Any) -> str:
    return repr(value) if isinstance(value, str) else str(value)


_TRUE = {"true", "yes", "on", "1"}
_FALSE = {"false", "no", "off", "0"}
#: Words an optional setting reads as "unset" (the trainer's coercer reads the same ones: ``auto`` lets the SDK or the
#: trainer choose).
NONE_WORDS = ("", "none", "null", "auto")


def _convert(value: Any, tp: Any, origin: Origin) -> Any:
    """Convert ``value`` to type ``tp`` or raise a ConfigError naming ``origin``."""
    name, source = origin.name, origin.source

    def fail(problem: str, fix: str) -> ConfigError:
        return ConfigError(name, f"{_show(value)} {problem}", fix, source=source)

    args = typing.get_args(tp)
    if typing.get_origin(tp) in (typing.Union, types.UnionType):
        inner = [a for a in args if a is not type(None)]
        if value is None or (isinstance(value, str) and value.strip().lower() in NONE_WORDS):
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
        if isinstance(value, float) and value.is_integer():
            return int(value)
        if isinstance(value, str) and re.fullmatch(r"\s*[-+]?\d+(_\d+)*\s*", value):
            return int(value.replace("_", ""))
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
        if isinstance(value, str) and value.strip() in args:
            return value.strip()
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
