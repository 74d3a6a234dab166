"""The EKS layer every AWS backend renders from (pure: no network, no file but the package's own data).

One record of the GPU node group (:class:`GpuNodeGroup`) holds what both the eksctl ``ClusterConfig`` and the
Terraform configuration need, decided once here:

* the instance type's facts and its network cards (``data/eks.json``, a dated table), hence the EFA interfaces:
  card 0 device 0 is the primary interface (``efa``: ENA and EFA), cards 1..N carry ``efa-only`` interfaces at
  their device index 0 where the type offers them (they take no VPC address), else ``efa`` at device index 1;
* one availability zone (EFA traffic and reservations are zonal: the first of ``cluster.availability_zones``);
* the placement rule (:func:`placement`): an EFA group without a reservation gets a cluster placement group of
  its own; with a reservation, never a new one (the reservation's instances live where it was made);
* the AMI family and its disks: the sized EBS volume is the root ``/dev/xvda`` on Amazon Linux and the data
  volume ``/dev/xvdb`` on Bottlerocket (its ``/dev/xvda`` holds only the OS);
* labels (``fsdp-sdk.io/node-role: gpu``) and the taint ``nvidia.com/gpu=true:NoSchedule`` (the accelerator's
  resource name for other accelerators);
* the local NVMe instance store as one RAID0 array (AL2023 nodeadm ``localStorage``, mounted at
  ``/mnt/k8s-disks/0``; Bottlerocket ``apiclient ephemeral-storage``, mounted at ``/mnt/.ephemeral``) where jobs
  write; kubelet and containerd move onto it too.

Beside it: the device-plugin DaemonSets (images from :mod:`fsdp_sdk.pins`), the region -> EKS image registry
table, the pods' cpu/memory sizing from the instance type's allocatable, and the hourly cost model.
"""

from __future__ import annotations

import dataclasses
import datetime
import functools
import json
import math
import re
from importlib import resources
from typing import TYPE_CHECKING, Any, Literal

from fsdp_sdk.errors import ConfigError

if TYPE_CHECKING:
    from fsdp_sdk.config import Config
    from fsdp_sdk.instance_types import InstanceType

__all__ = [
    "ACCELERATOR_LABEL",
    "AMI_FAMILIES",
    "NODE_ROLE_LABEL",
    "PLUGIN_RESOURCES",
    "AmiFamily",
    "Disk",
    "GpuNodeGroup",
    "HourlyCost",
    "LocalStorage",
    "NetworkInterface",
    "Placement",
    "SystemNodeGroup",
    "Taint",
    "checkpoint_bytes_per_node",
    "configured_ami_family",
    "device_plugin_objects",
    "eks_image_registry",
    "gpu_node_group",
    "gpu_taint",
    "hourly_cost",
    "image_registries",
    "local_storage_host_path",
    "network_cards",
    "network_interfaces",
    "node_allocatable",
    "placement",
    "system_node_group",
    "system_pod_scheduling",
    "table",
    "worker_cpu_memory",
]

AmiFamily = Literal["AmazonLinux2023", "AmazonLinux2", "Bottlerocket"]
#: AMI families whose accelerated variants carry the NVIDIA driver and the EFA software.
AMI_FAMILIES: tuple[AmiFamily, ...] = ("AmazonLinux2023", "AmazonLinux2", "Bottlerocket")
#: The label saying what a node is for: ``gpu`` (training) or ``system`` (etcd, operators, monitoring).
NODE_ROLE_LABEL = "fsdp-sdk.io/node-role"
#: The label naming the accelerator model of a GPU node.
ACCELERATOR_LABEL = "fsdp-sdk.io/accelerator"
#: Where each AMI family mounts the RAID0 array of the instance store.
_NVME_MOUNT: dict[str, str] = {"AmazonLinux2023": "/mnt/k8s-disks/0", "Bottlerocket": "/mnt/.ephemeral"}
_DEVICE_PLUGINS_DIR = "/var/lib/kubelet/device-plugins"
_MANAGED_BY = {"app.kubernetes.io/managed-by": "fsdp-sdk"}
#: What DaemonSets on a GPU node request together (device plugins, VPC CNI, kube-proxy, node agents, DCGM).
DAEMONSET_RESERVE_MILLICPU = 2000
DAEMONSET_RESERVE_MIB = 6144
#: Pods per node the kubelet's memory reservation is computed for (EKS AMIs cap large types at 110 or more).
_MAX_PODS = 110
#: The share of an instance's nominal memory its kernel reports as the node's capacity (conservatively).
_VISIBLE_MEMORY = 0.95


