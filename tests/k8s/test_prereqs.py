"""``fsdp-sdk prereqs``: etcd through server-side apply, the Training Operator through kubectl, status."""

from __future__ import annotations

import json
import os
import subprocess
import time
import urllib.request
from pathlib import Path

import pytest
import yaml

from fsdp_sdk.config import Config
from fsdp_sdk.k8s.cluster_objects import _on_system_nodes, cluster_prerequisites, patch_command, render_etcd
from fsdp_sdk.monitoring import EksAddon, MonitoringComponent
from fsdp_sdk.pins import pin

from .conftest import free_port
from .fake_apiserver import FakeApiServer
from .tools import cli, install_fake_tools, recorded

OPERATOR_URL = (
    f"github.com/kubeflow/training-operator.git/manifests/overlays/standalone?ref={pin('training-operator').version}"
)


pytestmark = pytest.mark.usefixtures("isolated_cli")


@pytest.fixture
def fake_kubectl(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    log = tmp_path / "calls.jsonl"
    bin_dir = install_fake_tools(tmp_path / "bin", log, "kubectl")
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    return log


def test_dry_run_prints_yaml_and_applies_nothing(
    apiserver: FakeApiServer, kubeconfig: Path, fake_kubectl: Path, capsys
) -> None:
    code, out, err = cli(capsys, "prereqs", "install", "--dry-run")
    assert code == 0, err
    assert f"# would run: kubectl apply --server-side -k '{OPERATOR_URL}' --kubeconfig {kubeconfig}" in out
    docs = list(yaml.safe_load_all(out))
    assert [(d["kind"], d["metadata"]["name"]) for d in docs] == [("Service", "etcd"), ("Deployment", "etcd")]
    assert apiserver.requests == [] and recorded(fake_kubectl) == []


def test_install_is_server_side_and_idempotent(
    apiserver: FakeApiServer, kubeconfig: Path, fake_kubectl: Path, capsys
) -> None:
    code, _, err = cli(capsys, "prereqs", "install")
    assert code == 0, err
    writes = apiserver.writes()
    assert [(w.method, w.path) for w in writes] == [
        ("PATCH", "/api/v1/namespaces/default/services/etcd"),
        ("PATCH", "/apis/apps/v1/namespaces/default/deployments/etcd"),
    ]
    assert all(
        w.content_type == "application/apply-patch+yaml"
        and w.query["fieldManager"] == ["fsdp-sdk"]
        and w.query["force"] == ["true"]
        for w in writes
    )
    calls = recorded(fake_kubectl)
    assert calls == [
        {
            "tool": "kubectl",
            "stdin": None,
            "argv": ["apply", "--server-side", "-k", OPERATOR_URL, "--kubeconfig", str(kubeconfig)],
        },
        {
            "tool": "kubectl",
            "stdin": None,
            "argv": [
                "patch",
                "deployment",
                "training-operator",
                "--namespace",
                "kubeflow",
                "--type",
                "merge",
                "--patch",
                # a cluster of one's own (no AWS backend): the system nodes are preferred, not required
                '{"spec":{"template":{"spec":{"affinity":{"nodeAffinity":{"preferredDuringSchedulingIgnoredDuring'
                'Execution":[{"weight":100,"preference":{"matchExpressions":[{"key":"fsdp-sdk.io/node-role",'
                '"operator":"In","values":["system"]}]}}]}}}}}}',
                "--kubeconfig",
                str(kubeconfig),
            ],
        },
    ]
    first = {o["kind"]: o for o in apiserver.objects()}

    code, _, err = cli(capsys, "prereqs", "install", "--operator-version", "v1.9.1", "-n", "default")
    assert code == 0, err
    second = {o["kind"]: o for o in apiserver.objects()}
    for kind in ("Service", "Deployment"):
        assert second[kind]["spec"] == first[kind]["spec"]
        assert second[kind]["metadata"]["uid"] == first[kind]["metadata"]["uid"]  # updated in place, not recreated
    assert recorded(fake_kubectl)[2]["argv"][3].endswith("?ref=v1.9.1")


def test_install_into_another_namespace_creates_it(
    apiserver: FakeApiServer, kubeconfig: Path, fake_kubectl: Path, capsys
) -> None:
    code, _, err = cli(capsys, "prereqs", "install", "--skip-operator", "-n", "training")
    assert code == 0, err
    assert [w.path for w in apiserver.writes()] == [
        "/api/v1/namespaces/training",
        "/api/v1/namespaces/training/services/etcd",
        "/apis/apps/v1/namespaces/training/deployments/etcd",
    ]
    assert apiserver.writes()[0].body == {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "training"}}
    assert recorded(fake_kubectl) == []


