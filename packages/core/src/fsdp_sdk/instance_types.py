"""GPU instance types: the :class:`InstanceType` record, its registry, and the built-in AWS types.

Instance types come from plugins through the ``fsdp_sdk_register_instance_types``
hook; this module is itself the default plugin that registers the built-in ones.
A plugin adds its own the same way::

    from fsdp_sdk import hookimpl
    from fsdp_sdk.instance_types import InstanceType

    @hookimpl
    def fsdp_sdk_register_instance_types(registry):
        registry.add(InstanceType(name="p6-b200.48xlarge", gpu_count=8, ...))

Prices are AWS on-demand Linux prices in us-east-1 as of :data:`PRICE_DATE`; they
are a planning aid (``fsdp-sdk up --dry-run`` shows the hourly cost), not a quote.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Iterator
from dataclasses import dataclass
from typing import TypedDict

from fsdp_sdk._fields import FrozenFields
from fsdp_sdk.errors import PluginError
from fsdp_sdk.markers import hookimpl
from fsdp_sdk.registry import NamedRegistry

__all__ = ["BUILTIN_INSTANCE_TYPES", "PRICE_DATE", "InstanceType", "InstanceTypeRegistry"]

#: The day the built-in prices were read from the AWS on-demand price list (us-east-1, Linux),
#: after the June 2025 price reduction for P4 and P5 instances.
PRICE_DATE = "2025-06-05"

_NAME = re.compile(r"^[a-z0-9][a-z0-9-]*\.[a-z0-9]+$")
_ISO_DATE = re.compile(r"^\d{4}-\d{2}-\d{2}$")
_RESOURCE = re.compile(r"^[a-z0-9]([-a-z0-9.]*[a-z0-9])?/[a-z0-9]([-a-z0-9_.]*[a-z0-9])?$")


@dataclass(frozen=True, eq=False, repr=False)
class InstanceType(FrozenFields):
    """One accelerated instance type, with the figures planning, estimating and rendering need.

    Capabilities live here, not in name patterns, so a plugin's type gets the same treatment
    as a built-in one: the Kubernetes resource its accelerators are requested by, GPUDirect
    RDMA over EFA, the EFA generation, the link between accelerators of one instance and its
    bandwidth (what all-gathers and reduce-scatters within a node run over). GPU memory is the
    vendor's figure per GPU (NVIDIA quotes GB, e.g. 80 or 179.2). ``efa_interfaces`` is the
    number of EFA network interfaces a pod may request (``vpc.amazonaws.com/efa``); 0 means no EFA.
    """

    name: str
    """The AWS instance type name, e.g. ``p5.48xlarge``."""
    gpu_count: int
    """Accelerators per instance; the default ``job.gpu_per_worker``."""
    gpu_model: str
    """Accelerator model, e.g. ``H100``."""
    gpu_memory_gib: float
    """Memory per accelerator, as the vendor quotes it (80, 141, 179.2)."""
    efa_interfaces: int
    """EFA interfaces per instance; the default ``job.efa_per_worker``."""
    vcpus: int
    """vCPUs per instance."""
    memory_gib: int
    """Host memory per instance."""
    bf16_tflops_per_gpu: float
    """Dense BF16 peak per accelerator in TFLOP/s (no sparsity), for MFU figures and estimates."""
    on_demand_usd_per_hour: float | None
    """On-demand Linux price in us-east-1, USD per hour; ``None`` when AWS sells it only as Capacity Blocks."""
    price_date: str | None = None
    """ISO date (YYYY-MM-DD) on which ``on_demand_usd_per_hour`` was read; required with a price."""
    nvme_gib: int = 0
    """Total local NVMe instance storage."""
    network_gbps: int = 0
    """Aggregate network (EFA) bandwidth of the instance, Gbit/s."""
    notes: str = ""
    """Anything a user should know when choosing it (purchase options, limits)."""
    accelerator_resource: str = "nvidia.com/gpu"
    """The Kubernetes extended resource pods request the accelerators by (``aws.amazon.com/neuron`` for Trainium)."""
    efa_generation: int | None = None
    """EFA generation (1, 2, 3, 4), when the instance has EFA."""
    gpudirect_rdma: bool = False
    """Whether EFA reads and writes accelerator memory directly (jobs get ``FI_EFA_USE_DEVICE_RDMA=1``)."""
    intra_node_link: str = "PCIe"
    """What connects the accelerators of one instance (``NVLink 4``, ``PCIe Gen4``, ``NeuronLink``)."""
    intra_node_gbytes_per_s: float = 0.0
    """Bandwidth of that link per accelerator, in one direction, GB/s (NVLink 4: 450); 0 when unknown."""

    def __post_init__(self) -> None:
        if not _NAME.match(self.name):
            raise PluginError(f"instance type {self.name!r}: the name must look like 'family.size', e.g. 'p5.48xlarge'")
        for field in ("gpu_count", "vcpus", "memory_gib"):
            value = getattr(self, field)
            if not isinstance(value, int) or isinstance(value, bool) or value <= 0:
                raise PluginError(f"instance type {self.name}: {field} must be a positive integer, got {value!r}")
        for field in ("efa_interfaces", "nvme_gib", "network_gbps"):
            value = getattr(self, field)
            if not isinstance(value, int) or isinstance(value, bool) or value < 0:
                raise PluginError(f"instance type {self.name}: {field} must be a non-negative integer, got {value!r}")
        for field in ("gpu_memory_gib", "bf16_tflops_per_gpu"):
            value = getattr(self, field)
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not value > 0:
                raise PluginError(f"instance type {self.name}: {field} must be a positive number, got {value!r}")
        bandwidth = self.intra_node_gbytes_per_s
        if isinstance(bandwidth, bool) or not (isinstance(bandwidth, (int, float)) and bandwidth >= 0):
            raise PluginError(f"instance type {self.name}: intra_node_gbytes_per_s must be 0 or more")
        if self.on_demand_usd_per_hour is not None:
            if not self.on_demand_usd_per_hour > 0:
                raise PluginError(f"instance type {self.name}: on_demand_usd_per_hour must be positive or None")
            if self.price_date is None:
                raise PluginError(
                    f"instance type {self.name}: price_date is needed with a price (the ISO date it was read)"
                )
        if self.price_date is not None and not _ISO_DATE.match(self.price_date):
            raise PluginError(f"instance type {self.name}: price_date must be an ISO date like 2025-06-05")
        if not _RESOURCE.match(self.accelerator_resource):
            raise PluginError(
                f"instance type {self.name}: accelerator_resource {self.accelerator_resource!r} is not a Kubernetes "
                "extended resource name like nvidia.com/gpu"
            )
        generation = self.efa_generation
        if generation is not None and (
            not isinstance(generation, int) or isinstance(generation, bool) or generation < 1
        ):
            raise PluginError(f"instance type {self.name}: efa_generation must be a positive integer or None")
        if self.gpudirect_rdma and self.efa_interfaces == 0:
            raise PluginError(f"instance type {self.name}: gpudirect_rdma needs EFA (efa_interfaces > 0)")

    def to_dict(self) -> dict[str, object]:
        """The fields as a JSON-ready dict."""
        return dataclasses.asdict(self)


class InstanceTypeRegistry(NamedRegistry[InstanceType]):
    """The instance types known to this process, filled by ``fsdp_sdk_register_instance_types``.

    :meth:`add` refuses a second type with the same name from one plugin; when two plugins
    register the same name, the plugin manager refuses it for both (:attr:`conflicts`), so two
    plugins cannot silently disagree about what ``trn1.32xlarge`` is, while other types keep working.
    """

    kind = "instance type"

    def add(self, instance_type: InstanceType) -> None:
        """Register one instance type.

        :param instance_type: the type to add.
        :raises PluginError: the argument is not an :class:`InstanceType` or its name is taken.
        """
        if not isinstance(instance_type, InstanceType):
            raise PluginError(
                f"plugin {self.current_plugin or '?'}: registry.add() takes an InstanceType, "
                f"got {type(instance_type).__name__}"
            )
        self._claim(instance_type.name, instance_type)

    def get(self, name: str) -> InstanceType | None:
        """The instance type called ``name``, or ``None``."""
        return self._entries.get(name)

    def __getitem__(self, name: str) -> InstanceType:
        return self._entries[name]

    def __iter__(self) -> Iterator[InstanceType]:
        return iter(sorted(self._entries.values(), key=lambda t: t.name))


class _IntraNodeLink(TypedDict):
    """The two :class:`InstanceType` fields that describe the GPUs' link inside a node."""

    intra_node_link: str
    intra_node_gbytes_per_s: float


