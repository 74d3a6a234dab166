"""The device plugins GPU jobs need, as Kubernetes objects core applies once the cluster is up (pure).

The EKS-optimized accelerated AL2023 AMIs carry the NVIDIA driver and the EFA host software but not
the Kubernetes device plugins that advertise ``nvidia.com/gpu`` and ``vpc.amazonaws.com/efa`` to the
scheduler, and neither plugin is an EKS add-on. So the backend puts the core's DaemonSets
(:func:`fsdp_sdk.aws.eks.device_plugin_objects`: images and versions from :mod:`fsdp_sdk.pins`, the EFA
plugin from the region's EKS registry) into the plan's ``kubernetes`` objects: ``up --dry-run`` shows
them, core server-side applies them with etcd, and ``down`` needs nothing more. Bottlerocket's NVIDIA
images already run the NVIDIA plugin, so it is left out there.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from fsdp_sdk.aws.eks import GpuNodeGroup, device_plugin_objects

if TYPE_CHECKING:
    from fsdp_sdk.config import Config
    from fsdp_sdk_terraform.settings import TerraformSettings

__all__ = ["NAMESPACE", "render_device_plugins"]

#: Where the device plugins run.
NAMESPACE = "kube-system"


def render_device_plugins(config: Config, group: GpuNodeGroup, settings: TerraformSettings) -> list[dict[str, Any]]:
    """The DaemonSets of the NVIDIA and EFA device plugins the GPU nodes need (none when turned off).

    :param config: the resolved configuration (``cluster.region``).
    :param group: the GPU node group (core's record: AMI family, EFA, labels, taints).
    :param settings: the ``terraform`` section (``device_plugins``, image overrides).
    """
    if not settings.device_plugins:
        return []
    return device_plugin_objects(
        group,
        config.cluster.region,
        nvidia_image=settings.nvidia_device_plugin_image,
        efa_image=settings.efa_device_plugin_image,
    )
