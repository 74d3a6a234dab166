"""What exists in AWS for a cluster, read through boto3 (reads only): the EKS cluster, its managed node
groups and add-ons, and the CloudFormation stacks eksctl made for it.

Stacks matter on their own: an interrupted or failed ``eksctl create cluster`` leaves them without a
cluster, and ``up`` and ``down`` must both see and clear them. eksctl tags each of its stacks with
the cluster's name (``alpha.eksctl.io/cluster-name``).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from fsdp_sdk.aws.session import aws_client, aws_errors, error_code
from fsdp_sdk.errors import FsdpSdkError

if TYPE_CHECKING:
    from fsdp_sdk.config import Config

__all__ = ["EKSCTL_CLUSTER_TAG", "AddonState", "NodeGroupState", "Observed", "observe"]

#: The tag eksctl puts on every stack it creates, with the cluster's name.
EKSCTL_CLUSTER_TAG = "alpha.eksctl.io/cluster-name"
#: CloudFormation stack states that are still changing.
_STACK_BUSY_SUFFIX = "_IN_PROGRESS"


def _issues(health: dict[str, Any] | None) -> list[str]:
    return [
        f"{issue.get('code', 'issue')}: {' '.join(str(issue.get('message', '')).split())}".rstrip(": ")
        for issue in (health or {}).get("issues") or []
    ]


@dataclass(frozen=True)
class NodeGroupState:
    """One managed node group as EKS describes it."""

    name: str
    status: str
    instance_types: tuple[str, ...]
    capacity_type: str
    desired: int
    min_size: int
    max_size: int
    health_issues: tuple[str, ...] = ()

    @classmethod
    def from_api(cls, group: dict[str, Any]) -> NodeGroupState:
        """From ``eks:DescribeNodegroup``'s ``nodegroup``."""
        scaling = group.get("scalingConfig") or {}
        return cls(
            name=group["nodegroupName"],
            status=str(group.get("status", "UNKNOWN")),
            instance_types=tuple(group.get("instanceTypes") or ()),
            capacity_type=str(group.get("capacityType") or "ON_DEMAND"),
            desired=int(scaling.get("desiredSize") or 0),
            min_size=int(scaling.get("minSize") or 0),
            max_size=int(scaling.get("maxSize") or 0),
            health_issues=tuple(_issues(group.get("health"))),
        )

    def to_dict(self) -> dict[str, Any]:
        """A row of the status table."""
        return {
            "name": self.name,
            "status": self.status,
            "instance_type": ",".join(self.instance_types) or None,
            "capacity": self.capacity_type,
            "nodes": self.desired,
            "min": self.min_size,
            "max": self.max_size,
            "health": "; ".join(self.health_issues) or "ok",
        }


@dataclass(frozen=True)
class AddonState:
    """One EKS add-on as EKS describes it."""

    name: str
    version: str
    status: str
    health_issues: tuple[str, ...] = ()

    def to_dict(self) -> dict[str, Any]:
        """A row of the status table."""
        return {
            "name": self.name,
            "version": self.version,
            "status": self.status,
            "health": "; ".join(self.health_issues) or "ok",
        }


