"""A Capacity Block that has not started yet: its GPU node group is created empty and scaled when the block starts.

No instance can launch into a Capacity Block before its start (``State: scheduled``), so a node group created with
its full desired size waits for nodes that never come until then (``eksctl create nodegroup`` and Terraform's
``aws_eks_node_group`` time out). The EKS user guide says to create the group at desired size 0 before the
reservation is active (docs.aws.amazon.com/eks/latest/userguide/capacity-blocks.html, "Considerations": "If you
create a ... node group prior to the capacity reservation becoming active, then set the desired capacity to 0", and
"schedule scaling to scale to zero more than 30 minutes before the Capacity Block reservation end time").

So ``up`` of a cluster whose Capacity Block is still scheduled:

* plans the GPU node group with ``cluster.nodes`` 0 and ``cluster.max_nodes`` the nodes asked for
  (:meth:`BlockSchedule.filled`; the plan shows it, :func:`pending_block` reads the block, reads only);
* once the backend has made the group, puts two EC2 Auto Scaling scheduled actions on the group's Auto Scaling group
  (:func:`schedule_scaling`): the desired size goes to the nodes asked for at the block's start, and to 0 thirty
  minutes before its end. Nothing has to run at that time; ``down`` deletes the group and its actions with it.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

from fsdp_sdk.aws.session import aws_client, aws_errors

if TYPE_CHECKING:
    from fsdp_sdk.config import Config

__all__ = [
    "DRAIN_BEFORE_END",
    "SCALE_DOWN_ACTION",
    "SCALE_UP_ACTION",
    "BlockSchedule",
    "pending_block",
    "schedule_scaling",
]

#: The scheduled actions fsdp-sdk puts on the GPU node group's Auto Scaling group.
SCALE_UP_ACTION = "fsdp-sdk-capacity-block-start"
SCALE_DOWN_ACTION = "fsdp-sdk-capacity-block-end"
#: How long before the block's end the nodes go (the EKS user guide: "more than 30 minutes").
DRAIN_BEFORE_END = dt.timedelta(minutes=31)


@dataclasses.dataclass(frozen=True)
class BlockSchedule:
    """A scheduled Capacity Block and the nodes to scale the GPU node group to when it starts.

    :param reservation_id: the block (``cr-...``).
    :param starts: its ``StartDate``.
    :param ends: its ``EndDate`` (None when EC2 gave none).
    :param nodes: the GPU nodes asked for (``cluster.nodes``).
    """

    reservation_id: str
    starts: dt.datetime
    ends: dt.datetime | None
    nodes: int

    def filled(self, config: Config) -> dict[str, Any]:
        """The settings the plan takes instead of the user's: the group is created empty, able to grow to ``nodes``."""
        return {"cluster.nodes": 0, "cluster.max_nodes": max(self.nodes, config.cluster.max_nodes or 0)}

    @property
    def scale_down_at(self) -> dt.datetime | None:
        """When the nodes go again: :data:`DRAIN_BEFORE_END` before the block ends (None without an end)."""
        return self.ends - DRAIN_BEFORE_END if self.ends is not None else None

    def steps(self, nodegroup: str) -> list[str]:
        """What the plan says about it, one line each."""
        lines = [
            f"Capacity Block {self.reservation_id} starts at {self.starts.isoformat(timespec='minutes')}: "
            f"node group '{nodegroup}' is created with 0 nodes (max {self.nodes}), as the EKS user guide says for a "
            "block not yet active",
            f"schedule node group '{nodegroup}' to scale to {self.nodes} node(s) at "
            f"{self.starts.isoformat(timespec='minutes')} (Auto Scaling scheduled action {SCALE_UP_ACTION})",
        ]
        if self.scale_down_at is not None:
            lines.append(
                f"schedule it to scale to 0 at {self.scale_down_at.isoformat(timespec='minutes')}, before the block "
                f"ends (scheduled action {SCALE_DOWN_ACTION})"
            )
        return lines

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready dict (the plan's ``details["capacity_block"]``)."""
        return {
            "reservation_id": self.reservation_id,
            "starts": self.starts.isoformat(),
            "ends": self.ends.isoformat() if self.ends else None,
            "nodes": self.nodes,
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> BlockSchedule:
        """The schedule :meth:`to_dict` wrote."""
        ends = data.get("ends")
        return cls(
            reservation_id=str(data["reservation_id"]),
            starts=dt.datetime.fromisoformat(str(data["starts"])),
            ends=dt.datetime.fromisoformat(str(ends)) if ends else None,
            nodes=int(data["nodes"]),
        )


def _utcnow() -> dt.datetime:
    return dt.datetime.now(dt.timezone.utc)


def pending_block(
    config: Config, *, client: Any = None, now: Callable[[], dt.datetime] | None = None
) -> BlockSchedule | None:
    """The Capacity Block of ``cluster.capacity_reservation_id`` when it has not started yet, else None (no block, an
    active one, or none found: the preflight says why). Reads only (one ``DescribeCapacityReservations``).

    :param client: an EC2 client to use instead of the cached one.
    :param now: the clock (tests pass a fixed one).
    """
    cluster = config.cluster
    if cluster.capacity_type != "capacity-block" or not cluster.capacity_reservation_id or cluster.nodes == 0:
        return None
    ec2 = client or aws_client("ec2", cluster.region)
    with aws_errors("ec2", f"describe the Capacity Block {cluster.capacity_reservation_id}"):
        found = ec2.describe_capacity_reservations(CapacityReservationIds=[cluster.capacity_reservation_id])
    reservations = found.get("CapacityReservations") or []
    if not reservations:
        return None
    block = reservations[0]
    starts = block.get("StartDate")
    if block.get("State") != "scheduled" or starts is None or starts <= (now or _utcnow)():
        return None
    return BlockSchedule(cluster.capacity_reservation_id, starts, block.get("EndDate"), cluster.nodes)


def schedule_scaling(
    config: Config,
    schedule: BlockSchedule,
    nodegroup: str,
    *,
    eks: Any = None,
    autoscaling: Any = None,
    progress: Callable[[str], None] = lambda line: None,
    now: Callable[[], dt.datetime] | None = None,
) -> list[str]:
    """Put the scale-up (and scale-down) scheduled actions on the Auto Scaling group(s) of ``nodegroup``.

    Idempotent: ``PutScheduledUpdateGroupAction`` replaces an action of the same name. A start already past (``up``
    ran late) scales the group now instead. Returns the Auto Scaling groups it scheduled.

    :param eks: an EKS client instead of the cached one; ``autoscaling`` likewise.
    :raises BackendError: the node group has no Auto Scaling group, or AWS refused (the message names the call).
    """
    from fsdp_sdk.errors import BackendError

    region, cluster = config.cluster.region, config.cluster.name
    eks = eks or aws_client("eks", region)
    autoscaling = autoscaling or aws_client("autoscaling", region)
    with aws_errors("eks", f"describe node group {nodegroup} of cluster {cluster}"):
        group = eks.describe_nodegroup(clusterName=cluster, nodegroupName=nodegroup)["nodegroup"]
    names = [g["name"] for g in (group.get("resources") or {}).get("autoScalingGroups") or [] if g.get("name")]
    if not names:
        raise BackendError(
            f"node group {nodegroup} of cluster {cluster} has no Auto Scaling group to schedule the Capacity Block "
            f"{schedule.reservation_id} on; scale it when the block starts: fsdp-sdk scale {schedule.nodes}"
        )
    if schedule.starts <= (now or _utcnow)():
        with aws_errors("eks", f"scale node group {nodegroup} to {schedule.nodes}"):
            scaling = dict(group.get("scalingConfig") or {})
            eks.update_nodegroup_config(
                clusterName=cluster,
                nodegroupName=nodegroup,
                scalingConfig={**scaling, "desiredSize": schedule.nodes, "maxSize": max(schedule.nodes, 1)},
            )
        progress(
            f"Capacity Block {schedule.reservation_id} has started: node group {nodegroup} scaled to {schedule.nodes}"
        )
        return names
    for name in names:
        with aws_errors("autoscaling", f"schedule {name} to scale at the Capacity Block's start"):
            autoscaling.put_scheduled_update_group_action(
                AutoScalingGroupName=name,
                ScheduledActionName=SCALE_UP_ACTION,
                StartTime=schedule.starts,
                DesiredCapacity=schedule.nodes,
            )
        if schedule.scale_down_at is not None and schedule.scale_down_at > schedule.starts:
            with aws_errors("autoscaling", f"schedule {name} to scale to 0 before the Capacity Block ends"):
                autoscaling.put_scheduled_update_group_action(
                    AutoScalingGroupName=name,
                    ScheduledActionName=SCALE_DOWN_ACTION,
                    StartTime=schedule.scale_down_at,
                    DesiredCapacity=0,
                )
    progress(
        f"node group {nodegroup} scales to {schedule.nodes} at {schedule.starts.isoformat(timespec='minutes')}, "
        f"when Capacity Block {schedule.reservation_id} starts"
    )
    return names
