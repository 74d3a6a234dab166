"""The CLI with the eksctl backend: ``up --dry-run`` (text and JSON) shows the plan and changes nothing; bad inputs
are one line, exit 2, and create nothing (no eksctl run, no AWS resource, no local state); ``status`` shows its
tables."""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from fsdp_sdk.aws.session import aws_client, reset_sessions
from k8s.fake_apiserver import FakeApiServer
from k8s.tools import cli

from .helpers import RESERVATION, AwsAnswers, Tools, aws_resources

pytestmark = pytest.mark.usefixtures("eksctl_env")

P4DE_ODCR = ("--set", "cluster.instance_type=p4de.24xlarge", "--set", f"cluster.capacity_reservation_id={RESERVATION}")


def test_up_dry_run_prints_the_plan_and_changes_nothing(
    eksctl_env: Path, tools: Tools, answers: AwsAnswers, capsys: pytest.CaptureFixture[str]
) -> None:
    answers.reserve()
    code, out, err = cli(capsys, "up", "--backend", "eksctl", "--dry-run", *P4DE_ODCR)
    assert code == 0, err
    lines = out.splitlines()
    assert lines[0] == "Plan for cluster 'fsdp-sdk' on backend 'eksctl':"
    assert "  [ok] eksctl-version: eksctl 0.210.0 (>= 0.205.0)" in lines
    assert any(
        line.startswith(f"  [ok] capacity-reservation: capacity reservation {RESERVATION}: active") for line in lines
    )
    assert "  chosen by the preflight checks: cluster.availability_zones=us-west-2b,us-west-2a,us-west-2c" in lines
    assert any(
        line.startswith("  4. node group 'gpu': 2 x p4de.24xlarge (min 0, max 2) in us-west-2b") for line in lines
    )
    assert "On-demand cost: $55.38/hour" in lines
    bucket = "fsdp-sdk-123456789012-us-west-2-fsdp-sdk"
    assert f"  chosen by the preflight checks: cluster.checkpoint_bucket={bucket}" in lines
    assert any(
        line.endswith(
            f"create the S3 bucket {bucket} in us-west-2 for checkpoints: versioning off, public access "
            "blocked, SSE-S3, incomplete multipart uploads aborted after 3 days"
        )
        for line in lines
    )
    assert any(
        "EKS Pod Identity association: ServiceAccount default/fsdp-trainer -> fsdp-sdk-" in line for line in lines
    )
    assert lines[-1] == "Current state: absent (dry run: nothing changed)"
    assert tools.eksctl() == [] and tools.calls("kubectl") == []
    assert aws_resources() == {"clusters": [], "nodegroups": [], "stacks": []}
    assert aws_client("s3", "us-west-2").list_buckets()["Buckets"] == []
    assert aws_client("iam", "us-west-2").list_roles(PathPrefix="/fsdp-sdk/")["Roles"] == []
    assert not eksctl_env.exists()


def test_up_dry_run_json_carries_a_valid_cluster_config(
    eksctl_env: Path,
    tools: Tools,
    answers: AwsAnswers,
    capsys: pytest.CaptureFixture[str],
    validate_cluster_config: Callable[[dict[str, Any]], list[str]],
) -> None:
    answers.reserve()
    code, out, err = cli(capsys, "up", "--backend", "eksctl", "--dry-run", "--json", *P4DE_ODCR)
    assert code == 0, err
    data = json.loads(out)
    plan = data["plan"]
    (document,) = plan["resources"]
    assert validate_cluster_config(document) == []
    assert document["managedNodeGroups"][1]["capacityReservation"] == {
        "capacityReservationTarget": {"capacityReservationID": RESERVATION}
    }
    assert plan["details"]["create_cluster"][:4] == ["eksctl", "create", "cluster", "-f"]
    assert [o["kind"] for o in plan["kubernetes"]] == [
        "DaemonSet",
        "DaemonSet",
        "Service",
        "Deployment",
        "ServiceAccount",
    ]
    checkpoints = plan["details"]["checkpoints"]
    assert (checkpoints["bucket"], checkpoints["found"], checkpoints["prefix"]) == (
        "fsdp-sdk-123456789012-us-west-2-fsdp-sdk",
        "absent",
        "default/",
    )
    assert data["status"]["state"] == "absent" and tools.eksctl() == []