@dataclass(frozen=True)
class Observed:
    """Everything of one cluster that exists in AWS.

    :param cluster: ``eks:DescribeCluster``'s ``cluster``, or ``None`` when there is none.
    :param nodegroups: the managed node groups by name.
    :param stacks: eksctl's CloudFormation stacks of the cluster, ``(name, status)``.
    :param addons: the EKS add-ons (``None`` when not read, or when reading them failed).
    :param addons_error: why reading the add-ons failed.
    """

    cluster: dict[str, Any] | None
    nodegroups: dict[str, NodeGroupState] = field(default_factory=dict)
    stacks: tuple[tuple[str, str], ...] = ()
    addons: tuple[AddonState, ...] | None = None
    addons_error: str | None = None

    @property
    def absent(self) -> bool:
        """Nothing exists: no cluster, no stack."""
        return self.cluster is None and not self.stacks

    @property
    def cluster_status(self) -> str | None:
        """``ACTIVE``, ``CREATING``, ``UPDATING``, ``DELETING``, ``FAILED``... or ``None``."""
        return None if self.cluster is None else str(self.cluster.get("status"))

    @property
    def leftover_stacks(self) -> tuple[tuple[str, str], ...]:
        """Stacks without a cluster: what an interrupted or failed ``create cluster`` left behind."""
        return self.stacks if self.cluster is None else ()

    @property
    def stacks_busy(self) -> bool:
        """Whether a stack is still being created, updated or deleted."""
        return any(status.endswith(_STACK_BUSY_SUFFIX) for _, status in self.stacks)

    def cluster_issues(self) -> list[str]:
        """The control plane's health issues."""
        return _issues((self.cluster or {}).get("health"))


def observe(config: Config, *, addons: bool = False) -> Observed:
    """Read what exists in AWS for ``cluster.name`` in ``cluster.region``; changes nothing.

    :param config: the resolved configuration.
    :param addons: read the EKS add-ons too (for ``status``).
    :raises ConfigError: the AWS credentials are missing or rejected.
    :raises AwsError: AWS refused a read.
    """
    name, region = config.cluster.name, config.cluster.region
    eks = aws_client("eks", region)
    with aws_errors("eks", f"describe the EKS cluster {name}"):
        try:
            cluster: dict[str, Any] | None = eks.describe_cluster(name=name)["cluster"]
        except Exception as error:
            if error_code(error) != "ResourceNotFoundException":
                raise
            cluster = None
    stacks = _stacks(name, region)
    if cluster is None:
        return Observed(None, {}, stacks)
    groups: dict[str, NodeGroupState] = {}
    with aws_errors("eks", f"list the node groups of {name}"):
        for page in eks.get_paginator("list_nodegroups").paginate(clusterName=name):
            for group in page.get("nodegroups", []):
                try:
                    described = eks.describe_nodegroup(clusterName=name, nodegroupName=group)["nodegroup"]
                except Exception as error:
                    if error_code(error) == "ResourceNotFoundException":
                        continue  # deleted between the list and the describe
                    raise
                groups[group] = NodeGroupState.from_api(described)
    found: tuple[AddonState, ...] | None = None
    failure = None
    if addons:
        try:
            found = _addons(eks, name)
        except FsdpSdkError as error:
            failure = str(error)
    return Observed(cluster, groups, stacks, found, failure)


def _stacks(name: str, region: str) -> tuple[tuple[str, str], ...]:
    cloudformation = aws_client("cloudformation", region)
    found = []
    token: str | None = None
    with aws_errors("cloudformation", f"list the CloudFormation stacks of {name}"):
        while True:
            page = cloudformation.describe_stacks(**({"NextToken": token} if token else {}))
            for stack in page.get("Stacks", []):
                tags = {t.get("Key"): t.get("Value") for t in stack.get("Tags") or []}
                if tags.get(EKSCTL_CLUSTER_TAG) == name or stack["StackName"] == f"eksctl-{name}-cluster":
                    found.append((stack["StackName"], str(stack.get("StackStatus"))))
            token = page.get("NextToken")
            if not token:
                return tuple(sorted(found))


def _addons(eks: Any, name: str) -> tuple[AddonState, ...]:
    found = []
    token: str | None = None
    with aws_errors("eks", f"list the add-ons of {name}"):
        while True:
            page = eks.list_addons(clusterName=name, **({"nextToken": token} if token else {}))
            for addon in page.get("addons", []):
                described = eks.describe_addon(clusterName=name, addonName=addon)["addon"]
                found.append(
                    AddonState(
                        addon,
                        str(described.get("addonVersion", "")),
                        str(described.get("status", "UNKNOWN")),
                        tuple(_issues(described.get("health"))),
                    )
                )
            token = page.get("nextToken")
            if not token:
                return tuple(found)
