"""The configuration's variables: what fsdp-sdk writes as ``terraform.tfvars.json`` (pure, checked).

Terraform reads ``terraform.tfvars.json`` in the working directory by itself. The values are plain
JSON data, never HCL built from strings. :func:`terraform_inputs` builds them from the resolved
configuration and the instance type (the EFA interface count comes from the instance-type registry,
so a third-party type works); :func:`check_inputs` refuses, before Terraform runs, every value the
configuration's ``variables.tf`` validations would refuse, naming the fsdp-sdk setting to change.
"""

from __future__ import annotations

import ipaddress
import json
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from fsdp_sdk.aws.eks import GpuNodeGroup, gpu_node_group, system_node_group
from fsdp_sdk.errors import ConfigError

if TYPE_CHECKING:
    from fsdp_sdk.config import Config
    from fsdp_sdk.instance_types import InstanceType
    from fsdp_sdk_terraform.settings import TerraformSettings

__all__ = [
    "AMI_TYPES",
    "INPUT_SETTINGS",
    "MIN_VOLUME_GIB",
    "check_inputs",
    "gpu_ami_type",
    "gpu_group",
    "gpu_user_data",
    "terraform_inputs",
]

#: EKS AMI types the GPU node group may use (accelerated AL2023 and Bottlerocket images).
AMI_TYPES = (
    "AL2023_x86_64_NVIDIA",
    "AL2023_ARM_64_NVIDIA",
    "AL2023_x86_64_NEURON",
    "BOTTLEROCKET_x86_64_NVIDIA",
    "BOTTLEROCKET_ARM_64_NVIDIA",
)
#: The smallest GPU root volume: the gp3 volume is provisioned at 16,000 IOPS, which needs 32 GiB or more.
MIN_VOLUME_GIB = 40
#: The fsdp-sdk setting each variable comes from, for error messages.
INPUT_SETTINGS: dict[str, str] = {
    "cluster_name": "cluster.name",
    "region": "cluster.region",
    "kubernetes_version": "cluster.kubernetes_version",
    "availability_zones": "cluster.availability_zones",
    "vpc_cidr": "terraform.vpc_cidr",
    "endpoint_public_access": "terraform.endpoint_public_access",
    "public_access_cidrs": "terraform.public_access_cidrs",
    "system_instance_type": "cluster.system_instance_type",
    "system_nodes": "cluster.system_nodes",
    "gpu_instance_type": "cluster.instance_type",
    "gpu_nodes": "cluster.nodes",
    "gpu_min_nodes": "cluster.min_nodes",
    "gpu_max_nodes": "cluster.max_nodes",
    "gpu_ami_type": "terraform.gpu_ami_type",
    "gpu_labels": "cluster.instance_type",
    "gpu_taints": "cluster.instance_type",
    "system_labels": "cluster.system_instance_type",
    "gpu_network_interfaces": "cluster.efa",
    "capacity_type": "cluster.capacity_type",
    "capacity_reservation_id": "cluster.capacity_reservation_id",
    "placement_group": "cluster.placement_group",
    "gpu_volume": "cluster.node_volume_size_gib",
    "gpu_user_data": "terraform.gpu_ami_type",
    "tags": "terraform.tags",
}
#: The EKS API's names of taint effects.
_EFFECTS = {"NoSchedule": "NO_SCHEDULE", "NoExecute": "NO_EXECUTE", "PreferNoSchedule": "PREFER_NO_SCHEDULE"}
_MIME_BOUNDARY = "//"


def gpu_ami_type(instance: InstanceType, settings: TerraformSettings) -> str:
    """The AMI type of the GPU nodes: the setting, else Neuron's for Neuron devices, else NVIDIA's."""
    if settings.gpu_ami_type:
        return settings.gpu_ami_type
    if instance.accelerator_resource.startswith("aws.amazon.com/neuron"):
        return "AL2023_x86_64_NEURON"
    return "AL2023_x86_64_NVIDIA"


def gpu_group(config: Config, instance: InstanceType, settings: TerraformSettings) -> GpuNodeGroup:
    """The core's GPU node group record for this backend's settings (AMI family from ``terraform.gpu_ami_type``)."""
    return gpu_node_group(config, instance, ami_family=settings.gpu_ami_family)


