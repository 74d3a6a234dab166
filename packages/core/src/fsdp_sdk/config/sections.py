"""The settings' types: the sections and their fields, a setting and where it came from, the plugins' sections.

Fields carry their checks in their metadata (``check``, ``rule``: applied as each value is read,
:mod:`fsdp_sdk.config.conversions`) and their seed ``.env`` name (``dotenv``, :mod:`fsdp_sdk.config.sources`).
This module is the bottom of the package: the conversions, the sources and the whole :class:`~fsdp_sdk.config.Config`
(:mod:`fsdp_sdk.config.model`) build on it, and it imports none of them.
"""

from __future__ import annotations

import dataclasses
import os
import re
import typing
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from fsdp_sdk import grammar, secrets
from fsdp_sdk._fields import Fields, FrozenFields
from fsdp_sdk.pins import default_kubernetes_version
from fsdp_sdk.registry import NamedRegistry

__all__ = [
    "CORE_SECTIONS",
    "DEFAULT_STATE_DIR",
    "SECRET_ENV_NAME",
    "STATE_DIR_ENV",
    "ClusterConfig",
    "JobConfig",
    "ObservabilityConfig",
    "Origin",
    "Secret",
    "Sections",
    "Setting",
    "SettingsRegistry",
    "trainer_arguments",
]

#: Environment variable for the default of ``cluster.state_dir``.
STATE_DIR_ENV = "FSDP_SDK_STATE_DIR"

#: Environment variable names that look like they hold secrets (``*TOKEN*``, ``*SECRET*``, ``*PASSWORD*``,
#: ``*API_KEY*``, ``*ACCESS_KEY*``...). Their values are masked in every output (:mod:`fsdp_sdk.secrets`), and
#: rendering a Kubernetes job refuses them (:func:`fsdp_sdk.k8s.render.check_env`): they belong in a Secret.
SECRET_ENV_NAME = secrets.SECRET_NAME

_REDACTED = "**********"


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


_REGION = re.compile(r"^(eusc-)?[a-z]{2}(-gov|-iso[a-z]?)?-[a-z]+-\d+$")
_ZONE = re.compile(r"^(eusc-)?[a-z]{2}(-gov|-iso[a-z]?)?-[a-z]+-\d+[a-z]$")
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
    """Number of GPU nodes of the cluster (``--nodes`` on every command); unset, ``job.num_workers``'s."""
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
        default_factory=default_kubernetes_version,
        metadata=_check(
            lambda v: bool(_K8S_VERSION.match(v)), "is not a Kubernetes minor version", "use a version like 1.35"
        ),
    )
    """Kubernetes version of the control plane (default: the newest in EKS standard support, ``fsdp-sdk versions``)."""
    efa: bool = True
    """Whether to enable Elastic Fabric Adapter networking on the nodes."""
    idle_scale_to_zero_minutes: int | None = field(default=None, metadata=_positive(30))
    """Scale the GPU nodes to 0 after this many minutes without a training pod (an in-cluster CronJob that ``up``
    installs); ``launch`` and ``run`` scale them back up. Unset: the nodes stay until ``scale`` or ``down``."""
    checkpoint_bucket: str | None = field(
        default=None,
        metadata=_rule(
            grammar.bucket_name_problem, "name a bucket S3 accepts, like my-team-checkpoints, or leave it unset"
        ),
    )
    """S3 bucket of the jobs' checkpoints on EKS clusters (an existing bucket in ``region`` is adopted). Unset:
    ``up`` creates ``fsdp-sdk-<account id>-<region>-<cluster>``. Jobs write to ``s3://<bucket>/<namespace>/<job>/``."""
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
    image_platform: str = field(
        default="linux/amd64",
        metadata=_check(
            lambda v: bool(re.fullmatch(r"[a-z0-9]+/[a-z0-9]+(/[a-z0-9]+)?", v)),
            "is not a platform",
            "use os/arch like linux/amd64 (what EC2 GPU instances run)",
        ),
    )
    """Platform ``image build`` builds for (``--platform``): GPU nodes are linux/amd64, whatever the laptop is."""
    num_workers: int = field(default=2, metadata={**_dotenv("NUM_WORKERS"), **_positive(2)})
    """Number of worker pods, one per node; locally, simulated nodes. Unset, ``cluster.nodes``'s (``--workers``
    runs a job on fewer)."""
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
    queue: str | None = field(default=None, metadata=_K8S_NAME)
    """Kueue LocalQueue the job waits in (the ``kueue.x-k8s.io/queue-name`` label). Unset: fsdp-sdk's LocalQueue
    when the cluster has it (``prereqs install --queue``), else none; ``no-queue``: outside any queue (``none``
    would read as unset)."""
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
    :param line: the line of the key in a YAML file, when known.
    """

    name: str
    source: str
    line: int | None = None


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
    line: int | None = None
    """The line of the key in a YAML file, when known (errors about the key say it)."""

    @property
    def origin(self) -> Origin:
        """This setting's :class:`Origin`."""
        return Origin(self.name or self.path, self.source, self.line)


#: The dataclass of each core section.
CORE_SECTIONS: dict[str, type] = {"cluster": ClusterConfig, "job": JobConfig, "observability": ObservabilityConfig}
_SECTION_NAME = re.compile(r"^[a-z][a-z0-9_]*$")


class SettingsRegistry(NamedRegistry[type]):
    """Configuration sections that plugins add, filled by the ``fsdp_sdk_register_settings`` hook.

    A section is a dataclass whose fields have defaults (and docstrings: ``config show`` and the docs
    read them). It is read from every source like the core's sections: ``eksctl:`` in YAML,
    ``FSDP_SDK_EKSCTL__<FIELD>`` in ``.env`` or the environment, ``--set eksctl.<field>=VALUE``, with
    the same one-line errors. Field metadata may carry ``dotenv`` (a seed ``.env`` name) and ``check``
    (see the core's fields). A section may define ``validate(self, config)``, called when the configuration is
    resolved (:func:`fsdp_sdk.config.resolution.resolve`), raising :class:`~fsdp_sdk.errors.ConfigError` on a contradiction.
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


def _flatten_mapping(data: Mapping[str, Any], prefix: str = "") -> list[tuple[str, Any]]:
    items: list[tuple[str, Any]] = []
    for key, value in data.items():
        path = f"{prefix}{key}"
        if isinstance(value, Mapping):
            items += _flatten_mapping(value, path + ".")
        else:
            items.append((path, value))
    return items