@functools.cache
def table() -> dict[str, Any]:
    """``data/eks.json``, parsed once per process: registries, network cards, system-node prices."""
    text = resources.files("fsdp_sdk").joinpath("data/eks.json").read_text(encoding="utf-8")
    data: dict[str, Any] = json.loads(text)
    return data


# ---------------------------------------------------------------------------------------------- registries


def image_registries() -> dict[str, str]:
    """Every region of the EKS user guide's registry table -> the ECR registry serving EKS images there."""
    return dict(table()["image_registries"]["registries"])


def eks_image_registry(region: str) -> str:
    """The ECR registry of Amazon EKS images in ``region`` (``602401143452.dkr.ecr.us-west-2.amazonaws.com``).

    :raises ConfigError: a region the EKS user guide's table does not list (no EKS images are served there).
    """
    try:
        return image_registries()[region]
    except KeyError:
        checked = table()["image_registries"]["checked"]
        raise ConfigError(
            "cluster.region",
            f"{region} has no EKS image registry in the EKS user guide's table (checked {checked})",
            "use a region where EKS runs, like us-west-2",
        ) from None


# ---------------------------------------------------------------------------------------------- network


@dataclasses.dataclass(frozen=True)
class NetworkInterface:
    """One network interface of the launch template: its card, device index and type (``efa``, ``efa-only``)."""

    card: int
    device_index: int
    interface_type: str


def network_cards(instance: InstanceType) -> int:
    """Network cards of the type: the checked-in table, else one per EFA interface (a plugin's type), else 1."""
    entry = table()["network_cards"]["types"].get(instance.name)
    if entry is not None:
        return int(entry["network_cards"])
    return max(instance.efa_interfaces, 1)


def _efa_only(instance: InstanceType) -> bool:
    entry = table()["network_cards"]["types"].get(instance.name)
    return bool(entry["efa_only"]) if entry is not None else network_cards(instance) > 1


def network_interfaces(instance: InstanceType, *, efa: bool) -> tuple[NetworkInterface, ...]:
    """The EFA interfaces of a node: one per card up to the type's EFA count; none without EFA.

    Card 0 device 0 is the primary interface (``efa``, which carries the node's IP); every further card one
    ``efa-only`` interface at its device index 0 where the type offers them (no VPC address used), else an ``efa``
    interface at device index 1.
    """
    if not efa or instance.efa_interfaces == 0:
        return ()
    count = min(instance.efa_interfaces, network_cards(instance))
    if _efa_only(instance):  # AWS's recommendation (efa-acc-inst-types, checked 2026-12-02): device 0 of each card
        return (NetworkInterface(0, 0, "efa"), *(NetworkInterface(card, 0, "efa-only") for card in range(1, count)))
    return tuple(NetworkInterface(card, 0 if card == 0 else 1, "efa") for card in range(count))


# ---------------------------------------------------------------------------------------------- placement


@dataclasses.dataclass(frozen=True)
class Placement:
    """Where the GPU nodes are placed: ``none``, a ``new`` cluster placement group, or an ``existing`` one."""

    kind: Literal["none", "new", "existing"]
    name: str | None = None

    def describe(self) -> str:
        """One phrase for plans."""
        if self.kind == "new":
            return "a cluster placement group of its own"
        if self.kind == "existing":
            return f"the cluster placement group {self.name}"
        return "no placement group"


