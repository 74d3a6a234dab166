"""``fsdp-sdk up|status|run|scale|down --backend terraform`` end to end: the real terraform binary on the
local-only configuration (the EKS cluster and node groups in moto), the preflight checks against moto,
the loopback Kubernetes API server as the cluster (``cluster.kubeconfig``) where core applies the device
plugins and etcd, a recording kubectl for the Training Operator, and the Kubernetes job layer for ``run``."""

from __future__ import annotations

import json
import os
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from fsdp_sdk.plugins import reset_plugins

from .conftest import eks_clusters, terraform_path

REGISTRY = "123456789012.dkr.ecr.us-west-2.amazonaws.com"


@pytest.fixture
def apiserver(pytorchjob_crd: Path, trainjob_crd: Path) -> Iterator[object]:
    """The loopback API server of the Kubernetes tests, validating every body against the real schemas."""
    from k8s.fake_apiserver import FakeApiServer, schema_validators

    with FakeApiServer(schema_validators(pytorchjob_crd, trainjob_crd)) as server:
        yield server


@pytest.fixture
def project(
    terraform_env: str, local_configuration: Path, apiserver, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> Path:
    """A working directory with cluster.yaml (terraform backend, local configuration, the API server's
    kubeconfig), a recording kubectl first on PATH, autoload on (the installed entry points)."""
    from k8s.tools import install_fake_tools

    work = tmp_path / "project"
    work.mkdir()
    monkeypatch.chdir(work)
    for name in list(os.environ):
        if name.startswith("FSDP_SDK_"):
            monkeypatch.delenv(name)
    bin_dir = install_fake_tools(tmp_path / "bin", tmp_path / "kubectl.jsonl", "kubectl")
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    kubeconfig = apiserver.write_kubeconfig(tmp_path / "kubeconfig")
    (work / "cluster.yaml").write_text(
        yaml.safe_dump(
            {
                "cluster": {
                    "backend": "terraform",
                    "state_dir": str(tmp_path / "state"),
                    "kubeconfig": str(kubeconfig),
                },
                "job": {"registry": REGISTRY},
                "terraform": {"configuration": str(local_configuration), "lock_timeout_s": 5},
            }
        )
    )
    reset_plugins()
    yield work
    reset_plugins()


def _cli(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    from fsdp_sdk.cli import main

    with pytest.raises(SystemExit) as exit_info:
        main(list(args))
    out, err = capsys.readouterr()
    return int(exit_info.value.code or 0), out, err


def test_up_dry_run_shows_terraforms_own_plan_and_changes_nothing(project: Path, apiserver, capsys, quota) -> None:
    quota(checks=2, prices=2)  # two dry runs
    code, out, err = _cli(capsys, "up", "-c", "cluster.yaml", "--dry-run", "--json")
    assert code == 0, err
    assert out, err
    plan = json.loads(out)["plan"]
    assert plan["backend"] == "terraform" and plan["details"]["changes"]["add"] == 3
    assert [r["address"] for r in plan["details"]["changes"]["resources"]] == [
        "terraform_data.cluster",
        "terraform_data.gpu_nodes",
        "terraform_data.system_nodes",
    ]
    assert any(step.endswith("(3 to add, 0 to change, 0 to destroy)") for step in plan["steps"])
    zones = plan["filled"]["cluster.availability_zones"]  # chosen by the preflight checks against moto
    assert zones[0].startswith("us-west-2") and len(zones) >= 2
    checks = [c["check"] for c in plan["preflight"]]
    assert checks[:4] == ["terraform", "kubectl-installed", "git-installed", "aws-installed"]
    assert checks[4:6] == ["aws-credentials", "aws-region"]
    assert [(o["kind"], o["metadata"]["name"]) for o in plan["kubernetes"]] == [
        ("DaemonSet", "nvidia-device-plugin"),
        ("DaemonSet", "aws-efa-k8s-device-plugin"),
        ("Service", "etcd"),
        ("Deployment", "etcd"),
        ("ServiceAccount", "fsdp-trainer"),
    ]
    assert plan["filled"]["cluster.checkpoint_bucket"] == "fsdp-sdk-123456789012-us-west-2-fsdp-sdk"
    assert "terraform plan (dry run): 3 to add, 0 to change, 0 to destroy" in err
    assert not (project.parent / "state" / "terraform" / "fsdp-sdk").exists() and eks_clusters() == []
    assert apiserver.writes() == []

    code, out, err = _cli(capsys, "up", "-c", "cluster.yaml", "--dry-run")
    assert code == 0, err
    assert "(3 to add, 0 to change, 0 to destroy)" in out and "dry run: nothing changed" in out


def test_up_run_status_scale_down_through_the_cli(project: Path, apiserver, capsys, tmp_path: Path, quota) -> None:
    from k8s.tools import LEADER_LINE, play_two_worker_job, recorded

    quota(checks=1, prices=1)  # up plans and checks; run and a smaller scale check nothing on AWS

    code, out, err = _cli(capsys, "up", "-c", "cluster.yaml", "--yes", "--json")
    assert code == 0, err
    status = json.loads(out)
    assert status["state"] == "ready" and status["nodes"] == 2
    assert "terraform plan: 3 to add, 0 to change, 0 to destroy" in err and "[terraform 00:" in err
    applied = sorted((w.method, w.path) for w in apiserver.writes())  # core applies them in its kind order
    assert applied == [
        ("PATCH", "/api/v1/namespaces/default/serviceaccounts/fsdp-trainer"),  # the pods' checkpoint identity
        ("PATCH", "/api/v1/namespaces/default/services/etcd"),
        ("PATCH", "/apis/apps/v1/namespaces/default/deployments/etcd"),
        ("PATCH", "/apis/apps/v1/namespaces/kube-system/daemonsets/aws-efa-k8s-device-plugin"),
        ("PATCH", "/apis/apps/v1/namespaces/kube-system/daemonsets/nvidia-device-plugin"),
    ]
    operator, pin = recorded(tmp_path / "kubectl.jsonl")
    assert operator["argv"][:3] == ["apply", "--server-side", "-k"]
    assert pin["argv"][:3] == ["patch", "deployment", "training-operator"]

    code, out, err = _cli(capsys, "status", "-c", "cluster.yaml", "--json")
    assert code == 0, err
    details = json.loads(out)["details"]
    assert details["node_groups"]["gpu"]["desired"] == 2
    assert details["checkpoint_bucket"] == "s3://fsdp-sdk-123456789012-us-west-2-fsdp-sdk (us-west-2)"

    threading.Thread(target=play_two_worker_job, args=(apiserver,), daemon=True).start()
    code, out, err = _cli(capsys, "run", "-c", "cluster.yaml", "--preset", "tiny", "--steps", "5", "--json")
    assert code == 0, err
    result = json.loads(out)
    assert result.pop("run_id") and result.pop("output_dir") is None  # a cluster run's outputs live in the pods
    assert result == {"steps": 5, "final_loss": 3.0}
    assert LEADER_LINE in err

    code, out, err = _cli(capsys, "scale", "1", "-c", "cluster.yaml", "--json")
    assert code == 0, err
    assert json.loads(out)["nodes"] == 1 and "terraform plan: 1 to add, 0 to change, 1 to destroy" in err

    code, out, err = _cli(capsys, "down", "-c", "cluster.yaml", "--yes", "--json")
    assert code == 0, err
    down = json.loads(out)
    assert down["state"] == "absent" and eks_clusters() == []
    assert down["details"]["checkpoint_bucket"].endswith("(kept; 'down --delete-checkpoints' deletes it)")
    assert not (project.parent / "state" / "terraform" / "fsdp-sdk").exists()


def test_without_terraform_up_is_one_line_saying_how_to_install_it(project: Path, capsys, monkeypatch, quota) -> None:
    quota(checks=1, prices=0)  # the preflight checks all run, then stop the command
    path = [
        p for p in os.environ["PATH"].split(os.pathsep) if p and terraform_path() and not Path(p, "terraform").exists()
    ]
    monkeypatch.setenv("PATH", os.pathsep.join(path))
    code, out, err = _cli(capsys, "up", "-c", "cluster.yaml")
    assert code == 2 and out == ""
    line = err.strip().splitlines()[-1]
    assert line.startswith("Error: preflight failed: [error] terraform: is not installed (not found on PATH); ")
    assert line.endswith("install Terraform 1.5 or newer: https://developer.hashicorp.com/terraform/install")
    assert eks_clusters() == []