def test_kubectl_failure_is_reported(
    apiserver: FakeApiServer, kubeconfig: Path, fake_kubectl: Path, monkeypatch: pytest.MonkeyPatch, capsys
) -> None:
    monkeypatch.setenv("FAKE_TOOL_EXIT", "1")
    code, _, err = cli(capsys, "prereqs", "install")
    assert code == 1 and "kubectl exited with status 1 while it tried to install the Kubeflow Training Operator" in err
    assert err.strip().splitlines()[-1].endswith("error: kubectl apply failed here")


def test_status_reports_what_is_missing_then_healthy(
    apiserver: FakeApiServer, kubeconfig: Path, fake_kubectl: Path, pytorchjob_crd: Path, capsys
) -> None:
    code, out, _ = cli(capsys, "prereqs", "status", "--json")
    report = json.loads(out)
    assert code == 1 and report["healthy"] is False and len(report["problems"]) == 4

    cli(capsys, "prereqs", "install")
    apiserver.set_status("apps/v1", "Deployment", "etcd", {"readyReplicas": 1})
    apiserver.put(
        {
            "apiVersion": "apps/v1",
            "kind": "Deployment",
            "metadata": {"name": "training-operator", "namespace": "kubeflow"},
            "spec": {
                "selector": {"matchLabels": {"a": "b"}},
                "template": {
                    "metadata": {"labels": {"a": "b"}},
                    "spec": {
                        "containers": [{"name": "training-operator", "image": "kubeflow/training-operator:v1-855e096"}]
                    },
                },
            },
            "status": {"readyReplicas": 1},
        }
    )
    apiserver.put(yaml.load(pytorchjob_crd.read_text(), Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader)))
    code, out, _ = cli(capsys, "prereqs", "status", "--json")
    report = json.loads(out)
    assert code == 0, report
    assert report["etcd"] == {"deployment": True, "ready_replicas": 1, "service": True}
    assert report["training_operator"]["image"] == "kubeflow/training-operator:v1-855e096"
    assert report["pytorchjob_crd"] is True and report["problems"] == []
    code, out, _ = cli(capsys, "prereqs", "status")
    assert code == 0 and "healthy: True" in out


def test_the_rendered_etcd_command_serves_the_v2_api(tmp_path: Path) -> None:
    """Run the container's exact etcd flags with the local binary (paths and ports moved to free ones)."""
    binary = "/usr/bin/etcd"
    if not os.path.exists(binary):
        pytest.skip("etcd is not installed at /usr/bin/etcd")
    config = Config()
    config.job.rdzv_port = free_port()
    container = render_etcd(config)[1]["spec"]["template"]["spec"]["containers"][0]
    peer = f"http://127.0.0.1:{free_port()}"
    command = [binary] + [
        arg.replace("/var/lib/etcd", str(tmp_path / "etcd"))
        .replace("http://127.0.0.1:2380", peer)
        .replace("0.0.0.0", "127.0.0.1")
        for arg in container["command"][1:]
    ]
    process = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        url = f"http://127.0.0.1:{config.job.rdzv_port}"
        deadline = time.monotonic() + 20
        while True:
            try:
                with urllib.request.urlopen(f"{url}/health", timeout=1) as response:  # the probes' path
                    assert json.loads(response.read())["health"] == "true"
                break
            except OSError:
                assert process.poll() is None and time.monotonic() < deadline, "etcd did not start"
                time.sleep(0.1)
        request = urllib.request.Request(f"{url}/v2/keys/probe", data=b"value=1", method="PUT")
        with urllib.request.urlopen(request, timeout=5) as response:
            assert json.loads(response.read())["node"]["value"] == "1"
    finally:
        process.terminate()
        process.wait(timeout=10)


