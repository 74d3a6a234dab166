"""Device plugin DaemonSets the backend applies itself (pure): what eksctl does not install on the GPU nodes.

* NVIDIA: eksctl's copy is turned off (``--install-nvidia-plugin=false``) and this one, pinned to
  :data:`NVIDIA_DEVICE_PLUGIN_VERSION`, runs on the GPU node group only. Bottlerocket's NVIDIA AMIs run
  the plugin themselves, and an accelerator that is not an NVIDIA GPU (``nvidia.com/gpu``) gets none.
* EFA: eksctl installs its EFA device plugin whenever a node group has ``efaEnabled``, but its DaemonSet
  runs only on the instance types listed in it (:data:`EKSCTL_EFA_PLUGIN_TYPES`, eksctl 0.205 to
  0.22x). For any other type with EFA (a plugin's new type, say), this module adds a second DaemonSet
  of the same plugin, limited to the GPU node group, so its pods get ``vpc.amazonaws.com/efa``.

Both select the GPU nodes by the label EKS puts on every node of a managed node group,
``eks.amazonaws.com/nodegroup``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from fsdp_sdk_eksctl.render import efa_enabled

if TYPE_CHECKING:
    from fsdp_sdk.config import Config
    from fsdp_sdk.instance_types import InstanceType

__all__ = [
    "EFA_DEVICE_PLUGIN_VERSION",
    "EKSCTL_EFA_PLUGIN_TYPES",
    "NVIDIA_DEVICE_PLUGIN_VERSION",
    "device_plugin_objects",
    "eks_image_registry",
]

#: The NVIDIA device plugin release applied on the GPU nodes (the one eksctl itself ships).
NVIDIA_DEVICE_PLUGIN_VERSION = "v0.20.0"
#: The AWS EFA device plugin release (the one eksctl installs).
EFA_DEVICE_PLUGIN_VERSION = "v0.5.4"

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

# The AWS account serving EKS images (amazon-eks ECR) where it is not the standard one.
_EKS_IMAGE_ACCOUNTS = {
    "af-south-1": "877085696533",
    "ap-east-1": "800184023465",
    "ap-east-2": "533267051163",
    "ap-south-2": "900889452093",
    "ap-southeast-3": "296578399912",
    "ap-southeast-4": "491585149902",
    "ap-southeast-5": "151610086707",
    "ap-southeast-6": "333609536671",
    "ap-southeast-7": "121268973566",
    "ca-west-1": "761377655185",
    "cn-north-1": "918309763551",
    "cn-northwest-1": "961992271922",
    "eu-central-2": "900612956339",
    "eu-south-1": "590381155156",
    "eu-south-2": "455263428931",
    "il-central-1": "066635153087",
    "me-central-1": "759879836304",
    "me-south-1": "558608220178",
    "mx-central-1": "730335286997",
    "us-gov-east-1": "151742754352",
    "us-gov-west-1": "013241004608",
}
_STANDARD_EKS_IMAGE_ACCOUNT = "602401143452"
_MANAGED_BY = {"app.kubernetes.io/managed-by": "fsdp-sdk"}
_DEVICE_PLUGINS_DIR = "/var/lib/kubelet/device-plugins"


def eks_image_registry(region: str) -> str:
    """The ECR registry of Amazon EKS images in ``region`` (``602401143452.dkr.ecr.us-west-2.amazonaws.com``)."""
    suffix = "amazonaws.com.cn" if region.startswith("cn-") else "amazonaws.com"
    return f"{_EKS_IMAGE_ACCOUNTS.get(region, _STANDARD_EKS_IMAGE_ACCOUNT)}.dkr.ecr.{region}.{suffix}"


def device_plugin_objects(config: Config, instance: InstanceType) -> list[dict[str, Any]]:
    """The DaemonSets to apply once the cluster is up (possibly none); see the module docstring."""
    settings = config.section("eksctl")
    objects = []
    if (
        settings.install_nvidia_device_plugin
        and instance.accelerator_resource == "nvidia.com/gpu"
        and settings.ami_family != "Bottlerocket"
    ):
        objects.append(_nvidia(settings.gpu_nodegroup))
    if efa_enabled(config, instance) and instance.name not in EKSCTL_EFA_PLUGIN_TYPES:
        objects.append(_efa(settings.gpu_nodegroup, config.cluster.region, instance))
    return objects


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


def _nvidia(nodegroup: str) -> dict[str, Any]:
    return _daemonset(
        "nvidia-device-plugin",
        {
            "nodeSelector": {"eks.amazonaws.com/nodegroup": nodegroup},
            "tolerations": [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}],
            "priorityClassName": "system-node-critical",
            "containers": [
                {
                    "name": "nvidia-device-plugin",
                    "image": f"nvcr.io/nvidia/k8s-device-plugin:{NVIDIA_DEVICE_PLUGIN_VERSION}",
                    # a node whose driver is not ready yet waits instead of crash-looping
                    "env": [{"name": "FAIL_ON_INIT_ERROR", "value": "false"}],
                    "securityContext": {"allowPrivilegeEscalation": False, "capabilities": {"drop": ["ALL"]}},
                    "volumeMounts": [{"name": "device-plugins", "mountPath": _DEVICE_PLUGINS_DIR}],
                }
            ],
            "volumes": [{"name": "device-plugins", "hostPath": {"path": _DEVICE_PLUGINS_DIR, "type": "Directory"}}],
        },
    )


def _efa(nodegroup: str, region: str, instance: InstanceType) -> dict[str, Any]:
    return _daemonset(
        "efa-device-plugin",
        {
            "nodeSelector": {
                "eks.amazonaws.com/nodegroup": nodegroup,
                "node.kubernetes.io/instance-type": instance.name,
            },
            "tolerations": [
                {"key": "CriticalAddonsOnly", "operator": "Exists"},
                {"key": "aws.amazon.com/efa", "operator": "Exists", "effect": "NoSchedule"},
                {"key": instance.accelerator_resource, "operator": "Exists", "effect": "NoSchedule"},
            ],
            "priorityClassName": "system-node-critical",
            "hostNetwork": True,
            "containers": [
                {
                    "name": "efa-device-plugin",
                    "image": f"{eks_image_registry(region)}/eks/aws-efa-k8s-device-plugin:{EFA_DEVICE_PLUGIN_VERSION}",
                    "securityContext": {"allowPrivilegeEscalation": False, "capabilities": {"drop": ["ALL"]}},
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
