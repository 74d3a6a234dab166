"""``fsdp-sdk clusters``: an eksctl cluster made by ``up`` on the simulated account (moto, the recording eksctl), a
local one, read live with credentials and as last recorded without, and a torn-down one hidden unless ``--all``."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from fsdp_sdk.aws.session import reset_sessions
from k8s.fake_apiserver import FakeApiServer
from k8s.tools import cli

from .helpers import AwsAnswers, Tools

pytestmark = pytest.mark.usefixtures("eksctl_env")


def listed(capsys: pytest.CaptureFixture[str], *args: str) -> dict[tuple[str, str], dict[str, Any]]:
    code, out, err = cli(capsys, "clusters", "--json", *args)
    assert code == 0, err
    return {(c["backend"], c["name"]): c for c in json.loads(out)["clusters"]}


def test_clusters_live_recorded_and_torn_down(
    eksctl_env: Path,
    tools: Tools,
    answers: AwsAnswers,
    apiserver: FakeApiServer,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
    pod_identity: Any,
    request: pytest.FixtureRequest,
) -> None:
    monkeypatch.setenv("FSDP_SDK_CLUSTER__INSTANCE_TYPE", "p4de.24xlarge")
    monkeypatch.setenv("FSDP_SDK_CLUSTER__NAME", "team-a")
    monkeypatch.setenv("FSDP_SDK_CLUSTER__KUBECONFIG", str(apiserver.write_kubeconfig(tmp_path / "loopback")))
    monkeypatch.setenv("FSDP_SDK_JOB__REGISTRY", "123456789012.dkr.ecr.us-west-2.amazonaws.com")
    code, out, err = cli(capsys, "clusters")
    assert code == 0 and out.startswith(f"no clusters known in {eksctl_env}"), out

    code, _, err = cli(capsys, "up", "--yes", "--backend", "eksctl")
    assert code == 0, err
    code, _, err = cli(capsys, "up", "--backend", "local")  # this machine's etcd: the local cluster
    assert code == 0, err
    request.addfinalizer(lambda: cli(capsys, "down", "--backend", "local"))

    code, out, _ = cli(capsys, "clusters")
    header, *rows = out.splitlines()
    assert header.split()[:4] == ["NAME", "BACKEND", "REGION", "KUBERNETES"]
    assert any(row.startswith("team-a") and "eksctl" in row and " now" in row for row in rows), out

    found = listed(capsys)  # the newest live reading: recorded as the cluster's last known state
    assert set(found) == {("eksctl", "team-a"), ("local", "team-a")}
    eks = found["eksctl", "team-a"]
    assert eks["source"] == "live" and eks["state"] == "ready" and eks["region"] == "us-west-2"
    assert eks["instance_type"] == "p4de.24xlarge" and eks["gpu"].startswith("8x A100")
    assert eks["nodes"] >= 1 and eks["max_nodes"] >= eks["nodes"]
    assert eks["kubernetes_version"] and eks["standard_support_until"]
    assert eks["usd_per_hour"] > 0 and eks["cost_usd"] is not None and eks["since"]
    assert eks["idle_minutes"] is None  # no idle scale-to-zero asked
    assert (eks["jobs_running"], eks["jobs_queued"]) == (0, 0)  # the API server has no job yet
    assert found["local", "team-a"]["usd_per_hour"] == 0.0 and found["local", "team-a"]["state"] == "ready"

    # without credentials: what was last recorded, saying so, and nothing asked of AWS
    monkeypatch.delenv("AWS_ACCESS_KEY_ID")
    monkeypatch.delenv("AWS_SECRET_ACCESS_KEY")
    reset_sessions()
    offline = listed(capsys)["eksctl", "team-a"]
    assert offline["source"] == "recorded" and offline["state"] == "ready"
    assert offline["observed_at"] == eks["observed_at"] and "no AWS credentials" in offline["note"]
    code, out, _ = cli(capsys, "clusters")
    assert "as of" in out and "team-a (eksctl): no AWS credentials here: last recorded state" in out, out
    assert listed(capsys, "--offline")["eksctl", "team-a"]["observed_at"] == eks["observed_at"]

    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "testing")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "testing")
    reset_sessions()
    code, _, err = cli(capsys, "down", "--yes", "--backend", "eksctl")
    assert code == 0, err
    assert ("eksctl", "team-a") not in listed(capsys)
    gone = listed(capsys, "--all")["eksctl", "team-a"]
    assert gone["state"] == "absent" and gone["usd_per_hour"] == 0.0 and gone["cost_usd"] is not None
