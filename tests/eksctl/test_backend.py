"""The backend against moto: a recording eksctl creates and deletes the cluster in the moto server, the loopback
API server stands for the cluster's Kubernetes; exact eksctl command lines, streamed output, reconciliation,
scaling within bounds, status from boto3, and one-line errors."""

from __future__ import annotations

import json
import re
import stat
from pathlib import Path
from typing import Any

import pytest
import yaml

from fsdp_sdk.aws.session import aws_client
from fsdp_sdk.errors import BackendError, ConfigError, PreflightError
from k8s.fake_apiserver import FakeApiServer

from .helpers import RESERVATION, AwsAnswers, Session, Tools, aws_resources

pytestmark = pytest.mark.usefixtures("eksctl_env")


@pytest.fixture
def loopback(apiserver: FakeApiServer, tmp_path: Path) -> Path:
    """A kubeconfig of the loopback API server (``cluster.kubeconfig``: where core prepares the cluster)."""
    return apiserver.write_kubeconfig(tmp_path / "loopback-kubeconfig")


def session(loopback: Path, **overrides: Any) -> Session:
    return Session(**{"cluster.kubeconfig": str(loopback), "cluster.instance_type": "p4de.24xlarge", **overrides})


def state_root(eksctl_env: Path) -> Path:
    return eksctl_env / "eksctl" / "demo"


def test_up_creates_the_cluster_with_eksctl_then_core_prepares_it(
    eksctl_env: Path, tools: Tools, answers: AwsAnswers, apiserver: FakeApiServer, loopback: Path
) -> None:
    s = session(loopback)
    plan = s.client.plan()
    assert plan.filled == {
        "cluster.availability_zones": ["us-west-2a", "us-west-2b", "us-west-2c"],
        "cluster.checkpoint_bucket": "fsdp-sdk-123456789012-us-west-2-demo",  # named after the account
    }
    assert tools.eksctl() == [] and aws_resources()["clusters"] == []  # planning created nothing
    assert aws_client("s3", "us-west-2").list_buckets()["Buckets"] == []

    status = s.client.up(plan)

    root = state_root(eksctl_env)
    assert tools.eksctl() == [
        [
            "create",
            "cluster",
            "-f",
            str(root / "cluster.yaml"),
            "--write-kubeconfig=false",
            "--install-nvidia-plugin=false",
            "--timeout",
            "40m",
        ]
    ]
    written = yaml.safe_load((root / "cluster.yaml").read_text())
    assert written == plan.resources[0]
    assert written["availabilityZones"] == ["us-west-2a", "us-west-2b", "us-west-2c"]
    assert aws_resources() == {
        "clusters": ["demo"],
        "nodegroups": ["demo/gpu", "demo/system"],
        "stacks": ["eksctl-demo-cluster", "eksctl-demo-nodegroup-gpu", "eksctl-demo-nodegroup-system"],
    }
    # eksctl's output streamed as it came, with the elapsed time
    streamed = [line for line in s.lines if line.startswith("[eksctl ")]
    assert re.fullmatch(r"\[eksctl 00:0\d\] 2026-12-01 12:00:00 \[.\]  eksctl version 0\.210\.0", streamed[0])
    assert streamed[-1].endswith('EKS cluster "demo" in "us-west-2" region is ready')
    # core: the plan's Kubernetes objects (the NVIDIA device plugin, etcd), then the Training Operator
    applied = [(w.path.split("/")[-3], w.path.split("/")[-1]) for w in apiserver.writes()]
    assert sorted(applied) == [
        ("default", "etcd"),
        ("default", "etcd"),
        ("default", "fsdp-trainer"),  # the ServiceAccount of the training pods (EKS Pod Identity)
        ("kube-system", "aws-efa-k8s-device-plugin"),
        ("kube-system", "nvidia-device-plugin"),
    ]
    buckets = [b["Name"] for b in aws_client("s3", "us-west-2").list_buckets()["Buckets"]]
    assert buckets == ["fsdp-sdk-123456789012-us-west-2-demo"]
    operator, pin = tools.calls("kubectl")
    assert operator[:3] == ["apply", "--server-side", "-k"] and operator[-2:] == ["--kubeconfig", str(loopback)]
    # then kept on the system node group, like etcd
    assert pin[:3] == ["patch", "deployment", "training-operator"] and '"fsdp-sdk.io/node-role":"system"' in pin[8]
    assert status.ready and status.nodes == 2 and status.endpoint.startswith("https://")
    assert json.loads((root / "state.json").read_text())["phase"] == "ready"


