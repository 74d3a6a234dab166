"""Device plugin DaemonSets the backend applies itself (pure): what eksctl does not install on the GPU nodes.

The DaemonSets, their images and versions come from the core's EKS layer (:mod:`fsdp_sdk.aws.eks`,
:mod:`fsdp_sdk.pins`); this module only decides which of them eksctl leaves to the backend:

* NVIDIA: eksctl's copy is turned off (``--install-nvidia-plugin=false``) and the pinned one runs on the
  GPU node group only. Bottlerocket's NVIDIA AMIs run the plugin themselves, and an accelerator that is
  not an NVIDIA GPU (``nvidia.com/gpu``) gets none.
* EFA: eksctl installs an EFA device plugin of its own whenever a node group has ``efaEnabled``, but
  its DaemonSet tolerates only ``CriticalAddonsOnly`` and ``aws.amazon.com/efa`` (eksctl's
  ``pkg/addons/assets/efa-device-plugin.yaml``, checked 2026-12-02): on GPU nodes tainted ``nvidia.com/gpu=true:NoSchedule`` it starts no
  pod. The core's EFA plugin, pinned and tolerating the taint, runs there instead, for every EFA type:
  one EFA plugin per node, one version in both backends.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from fsdp_sdk.aws.eks import device_plugin_objects as eks_device_plugins
from fsdp_sdk_eksctl.render import gpu_group

if TYPE_CHECKING:
    from fsdp_sdk.config import Config
    from fsdp_sdk.instance_types import InstanceType

__all__ = ["EKSCTL_EFA_TOLERATIONS", "device_plugin_objects"]

#: What eksctl's own EFA device plugin DaemonSet tolerates (not the GPU taint).
EKSCTL_EFA_TOLERATIONS = (
    {"key": "CriticalAddonsOnly", "operator": "Exists"},
    {"key": "aws.amazon.com/efa", "operator": "Exists", "effect": "NoSchedule"},
)


def device_plugin_objects(config: Config, instance: InstanceType) -> list[dict[str, Any]]:
    """The DaemonSets to apply once the cluster is up (possibly none); see the module docstring."""
    settings = config.section("eksctl")
    return eks_device_plugins(
        gpu_group(config, instance),
        config.cluster.region,
        nvidia=settings.install_nvidia_device_plugin,
        efa=True,
    )
