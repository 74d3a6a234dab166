"""The kubeconfig of an EKS cluster: from DescribeCluster (moto), private, atomic, never in ~/.kube unless asked."""

from __future__ import annotations

import json
import stat
from pathlib import Path

import pytest
import yaml

from fsdp_sdk.aws.kubeconfig import eks_kubeconfig, kubeconfig_path, merge_kubeconfig
from fsdp_sdk.aws.session import aws_client
from fsdp_sdk.config import Config
from fsdp_sdk.errors import BackendError


def _create(name: str) -> dict:
    eks = aws_client("eks", "us-west-2")
    return eks.create_cluster(
        name=name,
        roleArn="arn:aws:iam::123456789012:role/eks",
        resourcesVpcConfig={"subnetIds": ["subnet-1", "subnet-2"]},
    )["cluster"]


def test_the_kubeconfig_reaches_the_cluster_with_an_exec_token(aws: str, tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    created = _create("team-a")
    config = Config.from_dict({"cluster": {"name": "team-a", "state_dir": str(tmp_path / "state")}})
    path = eks_kubeconfig(config, kubeconfig_path(config, "eksctl"))
    assert path == tmp_path / "state" / "eksctl" / "team-a" / "kubeconfig"
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    document = json.loads(path.read_text())
    (cluster,) = document["clusters"]
    assert cluster["cluster"]["server"] == created["endpoint"]
    assert cluster["cluster"]["certificate-authority-data"] == created["certificateAuthority"]["data"]
    exec_entry = document["users"][0]["user"]["exec"]
    assert exec_entry["command"] == "aws" and exec_entry["apiVersion"] == "client.authentication.k8s.io/v1beta1"
    assert exec_entry["args"] == [
        "--region",
        "us-west-2",
        "eks",
        "get-token",
        "--cluster-name",
        "team-a",
        "--output",
        "json",
    ]
    assert document["current-context"] == created["arn"]
    assert not (tmp_path / "home" / ".kube").exists()
    assert sorted(p.name for p in path.parent.iterdir()) == ["kubeconfig"]  # no temporary file left


def test_a_missing_cluster_is_one_line(aws: str, tmp_path: Path) -> None:
    config = Config.from_dict({"cluster": {"name": "nope"}})
    with pytest.raises(
        BackendError, match=r"^EKS cluster nope does not exist in us-west-2; create it with 'fsdp-sdk up'$"
    ):
        eks_kubeconfig(config, tmp_path / "kubeconfig")
    assert not (tmp_path / "kubeconfig").exists()


def test_merge_adds_the_cluster_and_keeps_the_others(aws: str, tmp_path: Path) -> None:
    _create("team-b")
    config = Config.from_dict({"cluster": {"name": "team-b"}})
    source = eks_kubeconfig(config, tmp_path / "state" / "kubeconfig")
    target = tmp_path / "kube" / "config"
    target.parent.mkdir()
    other = {"name": "other", "cluster": {"server": "https://other"}}
    target.write_text(
        yaml.safe_dump(
            {
                "apiVersion": "v1",
                "kind": "Config",
                "clusters": [other],
                "users": [],
                "contexts": [],
                "current-context": "other",
            }
        )
    )
    merge_kubeconfig(source, target)
    merge_kubeconfig(source, target)  # twice: still one entry for the cluster
    merged = yaml.safe_load(target.read_text())
    names = [c["name"] for c in merged["clusters"]]
    assert names[0] == "other" and len(names) == 2 and merged["current-context"] == names[1]
    assert stat.S_IMODE(target.stat().st_mode) == 0o600