def test_the_kubeconfig_is_written_from_describe_cluster(
    eksctl_env: Path, tools: Tools, answers: AwsAnswers, loopback: Path
) -> None:
    session(loopback).up()
    path = state_root(eksctl_env) / "kubeconfig"
    cluster = aws_client("eks", "us-west-2").describe_cluster(name="demo")["cluster"]
    document = json.loads(path.read_text())
    assert document["clusters"] == [
        {
            "name": cluster["arn"],
            "cluster": {
                "server": cluster["endpoint"],
                "certificate-authority-data": cluster["certificateAuthority"]["data"],
            },
        }
    ]
    assert document["users"][0]["user"]["exec"]["args"] == [
        "--region",
        "us-west-2",
        "eks",
        "get-token",
        "--cluster-name",
        "demo",
        "--output",
        "json",
    ]
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert (
        not (Path.home() / ".kube" / "config").exists() or "demo" not in (Path.home() / ".kube" / "config").read_text()
    )


def test_up_on_an_existing_cluster_creates_missing_node_groups_and_scales_the_others(
    eksctl_env: Path, tools: Tools, answers: AwsAnswers, loopback: Path
) -> None:
    session(loopback).up()
    aws_client("eks", "us-west-2").delete_nodegroup(clusterName="demo", nodegroupName="gpu")  # as eksctl would
    aws_client("cloudformation", "us-west-2").delete_stack(StackName="eksctl-demo-nodegroup-gpu")
    s = session(loopback, **{"cluster.system_nodes": 3})
    status = s.up()
    root = state_root(eksctl_env)
    assert tools.eksctl()[1:] == [
        [
            "create",
            "nodegroup",
            "-f",
            str(root / "cluster.yaml"),
            "--include",
            "gpu",
            "--install-nvidia-plugin=false",
            "--timeout",
            "40m",
        ],
        [
            "scale",
            "nodegroup",
            "--cluster",
            "demo",
            "--region",
            "us-west-2",
            "--name",
            "system",
            "--nodes",
            "3",
            "--nodes-min",
            "3",
            "--nodes-max",
            "3",
            "--wait",
            "--timeout",
            "40m",
        ],
    ]
    assert s.said("EKS cluster demo exists: created node group(s) gpu; scaled system from 2 to 3 nodes (min 3, max 3)")
    rows = {row["name"]: row for row in status.details["nodegroups"]}
    assert rows["system"]["nodes"] == 3 and rows["gpu"]["nodes"] == 2 and status.ready


def test_a_node_group_of_another_instance_type_is_refused(
    eksctl_env: Path, tools: Tools, answers: AwsAnswers, loopback: Path
) -> None:
    session(loopback).up()
    with pytest.raises(BackendError) as error:
        session(loopback, **{"cluster.instance_type": "p5.48xlarge"}).up()
    assert str(error.value).startswith(
        "eksctl: node group gpu of demo runs p4de.24xlarge, not the planned p5.48xlarge; eksctl cannot change"
    )
    assert "\n" not in str(error.value) and len(tools.eksctl()) == 1


def test_scale_uses_eksctl_within_min_and_max(
    eksctl_env: Path, tools: Tools, answers: AwsAnswers, loopback: Path
) -> None:
    bounds = {"cluster.min_nodes": 1, "cluster.max_nodes": 4}
    session(loopback, **bounds).up()
    client = session(loopback, **bounds).client
    with pytest.raises(ConfigError) as error:
        client.scale(5)
    assert str(error.value) == (
        "nodes: 5 is outside cluster.min_nodes..cluster.max_nodes (1..4); pick a number in that range, "
        "or change cluster.min_nodes / cluster.max_nodes"
    )
    assert client.scale(3, dry_run=True).nodes == 2
    status = client.scale(4)
    assert tools.eksctl()[1:] == [
        [
            "scale",
            "nodegroup",
            "--cluster",
            "demo",
            "--region",
            "us-west-2",
            "--name",
            "gpu",
            "--nodes",
            "4",
            "--nodes-min",
            "1",
            "--nodes-max",
            "4",
            "--wait",
            "--timeout",
            "40m",
        ]
    ]
    assert status.nodes == 4 and status.ready


