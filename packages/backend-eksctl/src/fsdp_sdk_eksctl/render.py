"""The configuration as an eksctl ``ClusterConfig`` (``eksctl.io/v1alpha5``): pure, no network, no file.

One EKS cluster with two managed node groups::

    apiVersion: eksctl.io/v1alpha5
    kind: ClusterConfig
    metadata: {name: demo, region: us-west-2, version: "1.31", tags: {...}}
    availabilityZones: [us-west-2b, us-west-2a, us-west-2c]
    vpc: {cidr: 192.168.0.0/16, nat: {gateway: Single}}
    iam: {withOIDC: true}
    addons: [{name: vpc-cni, version: latest}, {name: coredns, ...}, {name: kube-proxy, ...},
             {name: eks-pod-identity-agent, ...}]
    managedNodeGroups:
      - name: system                       # etcd, the Training Operator, monitoring
        instanceType: m5.xlarge
        desiredCapacity: 2
      - name: gpu
        instanceType: p4de.24xlarge
        availabilityZones: [us-west-2b]    # one zone: EFA and reservations are zonal
        efaEnabled: true                   # every EFA interface the type has, an EFA security group
        capacityReservation: {capacityReservationTarget: {capacityReservationID: cr-...}}
        instanceMarketOptions: {marketType: capacity-block}   # Capacity Blocks only

What eksctl does with it, and what this module leaves to it (eksctl 0.205 or newer):

* it picks the EKS-accelerated AMI of ``amiFamily`` for GPU instance types (AL2023 NVIDIA, Bottlerocket
  NVIDIA), which ships the NVIDIA driver and the EFA software; for a type it does not know, pin
  ``eksctl.gpu_ami``;
* ``efaEnabled`` attaches every EFA interface of the type, adds the EFA security group, installs the
  EFA device plugin (its DaemonSet lists the instance types it runs on: see
  :mod:`fsdp_sdk_eksctl.device_plugins` for the others), and, for a node group without
  ``placement`` or ``capacityReservation``, puts it in a cluster placement group of its own;
* ``capacityReservation`` targets an On-Demand Capacity Reservation; with ``instanceMarketOptions``
  ``capacity-block`` the node group's capacity type is ``CAPACITY_BLOCK``;
* the NVIDIA device plugin it would install is turned off (``--install-nvidia-plugin=false``): the
  backend applies its own, pinned, on the GPU node group only.
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from fsdp_sdk.config import Config
    from fsdp_sdk.instance_types import InstanceType
    from fsdp_sdk_eksctl.settings import EksctlSettings

__all__ = [
    "API_VERSION",
    "CLUSTER_TAG",
    "DEFAULT_ADDONS",
    "efa_enabled",
    "render_cluster_config",
    "uses_own_placement_group",
]

API_VERSION = "eksctl.io/v1alpha5"
#: EKS add-ons every cluster gets: networking, DNS, and the EKS Pod Identity agent (it hands the training pods the
#: credentials of the checkpoint bucket's role; its DaemonSet tolerates every taint, the GPU nodes' included:
#: aws/eks-charts stable/eks-pod-identity-agent values.yaml, checked 2026-12-02); ``eksctl.addon_versions`` pins them
#: or adds more.
DEFAULT_ADDONS = ("vpc-cni", "coredns", "kube-proxy", "eks-pod-identity-agent")
#: The tag that marks what fsdp-sdk created, with the cluster's name as its value.
CLUSTER_TAG = "fsdp-sdk.io/cluster"


def uses_own_placement_group(config: Config, instance: InstanceType) -> bool:
    """Whether eksctl adds a cluster placement group of its own to the GPU node group.

    It does for EFA node groups without a named placement group or a capacity reservation, whatever
    ``cluster.placement_group`` says: eksctl cannot be told otherwise.
    """
    settings = config.section("eksctl")
    return (
        efa_enabled(config, instance)
        and not config.cluster.capacity_reservation_id
        and not (config.cluster.placement_group and settings.placement_group_name)
    )


def efa_enabled(config: Config, instance: InstanceType) -> bool:
    """Whether the GPU nodes get EFA interfaces: ``cluster.efa`` and an instance type that has them."""
    return config.cluster.efa and instance.efa_interfaces > 0


def render_cluster_config(config: Config, instance: InstanceType) -> dict[str, Any]:
    """The eksctl ``ClusterConfig`` that creates the cluster ``config`` describes.

    :param config: the resolved configuration (its ``eksctl`` section included).
    :param instance: the GPU instance type (``config.instance(plugins)``): EFA and the accelerator come from it, so a
        plugin's type is treated like a built-in one.
    """
    cluster = config.cluster
    settings: EksctlSettings = config.section("eksctl")
    document: dict[str, Any] = {
        "apiVersion": API_VERSION,
        "kind": "ClusterConfig",
        "metadata": {
            "name": cluster.name,
            "region": cluster.region,
            "version": cluster.kubernetes_version,
            "tags": {CLUSTER_TAG: cluster.name, **settings.tags},
        },
    }
    if cluster.availability_zones:
        document["availabilityZones"] = list(cluster.availability_zones)
    document["vpc"] = {"cidr": settings.vpc_cidr, "nat": {"gateway": "Single"}}
    document["iam"] = {"withOIDC": True}
    versions = dict(settings.addon_versions)
    names = [*DEFAULT_ADDONS, *sorted(n for n in versions if n not in DEFAULT_ADDONS)]
    document["addons"] = [{"name": name, "version": versions.get(name, "latest")} for name in names]
    document["managedNodeGroups"] = [_system_nodegroup(config, settings), _gpu_nodegroup(config, instance, settings)]
    return document


def _system_nodegroup(config: Config, settings: EksctlSettings) -> dict[str, Any]:
    cluster = config.cluster
    group: dict[str, Any] = {
        "name": settings.system_nodegroup,
        "instanceType": cluster.system_instance_type,
        "amiFamily": settings.ami_family,
        "desiredCapacity": cluster.system_nodes,
        "minSize": cluster.system_nodes,
        "maxSize": cluster.system_nodes,
        "privateNetworking": settings.private_networking,
        "labels": {"fsdp-sdk.io/node-role": "system"},
    }
    if cluster.availability_zones:
        group["availabilityZones"] = list(cluster.availability_zones)
    return group


def _gpu_nodegroup(config: Config, instance: InstanceType, settings: EksctlSettings) -> dict[str, Any]:
    cluster = config.cluster
    group: dict[str, Any] = {
        "name": settings.gpu_nodegroup,
        "instanceType": instance.name,
        "amiFamily": settings.ami_family,
        "desiredCapacity": cluster.nodes,
        "minSize": cluster.min_nodes,
        "maxSize": cluster.max_nodes,
        "volumeSize": cluster.node_volume_size_gib,
        "volumeType": "gp3",
        "privateNetworking": settings.private_networking,
        "labels": {"fsdp-sdk.io/node-role": "gpu", "fsdp-sdk.io/accelerator": _label_value(instance.gpu_model)},
    }
    if settings.gpu_ami:
        group["ami"] = settings.gpu_ami
    if cluster.availability_zones:
        # EFA node groups must sit in one zone, and reservations are zonal: the first zone is the GPU zone.
        group["availabilityZones"] = [cluster.availability_zones[0]]
    if efa_enabled(config, instance):
        group["efaEnabled"] = True
    if cluster.placement_group and settings.placement_group_name:
        group["placement"] = {"groupName": settings.placement_group_name}
    if cluster.capacity_type in ("capacity-reservation", "capacity-block"):
        group["capacityReservation"] = {
            "capacityReservationTarget": {"capacityReservationID": cluster.capacity_reservation_id}
        }
    if cluster.capacity_type == "capacity-block":
        group["instanceMarketOptions"] = {"marketType": "capacity-block"}
    if cluster.capacity_type == "spot":
        group["spot"] = True
    if settings.node_repair:
        group["nodeRepairConfig"] = {"enabled": True}
    return group


def _label_value(text: str) -> str:
    """``text`` as a Kubernetes label value (a plugin's accelerator name may hold spaces)."""
    return re.sub(r"[^a-z0-9._-]+", "-", text.lower()).strip("-._")[:63] or "unknown"
