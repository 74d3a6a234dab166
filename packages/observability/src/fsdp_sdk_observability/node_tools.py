"""htop on every node and nvtop on every GPU node, ready for ``fsdp-sdk monitor top NODE [--nvtop]``.

Each runs in a long-lived pod of a ``DaemonSet`` that shares the node's process namespace
(``hostPID``), so htop shows the node's processes (the trainer's ranks, the data loader workers)
and nvtop the processes on the node's GPUs. nvtop gets the GPUs' management library from the
NVIDIA container runtime (``NVIDIA_DRIVER_CAPABILITIES=utility``) without requesting any GPU.
The image is a pinned Ubuntu; the tools come from its archive when the pod starts
(``monitoring.node_tools_install``), or from an image of your own that has them.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from fsdp_sdk.monitoring import MonitoringComponent, NodeTool

from .common import image_version, labels, namespace_object, selector
from .dcgm import gpu_node_affinity
from .settings import settings_of

if TYPE_CHECKING:
    from fsdp_sdk.config import Config

__all__ = ["NAME", "node_tools_component"]

NAME = "node-tools"
_CONTAINER = "tool"


def _daemonset(config: Config, tool: str, *, gpu: bool) -> dict[str, Any]:
    settings = settings_of(config)
    namespace = config.observability.namespace
    meta_labels = labels(tool, image_version(settings.node_tools_image))
    if settings.node_tools_install:
        install = f"apt-get update -qq && apt-get install -y -qq --no-install-recommends {tool} >/dev/null"
        command = ["/bin/sh", "-c", f"export DEBIAN_FRONTEND=noninteractive; {install} && exec sleep infinity"]
    else:
        command = ["sleep", "infinity"]
    env = [{"name": "TERM", "value": "xterm-256color"}]
    if gpu:
        env += [
            {"name": "NVIDIA_VISIBLE_DEVICES", "value": "all"},
            {"name": "NVIDIA_DRIVER_CAPABILITIES", "value": "utility"},
        ]
    spec: dict[str, Any] = {
        "hostPID": True,
        "automountServiceAccountToken": False,
        "terminationGracePeriodSeconds": 5,
        "tolerations": [{"operator": "Exists"}],
        "containers": [
            {
                "name": _CONTAINER,
                "image": settings.node_tools_image,
                "imagePullPolicy": "IfNotPresent",
                "command": command,
                "env": env,
                "stdin": True,
                "tty": True,
                "readinessProbe": {"exec": {"command": [tool, "--version"]}, "periodSeconds": 10},
                "resources": {"requests": {"cpu": "10m", "memory": "32Mi"}, "limits": {"memory": "256Mi"}},
            }
        ],
    }
    if gpu:
        spec["affinity"] = gpu_node_affinity(config)
    return {
        "apiVersion": "apps/v1",
        "kind": "DaemonSet",
        "metadata": {"name": tool, "namespace": namespace, "labels": meta_labels},
        "spec": {
            "selector": {"matchLabels": selector(tool)},
            "template": {"metadata": {"labels": meta_labels}, "spec": spec},
        },
    }


def node_tools_component(config: Config) -> MonitoringComponent:
    """The ``node-tools`` component: the ``htop`` and ``nvtop`` DaemonSets."""
    namespace = config.observability.namespace
    return MonitoringComponent(
        name=NAME,
        description="htop on every node, nvtop on GPU nodes (fsdp-sdk monitor top NODE [--nvtop])",
        objects=[
            *namespace_object(config),
            _daemonset(config, "htop", gpu=False),
            _daemonset(config, "nvtop", gpu=True),
        ],
        namespace=namespace,
        node_tools=[
            NodeTool("htop", "htop", _CONTAINER, ["htop"], namespace),
            NodeTool("nvtop", "nvtop", _CONTAINER, ["nvtop"], namespace),
        ],
    )
