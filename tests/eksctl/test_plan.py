"""The backend's plan (pure): the rendered ClusterConfig, the steps in order, the hourly cost, the facts apply uses."""

from __future__ import annotations

import datetime
from pathlib import Path

import pytest

from fsdp_sdk import pins
from fsdp_sdk.pins import default_kubernetes_version, pin
from fsdp_sdk_eksctl.backend import EksctlBackend
from fsdp_sdk_eksctl.render import render_cluster_config

from .helpers import RESERVATION, ZONES, configure, resolve


@pytest.fixture(autouse=True)
def on_the_tables_date(monkeypatch: pytest.MonkeyPatch) -> None:
    """Price as of the pins table's date, whatever day the suite runs."""
    monkeypatch.setattr(pins, "today", pins.table_date)


def test_the_plan_of_the_seed_p4de_cluster(tmp_path: Path) -> None:
    config, instance = configure(
        **{
            "cluster.instance_type": "p4de.24xlarge",
            "cluster.capacity_reservation_id": RESERVATION,
            "cluster.availability_zones": ZONES,
            "cluster.state_dir": str(tmp_path / "state"),
        }
    )
    plan = EksctlBackend().plan(resolve(config))
    root = tmp_path / "state" / "eksctl" / "demo"
    assert plan.backend == "eksctl" and plan.cluster == "demo"
    assert plan.resources == [render_cluster_config(config, instance)]
    assert plan.steps == [
        f"write the eksctl ClusterConfig to {root / 'cluster.yaml'}",
        f"eksctl create cluster: EKS {default_kubernetes_version()} control plane in us-west-2 "
        "(us-west-2b, us-west-2a, us-west-2c), "
        "VPC 192.168.0.0/16, IAM OIDC provider, add-ons vpc-cni latest, coredns latest, kube-proxy latest, "
        "eks-pod-identity-agent latest",
        "node group 'system': 2 x m5.xlarge, private subnets",
        f"node group 'gpu': 2 x p4de.24xlarge (min 0, max 2) in us-west-2b, capacity reservation {RESERVATION}, "
        "EFA (4 interfaces each), AmazonLinux2023 accelerated AMI, 500 GiB gp3 on /dev/xvda, "
        "local NVMe (8000 GB) as RAID0 at /mnt/k8s-disks/0, tainted nvidia.com/gpu=true:NoSchedule, private subnets",
        "GPU nodes in no placement group (a reservation places them)",
        f"apply the nvidia-device-plugin DaemonSet on the GPU nodes ({pin('nvidia-device-plugin').image_ref()})",
        "apply the aws-efa-k8s-device-plugin DaemonSet on the GPU nodes "
        f"({pin('efa-device-plugin').image_ref(eks_registry='602401143452.dkr.ecr.us-west-2.amazonaws.com')})",
        "on an existing cluster: create the missing node groups and scale the others to these sizes, nothing else",
    ]
    # 2 x $27.45 + 2 x m5.xlarge $0.192 + the control plane $0.10
    assert plan.hourly_cost_usd == 55.38
    cost = plan.details["cost"]
    assert cost["gpu_nodes_usd_per_hour"] == 54.9 and cost["system_nodes_usd_per_hour"] == 0.384
    assert any("billed at the on-demand rate for every reserved instance" in n for n in cost["notes"])
    assert plan.details["config_file"] == str(root / "cluster.yaml")
    assert plan.details["kubeconfig"] == str(root / "kubeconfig")
    assert plan.details["nodegroups"] == {
        "system": {"instance_type": "m5.xlarge", "nodes": 2, "min": 2, "max": 2},
        "gpu": {"instance_type": "p4de.24xlarge", "nodes": 2, "min": 0, "max": 2},
    }
    assert plan.details["create_cluster"] == [
        "eksctl",
        "create",
        "cluster",
        "-f",
        str(root / "cluster.yaml"),
        "--write-kubeconfig=false",
        "--install-nvidia-plugin=false",
        "--timeout",
        "40m",
    ]
    assert [o["kind"] for o in plan.kubernetes] == ["DaemonSet", "DaemonSet"]
    assert not (tmp_path / "state").exists()


def test_an_unpriced_instance_type_gives_no_total() -> None:
    config, _ = configure(
        **{
            "cluster.instance_type": "p5e.48xlarge",
            "cluster.capacity_type": "capacity-block",
            "cluster.capacity_reservation_id": RESERVATION,
            "cluster.system_instance_type": "r7i.large",
        }
    )
    plan = EksctlBackend().plan(resolve(config))
    assert plan.hourly_cost_usd is None
    notes = plan.details["cost"]["notes"]
    assert "p5e.48xlarge has no on-demand list price: GPU nodes not priced" in notes
    assert "system nodes (r7i.large) not priced: not in the price table" in notes
    assert any(n.startswith("a Capacity Block is paid upfront") for n in notes)
    assert any("Capacity Block cr-0123456789abcdef0" in step for step in plan.steps)


def test_eksctls_own_placement_group_is_in_the_plan() -> None:
    config, _ = configure(**{"cluster.instance_type": "p5.48xlarge"})
    steps = EksctlBackend().plan(resolve(config)).steps
    assert "GPU nodes in a cluster placement group eksctl adds to the node group's stack (EFA, no reservation)" in steps
    named, _ = configure(
        **{
            "cluster.capacity_reservation_id": RESERVATION,
            "cluster.placement_group": "true",
            "eksctl.placement_group_name": "odcr-pg",
        }
    )
    assert "GPU nodes in the cluster placement group odcr-pg" in EksctlBackend().plan(resolve(named)).steps


def test_a_plugin_instance_type_is_priced_from_its_record() -> None:
    config, _ = configure(**{"cluster.instance_type": "p6-b200.48xlarge", "cluster.nodes": 16, "cluster.max_nodes": 16})
    plan = EksctlBackend().plan(resolve(config))
    assert plan.hourly_cost_usd == round(16 * 113.93 + 2 * 0.192 + 0.10, 2)
    assert [o["metadata"]["name"] for o in plan.kubernetes] == ["nvidia-device-plugin", "aws-efa-k8s-device-plugin"]


@pytest.mark.parametrize(
    "version, on, control_plane",
    [
        ("1.34", "2026-12-02", 0.10),  # the last day of standard support
        ("1.34", "2026-12-03", 0.60),  # the first of extended support
        ("1.34", "2027-12-02", 0.60),  # the last of extended support
        ("1.35", "2027-03-27", 0.10),
        ("1.35", "2027-03-28", 0.60),
    ],
)
def test_the_control_plane_is_priced_by_its_support_state_on_the_day(
    monkeypatch: pytest.MonkeyPatch, version: str, on: str, control_plane: float
) -> None:
    monkeypatch.setattr(pins, "today", lambda: datetime.date.fromisoformat(on))
    config, _ = configure(**{"cluster.kubernetes_version": version})
    plan = EksctlBackend().plan(resolve(config))
    assert plan.details["cost"]["control_plane_usd_per_hour"] == control_plane
    cost = plan.details["cost"]
    assert plan.hourly_cost_usd == round(
        cost["gpu_nodes_usd_per_hour"] + cost["system_nodes_usd_per_hour"] + control_plane, 2
    )
