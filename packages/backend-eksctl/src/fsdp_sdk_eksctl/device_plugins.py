"""Device plugin DaemonSets the backend applies itself (pure): what eksctl does not install on the GPU nodes.

The DaemonSets, their images and versions come from the core's EKS layer (:mod:`fsdp_sdk.aws.eks`,
:mod:`fsdp_sdk.pins`); this module only decides which of them eksctl leaves to the backend:

* NVIDIA: eksctl's copy is turned off (``--install-nvidia-plugin=false``) and the pinned one runs on the
  GPU node group only. Bottlerocket's NVIDIA AMIs run the plugin themselves, and an accelerator that is
  not an NVIDIA GPU (``nvidia.com/gpu``) gets none.
* EFA: eksctl installs its EFA device plugin whenever a node group has ``efaEnabled``, but its DaemonSet
  runs only on the instance types listed in it (:data:`EKSCTL_EFA_PLUGIN_TYPES`, eksctl 0.205 to
  0.22x). For any other type with EFA (a plugin's new type, say), the core's EFA plugin DaemonSet is
  added, so its pods get ``vpc.amazonaws.com/efa`` (two plugins of one resource on a node would fight).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from fsdp_sdk.aws.eks import device_plugin_objects as eks_device_plugins
from fsdp_sdk_eksctl.render import gpu_group

if TYPE_CHECKING:
    from fsdp_sdk.config import Config
    from fsdp_sdk.instance_types import InstanceType

__all__ = ["EKSCTL_EFA_PLUGIN_TYPES", "device_plugin_objects"]

#: Accelerated instance types eksctl's EFA device plugin DaemonSet runs on (its node affinity).
EKSCTL_EFA_PLUGIN_TYPES = frozenset(
    {
        *(f"g4dn.{s}" for s in ("8xlarge", "12xlarge", "16xlarge", "metal")),
        *(f"{f}.{s}" for f in ("g5", "g6", "g6e") for s in ("8xlarge", "12xlarge", "16xlarge", "24xlarge", "48xlarge")),
        "gr6.8xlarge",
        "dl1.24xlarge",
        "dl2q.24xlarge",
        "inf1.24xlarge",
        "p3dn.24xlarge",
        "p4d.24xlarge",
        "p4de.24xlarge",
        "p5.48xlarge",
        "p5e.48xlarge",
        "p5en.48xlarge",
        "trn1.32xlarge",
        "trn1n.32xlarge",
        "trn2.48xlarge",
        "vt1.24xlarge",
    }
)


def device_plugin_objects(config: Config, instance: InstanceType) -> list[dict[str, Any]]:
    """The DaemonSets to apply once the cluster is up (possibly none); see the module docstring."""
    settings = config.section("eksctl")
    return eks_device_plugins(
        gpu_group(config, instance),
        config.cluster.region,
        nvidia=settings.install_nvidia_device_plugin,
        efa=instance.name not in EKSCTL_EFA_PLUGIN_TYPES,
    )