def placement(config: Config, instance: InstanceType, existing: str | None = None) -> Placement:
    """The placement rule both backends follow.

    * ``existing`` (a named cluster placement group, e.g. the one a reservation was made in): that group;
    * a capacity reservation or Capacity Block: no new group, ever (its instances are already placed; an
      enforced new group makes launches fail), and ``cluster.placement_group`` is refused;
    * EFA, or ``cluster.placement_group``: a new cluster placement group for the node group;
    * otherwise none.

    :raises ConfigError: ``cluster.placement_group`` with a reservation and no existing group.
    """
    cluster = config.cluster
    if existing:
        return Placement("existing", existing)
    if cluster.capacity_reservation_id:
        if cluster.placement_group:
            raise ConfigError(
                "cluster.placement_group",
                "is on with a capacity reservation, whose instances live in the placement group it was created in",
                "turn cluster.placement_group off (or name that group, where the backend takes one)",
            )
        return Placement("none")
    if (cluster.efa and instance.efa_interfaces > 0) or cluster.placement_group:
        return Placement("new")
    return Placement("none")


# ---------------------------------------------------------------------------------------------- node groups


@dataclasses.dataclass(frozen=True)
class Taint:
    """A node taint."""

    key: str
    value: str
    effect: str = "NoSchedule"

    def to_dict(self) -> dict[str, str]:
        """As Kubernetes (and eksctl) write it."""
        return {"key": self.key, "value": self.value, "effect": self.effect}

    def toleration(self) -> dict[str, str]:
        """The toleration of pods that may run on the tainted nodes."""
        return {"key": self.key, "operator": "Equal", "value": self.value, "effect": self.effect}


def gpu_taint(instance: InstanceType) -> Taint:
    """The GPU nodes' taint: ``nvidia.com/gpu=true:NoSchedule`` (the accelerator's resource name)."""
    return Taint(instance.accelerator_resource, "true")


