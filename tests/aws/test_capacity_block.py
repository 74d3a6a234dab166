"""A Capacity Block not started yet: the plan creates the GPU node group with 0 nodes, and ``up`` schedules it to scale
to the nodes asked for when the block starts (EKS user guide, Capacity Blocks). The block's details come from
botocore's Stubber (moto has no Capacity Blocks); the node group and its Auto Scaling group from moto's server."""

from __future__ import annotations

import datetime as dt
from typing import Any

import pytest

from fsdp_sdk.aws.capacity_block import (
    DRAIN_BEFORE_END,
    SCALE_DOWN_ACTION,
    SCALE_UP_ACTION,
    BlockSchedule,
    pending_block,
    schedule_scaling,
)
from fsdp_sdk.aws.session import aws_client
from fsdp_sdk.config import Config

NOW = dt.datetime(2026, 12, 6, 12, 0, tzinfo=dt.timezone.utc)
BLOCK = "cr-0123456789abcdef0"
STARTS = NOW + dt.timedelta(hours=5)
ENDS = STARTS + dt.timedelta(days=2)


def config(**cluster: Any) -> Config:
    return Config.from_dict(
        {
            "cluster": {
                "backend": "eksctl",
                "name": "demo",
                "instance_type": "p5.48xlarge",
                "nodes": 2,
                "capacity_type": "capacity-block",
                "capacity_reservation_id": BLOCK,
                **cluster,
            }
        }
    )


def described(stubbed: Any, **fields: Any) -> Any:
    ec2, stubber = stubbed("ec2")
    block = {
        "CapacityReservationId": BLOCK,
        "InstanceType": "p5.48xlarge",
        "AvailabilityZone": "us-west-2b",
        "State": "scheduled",
        "TotalInstanceCount": 2,
        "AvailableInstanceCount": 0,
        "StartDate": STARTS,
        "EndDate": ENDS,
        "ReservationType": "capacity-block",
        **fields,
    }
    stubber.add_response(
        "describe_capacity_reservations", {"CapacityReservations": [block]}, {"CapacityReservationIds": [BLOCK]}
    )
    return ec2


def test_a_block_not_started_is_planned_empty_and_able_to_grow(stubbed: Any) -> None:
    wanted = config()
    block = pending_block(wanted, client=described(stubbed), now=lambda: NOW)
    assert block == BlockSchedule(BLOCK, STARTS, ENDS, 2)
    assert block.filled(wanted) == {"cluster.nodes": 0, "cluster.max_nodes": 2}
    steps = block.steps("gpu")
    assert steps[0].startswith(f"Capacity Block {BLOCK} starts at 2026-12-06T17:00+00:00: node group 'gpu' is created")
    assert "scale to 2 node(s) at 2026-12-06T17:00+00:00" in steps[1]
    assert BlockSchedule.from_dict(block.to_dict()) == block


@pytest.mark.parametrize(
    "fields", [{"State": "active"}, {"StartDate": NOW - dt.timedelta(minutes=1)}, {"State": "expired"}]
)
def test_an_active_or_past_block_is_planned_as_asked(stubbed: Any, fields: dict[str, Any]) -> None:
    assert pending_block(config(), client=described(stubbed, **fields), now=lambda: NOW) is None


def test_no_block_no_call() -> None:
    class NoCalls:
        def __getattr__(self, name: str) -> Any:
            raise AssertionError(f"called {name}")

    assert pending_block(config(capacity_type="capacity-reservation"), client=NoCalls()) is None
    assert pending_block(config(capacity_type="on-demand", capacity_reservation_id=None), client=NoCalls()) is None


def _nodegroup(nodes: int = 0) -> str:
    """A cluster and its GPU node group in moto; returns the node group's Auto Scaling group."""
    eks = aws_client("eks", "us-west-2")
    role = "arn:aws:iam::123456789012:role/eks"
    eks.create_cluster(name="demo", roleArn=role, resourcesVpcConfig={"subnetIds": ["subnet-1", "subnet-2"]})
    group = eks.create_nodegroup(
        clusterName="demo",
        nodegroupName="gpu",
        nodeRole=role,
        subnets=["subnet-1"],
        scalingConfig={"minSize": 0, "maxSize": 2, "desiredSize": nodes},
    )["nodegroup"]
    (asg,) = group["resources"]["autoScalingGroups"]
    autoscaling = aws_client("autoscaling", "us-west-2")
    ec2 = aws_client("ec2", "us-west-2")
    template = ec2.create_launch_template(
        LaunchTemplateName="gpu", LaunchTemplateData={"ImageId": "ami-12c6146b", "InstanceType": "p5.48xlarge"}
    )["LaunchTemplate"]["LaunchTemplateId"]
    autoscaling.create_auto_scaling_group(  # what EKS makes behind a managed node group
        AutoScalingGroupName=asg["name"],
        LaunchTemplate={"LaunchTemplateId": template},
        MinSize=0,
        MaxSize=2,
        DesiredCapacity=nodes,
        AvailabilityZones=["us-west-2b"],
    )
    return str(asg["name"])