def test_cluster_prerequisites_render_what_up_applies_in_order() -> None:
    """Pure: the backend's objects, etcd, the operator's overlay, monitoring objects, then EKS add-ons."""
    config = Config().with_overrides({"job.namespace": "training"})
    plugin = {"apiVersion": "apps/v1", "kind": "DaemonSet", "metadata": {"name": "gpu-plugin", "namespace": "x"}}
    probe = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "probe", "namespace": "monitoring"}}
    addon = EksAddon("amazon-cloudwatch-observability", "cloudwatch-agent", "amazon-cloudwatch", ["arn:p"], "role")
    components = [
        MonitoringComponent("probe", "a probe", objects=[probe]),
        MonitoringComponent("cloudwatch", "CloudWatch", objects=[], eks_addon=addon),
    ]
    found = cluster_prerequisites(config, [plugin], components)
    assert [p.name for p in found] == ["device-plugins", "etcd", "training-operator", "monitoring", "eks-addons"]
    assert [s for p in found for s in p.steps] == [
        "apply etcd (v2 API) for the rendezvous in namespace training",
        f"install the Kubeflow Training Operator {pin('training-operator').version}",
        "apply monitoring: probe, cloudwatch",
        "enable the EKS add-on amazon-cloudwatch-observability",
    ]
    assert [(o["kind"], o["metadata"]["name"]) for p in found for o in p.objects] == [
        ("DaemonSet", "gpu-plugin"),
        ("Namespace", "training"),
        ("Service", "etcd"),
        ("Deployment", "etcd"),
        ("ConfigMap", "probe"),
    ]
    assert [c for p in found for c in p.commands(kubeconfig="/k", context="c")] == [
        ["kubectl", "apply", "--server-side", "-k", OPERATOR_URL, "--kubeconfig", "/k", "--context", "c"],
        patch_command("kubeflow", "training-operator", _on_system_nodes(config), kubeconfig="/k", context="c"),
    ]
    assert found[-1].eks_addons == (addon,)
    assert cluster_prerequisites(config) == found[1:3]  # no backend objects, no monitoring: etcd and the operator


TRAINER_URL = f"github.com/kubeflow/trainer.git/manifests/overlays/manager?ref={pin('kubeflow-trainer').version}"


def test_trainjob_dry_run_lists_the_trainer_and_its_runtime(
    apiserver: FakeApiServer, kubeconfig: Path, fake_kubectl: Path, capsys
) -> None:
    code, out, err = cli(capsys, "prereqs", "install", "--dry-run", "--api", "trainjob")
    assert code == 0, err
    assert f"# would run: kubectl apply --server-side -k '{TRAINER_URL}' --kubeconfig {kubeconfig}" in out
    assert (
        "# would run: kubectl wait --for=condition=Available --timeout=300s -n kubeflow-system "
        f"deployment/kubeflow-trainer-controller-manager --kubeconfig {kubeconfig}"
    ) in out
    assert "training-operator" not in out
    docs = list(yaml.safe_load_all(out))
    assert [(d["kind"], d["metadata"]["name"]) for d in docs] == [
        ("Service", "etcd"),
        ("Deployment", "etcd"),
        ("ClusterTrainingRuntime", "fsdp-sdk-torch-distributed"),
    ]
    (container,) = docs[2]["spec"]["template"]["spec"]["replicatedJobs"][0]["template"]["spec"]["template"]["spec"][
        "containers"
    ]
    assert container["ports"] == [{"name": "fsdp-metrics", "containerPort": 9464, "protocol": "TCP"}]
    assert apiserver.requests == [] and recorded(fake_kubectl) == []


def test_trainjob_install_is_idempotent(
    fake_kubectl: Path,
    kubeconfig: Path,
    clustertrainingruntime_crd: Path,
    pytorchjob_crd: Path,
    trainjob_crd: Path,
    capsys,
) -> None:
    from .fake_apiserver import schema_validators

    validators = schema_validators(pytorchjob_crd, trainjob_crd, runtime_crd=clustertrainingruntime_crd)
    with FakeApiServer(validators) as server:
        server.write_kubeconfig(kubeconfig)
        uids = []
        for _ in range(2):
            code, _, err = cli(capsys, "prereqs", "install", "--api", "trainjob")
            assert code == 0, err
            uids.append({o["kind"]: o["metadata"]["uid"] for o in server.objects()})
        assert uids[0] == uids[1]  # updated in place, nothing recreated
        paths = [(w.method, w.path) for w in server.writes()]
        runtime_path = "/apis/trainer.kubeflow.org/v1alpha1/clustertrainingruntimes/fsdp-sdk-torch-distributed"
        assert paths == 2 * [
            ("PATCH", "/api/v1/namespaces/default/services/etcd"),
            ("PATCH", "/apis/apps/v1/namespaces/default/deployments/etcd"),
            ("PATCH", runtime_path),
        ]
        assert len(server.objects()) == 3 and server.objects("ClusterTrainingRuntime")  # applied twice, stored once
    calls = [c["argv"] for c in recorded(fake_kubectl)]
    target = ["--kubeconfig", str(kubeconfig)]
    install = ["apply", "--server-side", "-k", TRAINER_URL, *target]
    wait = [
        "wait",
        "--for=condition=Available",
        "--timeout=300s",
        "-n",
        "kubeflow-system",
        "deployment/kubeflow-trainer-controller-manager",
        *target,
    ]
    patch = patch_command(
        "kubeflow-system", "kubeflow-trainer-controller-manager", _on_system_nodes(Config()), kubeconfig=str(kubeconfig)
    )[1:]
    assert calls == [install, patch, wait, install, patch, wait]


