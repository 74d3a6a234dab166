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

from typing import TYPE_CHECKING, Any

from fsdp_sdk.aws.eks import GpuNodeGroup, gpu_node_group, system_node_group

if TYPE_CHECKING:
    from fsdp_sdk.config import Config
    from fsdp_sdk.instance_types import InstanceType
    from fsdp_sdk_eksctl.settings import EksctlSettings

__all__ = [
    "API_VERSION",
    "CLUSTER_TAG",
    "DEFAULT_ADDONS",
    "efa_enabled",
    "gpu_group",
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
    """Whether the GPU node group gets a cluster placement group of its own (core's rule: EFA, no reservation).

    eksctl adds it to the node group's stack itself for EFA node groups without ``placement`` or
    ``capacityReservation``: the rendered group says so by carrying neither.
    """
    return gpu_group(config, instance).placement.kind == "new"


def efa_enabled(config: Config, instance: InstanceType) -> bool:
    """Whether the GPU nodes get EFA interfaces: ``cluster.efa`` and an instance type that has them."""
    return config.cluster.efa and instance.efa_interfaces > 0


def render_cluster_config(config: Config, instance: InstanceType) -> dict[str, Any]:
    """The eksctl ``ClusterConfig`` that creates the cluster ``config`` describes.

    :param config: the resolved configuration (its ``eksctl`` section included).
    :param instance: the GPU instance type (``resolved.instance``): EFA and the accelerator come from it, so a
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
    system = system_node_group(config, settings.system_nodegroup)
    group: dict[str, Any] = {
        "name": system.name,
        "instanceType": system.instance_type,
        "amiFamily": settings.ami_family,
        "desiredCapacity": system.nodes,
        "minSize": system.nodes,
        "maxSize": system.nodes,
        "privateNetworking": settings.private_networking,
        "labels": dict(system.labels),
    }
    if config.cluster.availability_zones:
        group["availabilityZones"] = list(config.cluster.availability_zones)
    return group


def gpu_group(config: Config, instance: InstanceType) -> GpuNodeGroup:
    """The core's GPU node group record for this backend's settings (AMI family, name, placement group)."""
    settings: EksctlSettings = config.section("eksctl")
    name = settings.placement_group_name if config.cluster.placement_group else None
    return gpu_node_group(
        config, instance, ami_family=settings.ami_family, name=settings.gpu_nodegroup, placement_group_name=name
    )


def _gpu_nodegroup(config: Config, instance: InstanceType, settings: EksctlSettings) -> dict[str, Any]:
    g = gpu_group(config, instance)
    group: dict[str, Any] = {
        "name": g.name,
        "instanceType": instance.name,
        "amiFamily": settings.ami_family,
        "desiredCapacity": g.nodes,
        "minSize": g.min_nodes,
        "maxSize": g.max_nodes,
        "volumeSize": g.volume.size_gib,
        "volumeType": g.volume.volume_type,
        "volumeIOPS": g.volume.iops,
        "volumeThroughput": g.volume.throughput_mib_s,
        "privateNetworking": settings.private_networking,
        "labels": dict(g.labels),
        "taints": [t.to_dict() for t in g.taints],
    }
    if g.bottlerocket:
        # Bottlerocket's /dev/xvda holds the OS only: images and pods live on the data volume
        group["volumeName"] = g.volume.device
    if settings.gpu_ami:
        group["ami"] = settings.gpu_ami
    if g.zone:
        # EFA node groups must sit in one zone, and reservations are zonal: the first zone is the GPU zone.
        group["availabilityZones"] = [g.zone]
    if g.efa:
        group["efaEnabled"] = True
    if g.placement.kind == "existing":
        group["placement"] = {"groupName": g.placement.name}
    if g.reservation_id:
        group["capacityReservation"] = {"capacityReservationTarget": {"capacityReservationID": g.reservation_id}}
    if g.market_type:
        group["instanceMarketOptions"] = {"marketType": g.market_type}
    if g.capacity_type == "spot":
        group["spot"] = True
    if g.local_storage is not None:
        if g.bottlerocket:
            group["bottlerocket"] = {"settings": g.local_storage.bottlerocket_settings()}
        elif settings.ami_family == "AmazonLinux2023":
            # eksctl refuses overrideBootstrapCommand without a custom AMI: the AMI's script runs before kubelet
            group["preBootstrapCommands"] = [g.local_storage.setup_command()]
    if settings.node_repair:
        group["nodeRepairConfig"] = {"enabled": True}
    return group
