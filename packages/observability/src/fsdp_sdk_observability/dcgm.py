"""The NVIDIA DCGM exporter: GPU telemetry on port 9400 of every GPU node.

One pod per GPU node (a ``DaemonSet``) runs ``dcgm-exporter`` with its embedded DCGM host
engine, as NVIDIA's own manifests do: root with the ``SYS_ADMIN`` capability (needed for the
profiling fields ``DCGM_FI_PROF_*``), no privilege escalation, and the kubelet's
``pod-resources`` socket directory mounted read-only (``hostPath``) so each GPU's series carry
the ``pod``, ``namespace`` and ``container`` of the pod using it (``DCGM_EXPORTER_KUBERNETES``).
The NVIDIA container runtime of GPU nodes gives it every GPU (the CUDA base image sets
``NVIDIA_VISIBLE_DEVICES=all``) without requesting any, so training pods keep them all.

Nodes are chosen by the ``nvidia.com/gpu.present=true`` label (NVIDIA GPU Feature Discovery /
GPU Operator) or, on EKS GPU AMIs without it, by the configured GPU instance type; every
taint is tolerated, as a node agent should. The counters are ours (:data:`COUNTERS`, mounted
from a ``ConfigMap`` and passed with ``-f``), so the dashboard's and the report's series are
always collected; each series is labelled ``gpu``, ``UUID``, ``pci_bus_id``, ``device``,
``modelName`` and ``Hostname`` (the node).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from fsdp_sdk.monitoring import MonitoringComponent

from .common import image_version, labels, namespace_object, selector
from .settings import settings_of

if TYPE_CHECKING:
    from fsdp_sdk.config import Config

__all__ = ["COUNTERS", "DCGM_PORT", "NAME", "counters_csv", "dcgm_component", "gpu_node_affinity"]

NAME = "dcgm-exporter"
#: The exporter's default port (``DCGM_EXPORTER_LISTEN=:9400``).
DCGM_PORT = 9400
#: Where the counters file is mounted in the exporter's container.
COUNTERS_PATH = "/etc/dcgm-exporter/fsdp-counters.csv"
#: The node label NVIDIA GPU Feature Discovery sets on GPU nodes.
GPU_PRESENT_LABEL = "nvidia.com/gpu.present"

#: ``(DCGM field, Prometheus type, help)`` of every counter collected: the exporter's defaults that matter for
#: training (clocks, temperature, power, utilisation, XID errors, memory, NVLink, remapped rows) and the
#: profiling fields that say how busy the SMs and tensor cores are.
COUNTERS: tuple[tuple[str, str, str], ...] = (
    ("DCGM_FI_DEV_SM_CLOCK", "gauge", "SM clock frequency (in MHz)."),
    ("DCGM_FI_DEV_MEM_CLOCK", "gauge", "Memory clock frequency (in MHz)."),
    ("DCGM_FI_DEV_GPU_TEMP", "gauge", "GPU temperature (in C)."),
    ("DCGM_FI_DEV_MEMORY_TEMP", "gauge", "Memory temperature (in C)."),
    ("DCGM_FI_DEV_POWER_USAGE", "gauge", "Power draw (in W)."),
    ("DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION", "counter", "Total energy consumption since boot (in mJ)."),
    ("DCGM_FI_DEV_GPU_UTIL", "gauge", "GPU utilization (in %)."),
    ("DCGM_FI_DEV_MEM_COPY_UTIL", "gauge", "Memory utilization (in %)."),
    ("DCGM_FI_DEV_XID_ERRORS", "gauge", "Value of the last XID error encountered."),
    ("DCGM_FI_DEV_FB_FREE", "gauge", "Framebuffer memory free (in MiB)."),
    ("DCGM_FI_DEV_FB_USED", "gauge", "Framebuffer memory used (in MiB)."),
    ("DCGM_FI_DEV_PCIE_REPLAY_COUNTER", "counter", "Total number of PCIe retries."),
    ("DCGM_FI_DEV_NVLINK_BANDWIDTH_TOTAL", "counter", "Total number of NVLink bandwidth counters for all lanes."),
    ("DCGM_FI_DEV_UNCORRECTABLE_REMAPPED_ROWS", "counter", "Number of remapped rows for uncorrectable errors."),
    ("DCGM_FI_DEV_ROW_REMAP_FAILURE", "gauge", "Whether remapping of rows has failed."),
    ("DCGM_FI_PROF_GR_ENGINE_ACTIVE", "gauge", "Ratio of time the graphics engine is active."),
    ("DCGM_FI_PROF_SM_ACTIVE", "gauge", "The ratio of cycles an SM has at least 1 warp assigned."),
    ("DCGM_FI_PROF_PIPE_TENSOR_ACTIVE", "gauge", "Ratio of cycles the tensor (HMMA) pipe is active."),
    ("DCGM_FI_PROF_DRAM_ACTIVE", "gauge", "Ratio of cycles the device memory interface is active."),
)


def counters_csv() -> str:
    """The counters file in the exporter's CSV format (``field, type, help``; ``#`` starts a comment)."""
    lines = ["# DCGM FIELD, Prometheus metric type, help message (rendered by fsdp-sdk-observability)"]
    lines += [f"{name}, {kind}, {text}" for name, kind, text in COUNTERS]
    return "\n".join(lines) + "\n"