def test_scale_without_a_cluster_is_one_line(eksctl_env: Path, tools: Tools, answers: AwsAnswers) -> None:
    with pytest.raises(BackendError, match=r"^eksctl: no EKS cluster demo in us-west-2 to scale; run 'fsdp-sdk up"):
        Session().client.scale(1)
    assert tools.eksctl() == []


def test_status_reports_node_groups_add_ons_and_health_issues(
    eksctl_env: Path, tools: Tools, answers: AwsAnswers, loopback: Path
) -> None:
    session(loopback).up()
    client = session(loopback).client
    status = client.status()
    assert status.ready and status.details["cluster_status"] == "ACTIVE"
    assert status.details["nodegroups"] == [
        {
            "name": "gpu",
            "status": "ACTIVE",
            "instance_type": "p4de.24xlarge",
            "capacity": "ON_DEMAND",
            "nodes": 2,
            "min": 0,
            "max": 2,
            "health": "ok",
        },
        {
            "name": "system",
            "status": "ACTIVE",
            "instance_type": "m5.xlarge",
            "capacity": "ON_DEMAND",
            "nodes": 2,
            "min": 2,
            "max": 2,
            "health": "ok",
        },
    ]
    assert [a["name"] for a in status.details["addons"]] == ["coredns", "kube-proxy", "vpc-cni"]
    answers.addons["coredns"] = ("v1.11.4-eksbuild.2", "DEGRADED")
    answers.nodegroup_issues["gpu"] = [
        {"code": "Ec2InsufficientCapacity", "message": "Insufficient capacity.", "resourceIds": ["i-0123"]}
    ]
    status = client.status()
    assert status.state == "degraded"
    assert status.details["problems"] == [
        "node group gpu: Ec2InsufficientCapacity: Insufficient capacity.",
        "add-on coredns is DEGRADED: InsufficientNumberOfReplicas: 0 of 2 ready",
    ]


def test_an_eksctl_failure_is_one_line_naming_the_step_and_its_last_lines(
    eksctl_env: Path, tools: Tools, answers: AwsAnswers, loopback: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("FAKE_EKSCTL_FAULT", "create-fails")
    with pytest.raises(BackendError) as error:
        session(loopback).up()
    message = str(error.value)
    assert "\n" not in message
    assert message.startswith("eksctl exited with status 1 while it tried to create the EKS cluster demo: ")
    assert 'unexpected status "ROLLBACK_IN_PROGRESS"' in message
    assert message.endswith("; 'fsdp-sdk up' tries again, 'fsdp-sdk down' deletes what was created")
    assert json.loads((state_root(eksctl_env) / "state.json").read_text())["phase"] == "failed"


def test_a_cluster_eksctl_did_not_create_is_left_alone(
    eksctl_env: Path, tools: Tools, answers: AwsAnswers, loopback: Path
) -> None:
    aws_client("eks", "us-west-2").create_cluster(
        name="demo",
        roleArn="arn:aws:iam::123456789012:role/terraform",
        resourcesVpcConfig={"subnetIds": ["subnet-1"]},
    )
    for attempt in (lambda: session(loopback).up(), lambda: Session().client.down()):
        with pytest.raises(BackendError, match="exists but eksctl did not create it"):
            attempt()
    assert tools.eksctl() == [] and aws_resources()["clusters"] == ["demo"]


def test_on_a_running_cluster_the_checks_count_only_the_nodes_up_adds(
    eksctl_env: Path, tools: Tools, answers: AwsAnswers, loopback: Path
) -> None:
    reserved = {"cluster.capacity_reservation_id": RESERVATION}
    answers.reserve(AvailableInstanceCount=2)
    session(loopback, **reserved).up()
    answers.reserve(AvailableInstanceCount=0)  # the cluster's two nodes hold the reservation now
    s = session(loopback, **reserved)
    plan = s.client.plan()
    checks = {r.check: r for r in plan.preflight}
    assert checks["existing-gpu-nodes"].message == (
        "cluster demo already runs 2 x p4de.24xlarge: the quota and reservation checks count the 0 node(s) the plan adds"
    )
    assert checks["capacity-reservation"].ok
    s.client.up(plan)
    assert s.said("EKS cluster demo exists and matches the plan: nothing to change")
    with pytest.raises(PreflightError, match=r"has 0 free instance\(s\) for 1 node\(s\)"):
        session(loopback, **reserved, **{"cluster.nodes": 3, "cluster.max_nodes": 3}).client.plan()
    assert [argv[:2] for argv in tools.eksctl()] == [["create", "cluster"]]