BAD_INPUTS = {
    "unknown zone": (
        ("--set", "cluster.availability_zones=us-west-2z,us-west-2a"),
        None,
        "[error] aws-region: availability zone us-west-2z is not an available zone of us-west-2; "
        "set cluster.availability_zones to zones of us-west-2: us-west-2a, us-west-2b, us-west-2c, us-west-2d",
    ),
    "quota too small": (
        ("--set", "cluster.instance_type=p4de.24xlarge", "--nodes", "4", "--set", "cluster.max_nodes=4"),
        None,
        "[error] gpu-vcpu-quota: 4 x p4de.24xlarge need 384 vCPUs but the quota 'Running On-Demand P instances' "
        "(L-417A185B) in us-west-2 is 96",
    ),
    "reservation of another type": (
        P4DE_ODCR,
        {"InstanceType": "p5.48xlarge"},
        f"[error] capacity-reservation: capacity reservation {RESERVATION} is for p5.48xlarge, not p4de.24xlarge; "
        "set cluster.instance_type to p5.48xlarge",
    ),
    "reservation in another zone": (
        (*P4DE_ODCR, "--set", "cluster.availability_zones=us-west-2a,us-west-2b"),
        {},
        f"[error] capacity-reservation: capacity reservation {RESERVATION} is in us-west-2b, but the GPU nodes go to "
        "us-west-2a; put us-west-2b first in cluster.availability_zones",
    ),
    "more nodes than the reservation has": (
        (*P4DE_ODCR, "--nodes", "3", "--set", "cluster.max_nodes=3"),
        {"AvailableInstanceCount": 2},
        f"[error] capacity-reservation: capacity reservation {RESERVATION} has 2 free instance(s) for 3 node(s); "
        "set cluster.nodes to 2 or less, or extend the reservation",
    ),
}


@pytest.mark.parametrize("case", BAD_INPUTS)
def test_bad_inputs_are_one_line_exit_2_and_create_nothing(
    case: str, eksctl_env: Path, tools: Tools, answers: AwsAnswers, capsys: pytest.CaptureFixture[str]
) -> None:
    args, reservation, message = BAD_INPUTS[case]
    answers.quota_vcpus = 96
    if reservation is not None:
        answers.reserve(**reservation)
    code, _, err = cli(capsys, "up", "--backend", "eksctl", *args)
    assert code == 2, err
    assert len(err.strip().splitlines()) == 1 and err.startswith("Error: preflight failed: ")
    assert message in err
    assert tools.eksctl() == [] and tools.calls("kubectl") == []
    assert aws_resources() == {"clusters": [], "nodegroups": [], "stacks": []}
    assert not eksctl_env.exists()


