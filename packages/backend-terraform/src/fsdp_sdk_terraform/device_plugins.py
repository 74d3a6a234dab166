"""The device plugins GPU jobs need, as Kubernetes objects core applies once the cluster is up (pure).

The EKS-optimized accelerated AL2023 AMIs carry the NVIDIA driver and the EFA host software but not
the Kubernetes device plugins that advertise ``nvidia.com/gpu`` and ``vpc.amazonaws.com/efa`` to the
scheduler, and neither plugin is an EKS add-on (AWS ships the EFA one as a Helm chart, NVIDIA a
static manifest). So the backend renders both DaemonSets into the plan's ``kubernetes`` objects:
``up --dry-run`` shows them, core server-side applies them with etcd (the API server validates them),
and ``down`` needs nothing more (they go with the cluster). Bottlerocket's NVIDIA images already run
the NVIDIA plugin, so it is left out there.

Both run only on the GPU nodes (``node.kubernetes.io/instance-type``) and tolerate their taint.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from fsdp_sdk.config import Config
    from fsdp_sdk.instance_types import InstanceType
    from fsdp_sdk_terraform.settings import TerraformSettings

__all__ = ["EFA_DEVICE_PLUGIN_TAG", "NAMESPACE", "efa_device_plugin_image", "render_device_plugins"]

#: Where the device plugins run.
NAMESPACE = "kube-system"
#: The EFA device plugin release (aws/eks-charts, aws-efa-k8s-device-plugin).
EFA_DEVICE_PLUGIN_TAG = "v0.5.5"
#: The account of the EKS image registry of the regions that do not use the default one.
_EKS_REGISTRY_ACCOUNTS = {
    "af-south-1": "877085696533",
    "ap-east-1": "800184023465",
    "ap-south-2": "900889452093",
    "ap-southeast-3": "296578399912",
    "ap-southeast-4": "491585149902",
    "ap-southeast-5": "151610086707",
    "ap-southeast-7": "121268973566",
    "cn-north-1": "918309763551",
    "cn-northwest-1": "961992271922",
}
_DEFAULT_EKS_REGISTRY_ACCOUNT = "602401143452"
_LABELS = {"app.kubernetes.io/managed-by": "fsdp-sdk", "app.kubernetes.io/part-of": "fsdp-sdk-terraform"}


def efa_device_plugin_image(region: str, settings: TerraformSettings) -> str:
    """The EFA device plugin image: the setting, else the EKS registry of ``region``."""
    if settings.efa_device_plugin_image:
        return settings.efa_device_plugin_image
    account = _EKS_REGISTRY_ACCOUNTS.get(region, _DEFAULT_EKS_REGISTRY_ACCOUNT)
    domain = "amazonaws.com.cn" if region.startswith("cn-") else "amazonaws.com"
    return f"{account}.dkr.ecr.{region}.{domain}/eks/aws-efa-k8s-device-plugin:{EFA_DEVICE_PLUGIN_TAG}"


def _daemonset(
    name: str, instance: InstanceType, container: dict[str, Any], volumes: list[dict[str, Any]], *, host_network: bool
) -> dict[str, Any]:
    labels = {**_LABELS, "app.kubernetes.io/name": name}
    spec: dict[str, Any] = {
        "priorityClassName": "system-node-critical",
        "nodeSelector": {"node.kubernetes.io/instance-type": instance.name},
        "tolerations": [
            {"key": instance.accelerator_resource, "operator": "Exists", "effect": "NoSchedule"},
            {"key": "CriticalAddonsOnly", "operator": "Exists"},
        ],
        "containers": [container],
        "volumes": volumes,
    }
    if host_network:
        spec["hostNetwork"] = True
    return {
        "apiVersion": "apps/v1",
        "kind": "DaemonSet",
        "metadata": {"name": name, "namespace": NAMESPACE, "labels": labels},
        "spec": {
            "selector": {"matchLabels": {"app.kubernetes.io/name": name}},
            "updateStrategy": {"type": "RollingUpdate"},
            "template": {"metadata": {"labels": labels}, "spec": spec},
        },
    }


_DROP_ALL = {"allowPrivilegeEscalation": False, "capabilities": {"drop": ["ALL"]}}
_DEVICE_PLUGINS_DIR = "/var/lib/kubelet/device-plugins"


def render_device_plugins(
    config: Config, instance: InstanceType, settings: TerraformSettings, ami_type: str
) -> list[dict[str, Any]]:
    """The DaemonSets of the NVIDIA and EFA device plugins the GPU nodes need (none when turned off).

    :param config: the resolved configuration (``cluster.region``, ``cluster.efa``).
    :param instance: the GPU instance type.
    :param settings: the ``terraform`` section (images, ``device_plugins``).
    :param ami_type: the GPU nodes' AMI type (Bottlerocket runs the NVIDIA plugin itself).
    """
    if not settings.device_plugins:
        return []
    objects: list[dict[str, Any]] = []
    if instance.accelerator_resource == "nvidia.com/gpu" and not ami_type.startswith("BOTTLEROCKET"):
        objects.append(
            _daemonset(
                "nvidia-device-plugin",
                instance,
                {
                    "name": "nvidia-device-plugin",
                    "image": settings.nvidia_device_plugin_image,
                    "env": [{"name": "FAIL_ON_INIT_ERROR", "value": "false"}],
                    "securityContext": _DROP_ALL,
                    "volumeMounts": [{"name": "device-plugins", "mountPath": _DEVICE_PLUGINS_DIR}],
                },
                [{"name": "device-plugins", "hostPath": {"path": _DEVICE_PLUGINS_DIR, "type": "Directory"}}],
                host_network=False,
            )
        )
    if config.cluster.efa and instance.efa_interfaces > 0:
        objects.append(
            _daemonset(
                "aws-efa-k8s-device-plugin",
                instance,
                {
                    "name": "aws-efa-k8s-device-plugin",
                    "image": efa_device_plugin_image(config.cluster.region, settings),
                    "securityContext": {**_DROP_ALL, "runAsNonRoot": False},
                    "resources": {"requests": {"cpu": "10m", "memory": "20Mi"}},
                    "volumeMounts": [
                        {"name": "device-plugins", "mountPath": _DEVICE_PLUGINS_DIR},
                        {"name": "infiniband", "mountPath": "/dev/infiniband/"},
                    ],
                },
                [
                    {"name": "device-plugins", "hostPath": {"path": _DEVICE_PLUGINS_DIR}},
                    {"name": "infiniband", "hostPath": {"path": "/dev/infiniband/"}},
                ],
                host_network=True,
            )
        )
    return objects