@dataclasses.dataclass(frozen=True)
class Disk:
    """The EBS volume a node group sizes, and on which device (root on Amazon Linux, data on Bottlerocket)."""

    device: str
    size_gib: int
    volume_type: str = "gp3"

    @property
    def iops(self) -> int:
        """gp3 IOPS: 16,000 (the most) where the size allows it (500 per GiB), at least the 3,000 baseline."""
        return min(16000, max(3000, 500 * self.size_gib))

    @property
    def throughput_mib_s(self) -> int:
        """gp3 throughput: 1,000 MiB/s (the most) where the IOPS allow it (0.25 MiB/s each), at least 125."""
        return min(1000, max(125, self.iops // 4))


@dataclasses.dataclass(frozen=True)
class LocalStorage:
    """The instance store as one RAID0 array, mounted at ``mount_path``, where jobs write (hostPath)."""

    ami_family: str
    mount_path: str
    nvme_gib: int
    strategy: str = "RAID0"

    def nodeadm_config(self) -> dict[str, Any]:
        """The AL2023 nodeadm ``NodeConfig`` that builds the array (kubelet and containerd move onto it)."""
        return {
            "apiVersion": "node.eks.aws/v1alpha1",
            "kind": "NodeConfig",
            "spec": {"instance": {"localStorage": {"strategy": self.strategy}}},
        }

    def setup_command(self) -> str:
        """The AL2023 EKS AMI's own script that builds the array, for a boot script before kubelet starts (what
        nodeadm runs for ``localStorage``; eksctl takes no NodeConfig for EKS AMIs, only ``preBootstrapCommands``)."""
        return f"/usr/bin/setup-local-disks {self.strategy.lower()}"

    def bottlerocket_settings(self) -> dict[str, Any]:
        """Bottlerocket settings whose bootstrap command builds the array and binds kubelet and containerd to it."""
        return {
            "bootstrap-commands": {
                "000-mount-instance-storage": {
                    "commands": [
                        ["apiclient", "ephemeral-storage", "init"],
                        [
                            "apiclient",
                            "ephemeral-storage",
                            "bind",
                            "--dirs",
                            "/var/lib/containerd",
                            "/var/lib/kubelet",
                            "/var/log/pods",
                        ],
                    ],
                    "essential": True,
                    "mode": "always",
                }
            }
        }


@dataclasses.dataclass(frozen=True)
class GpuNodeGroup:
    """The GPU node group every AWS backend renders (see the module docstring)."""

    name: str
    instance: InstanceType
    zone: str | None
    nodes: int
    min_nodes: int
    max_nodes: int
    capacity_type: str
    reservation_id: str | None
    ami_family: str
    interfaces: tuple[NetworkInterface, ...]
    placement: Placement
    volume: Disk
    local_storage: LocalStorage | None
    labels: dict[str, str]
    taints: tuple[Taint, ...]

    @property
    def efa(self) -> bool:
        """Whether the nodes get EFA interfaces."""
        return bool(self.interfaces)

    @property
    def market_type(self) -> str | None:
        """The launch template's market type: ``capacity-block`` for Capacity Blocks, else None."""
        return "capacity-block" if self.capacity_type == "capacity-block" else None

    @property
    def bottlerocket(self) -> bool:
        """Whether the AMI is Bottlerocket."""
        return self.ami_family == "Bottlerocket"

    def host_paths(self) -> set[str]:
        """The host directories the node's bootstrap creates for pods (the local array's mount)."""
        return {self.local_storage.mount_path} if self.local_storage else set()


@dataclasses.dataclass(frozen=True)
class SystemNodeGroup:
    """The system node group: etcd, the Training Operator, monitoring."""

    name: str
    instance_type: str
    nodes: int
    labels: dict[str, str]


def system_node_group(config: Config, name: str = "system") -> SystemNodeGroup:
    """The system node group of ``config``."""
    cluster = config.cluster
    return SystemNodeGroup(name, cluster.system_instance_type, cluster.system_nodes, {NODE_ROLE_LABEL: "system"})


def gpu_node_group(
    config: Config,
    instance: InstanceType,
    *,
    ami_family: str,
    name: str = "gpu",
    placement_group_name: str | None = None,
) -> GpuNodeGroup:
    """The GPU node group of ``config`` (see the module docstring).

    :param ami_family: ``AmazonLinux2023``, ``AmazonLinux2`` or ``Bottlerocket`` (from the backend's settings).
    :param name: the node group's name.
    :param placement_group_name: an existing cluster placement group, where the backend takes one.
    :raises ConfigError: ``cluster.placement_group`` with a reservation and no existing group.
    """
    cluster = config.cluster
    efa = cluster.efa and instance.efa_interfaces > 0
    bottlerocket = ami_family == "Bottlerocket"
    mount = _NVME_MOUNT.get(ami_family)
    local = LocalStorage(ami_family, mount, instance.nvme_gib) if mount and instance.nvme_gib > 0 else None
    max_nodes = cluster.max_nodes if cluster.max_nodes is not None else cluster.nodes
    return GpuNodeGroup(
        name=name,
        instance=instance,
        zone=cluster.availability_zones[0] if cluster.availability_zones else None,
        nodes=cluster.nodes,
        min_nodes=cluster.min_nodes,
        max_nodes=max(max_nodes, 1),
        capacity_type=cluster.capacity_type,
        reservation_id=cluster.capacity_reservation_id,
        ami_family=ami_family,
        interfaces=network_interfaces(instance, efa=efa),
        placement=placement(config, instance, placement_group_name),
        volume=Disk("/dev/xvdb" if bottlerocket else "/dev/xvda", cluster.node_volume_size_gib),
        local_storage=local,
        labels={NODE_ROLE_LABEL: "gpu", ACCELERATOR_LABEL: _label_value(instance.gpu_model)},
        taints=(gpu_taint(instance),),
    )


def _label_value(text: str) -> str:
    """``text`` as a Kubernetes label value (a plugin's accelerator name may hold spaces)."""
    return re.sub(r"[^a-z0-9._-]+", "-", text.lower()).strip("-._")[:63] or "unknown"


def configured_ami_family(config: Config) -> str | None:
    """The GPU nodes' AMI family the active backend's settings name (``gpu_ami_family``), or None (not AWS)."""
    from fsdp_sdk.contracts import gpu_ami_settings

    section = gpu_ami_settings(config)
    return section.gpu_ami_family if section is not None else None


def local_storage_host_path(config: Config, instance: InstanceType) -> str | None:
    """Where the GPU nodes mount their local NVMe array, or None where the node group sets none up."""
    family = configured_ami_family(config)
    if family is None or instance.nvme_gib == 0:
        return None
    return _NVME_MOUNT.get(family)


def system_pod_scheduling(config: Config) -> dict[str, Any]:
    """Pod spec fields that keep system pods (etcd, the Training Operator, monitoring) on the system node group.

    On a cluster an AWS backend made (its settings name the AMI family), a ``nodeSelector`` on
    ``fsdp-sdk.io/node-role: system``: a GPU node scaled to zero never takes the rendezvous with it. On a
    cluster of one's own, which may have no such label, a preference for it instead.
    """
    if configured_ami_family(config) is not None:
        return {"nodeSelector": {NODE_ROLE_LABEL: "system"}}
    term = {"matchExpressions": [{"key": NODE_ROLE_LABEL, "operator": "In", "values": ["system"]}]}
    return {
        "affinity": {
            "nodeAffinity": {"preferredDuringSchedulingIgnoredDuringExecution": [{"weight": 100, "preference": term}]}
        }
    }


# ---------------------------------------------------------------------------------------------- pod sizing


def node_allocatable(instance: InstanceType) -> tuple[int, int]:
    """The node's allocatable (millicpu, MiB) under the EKS AMIs' kubelet reservations.

    kube-reserved cpu: 6% of the first core, 1% of the second, 0.5% of the next two, 0.25% of the rest;
    memory: 255 MiB + 11 MiB per pod, plus the 100 MiB hard eviction threshold, from the memory the kernel
    reports (taken as 95% of the type's nominal memory: firmware and the kernel keep the rest).
    """
    cores = instance.vcpus
    reserved = 60 + (10 if cores > 1 else 0) + 5 * min(max(cores - 2, 0), 2) + math.ceil(2.5 * max(cores - 4, 0))
    memory = int(instance.memory_gib * 1024 * _VISIBLE_MEMORY) - (255 + 11 * _MAX_PODS) - 100
    return cores * 1000 - reserved, memory


def worker_cpu_memory(instance: InstanceType, gpus: int) -> tuple[str, str]:
    """cpu and memory for one worker using ``gpus`` of the node's accelerators: its share of the allocatable,
    less what the node's DaemonSets request (requests = limits: a Guaranteed pod, evicted last).
    """
    cpu, memory = node_allocatable(instance)
    share = min(max(gpus, 1) / instance.gpu_count, 1.0)
    cpu_cores = max(int((cpu - DAEMONSET_RESERVE_MILLICPU) * share // 1000), 1)
    memory_gib = max(int((memory - DAEMONSET_RESERVE_MIB) * share // 1024), 1)
    return str(cpu_cores), f"{memory_gib}Gi"


def checkpoint_bytes_per_node(parameters: float, nodes: int, *, kept: int = 2) -> float:
    """Local disk a sharded checkpoint takes per node: fp32 weights and two Adam moments (12 bytes a
    parameter), spread over ``nodes``, ``kept`` of them at once (the newest and the one being written)."""
    return 12.0 * parameters / max(nodes, 1) * kept


# ---------------------------------------------------------------------------------------------- device plugins


def _daemonset(name: str, pod: dict[str, Any]) -> dict[str, Any]:
    labels = {"app.kubernetes.io/name": name}
    return {
        "apiVersion": "apps/v1",
        "kind": "DaemonSet",
        "metadata": {"name": name, "namespace": "kube-system", "labels": {**labels, **_MANAGED_BY}},
        "spec": {
            "selector": {"matchLabels": labels},
            "updateStrategy": {"type": "RollingUpdate"},
            "template": {"metadata": {"labels": labels}, "spec": pod},
        },
    }


def _gpu_pod_placement(group: GpuNodeGroup) -> dict[str, Any]:
    return {
        "nodeSelector": {NODE_ROLE_LABEL: "gpu", "node.kubernetes.io/instance-type": group.instance.name},
        "tolerations": [
            *(t.toleration() for t in group.taints),
            {"key": "CriticalAddonsOnly", "operator": "Exists"},
            {"key": "aws.amazon.com/efa", "operator": "Exists", "effect": "NoSchedule"},
        ],
        "priorityClassName": "system-node-critical",
    }


def device_plugin_objects(
    group: GpuNodeGroup,
    region: str,
    *,
    nvidia: bool = True,
    efa: bool = True,
    nvidia_image: str | None = None,
    efa_image: str | None = None,
) -> list[dict[str, Any]]:
    """The NVIDIA and EFA device plugin DaemonSets of the GPU node group (images from :mod:`fsdp_sdk.pins`).

    :param group: the GPU node group (its labels and taints place the plugins).
    :param region: the cluster's region (the EFA plugin's registry).
    :param nvidia: render the NVIDIA plugin (for NVIDIA GPUs, off where the AMI runs its own: Bottlerocket).
    :param efa: render the EFA plugin (for EFA groups).
    :param nvidia_image: an image instead of the pinned one.
    :param efa_image: an image instead of the pinned one.
    """
    from fsdp_sdk.pins import pin

    objects: list[dict[str, Any]] = []
    placement_ = _gpu_pod_placement(group)
    drop_all = {"allowPrivilegeEscalation": False, "capabilities": {"drop": ["ALL"]}}
    if nvidia and group.instance.accelerator_resource == "nvidia.com/gpu" and not group.bottlerocket:
        image = nvidia_image or pin("nvidia-device-plugin").image_ref()
        objects.append(
            _daemonset(
                "nvidia-device-plugin",
                {
                    **placement_,
                    "containers": [
                        {
                            "name": "nvidia-device-plugin",
                            "image": image,
                            # a node whose driver is not ready yet waits instead of crash-looping
                            "env": [{"name": "FAIL_ON_INIT_ERROR", "value": "false"}],
                            "securityContext": drop_all,
                            "resources": {"requests": {"cpu": "10m", "memory": "40Mi"}},
                            "volumeMounts": [{"name": "device-plugins", "mountPath": _DEVICE_PLUGINS_DIR}],
                        }
                    ],
                    "volumes": [
                        {"name": "device-plugins", "hostPath": {"path": _DEVICE_PLUGINS_DIR, "type": "Directory"}}
                    ],
                },
            )
        )
    if efa and group.efa:
        image = efa_image or pin("efa-device-plugin").image_ref(eks_registry=eks_image_registry(region))
        objects.append(
            _daemonset(
                "aws-efa-k8s-device-plugin",
                {
                    **placement_,
                    "hostNetwork": True,
                    "containers": [
                        {
                            "name": "aws-efa-k8s-device-plugin",
                            "image": image,
                            "securityContext": drop_all,
                            "resources": {"requests": {"cpu": "10m", "memory": "20Mi"}},
                            "volumeMounts": [
                                {"name": "device-plugins", "mountPath": _DEVICE_PLUGINS_DIR},
                                {"name": "infiniband", "mountPath": "/dev/infiniband"},
                            ],
                        }
                    ],
                    "volumes": [
                        {"name": "device-plugins", "hostPath": {"path": _DEVICE_PLUGINS_DIR}},
                        {"name": "infiniband", "hostPath": {"path": "/dev/infiniband"}},
                    ],
                },
            )
        )
    return objects


#: The extended resource each device plugin DaemonSet advertises (for contract checks and plans).
PLUGIN_RESOURCES: dict[str, str] = {
    "nvidia-device-plugin": "nvidia.com/gpu",
    "aws-efa-k8s-device-plugin": "vpc.amazonaws.com/efa",
}


# ---------------------------------------------------------------------------------------------- cost


@dataclasses.dataclass(frozen=True)
class HourlyCost:
    """The parts of the hourly on-demand cost; ``None`` where a price is not known.

    :param gpu_nodes: GPU nodes x the instance type's on-demand price.
    :param system_nodes: system nodes x their price.
    :param control_plane: the EKS control plane (standard or extended support, by the Kubernetes version).
    :param notes: what the figure leaves out or how it differs from the bill.
    """

    gpu_nodes: float | None
    system_nodes: float | None
    control_plane: float
    notes: tuple[str, ...]

    @property
    def total(self) -> float | None:
        """The sum, or ``None`` when the GPU nodes cannot be priced (the total would mislead)."""
        if self.gpu_nodes is None:
            return None
        return round(self.gpu_nodes + (self.system_nodes or 0.0) + self.control_plane, 2)

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready dict (``plan.details["cost"]``)."""
        return {
            "gpu_nodes_usd_per_hour": self.gpu_nodes,
            "system_nodes_usd_per_hour": self.system_nodes,
            "control_plane_usd_per_hour": self.control_plane,
            "total_usd_per_hour": self.total,
            "notes": list(self.notes),
        }


def hourly_cost(config: Config, instance: InstanceType, *, on: datetime.date | None = None) -> HourlyCost:
    """The hourly on-demand cost of the cluster ``config`` plans (see :class:`HourlyCost`).

    :param on: the day the control plane is priced for (its Kubernetes version's support state); default today.
    """
    from fsdp_sdk.pins import control_plane_usd_per_hour, today

    cluster = config.cluster
    notes: list[str] = []
    gpu = None
    if instance.on_demand_usd_per_hour is None:
        notes.append(f"{instance.name} has no on-demand list price: GPU nodes not priced")
    else:
        gpu = round(cluster.nodes * instance.on_demand_usd_per_hour, 2)
        notes.append(
            f"{instance.name}: ${instance.on_demand_usd_per_hour:,.2f}/h on demand as of {instance.price_date}"
        )
    if cluster.capacity_type == "capacity-block":
        notes.append("a Capacity Block is paid upfront when bought; the on-demand figure is for comparison")
    elif cluster.capacity_type == "capacity-reservation":
        notes.append("a capacity reservation is billed at the on-demand rate for every reserved instance, used or not")
    elif cluster.capacity_type == "spot":
        notes.append("Spot prices vary and are usually well below the on-demand figure")
    prices = table()["system_node_usd_per_hour"]
    price = prices["prices"].get(cluster.system_instance_type)
    system = None
    if price is None:
        notes.append(f"system nodes ({cluster.system_instance_type}) not priced: not in the price table")
    else:
        system = round(cluster.system_nodes * float(price), 4)
    day = on or today()
    control = control_plane_usd_per_hour(cluster.kubernetes_version, on=day)
    notes.append(f"EKS control plane for Kubernetes {cluster.kubernetes_version} on {day.isoformat()}: ${control}/h")
    notes.append(
        f"plus NAT gateway, EBS volumes and data transfer (not counted); prices of us-east-1, {prices['checked']}"
    )
    return HourlyCost(gpu, system, control, tuple(notes))