def test_bad_checkpoint_buckets_are_one_line_exit_2_and_create_nothing(
    eksctl_env: Path,
    tools: Tools,
    answers: AwsAnswers,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    aws_client("s3", "eu-west-1").create_bucket(
        Bucket="far-checkpoints", CreateBucketConfiguration={"LocationConstraint": "eu-west-1"}
    )
    for args, message in (
        (
            ("--set", "cluster.checkpoint_bucket=Team_Checkpoints"),
            "Error: cluster.checkpoint_bucket (from --set): 'Team_Checkpoints' is not an S3 bucket name",
        ),
        (
            ("--set", "cluster.checkpoint_bucket=far-checkpoints"),
            "Error: cluster.checkpoint_bucket: the S3 bucket far-checkpoints is in eu-west-1, not in the cluster's "
            "region us-west-2; name a bucket of this account in us-west-2, or leave cluster.checkpoint_bucket unset",
        ),
    ):
        code, out, err = cli(capsys, "up", "--backend", "eksctl", *args)
        assert code == 2 and out == "", err
        assert len(err.strip().splitlines()) == 1 and err.startswith(message), err
    for name in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY"):
        monkeypatch.delenv(name)
    reset_sessions()  # the cached sessions hold the credentials they found
    code, _, err = cli(capsys, "up", "--backend", "eksctl")
    assert code == 2 and len(err.strip().splitlines()) == 1, err
    assert "AWS credentials: none were found" in err
    for name in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY"):
        monkeypatch.setenv(name, "testing")
    reset_sessions()
    assert tools.eksctl() == [] and tools.calls("kubectl") == []
    assert aws_resources() == {"clusters": [], "nodegroups": [], "stacks": []}
    assert [b["Name"] for b in aws_client("s3", "us-west-2").list_buckets()["Buckets"]] == ["far-checkpoints"]
    assert not eksctl_env.exists()


def test_missing_or_old_tools_are_one_line_exit_2(
    eksctl_env: Path,
    tools: Tools,
    answers: AwsAnswers,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("FAKE_EKSCTL_FAULT", "old-version")
    code, _, err = cli(capsys, "up", "--backend", "eksctl")
    assert code == 2 and len(err.strip().splitlines()) == 1
    assert (
        "[error] eksctl-version: eksctl 0.190.0 is older than 0.205.0, the first that supports Capacity Blocks and "
        "the AL2023 NVIDIA AMIs; upgrade it: install eksctl: https://eksctl.io/installation/"
    ) in err
    (tools.bin_dir / "eksctl").unlink()
    monkeypatch.setenv("PATH", f"{tools.bin_dir}{os.pathsep}/usr/bin{os.pathsep}/bin")
    (tools.bin_dir / "aws").unlink()
    code, _, err = cli(capsys, "up", "--backend", "eksctl")
    assert code == 2 and len(err.strip().splitlines()) == 1
    assert (
        "[error] eksctl-installed: eksctl is not on PATH (creates, scales and deletes the cluster); install eksctl"
        in err
    )
    assert "[error] aws-installed: aws is not on PATH" in err
    assert aws_resources()["stacks"] == [] and not eksctl_env.exists()


def test_a_bad_eksctl_setting_is_one_line_exit_2(
    eksctl_env: Path, tools: Tools, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("FSDP_SDK_EKSCTL__TIMEOUT_MINUTES", "2")
    code, _, err = cli(capsys, "up", "--backend", "eksctl", "--dry-run")
    assert code == 2
    assert err.strip() == (
        "Error: FSDP_SDK_EKSCTL__TIMEOUT_MINUTES (from environment): 2 is not between 5 and 300 minutes; "
        "set it to a number of minutes like 40"
    )
    assert tools.calls() == []


def test_status_shows_node_groups_and_add_ons_as_tables(
    eksctl_env: Path,
    tools: Tools,
    answers: AwsAnswers,
    apiserver: FakeApiServer,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    loopback = apiserver.write_kubeconfig(tmp_path / "loopback")
    flags = ("--backend", "eksctl", "--set", f"cluster.kubeconfig={loopback}")
    code, _, err = cli(capsys, "up", "--yes", *flags)
    assert code == 0, err
    code, out, err = cli(capsys, "status", *flags)
    assert code == 0, err
    lines = out.splitlines()
    assert "state: ready" in lines and "nodes: 2" in lines
    table = lines[lines.index("  nodegroups:") + 1 :][:3] if "  nodegroups:" in lines else []
    assert table == [
        "    NAME    STATUS  INSTANCE_TYPE  CAPACITY   NODES  MIN  MAX  HEALTH",
        "    gpu     ACTIVE  p5.48xlarge    ON_DEMAND  2      0    2    ok",
        "    system  ACTIVE  m5.xlarge      ON_DEMAND  2      2    2    ok",
    ]
    assert "    vpc-cni     v1.19.2-eksbuild.1  ACTIVE  ok" in lines
    code, out, _ = cli(capsys, "status", "--json", *flags)
    data = json.loads(out)
    assert data["state"] == "ready" and [g["name"] for g in data["details"]["nodegroups"]] == ["gpu", "system"]


def test_up_dry_run_shows_the_whole_plan_when_a_check_fails_and_exits_1(
    eksctl_env: Path,
    tools: Tools,
    answers: AwsAnswers,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    (tools.bin_dir / "eksctl").unlink()
    monkeypatch.setenv("PATH", f"{tools.bin_dir}{os.pathsep}/usr/bin{os.pathsep}/bin")
    answers.reserve()
    code, out, err = cli(capsys, "up", "--backend", "eksctl", "--dry-run", *P4DE_ODCR)
    assert code == 1, err
    lines = out.splitlines()
    assert (
        "  [error] eksctl-installed: eksctl is not on PATH (creates, scales and deletes the cluster); install eksctl: "
        "https://eksctl.io/installation/ (e.g. the release tarball for your platform)"
    ) in lines
    assert any(line.startswith("  [ok] capacity-reservation: ") for line in lines)  # every check on its own line
    gpu = next(line for line in lines if line.startswith("  4. node group 'gpu': 2 x p4de.24xlarge"))
    assert "500 GiB gp3 on /dev/xvda" in gpu and "RAID0 at /mnt/k8s-disks/0" in gpu and "nvidia.com/gpu=true" in gpu
    assert any("nvidia-device-plugin DaemonSet" in line and ":v" in line for line in lines)
    assert "On-demand cost: $55.38/hour" in lines
    assert lines[-1] == "'fsdp-sdk up' would stop: 1 preflight check(s) failed (dry run: nothing changed)"
    assert tools.eksctl() == [] and aws_resources() == {"clusters": [], "nodegroups": [], "stacks": []}


def test_up_asks_before_creating_a_cluster_and_refuses_without_a_terminal(
    eksctl_env: Path, tools: Tools, answers: AwsAnswers, capsys: pytest.CaptureFixture[str]
) -> None:
    code, _, err = cli(capsys, "up", "--backend", "eksctl")
    assert code == 2
    error = err.strip().splitlines()[-1]
    assert error.startswith("Error: --yes: create cluster 'fsdp-sdk' (eksctl) ($")
    assert error.endswith("/hour) needs a confirmation; pass --yes to go ahead without a prompt")
    assert "On-demand cost: $" in err  # the plan with its hourly cost came first
    assert tools.eksctl() == [] and aws_resources()["clusters"] == []