def gpu_node_affinity(config: Config) -> dict[str, Any]:
    """Node affinity for GPU nodes: labelled ``nvidia.com/gpu.present=true``, or of the configured GPU instance type."""
    terms = [{"matchExpressions": [{"key": GPU_PRESENT_LABEL, "operator": "In", "values": ["true"]}]}]
    instance = config.cluster.instance_type
    terms.append(
        {"matchExpressions": [{"key": "node.kubernetes.io/instance-type", "operator": "In", "values": [instance]}]}
    )
    return {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": terms}}}


def dcgm_objects(config: Config) -> list[dict[str, Any]]:
    """The exporter's ``ConfigMap`` (counters), ``DaemonSet`` and ``Service`` (pure)."""
    settings = settings_of(config)
    namespace = config.observability.namespace
    meta_labels = labels(NAME, image_version(settings.dcgm_exporter_image))
    health = {"httpGet": {"path": "/health", "port": DCGM_PORT}}
    counters = {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": f"{NAME}-counters", "namespace": namespace, "labels": meta_labels},
        "data": {"fsdp-counters.csv": counters_csv()},
    }
    container = {
        "name": "exporter",
        "image": settings.dcgm_exporter_image,
        "imagePullPolicy": "IfNotPresent",
        "args": ["-f", COUNTERS_PATH],
        "env": [
            {"name": "DCGM_EXPORTER_LISTEN", "value": f":{DCGM_PORT}"},
            {"name": "DCGM_EXPORTER_KUBERNETES", "value": "true"},
            {"name": "NODE_NAME", "valueFrom": {"fieldRef": {"fieldPath": "spec.nodeName"}}},
        ],
        "ports": [{"name": "metrics", "containerPort": DCGM_PORT, "protocol": "TCP"}],
        "securityContext": {
            "runAsNonRoot": False,
            "runAsUser": 0,
            "allowPrivilegeEscalation": False,
            "capabilities": {"add": ["SYS_ADMIN"], "drop": ["ALL"]},  # SYS_ADMIN: the DCGM_FI_PROF_* fields
        },
        "volumeMounts": [
            {"name": "pod-gpu-resources", "mountPath": "/var/lib/kubelet/pod-resources", "readOnly": True},
            {"name": "counters", "mountPath": COUNTERS_PATH, "subPath": "fsdp-counters.csv", "readOnly": True},
        ],
        "resources": {"requests": {"cpu": "100m", "memory": "128Mi"}, "limits": {"cpu": "500m", "memory": "512Mi"}},
        "livenessProbe": {**health, "initialDelaySeconds": 45, "periodSeconds": 10},
        "readinessProbe": {**health, "initialDelaySeconds": 15, "periodSeconds": 5},
    }
    daemonset = {
        "apiVersion": "apps/v1",
        "kind": "DaemonSet",
        "metadata": {"name": NAME, "namespace": namespace, "labels": meta_labels},
        "spec": {
            "selector": {"matchLabels": selector(NAME)},
            "updateStrategy": {"type": "RollingUpdate", "rollingUpdate": {"maxUnavailable": 1}},
            "template": {
                "metadata": {"labels": meta_labels},
                "spec": {
                    "automountServiceAccountToken": False,
                    "affinity": gpu_node_affinity(config),
                    "tolerations": [{"operator": "Exists"}],
                    "containers": [container],
                    "volumes": [
                        {
                            "name": "pod-gpu-resources",
                            "hostPath": {"path": "/var/lib/kubelet/pod-resources", "type": "Directory"},
                        },
                        {"name": "counters", "configMap": {"name": f"{NAME}-counters"}},
                    ],
                },
            },
        },
    }
    service = {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {"name": NAME, "namespace": namespace, "labels": meta_labels},
        "spec": {
            "selector": selector(NAME),
            "ports": [{"name": "metrics", "port": DCGM_PORT, "targetPort": "metrics", "protocol": "TCP"}],
        },
    }
    return [counters, daemonset, service]


def dcgm_component(config: Config, extra: list[dict[str, Any]] | None = None) -> MonitoringComponent:
    """The ``dcgm-exporter`` component; ``extra`` are objects another part renders for it (a ServiceMonitor)."""
    return MonitoringComponent(
        name=NAME,
        description=f"NVIDIA DCGM exporter on every GPU node (port {DCGM_PORT})",
        objects=[*namespace_object(config), *dcgm_objects(config), *(extra or [])],
        namespace=config.observability.namespace,
    )