def gpu_user_data(group: GpuNodeGroup) -> str:
    """What EKS merges into the GPU nodes' user data: the local NVMe RAID0 (empty without instance store).

    AL2023 takes a MIME multi-part document whose ``application/node.eks.aws`` part is a nodeadm ``NodeConfig``;
    Bottlerocket takes TOML settings (its bootstrap command builds the array).
    """
    local = group.local_storage
    if local is None:
        return ""
    if group.bottlerocket:
        return _toml(local.bottlerocket_settings())
    import yaml

    return (
        "MIME-Version: 1.0\n"
        f'Content-Type: multipart/mixed; boundary="{_MIME_BOUNDARY}"\n\n'
        f"--{_MIME_BOUNDARY}\n"
        "Content-Type: application/node.eks.aws\n\n"
        "---\n"
        f"{yaml.safe_dump(local.nodeadm_config(), sort_keys=False)}"
        f"--{_MIME_BOUNDARY}--\n"
    )


def _toml(settings: dict[str, Any]) -> str:
    """Bottlerocket's ``[settings.<table>.<name>]`` tables of scalar and list values, as TOML."""
    lines: list[str] = []
    for table, entries in settings.items():
        for name, values in entries.items():
            lines.append(f'[settings.{table}."{name}"]')
            lines += [f"{key} = {json.dumps(value)}" for key, value in values.items()]
    return "\n".join(lines) + "\n"


def terraform_inputs(config: Config, instance: InstanceType, settings: TerraformSettings) -> dict[str, Any]:
    """Every variable of the configuration, from the resolved configuration and the core's node group (pure).

    :param config: the resolved configuration.
    :param instance: the GPU instance type (``cluster.instance_type``).
    :param settings: the ``terraform`` section.
    :raises ConfigError: ``cluster.placement_group`` with a reservation (never a new group with one).
    """
    cluster = config.cluster
    group = gpu_group(config, instance, settings)
    system = system_node_group(config)
    return {
        "cluster_name": cluster.name,
        "region": cluster.region,
        "kubernetes_version": cluster.kubernetes_version,
        "availability_zones": list(cluster.availability_zones),
        "vpc_cidr": settings.vpc_cidr,
        "endpoint_public_access": settings.endpoint_public_access,
        "public_access_cidrs": list(settings.public_access_cidrs),
        "system_instance_type": cluster.system_instance_type,
        "system_nodes": cluster.system_nodes,
        "gpu_instance_type": instance.name,
        "gpu_nodes": group.nodes,
        "gpu_min_nodes": group.min_nodes,
        "gpu_max_nodes": group.max_nodes,  # an EKS node group's maximum is 1 at least
        "gpu_ami_type": gpu_ami_type(instance, settings),
        "gpu_labels": dict(group.labels),
        "gpu_taints": [{**t.to_dict(), "effect": _EFFECTS[t.effect]} for t in group.taints],
        "system_labels": dict(system.labels),
        "gpu_network_interfaces": [
            {"network_card_index": i.card, "device_index": i.device_index, "interface_type": i.interface_type}
            for i in group.interfaces
        ],
        "capacity_type": group.capacity_type,
        "capacity_reservation_id": group.reservation_id,
        "placement_group": group.placement.kind == "new",
        "gpu_volume": {
            "device_name": group.volume.device,
            "size_gib": group.volume.size_gib,
            "iops": group.volume.iops,
            "throughput": group.volume.throughput_mib_s,
        },
        "gpu_user_data": gpu_user_data(group),
        "tags": dict(settings.tags),
    }


def _fail(variable: str, problem: str, fix: str) -> ConfigError:
    return ConfigError(INPUT_SETTINGS.get(variable, f"terraform variable {variable}"), problem, fix)


