"""``fsdp-sdk monitor install/status/uninstall/top/open`` against the loopback Kubernetes API server."""

from __future__ import annotations

import base64
import json
import os
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from k8s.fake_apiserver import FakeApiServer
from k8s.tools import cli, install_fake_tools, recorded

pytestmark = pytest.mark.usefixtures("isolated")

NS = "monitoring"


@pytest.fixture
def kubeconfig(apiserver: FakeApiServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    path = apiserver.write_kubeconfig(tmp_path / "kubeconfig")
    monkeypatch.setenv("KUBECONFIG", str(path))
    return path


def _applied(server: FakeApiServer) -> list[tuple[str, str]]:
    return [(w.body["kind"], w.body["metadata"]["name"]) for w in server.writes() if w.method == "PATCH"]


def test_dry_run_prints_the_objects_and_contacts_nothing(
    apiserver: FakeApiServer, kubeconfig: Path, capsys: Any
) -> None:
    code, out, err = cli(capsys, "monitor", "install", "--dry-run")
    assert code == 0, err
    docs = list(yaml.safe_load_all(out))
    kinds = [d["kind"] for d in docs]
    assert kinds[0] == "Namespace" and kinds.count("Namespace") == 1
    assert kinds.index("ClusterRole") < kinds.index("ConfigMap") < kinds.index("Service") < kinds.index("Deployment")
    assert apiserver.requests == []
    code, out, err = cli(capsys, "monitor", "install", "cloudwatch", "--dry-run")
    assert code == 0, err
    assert "would enable the EKS add-on amazon-cloudwatch-observability" in out and "EKS Pod Identity" in out


def test_install_applies_in_order_generates_the_password_once(
    apiserver: FakeApiServer, kubeconfig: Path, capsys: Any
) -> None:
    code, out, err = cli(capsys, "monitor", "install")
    assert code == 0, err
    applied = _applied(apiserver)
    assert applied[0] == ("Namespace", NS)
    order = [kind for kind, _ in applied]
    assert (
        order.index("ServiceAccount")
        < order.index("ClusterRoleBinding")
        < order.index("Secret")
        < order.index("DaemonSet")
    )
    assert {
        ("DaemonSet", "dcgm-exporter"),
        ("Deployment", "prometheus"),
        ("Deployment", "grafana"),
        ("DaemonSet", "htop"),
        ("DaemonSet", "nvtop"),
    } <= set(applied)
    assert all(w.query["fieldManager"] == ["fsdp-sdk"] for w in apiserver.writes())
    secret = apiserver.get("v1", "Secret", "grafana-admin", NS)
    password = base64.b64decode(secret["data"]["admin-password"]).decode()
    assert len(password) >= 24 and password != "admin"
    assert password not in out + err
    # installing again keeps the password (Grafana keeps it in its database after the first start)
    code, out, err = cli(capsys, "monitor", "install", "grafana")
    assert code == 0, err
    again = apiserver.get("v1", "Secret", "grafana-admin", NS)
    assert base64.b64decode(again["data"]["admin-password"]).decode() == password


def test_status_reports_readiness_then_uninstall_removes_in_reverse(
    apiserver: FakeApiServer, kubeconfig: Path, capsys: Any
) -> None:
    code, out, _ = cli(capsys, "monitor", "status", "--json")
    assert code == 1 and not json.loads(out)["healthy"]
    assert cli(capsys, "monitor", "install")[0] == 0
    code, out, _ = cli(capsys, "monitor", "status")
    assert code == 1 and "dcgm-exporter" in out and "Deployment/grafana in monitoring: 0 of 1 ready" in out
    for name in ("prometheus", "grafana"):
        apiserver.set_status("apps/v1", "Deployment", name, {"readyReplicas": 1}, NS)
    for name in ("dcgm-exporter", "htop", "nvtop"):
        apiserver.set_status("apps/v1", "DaemonSet", name, {"numberReady": 2, "desiredNumberScheduled": 2}, NS)
    code, out, err = cli(capsys, "monitor", "status", "--json")
    assert code == 0, out + err
    status = json.loads(out)
    assert status["healthy"] and [c["name"] for c in status["components"]] == [
        "dcgm-exporter",
        "prometheus",
        "grafana",
        "node-tools",
    ]
    apiserver.requests.clear()
    code, out, err = cli(capsys, "monitor", "uninstall", "--json")
    assert code == 0, err
    deletes = [w.path for w in apiserver.writes() if w.method == "DELETE"]
    assert deletes and all("/namespaces/monitoring" in p or "clusterrole" in p for p in deletes)
    assert not any(p.endswith("/namespaces/monitoring") for p in deletes)  # the namespace stays
    assert deletes.index(next(p for p in deletes if p.endswith("deployments/grafana"))) < deletes.index(
        next(p for p in deletes if p.endswith("secrets/grafana-admin"))
    )
    assert apiserver.objects("Deployment") == [] and apiserver.objects("ClusterRole") == []
    assert [o["metadata"]["name"] for o in apiserver.objects("Namespace")] == [NS]


def test_uninstalling_one_component_keeps_the_others(apiserver: FakeApiServer, kubeconfig: Path, capsys: Any) -> None:
    assert cli(capsys, "monitor", "install")[0] == 0
    code, _, err = cli(capsys, "monitor", "uninstall", "node-tools")
    assert code == 0, err
    assert {o["metadata"]["name"] for o in apiserver.objects("DaemonSet")} == {"dcgm-exporter"}
    assert apiserver.get("apps/v1", "Deployment", "grafana", NS) is not None


def test_unknown_component_is_a_usage_error(apiserver: FakeApiServer, kubeconfig: Path, capsys: Any) -> None:
    code, _, err = cli(capsys, "monitor", "install", "grafna")
    assert code == 2
    assert "unknown monitoring component 'grafna'" in err and "choose from: dcgm-exporter, prometheus, grafana" in err
    assert apiserver.writes() == []


def test_prometheus_operator_is_discovered(
    operator_apiserver: FakeApiServer, tmp_path: Path, monkeypatch: Any, capsys: Any
) -> None:
    monkeypatch.setenv("KUBECONFIG", str(operator_apiserver.write_kubeconfig(tmp_path / "kubeconfig")))
    code, out, err = cli(capsys, "monitor", "install", "--json")
    assert code == 0, err
    assert json.loads(out)["prometheus_operator"] is True
    applied = _applied(operator_apiserver)
    assert ("ServiceMonitor", "dcgm-exporter") in applied and ("PodMonitor", "fsdp-trainer") in applied
    assert ("Deployment", "prometheus") not in applied and ("Deployment", "grafana") in applied
    grafana = operator_apiserver.get("v1", "ConfigMap", "grafana-provisioning", NS)
    assert "http://prometheus-operated.monitoring.svc:9090" in grafana["data"]["datasources.yaml"]


def test_setting_overrides_discovery(
    operator_apiserver: FakeApiServer, tmp_path: Path, monkeypatch: Any, capsys: Any
) -> None:
    monkeypatch.setenv("KUBECONFIG", str(operator_apiserver.write_kubeconfig(tmp_path / "kubeconfig")))
    code, _, err = cli(capsys, "monitor", "install", "prometheus", "--set", "observability.prometheus_operator=false")
    assert code == 0, err
    assert ("Deployment", "prometheus") in _applied(operator_apiserver)


@pytest.fixture
def kubectl(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A recording kubectl; ``port-forward`` prints kubectl's 'Forwarding from' line, as the real one does."""
    log = tmp_path / "kubectl.jsonl"
    bin_dir = tmp_path / "bin"
    install_fake_tools(bin_dir, log, "kubectl")
    script = bin_dir / "kubectl"
    script.write_text(
        script.read_text().replace(
            "code = int(",
            "if 'port-forward' in sys.argv:\n"
            "    local, remote = sys.argv[sys.argv.index('port-forward') + 4].split(':')\n"
            "    print(f'Forwarding from 127.0.0.1:{local} -> {remote}', flush=True)\n"
            "code = int(",
        )
    )
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    return log


def test_top_execs_htop_or_nvtop_in_the_pod_on_the_node(
    apiserver: FakeApiServer, kubeconfig: Path, kubectl: Path, capsys: Any
) -> None:
    assert cli(capsys, "monitor", "install", "node-tools")[0] == 0
    for tool, node in (("htop", "ip-10-0-1-1"), ("htop", "ip-10-0-1-2"), ("nvtop", "ip-10-0-1-2")):
        apiserver.put(
            {
                "apiVersion": "v1",
                "kind": "Pod",
                "metadata": {
                    "name": f"{tool}-{node[-1]}",
                    "namespace": NS,
                    "labels": {"app.kubernetes.io/name": tool, "app.kubernetes.io/instance": "fsdp-sdk-monitoring"},
                },
                "spec": {"nodeName": node, "containers": [{"name": "tool", "image": "ubuntu"}]},
            }
        )
    code, _, err = cli(capsys, "monitor", "top", "ip-10-0-1-2", "--nvtop")
    assert code == 0, err
    code, _, err = cli(capsys, "monitor", "top", "ip-10-0-1-1")
    assert code == 0, err
    calls = [c["argv"] for c in recorded(kubectl)]
    assert calls == [
        ["--kubeconfig", str(kubeconfig), "exec", "-it", "-n", NS, "nvtop-2", "-c", "tool", "--", "nvtop"],
        ["--kubeconfig", str(kubeconfig), "exec", "-it", "-n", NS, "htop-1", "-c", "tool", "--", "htop"],
    ]
    code, _, err = cli(capsys, "monitor", "top", "ip-10-0-9-9")
    assert code == 2 and "no htop pod runs on node 'ip-10-0-9-9'; choose one of: ip-10-0-1-1, ip-10-0-1-2" in err


def test_top_exit_status_of_kubectl_is_kept(
    apiserver: FakeApiServer, kubeconfig: Path, kubectl: Path, capsys: Any, monkeypatch: Any
) -> None:
    assert cli(capsys, "monitor", "install", "node-tools")[0] == 0
    apiserver.put(
        {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {
                "name": "htop-1",
                "namespace": NS,
                "labels": {"app.kubernetes.io/name": "htop", "app.kubernetes.io/instance": "fsdp-sdk-monitoring"},
            },
            "spec": {"nodeName": "n1", "containers": [{"name": "tool", "image": "ubuntu"}]},
        }
    )
    monkeypatch.setenv("FAKE_TOOL_EXIT", "7")
    assert cli(capsys, "monitor", "top", "n1")[0] == 7


def test_open_port_forwards_and_prints_the_url(
    apiserver: FakeApiServer, kubeconfig: Path, kubectl: Path, capsys: Any
) -> None:
    code, out, err = cli(capsys, "monitor", "open", "grafana", "--port", "18300")
    assert code == 0, err
    assert out.strip() == "http://127.0.0.1:18300/d/fsdp-training"
    assert "get secret grafana-admin" in err
    [call] = recorded(kubectl)
    assert call["argv"] == [
        "--kubeconfig",
        str(kubeconfig),
        "port-forward",
        "-n",
        NS,
        "svc/grafana",
        "18300:3000",
        "--address",
        "127.0.0.1",
    ]
    code, out, err = cli(capsys, "monitor", "open", "prometheus", "--port", "19090")
    assert code == 0 and out.strip() == "http://127.0.0.1:19090/"
    code, _, err = cli(capsys, "monitor", "open", "kibana")
    assert code == 2 and "choose from: prometheus, grafana" in err


def test_open_reports_a_failing_kubectl(
    apiserver: FakeApiServer, kubeconfig: Path, kubectl: Path, capsys: Any, monkeypatch: Any
) -> None:
    monkeypatch.setenv("FAKE_TOOL_EXIT", "1")
    script = Path(kubectl.parent / "bin" / "kubectl")
    script.write_text(script.read_text().replace("print(f'Forwarding", "pass  # print(f'Forwarding"))
    code, _, err = cli(capsys, "monitor", "open", "grafana")
    assert code == 1 and "kubectl exited with status 1" in err


def test_kubectl_missing_is_a_one_line_error(
    apiserver: FakeApiServer, kubeconfig: Path, capsys: Any, monkeypatch: Any
) -> None:
    monkeypatch.setenv("PATH", str(Path(sys.executable).parent))
    code, _, err = cli(capsys, "monitor", "open", "grafana")
    assert code == 2 and "kubectl: is not installed" in err
