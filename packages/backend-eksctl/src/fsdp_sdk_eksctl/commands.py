"""The eksctl command lines the backend runs (pure): argument lists, never a shell string.

Every command names the cluster and region explicitly (``-f FILE`` carries them for ``create``), so
what runs does not depend on the user's eksctl defaults, and none of them writes ``~/.kube/config``
(``--write-kubeconfig=false``: the backend writes the cluster's own kubeconfig under the state
directory). eksctl reads AWS credentials, ``AWS_PROFILE`` and ``AWS_ENDPOINT_URL`` from the
environment, like the SDK's boto3 sessions.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

__all__ = [
    "MIN_EKSCTL_VERSION",
    "create_cluster",
    "create_nodegroups",
    "delete_cluster",
    "eksctl_version",
    "scale_nodegroup",
    "version_command",
]

#: The oldest eksctl with what the rendered ClusterConfig uses: AL2023 NVIDIA AMIs with their device plugin
#: switchable, and ``instanceMarketOptions.marketType: capacity-block`` (0.205.0).
MIN_EKSCTL_VERSION = (0, 205, 0)


def _timeout(minutes: int) -> list[str]:
    return ["--timeout", f"{minutes}m"]


def create_cluster(config_file: str, *, timeout_minutes: int) -> list[str]:
    """``eksctl create cluster -f FILE``: the control plane, its VPC, the add-ons and every node group of the file."""
    return [
        "eksctl",
        "create",
        "cluster",
        "-f",
        config_file,
        "--write-kubeconfig=false",
        "--install-nvidia-plugin=false",
        *_timeout(timeout_minutes),
    ]


def create_nodegroups(config_file: str, names: Sequence[str], *, timeout_minutes: int) -> list[str]:
    """``eksctl create nodegroup -f FILE --include A,B``: the named node groups of the file, on an existing cluster."""
    return [
        "eksctl",
        "create",
        "nodegroup",
        "-f",
        config_file,
        "--include",
        ",".join(names),
        "--install-nvidia-plugin=false",
        *_timeout(timeout_minutes),
    ]


def scale_nodegroup(
    cluster: str, region: str, nodegroup: str, *, nodes: int, min_nodes: int, max_nodes: int, timeout_minutes: int
) -> list[str]:
    """``eksctl scale nodegroup``: set a managed node group's desired, minimum and maximum size, and wait."""
    return [
        "eksctl",
        "scale",
        "nodegroup",
        "--cluster",
        cluster,
        "--region",
        region,
        "--name",
        nodegroup,
        "--nodes",
        str(nodes),
        "--nodes-min",
        str(min_nodes),
        "--nodes-max",
        str(max_nodes),
        "--wait",
        *_timeout(timeout_minutes),
    ]


def delete_cluster(cluster: str, region: str, *, force: bool, timeout_minutes: int) -> list[str]:
    """``eksctl delete cluster --wait``: node groups, add-ons, the control plane, the VPC and their stacks.

    :param force: go on when the cluster itself is missing, so the stacks an interrupted or failed
        ``create cluster`` left are deleted too.
    """
    return [
        "eksctl",
        "delete",
        "cluster",
        "--name",
        cluster,
        "--region",
        region,
        "--wait",
        *(["--force"] if force else []),
        *_timeout(timeout_minutes),
    ]


def version_command() -> list[str]:
    """``eksctl version``."""
    return ["eksctl", "version"]


def eksctl_version(output: str) -> tuple[int, int, int] | None:
    """The ``(major, minor, patch)`` that ``eksctl version`` printed, or ``None`` when it printed none."""
    match = re.search(r"(\d+)\.(\d+)\.(\d+)", output)
    return (int(match.group(1)), int(match.group(2)), int(match.group(3))) if match else None
