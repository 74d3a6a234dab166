"""The rehearsal with the eksctl backend: ``up`` on a cluster where eksctl has done what it does in the field."""

from __future__ import annotations

from pathlib import Path

import pytest

from eksctl.helpers import AwsAnswers, Tools
from k8s.fake_apiserver import FakeApiServer
from k8s.server_apply import owners
from k8s.tools import cli

from .scheduling import place

pytestmark = pytest.mark.usefixtures("eksctl_env")

EFA = "aws-efa-k8s-device-plugin"


def _gpu_nodes(cluster: FakeApiServer) -> list[dict]:
    return [n for n in cluster.objects("Node") if n["metadata"]["labels"].get("fsdp-sdk.io/node-role") == "gpu"]


def test_up_adopts_the_efa_plugin_eksctl_installs_and_the_gpu_nodes_advertise_gpus_and_efa(
    tools: Tools,
    answers: AwsAnswers,
    cluster: FakeApiServer,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Issue 39: eksctl creates kube-system/aws-efa-k8s-device-plugin for every efaEnabled group (selector
    ``name: aws-efa-k8s-device-plugin``, no toleration of the GPU taint); ``up`` applied a DaemonSet of that name with
    another selector, refused as immutable, and failed before etcd and the Training Operator on every run."""
    kubeconfig = tmp_path / "cluster-kubeconfig"
    monkeypatch.setenv("FAKE_EKSCTL_KUBECONFIG", str(kubeconfig))
    flags = ("--backend", "eksctl", "--set", f"cluster.kubeconfig={kubeconfig}")
    code, _, err = cli(capsys, "up", "--yes", *flags)
    assert code == 0, err
    # eksctl did its in-cluster part: EKS's default add-ons, the nodes, its own EFA plugin (NVIDIA's turned off)
    created = {(o["kind"], o["metadata"]["name"]) for o in cluster.objects()}
    assert {("DaemonSet", "aws-node"), ("DaemonSet", "kube-proxy"), ("Deployment", "coredns")} <= created
    assert ("DaemonSet", "nvidia-device-plugin-daemonset") not in created  # --install-nvidia-plugin=false
    efa = cluster.get("apps/v1", "DaemonSet", EFA, "kube-system")
    assert efa is not None
    managers = owners(efa)
    assert {"eksctl", "fsdp-sdk"} <= set(managers)  # eksctl created it, fsdp-sdk applied over it
    assert efa["spec"]["selector"] == {"matchLabels": {"name": EFA}}  # eksctl's, immutable
    pod = efa["spec"]["template"]["spec"]
    assert [c["name"] for c in pod["containers"]] == [EFA] and len(pod["volumes"]) == 2  # one object, not two
    assert any(t.get("key") == "nvidia.com/gpu" for t in pod["tolerations"])
    # then the rest of up ran: etcd and the Training Operator
    assert cluster.get("apps/v1", "Deployment", "etcd") is not None
    assert next(c[:3] for c in tools.calls("kubectl")) == ["apply", "--server-side", "-k"]

    # every GPU node advertises its GPUs and EFA devices (plugins that run there), and a worker of the tiny preset
    # on 2 nodes fits one of them; the system nodes advertise neither
    gpu_nodes = _gpu_nodes(cluster)
    assert len(gpu_nodes) == 2
    cluster.wait_for(lambda: all("vpc.amazonaws.com/efa" in n["status"]["allocatable"] for n in _gpu_nodes(cluster)))
    for node in _gpu_nodes(cluster):
        assert node["status"]["allocatable"]["nvidia.com/gpu"] == "8"
        assert node["status"]["allocatable"]["vpc.amazonaws.com/efa"] == "32"
    from fsdp_sdk.config import Config
    from fsdp_sdk.k8s.render import render_job
    from fsdp_sdk.plugins import build_plugins

    config = Config.from_dict(
        {
            "cluster": {"instance_type": "p5.48xlarge"},
            "job": {"num_workers": 2, "registry": "123456789012.dkr.ecr.us-west-2.amazonaws.com"},
            "trainer": {"model": {"preset": "tiny"}},
        }
    )
    (job,) = [
        o
        for o in render_job(config, rdzv_id="fsdp-r", plugins=build_plugins(autoload=False))
        if o["kind"] == "PyTorchJob"
    ]
    worker = job["spec"]["pytorchReplicaSpecs"]["Worker"]["template"]["spec"]
    where, message = place(worker, cluster.objects("Node"), {})
    assert where in {n["metadata"]["name"] for n in gpu_nodes}, message

    # up again: nothing collides on a re-run either
    code, _, err = cli(capsys, "up", "--yes", *flags)
    assert code == 0, err
