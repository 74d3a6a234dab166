"""Device plugin DaemonSets the backend applies itself (pure): what eksctl does not install on the GPU nodes, and
the EFA plugin eksctl does install, adopted.

The DaemonSets, their images and versions come from the core's EKS layer (:mod:`fsdp_sdk.aws.eks`,
:mod:`fsdp_sdk.pins`); this module only decides which of them eksctl leaves to the backend:

* NVIDIA: eksctl's copy is turned off (``--install-nvidia-plugin=false``) and the pinned one runs on the
  GPU node group only. Bottlerocket's NVIDIA AMIs run the plugin themselves, and an accelerator that is
  not an NVIDIA GPU (``nvidia.com/gpu``) gets none.
* EFA: eksctl creates ``kube-system/aws-efa-k8s-device-plugin`` itself whenever a node group has
  ``efaEnabled``, with no flag to skip it (eksctl-io/eksctl@99984adb6164ece593c0728523b7f497ea61d60e:
  ``pkg/eks/tasks.go`` ``ClusterTasksForNodeGroups`` appends ``newEFADevicePluginTask`` for ``efaEnabled``, in
  ``create cluster`` and ``create nodegroup`` alike; ``pkg/addons/device_plugin.go`` ``applyDevicePlugin``
  creates it, or replaces it whole with a PUT when it exists; the manifest is
  ``pkg/addons/assets/efa-device-plugin.yaml``). Its ``spec.selector`` (``name: aws-efa-k8s-device-plugin``) is
  immutable, so a DaemonSet of that name with any other selector is refused by the API server; and it tolerates
  only ``CriticalAddonsOnly`` and ``aws.amazon.com/efa``, not the GPU taint (``nvidia.com/gpu=true:NoSchedule``),
  and its node affinity lists the instance types eksctl knew of when it was released. So the backend adopts
  eksctl's object rather than bringing a second one: the same name, selector, pod labels, container name, volume
  names and mount paths (server-side apply merges lists by those keys: another name would be a second volume on
  the same path), with the pinned image, the GPU taint tolerated and the affinity of the GPU node group, applied
  with forced ownership after every eksctl run (a ``create nodegroup`` puts eksctl's copy back).
  One EFA plugin per node, one version in both backends.
"""

from __future__ import annotations

import copy
from typing import TYPE_CHECKING, Any

from fsdp_sdk.aws.eks import device_plugin_objects as eks_device_plugins
from fsdp_sdk_eksctl.render import gpu_group

if TYPE_CHECKING:
    from fsdp_sdk.config import Config
    from fsdp_sdk.instance_types import InstanceType

__all__ = ["EKSCTL_EFA_PLUGIN", "EKSCTL_EFA_TOLERATIONS", "adopt_eksctl_efa_plugin", "device_plugin_objects"]

#: What eksctl's own EFA device plugin DaemonSet tolerates (not the GPU taint).
EKSCTL_EFA_TOLERATIONS = (
    {"key": "CriticalAddonsOnly", "operator": "Exists"},
    {"key": "aws.amazon.com/efa", "operator": "Exists", "effect": "NoSchedule"},
)

#: The identity of eksctl's EFA device plugin DaemonSet (``pkg/addons/assets/efa-device-plugin.yaml`` at
#: eksctl-io/eksctl@99984adb6164ece593c0728523b7f497ea61d60e): what an adopting apply must keep as it is.
EKSCTL_EFA_PLUGIN: dict[str, Any] = {
    "name": "aws-efa-k8s-device-plugin",
    "namespace": "kube-system",
    "selector": {"name": "aws-efa-k8s-device-plugin"},
    "container": "aws-efa-k8s-device-plugin",
    # host path -> (volume name, mount path) as eksctl writes them
    "volumes": {
        "/var/lib/kubelet/device-plugins": ("device-plugin", "/var/lib/kubelet/device-plugins"),
        "/dev/infiniband": ("infiniband-volume", "/dev/infiniband/"),
    },
}


def adopt_eksctl_efa_plugin(daemonset: dict[str, Any], instance_type: str) -> dict[str, Any]:
    """The core's EFA plugin DaemonSet rewritten to be eksctl's object (see the module docstring).

    :param daemonset: the core's ``aws-efa-k8s-device-plugin`` DaemonSet.
    :param instance_type: the GPU node group's instance type (its node affinity, in place of eksctl's list).
    """
    adopted = copy.deepcopy(daemonset)
    spec = adopted["spec"]
    spec["selector"] = {"matchLabels": dict(EKSCTL_EFA_PLUGIN["selector"])}
    template = spec["template"]
    template["metadata"]["labels"] = {**template["metadata"].get("labels", {}), **EKSCTL_EFA_PLUGIN["selector"]}
    pod = template["spec"]
    # eksctl's required node affinity lists instance types (nodeSelectorTerms is an atomic list: this one replaces
    # it); the node selector of the GPU group still places the pods
    pod["affinity"] = {
        "nodeAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": {
                "nodeSelectorTerms": [
                    {
                        "matchExpressions": [
                            {"key": "node.kubernetes.io/instance-type", "operator": "In", "values": [instance_type]},
                            {"key": "eks.amazonaws.com/compute-type", "operator": "NotIn", "values": ["auto"]},
                        ]
                    }
                ]
            }
        }
    }
    names: dict[str, tuple[str, str]] = {}
    for volume in pod["volumes"]:
        path = volume["hostPath"]["path"].rstrip("/")
        name, mount = EKSCTL_EFA_PLUGIN["volumes"][path]
        names[volume["name"]] = (name, mount)
        volume["name"] = name
        volume["hostPath"] = {"path": mount if path == "/dev/infiniband" else path}
    (container,) = pod["containers"]
    container["name"] = EKSCTL_EFA_PLUGIN["container"]
    for mount in container["volumeMounts"]:
        mount["name"], mount["mountPath"] = names[mount["name"]]
    return adopted


def device_plugin_objects(config: Config, instance: InstanceType) -> list[dict[str, Any]]:
    """The DaemonSets to apply once the cluster is up (possibly none); see the module docstring."""
    settings = config.section("eksctl")
    objects = eks_device_plugins(
        gpu_group(config, instance),
        config.cluster.region,
        nvidia=settings.install_nvidia_device_plugin,
        efa=True,
    )
    return [
        adopt_eksctl_efa_plugin(o, instance.name) if o["metadata"]["name"] == EKSCTL_EFA_PLUGIN["name"] else o
        for o in objects
    ]