def check_inputs(inputs: Mapping[str, Any]) -> None:
    """Refuse the values the configuration's variable validations would refuse, before Terraform runs.

    :param inputs: what :func:`terraform_inputs` returned (or a plan's copy of it).
    :raises ConfigError: one line naming the fsdp-sdk setting and the fix.
    """
    missing = sorted(set(INPUT_SETTINGS) - set(inputs))
    if missing:
        raise ConfigError("plan", f"has no value for the variable {missing[0]}", "make the plan again with this SDK")
    zones = list(inputs["availability_zones"])
    if len(zones) < 2:
        raise _fail(
            "availability_zones",
            f"names {len(zones)} zone(s); EKS needs subnets in 2 zones at least",
            "set cluster.availability_zones to 2-6 zones of the region (the GPU nodes go to the first), or leave it "
            "empty and let 'fsdp-sdk up' choose them",
        )
    if len(zones) > 6:
        raise _fail("availability_zones", f"names {len(zones)} zones", "name at most 6 zones")
    if len(set(zones)) != len(zones):
        raise _fail("availability_zones", "names a zone twice", "name each zone once")
    if len(inputs["gpu_network_interfaces"]) > 64:
        raise _fail(
            "gpu_network_interfaces",
            f"{len(inputs['gpu_network_interfaces'])} EFA interfaces per node",
            "use at most 64",
        )
    for interface in inputs["gpu_network_interfaces"]:
        card_zero = interface["network_card_index"] == 0
        primary = interface["device_index"] == 0 and interface["interface_type"] == "efa"
        if interface["interface_type"] not in ("efa", "efa-only") or (card_zero and not primary):
            raise _fail(
                "gpu_network_interfaces",
                f"{interface} is not an EFA interface the launch template takes",
                "card 0 holding the primary efa interface at device 0, efa or efa-only on the others",
            )
    for taint in inputs["gpu_taints"]:
        if taint["effect"] not in _EFFECTS.values():
            raise _fail("gpu_taints", f"effect {taint['effect']!r} is not an EKS taint effect", "use NO_SCHEDULE")
    if inputs["gpu_ami_type"] not in AMI_TYPES:
        raise _fail(
            "gpu_ami_type",
            f"{inputs['gpu_ami_type']!r} is not an accelerated EKS AMI type",
            f"use one of {', '.join(AMI_TYPES)}",
        )
    size = inputs["gpu_volume"]["size_gib"]
    if not MIN_VOLUME_GIB <= size <= 16384:
        raise _fail(
            "gpu_volume",
            f"{size} GiB is outside {MIN_VOLUME_GIB}..16384",
            f"set it to {MIN_VOLUME_GIB} or more (the gp3 volume is provisioned at up to 16,000 IOPS)",
        )
    if inputs["placement_group"] and inputs["capacity_reservation_id"] is not None:
        raise _fail(
            "placement_group",
            "is on with a capacity reservation, whose instances live in the placement group it was created in",
            "turn cluster.placement_group off",
        )
    if not 1 <= inputs["system_nodes"] <= 100:
        raise _fail("system_nodes", f"{inputs['system_nodes']} is outside 1..100", "use 1 to 100 system nodes")
    if not inputs["gpu_min_nodes"] <= inputs["gpu_nodes"] <= inputs["gpu_max_nodes"]:
        raise _fail(
            "gpu_nodes",
            f"{inputs['gpu_nodes']} is outside {inputs['gpu_min_nodes']}..{inputs['gpu_max_nodes']}",
            "make cluster.min_nodes <= cluster.nodes <= cluster.max_nodes",
        )
    reserved = inputs["capacity_type"] in ("capacity-reservation", "capacity-block")
    if reserved != (inputs["capacity_reservation_id"] is not None):
        raise _fail(
            "capacity_reservation_id",
            f"does not match cluster.capacity_type {inputs['capacity_type']}",
            "set a cr-... id exactly when capacity_type is capacity-reservation or capacity-block",
        )
    for key, value in dict(inputs["tags"]).items():
        if not 1 <= len(key) <= 128 or len(str(value)) > 256 or key.lower().startswith("aws:"):
            raise _fail(
                "tags",
                f"tag {key!r} is not allowed",
                "use keys of 1-128 characters not starting with aws:, values of at most 256",
            )
    network = ipaddress.IPv4Network(inputs["vpc_cidr"])
    if network.prefixlen > 20:
        raise _fail("vpc_cidr", f"{inputs['vpc_cidr']} is smaller than /20", "use a /20 or larger range")