def test_up_schedules_the_node_group_to_scale_at_the_start_and_to_zero_before_the_end(aws: str) -> None:
    asg = _nodegroup()
    said: list[str] = []
    block = BlockSchedule(BLOCK, STARTS, ENDS, 2)
    assert schedule_scaling(config(), block, "gpu", progress=said.append, now=lambda: NOW) == [asg]
    actions = aws_client("autoscaling", "us-west-2").describe_scheduled_actions(AutoScalingGroupName=asg)
    by_name = {a["ScheduledActionName"]: a for a in actions["ScheduledUpdateGroupActions"]}
    assert set(by_name) == {SCALE_UP_ACTION, SCALE_DOWN_ACTION}
    assert by_name[SCALE_UP_ACTION]["DesiredCapacity"] == 2 and by_name[SCALE_UP_ACTION]["StartTime"] == STARTS
    assert by_name[SCALE_DOWN_ACTION]["DesiredCapacity"] == 0
    assert by_name[SCALE_DOWN_ACTION]["StartTime"] == ENDS - DRAIN_BEFORE_END
    assert said and "scales to 2 at 2026-12-06T17:00+00:00" in said[-1]
    # idempotent: up again puts the same two actions
    schedule_scaling(config(), block, "gpu", now=lambda: NOW)
    again = aws_client("autoscaling", "us-west-2").describe_scheduled_actions(AutoScalingGroupName=asg)
    assert len(again["ScheduledUpdateGroupActions"]) == 2


def test_a_start_already_past_scales_the_node_group_now(aws: str) -> None:
    _nodegroup()
    block = BlockSchedule(BLOCK, NOW - dt.timedelta(minutes=5), ENDS, 2)
    schedule_scaling(config(), block, "gpu", now=lambda: NOW)
    group = aws_client("eks", "us-west-2").describe_nodegroup(clusterName="demo", nodegroupName="gpu")["nodegroup"]
    assert group["scalingConfig"]["desiredSize"] == 2


def test_the_plan_of_up_creates_the_group_empty_and_up_schedules_it(
    aws: str, stubbed: Any, monkeypatch: pytest.MonkeyPatch, tmp_path: Any
) -> None:
    import fsdp_sdk.aws.capacity_block as capacity_block
    from fsdp_sdk import Client
    from fsdp_sdk.plugins import DEFAULT_PLUGINS, build_plugins
    from fsdp_sdk.preflight import PreflightResult
    from fsdp_sdk.workflows.context import Context

    ec2 = described(stubbed)
    monkeypatch.setattr(capacity_block, "aws_client", lambda service, region: ec2 if service == "ec2" else None)
    monkeypatch.setattr(capacity_block, "_utcnow", lambda: NOW)
    waiting = PreflightResult(
        "capacity-reservation", False, f"Capacity Block {BLOCK}: scheduled; it starts at ...", severity="warning"
    )
    # the plan's checks (the Client's workflows run them through their shared Context)
    monkeypatch.setattr(Context, "preflight", lambda self, action="up", resolved=None: [waiting])
    plugins = build_plugins(autoload=False, default_plugins=(*DEFAULT_PLUGINS, "fsdp_sdk_eksctl.plugin"))
    client = Client.from_dict(
        {
            "cluster": {
                "backend": "eksctl",
                "name": "demo",
                "instance_type": "p5.48xlarge",
                "nodes": 2,
                "capacity_type": "capacity-block",
                "capacity_reservation_id": BLOCK,
                "availability_zones": ["us-west-2b", "us-west-2a"],
                "checkpoint_bucket": "ckpt-demo",
                "state_dir": str(tmp_path / "state"),
            }
        },
        plugins=plugins,
    )
    plan = client.plan()
    assert plan.filled["cluster.nodes"] == 0 and plan.filled["cluster.max_nodes"] == 2
    (cluster_config,) = [r for r in plan.resources if r.get("kind") == "ClusterConfig"]
    gpu = next(g for g in cluster_config["managedNodeGroups"] if g["name"] == "gpu")
    assert (gpu["desiredCapacity"], gpu["maxSize"]) == (0, 2)
    assert plan.details["capacity_block"] == BlockSchedule(BLOCK, STARTS, ENDS, 2).to_dict()
    assert any(step.startswith(f"Capacity Block {BLOCK} starts at") for step in plan.steps)