def _controller(name: str, namespace: str, image: str, ready: int) -> dict:
    labels = {"app.kubernetes.io/name": name}
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {
            "selector": {"matchLabels": labels},
            "template": {"metadata": {"labels": labels}, "spec": {"containers": [{"name": "manager", "image": image}]}},
        },
        "status": {"readyReplicas": ready},
    }


def test_trainjob_status_checks_the_trainer_jobset_their_crds_and_the_runtime(
    apiserver: FakeApiServer,
    kubeconfig: Path,
    fake_kubectl: Path,
    trainjob_crd: Path,
    clustertrainingruntime_crd: Path,
    capsys,
) -> None:
    from fsdp_sdk.k8s.trainer_v2 import render_runtime

    install = "run 'fsdp-sdk prereqs install --api trainjob'"
    code, out, _ = cli(capsys, "prereqs", "status", "--api", "trainjob", "--json")
    report = json.loads(out)
    assert code == 1 and report["api"] == "trainjob" and report["healthy"] is False
    assert "training_operator" not in report and "pytorchjob_crd" not in report
    assert report["problems"][2:] == [  # after etcd's deployment and service; no runtime looked for without its CRD
        "Kubeflow Trainer is not installed (no deployment kubeflow-system/kubeflow-trainer-controller-manager): "
        + install,
        "JobSet's controller is not installed (no deployment jobset-controller-manager in kubeflow-system or "
        "jobset-system): " + install,
        f"the trainjobs.trainer.kubeflow.org CRD is missing: {install}",
        f"the clustertrainingruntimes.trainer.kubeflow.org CRD is missing: {install}",
    ]

    cli(capsys, "prereqs", "install", "--skip-operator")
    apiserver.set_status("apps/v1", "Deployment", "etcd", {"readyReplicas": 1})
    trainer_image = f"ghcr.io/kubeflow/trainer/trainer-controller-manager:{pin('kubeflow-trainer').version}"
    apiserver.put(_controller("kubeflow-trainer-controller-manager", "kubeflow-system", trainer_image, 1))
    apiserver.put(_controller("jobset-controller-manager", "kubeflow-system", pin("jobset").image_ref(), 0))
    loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
    for crd in (trainjob_crd, clustertrainingruntime_crd):
        apiserver.put(yaml.load(crd.read_text(), Loader=loader))
    stale = render_runtime()  # a runtime applied by an fsdp-sdk that declared another port
    stale["spec"]["template"]["spec"]["replicatedJobs"][0]["template"]["spec"]["template"]["spec"]["containers"][0][
        "ports"
    ][0]["containerPort"] = 9500
    apiserver.put(stale)
    code, out, _ = cli(capsys, "prereqs", "status", "--set", "job.api=trainjob", "--json")  # job.api picks it too
    report = json.loads(out)
    assert code == 1 and report["healthy"] is False
    assert report["kubeflow_trainer"] == {
        "deployment": True,
        "ready_replicas": 1,
        "image": trainer_image,
        "namespace": "kubeflow-system",
    }
    assert report["jobset"] == {"deployment": True, "ready_replicas": 0, "namespace": "kubeflow-system"}
    assert report["crds"] == {
        "trainjobs.trainer.kubeflow.org": True,
        "clustertrainingruntimes.trainer.kubeflow.org": True,
    }
    assert report["runtime"] == {"name": "fsdp-sdk-torch-distributed", "installed": True, "metrics_port": 9500}
    assert report["problems"] == [
        "JobSet's controller kubeflow-system/jobset-controller-manager has no ready replica",
        "the ClusterTrainingRuntime fsdp-sdk-torch-distributed declares 9500 as fsdp-metrics, fsdp-sdk's jobs use "
        f"9464: {install}",
    ]

    apiserver.delete("apps/v1", "Deployment", "jobset-controller-manager", "kubeflow-system")
    apiserver.put(_controller("jobset-controller-manager", "jobset-system", pin("jobset").image_ref(), 1))
    apiserver.put(render_runtime())
    code, out, _ = cli(capsys, "prereqs", "status", "--api", "trainjob", "--json")
    report = json.loads(out)
    assert code == 0, report
    assert report["jobset"]["namespace"] == "jobset-system" and report["runtime"]["metrics_port"] == 9464
    assert report["problems"] == []
    code, out, _ = cli(capsys, "prereqs", "status", "--api", "trainjob")
    assert code == 0 and "healthy: True" in out and "api: trainjob" in out and "kubeflow_trainer:" in out
    code, out, _ = cli(capsys, "prereqs", "status", "--json")  # the same cluster, asked about PyTorchJob
    assert code == 1 and json.loads(out)["api"] == "pytorchjob"