_NVLINK3: _IntraNodeLink = {"intra_node_link": "NVLink 3", "intra_node_gbytes_per_s": 300.0}
_NVLINK4: _IntraNodeLink = {"intra_node_link": "NVLink 4", "intra_node_gbytes_per_s": 450.0}
_PCIE4: _IntraNodeLink = {"intra_node_link": "PCIe Gen4", "intra_node_gbytes_per_s": 25.0}
_PCIE3: _IntraNodeLink = {"intra_node_link": "PCIe Gen3", "intra_node_gbytes_per_s": 12.0}

BUILTIN_INSTANCE_TYPES: tuple[InstanceType, ...] = (
    InstanceType(
        name="p4d.24xlarge",
        gpu_count=8,
        gpu_model="A100",
        gpu_memory_gib=40,
        efa_interfaces=4,
        vcpus=96,
        memory_gib=1152,
        bf16_tflops_per_gpu=312.0,
        on_demand_usd_per_hour=21.96,
        price_date=PRICE_DATE,
        nvme_gib=8000,
        network_gbps=400,
        notes="A100 40GB SXM4",
        efa_generation=1,
        gpudirect_rdma=True,
        **_NVLINK3,
    ),
    InstanceType(
        name="p4de.24xlarge",
        gpu_count=8,
        gpu_model="A100",
        gpu_memory_gib=80,
        efa_interfaces=4,
        vcpus=96,
        memory_gib=1152,
        bf16_tflops_per_gpu=312.0,
        on_demand_usd_per_hour=27.45,
        price_date=PRICE_DATE,
        nvme_gib=8000,
        network_gbps=400,
        notes="A100 80GB SXM4",
        efa_generation=1,
        gpudirect_rdma=True,
        **_NVLINK3,
    ),
    InstanceType(
        name="p5.48xlarge",
        gpu_count=8,
        gpu_model="H100",
        gpu_memory_gib=80,
        efa_interfaces=32,
        vcpus=192,
        memory_gib=2048,
        bf16_tflops_per_gpu=989.0,
        on_demand_usd_per_hour=55.04,
        price_date=PRICE_DATE,
        nvme_gib=30720,
        network_gbps=3200,
        notes="H100 80GB SXM5",
        efa_generation=2,
        gpudirect_rdma=True,
        **_NVLINK4,
    ),
    InstanceType(
        name="p5e.48xlarge",
        gpu_count=8,
        gpu_model="H200",
        gpu_memory_gib=141,
        efa_interfaces=32,
        vcpus=192,
        memory_gib=2048,
        bf16_tflops_per_gpu=989.0,
        on_demand_usd_per_hour=None,
        price_date=PRICE_DATE,
        nvme_gib=30720,
        network_gbps=3200,
        notes="H200 141GB; sold through EC2 Capacity Blocks, no on-demand list price",
        efa_generation=2,
        gpudirect_rdma=True,
        **_NVLINK4,
    ),
    InstanceType(
        name="p5en.48xlarge",
        gpu_count=8,
        gpu_model="H200",
        gpu_memory_gib=141,
        efa_interfaces=16,
        vcpus=192,
        memory_gib=2048,
        bf16_tflops_per_gpu=989.0,
        on_demand_usd_per_hour=63.30,
        price_date=PRICE_DATE,
        nvme_gib=30720,
        network_gbps=3200,
        notes="H200 141GB, PCIe Gen5 host link",
        efa_generation=3,
        gpudirect_rdma=True,
        **_NVLINK4,
    ),
    InstanceType(
        name="g5.48xlarge",
        gpu_count=8,
        gpu_model="A10G",
        gpu_memory_gib=24,
        efa_interfaces=1,
        vcpus=192,
        memory_gib=768,
        bf16_tflops_per_gpu=125.0,
        on_demand_usd_per_hour=16.288,
        price_date=PRICE_DATE,
        nvme_gib=7600,
        network_gbps=100,
        notes="A10G 24GB, no NVLink",
        efa_generation=1,
        **_PCIE4,
    ),
    InstanceType(
        name="g6e.48xlarge",
        gpu_count=8,
        gpu_model="L40S",
        gpu_memory_gib=48,
        efa_interfaces=4,
        vcpus=192,
        memory_gib=1536,
        bf16_tflops_per_gpu=362.0,
        on_demand_usd_per_hour=30.131,
        price_date=PRICE_DATE,
        nvme_gib=7600,
        network_gbps=400,
        notes="L40S 48GB, no NVLink",
        **_PCIE4,
    ),
    # Smaller G instances: single-node jobs, development, and the seed example's default (g4dn.8xlarge).
    InstanceType(
        name="g4dn.8xlarge",
        gpu_count=1,
        gpu_model="T4",
        gpu_memory_gib=16,
        efa_interfaces=1,
        vcpus=32,
        memory_gib=128,
        bf16_tflops_per_gpu=65.0,
        on_demand_usd_per_hour=2.176,
        price_date=PRICE_DATE,
        nvme_gib=900,
        network_gbps=50,
        notes="T4 16GB; no bf16 (65 TFLOP/s is its fp16 peak): train with --precision.mode fp16",
        efa_generation=1,
        **_PCIE3,
    ),
    InstanceType(
        name="g4dn.12xlarge",
        gpu_count=4,
        gpu_model="T4",
        gpu_memory_gib=16,
        efa_interfaces=1,
        vcpus=48,
        memory_gib=192,
        bf16_tflops_per_gpu=65.0,
        on_demand_usd_per_hour=3.912,
        price_date=PRICE_DATE,
        nvme_gib=900,
        network_gbps=50,
        notes="T4 16GB; no bf16 (65 TFLOP/s is its fp16 peak): train with --precision.mode fp16",
        efa_generation=1,
        **_PCIE3,
    ),
    InstanceType(
        name="g4dn.metal",
        gpu_count=8,
        gpu_model="T4",
        gpu_memory_gib=16,
        efa_interfaces=1,
        vcpus=96,
        memory_gib=384,
        bf16_tflops_per_gpu=65.0,
        on_demand_usd_per_hour=7.824,
        price_date=PRICE_DATE,
        nvme_gib=1800,
        network_gbps=100,
        notes="T4 16GB; no bf16 (65 TFLOP/s is its fp16 peak): train with --precision.mode fp16",
        efa_generation=1,
        **_PCIE3,
    ),
    InstanceType(
        name="g5.12xlarge",
        gpu_count=4,
        gpu_model="A10G",
        gpu_memory_gib=24,
        efa_interfaces=1,
        vcpus=48,
        memory_gib=192,
        bf16_tflops_per_gpu=125.0,
        on_demand_usd_per_hour=5.672,
        price_date=PRICE_DATE,
        nvme_gib=3800,
        network_gbps=40,
        notes="A10G 24GB, no NVLink",
        efa_generation=1,
        **_PCIE4,
    ),
    InstanceType(
        name="g6.12xlarge",
        gpu_count=4,
        gpu_model="L4",
        gpu_memory_gib=24,
        efa_interfaces=1,
        vcpus=48,
        memory_gib=192,
        bf16_tflops_per_gpu=121.0,
        on_demand_usd_per_hour=4.6016,
        price_date=PRICE_DATE,
        nvme_gib=3760,
        network_gbps=40,
        notes="L4 24GB, no NVLink",
        efa_generation=1,
        **_PCIE4,
    ),
    InstanceType(
        name="g6.48xlarge",
        gpu_count=8,
        gpu_model="L4",
        gpu_memory_gib=24,
        efa_interfaces=1,
        vcpus=192,
        memory_gib=768,
        bf16_tflops_per_gpu=121.0,
        on_demand_usd_per_hour=13.3504,
        price_date=PRICE_DATE,
        nvme_gib=7520,
        network_gbps=100,
        notes="L4 24GB, no NVLink",
        efa_generation=1,
        **_PCIE4,
    ),
)


@hookimpl
def fsdp_sdk_register_instance_types(registry: InstanceTypeRegistry) -> None:
    """Register the built-in AWS GPU instance types."""
    for instance_type in BUILTIN_INSTANCE_TYPES:
        registry.add(instance_type)
