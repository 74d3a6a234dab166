"""The eksctl backend's plan (pure): the rendered ClusterConfig, the steps in order, the hourly cost, and the
facts ``apply`` acts on (paths, node groups and their sizes, the eksctl commands).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from fsdp_sdk.aws.eks import hourly_cost
from fsdp_sdk.backends.base import Plan
from fsdp_sdk_eksctl import commands
from fsdp_sdk_eksctl.device_plugins import device_plugin_objects
from fsdp_sdk_eksctl.render import gpu_group, render_cluster_config
from fsdp_sdk_eksctl.state import StateDir

if TYPE_CHECKING:
    from fsdp_sdk.config import Config
    from fsdp_sdk.instance_types import InstanceType

__all__ = ["make_plan"]

_CAPACITY = {
    "on-demand": "On-Demand",
    "spot": "Spot",
    "capacity-reservation": "capacity reservation {id}",
    "capacity-block": "Capacity Block {id}",
}


def make_plan(backend: str, config: Config, instance: InstanceType) -> Plan:
    """The plan ``apply`` acts on (see the module docstring).

    :param backend: the backend's name.
    :param config: the resolved configuration.
    :param instance: the GPU instance type.
    """
    cluster = config.cluster
    settings = config.section("eksctl")
    paths = StateDir.of(cluster.state_dir, cluster.name)
    document = render_cluster_config(config, instance)
    objects = device_plugin_objects(config, instance)
    cost = hourly_cost(config, instance)
    timeout = settings.timeout_minutes
    zones = ", ".join(cluster.availability_zones) or "zones eksctl picks"
    gpu_zone = cluster.availability_zones[0] if cluster.availability_zones else "one of them"
    capacity = _CAPACITY[cluster.capacity_type].format(id=cluster.capacity_reservation_id)
    addons = ", ".join(f"{a['name']} {a['version']}" for a in document["addons"])
    group = gpu_group(config, instance)
    efa = f"EFA ({len(group.interfaces)} interfaces each)" if group.efa else "no EFA"
    network = "private subnets" if settings.private_networking else "public subnets"
    ami = settings.gpu_ami or f"{settings.ami_family} accelerated AMI"
    disk = f"{group.volume.size_gib} GiB gp3 on {group.volume.device}"
    local = (
        f"local NVMe ({group.local_storage.nvme_gib} GB) as RAID0 at {group.local_storage.mount_path}"
        if group.local_storage
        else "no local NVMe set up"
    )
    taints = ", ".join(f"{t.key}={t.value}:{t.effect}" for t in group.taints)

    steps = [
        f"write the eksctl ClusterConfig to {paths.config_file}",
        f"eksctl create cluster: EKS {cluster.kubernetes_version} control plane in {cluster.region} ({zones}), "
        f"VPC {settings.vpc_cidr}, IAM OIDC provider, add-ons {addons}",
        f"node group {settings.system_nodegroup!r}: {cluster.system_nodes} x {cluster.system_instance_type}, {network}",
        f"node group {settings.gpu_nodegroup!r}: {cluster.nodes} x {instance.name} (min {cluster.min_nodes}, "
        f"max {cluster.max_nodes}) in {gpu_zone}, {capacity}, {efa}, {ami}, {disk}, {local}, "
        f"tainted {taints}, {network}",
    ]
    if group.placement.kind == "existing":
        steps.append(f"GPU nodes in the cluster placement group {group.placement.name}")
    elif group.placement.kind == "new":
        steps.append(
            "GPU nodes in a cluster placement group eksctl adds to the node group's stack (EFA, no reservation)"
        )
    else:
        steps.append(
            "GPU nodes in no placement group" + (" (a reservation places them)" if group.reservation_id else "")
        )
    steps += [
        f"apply the {o['metadata']['name']} DaemonSet on the GPU nodes ({o['spec']['template']['spec']['containers'][0]['image']})"
        for o in objects
    ]
    steps.append(
        "on an existing cluster: create the missing node groups and scale the others to these sizes, nothing else"
    )

    nodegroups = {
        settings.system_nodegroup: {
            "instance_type": cluster.system_instance_type,
            "nodes": cluster.system_nodes,
            "min": cluster.system_nodes,
            "max": cluster.system_nodes,
        },
        settings.gpu_nodegroup: {
            "instance_type": instance.name,
            "nodes": cluster.nodes,
            "min": cluster.min_nodes,
            "max": cluster.max_nodes,
        },
    }
    details: dict[str, Any] = {
        "region": cluster.region,
        "state_dir": str(paths.root),
        "config_file": str(paths.config_file),
        "kubeconfig": str(paths.kubeconfig),
        "nodegroups": nodegroups,
        "gpu_nodegroup": settings.gpu_nodegroup,
        "timeout_minutes": timeout,
        "create_cluster": commands.create_cluster(str(paths.config_file), timeout_minutes=timeout),
        "cost": cost.to_dict(),
        "gpu_group": {
            "zone": group.zone,
            "placement": group.placement.kind,
            "interfaces": [[i.card, i.device_index, i.interface_type] for i in group.interfaces],
            "volume": {"device": group.volume.device, "size_gib": group.volume.size_gib},
            "local_storage": group.local_storage.mount_path if group.local_storage else None,
            "labels": dict(group.labels),
            "taints": [t.to_dict() for t in group.taints],
        },
    }
    return Plan(
        backend=backend,
        cluster=cluster.name,
        steps=steps,
        resources=[document],
        hourly_cost_usd=cost.total,
        details=details,
        kubernetes=objects,
    )
