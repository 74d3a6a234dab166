"""The eksctl backend's preflight checks (reads only): its tools, then core's AWS checks.

1. ``eksctl``, ``kubectl``, ``git`` and ``aws`` are installed (the kubeconfig authenticates with
   ``aws eks get-token``; the Training Operator installs with ``kubectl apply -k github.com/...``, which
   fetches the overlay with git), each with an install hint;
   eksctl is :data:`~fsdp_sdk_eksctl.commands.MIN_EKSCTL_VERSION` or newer;
2. :func:`fsdp_sdk.aws.preflight.aws_preflight`: credentials, region and zones, the instance type in
   the GPU zone, the vCPU quota, the capacity reservation or Capacity Block. When the cluster already
   runs GPU nodes, those hold their vCPUs and reservation slots already: the checks count only the
   nodes the plan adds.
"""

from __future__ import annotations

import copy
import shutil
from typing import TYPE_CHECKING

from fsdp_sdk.aws.preflight import CLUSTER_TOOLS, aws_preflight
from fsdp_sdk.aws.session import aws_client
from fsdp_sdk.errors import FsdpSdkError
from fsdp_sdk.preflight import PreflightResult
from fsdp_sdk.tools import INSTALL_HINTS, ToolError, run_tool
from fsdp_sdk_eksctl import commands

if TYPE_CHECKING:
    from fsdp_sdk.config import Config
    from fsdp_sdk.instance_types import InstanceType

__all__ = ["TOOLS", "eksctl_preflight", "running_gpu_nodes"]

#: The tools the backend runs, and what for (eksctl, then the ones every AWS backend needs).
TOOLS = {"eksctl": "creates, scales and deletes the cluster", **CLUSTER_TOOLS}


def eksctl_preflight(config: Config, instance: InstanceType) -> list[PreflightResult]:
    """Every check of the backend for ``config`` (see the module docstring).

    :param config: the resolved configuration.
    :param instance: its GPU instance type, as resolving found it (``resolved.instance``).
    """
    results = [_tool(name, why) for name, why in TOOLS.items()]
    if results[0].ok:
        results.append(_eksctl_version())
    running = running_gpu_nodes(config)
    checked = config
    if running:
        checked = copy.deepcopy(config)
        checked.cluster.nodes = max(0, config.cluster.nodes - running)
        results.append(
            PreflightResult(
                "existing-gpu-nodes",
                True,
                f"cluster {config.cluster.name} already runs {running} x {instance.name}: the quota and "
                f"reservation checks count the {checked.cluster.nodes} node(s) the plan adds",
            )
        )
    return results + aws_preflight(checked, instance)


def _tool(name: str, why: str) -> PreflightResult:
    path = shutil.which(name)
    if path is None:
        return PreflightResult(f"{name}-installed", False, f"{name} is not on PATH ({why})", INSTALL_HINTS[name])
    return PreflightResult(f"{name}-installed", True, path)


def _eksctl_version() -> PreflightResult:
    wanted = ".".join(map(str, commands.MIN_EKSCTL_VERSION))
    try:
        result = run_tool(commands.version_command(), step="read its version", echo=False, timeout=60)
    except (ToolError, FsdpSdkError) as error:
        return PreflightResult("eksctl-version", False, str(error), severity="warning")
    version = commands.eksctl_version(result.output)
    if version is None:
        return PreflightResult(
            "eksctl-version", False, f"cannot read a version in {result.output[-80:]!r}", severity="warning"
        )
    shown = ".".join(map(str, version))
    if version < commands.MIN_EKSCTL_VERSION:
        return PreflightResult(
            "eksctl-version",
            False,
            f"eksctl {shown} is older than {wanted}, the first that supports Capacity Blocks and the AL2023 NVIDIA AMIs",
            f"upgrade it: {INSTALL_HINTS['eksctl']}",
        )
    return PreflightResult("eksctl-version", True, f"eksctl {shown} (>= {wanted})")


def running_gpu_nodes(config: Config) -> int:
    """How many nodes the cluster's GPU node group runs now (0 when there is no cluster or it cannot be read)."""
    group = config.section("eksctl").gpu_nodegroup
    try:
        eks = aws_client("eks", config.cluster.region)
        found = eks.describe_nodegroup(clusterName=config.cluster.name, nodegroupName=group)["nodegroup"]
    except Exception:  # no cluster, no credentials: the AWS checks that follow say which
        return 0
    if found.get("instanceTypes") and config.cluster.instance_type not in found["instanceTypes"]:
        return 0
    return int((found.get("scalingConfig") or {}).get("desiredSize") or 0)
