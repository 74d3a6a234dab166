"""``fsdp-sdk launch`` from an empty state directory to a finished job, offline, with each EKS backend: moto for
AWS; the recording eksctl acting on moto and on the cluster as the real one does, or the real terraform binary on
a configuration whose provisioners do what the shipped one's resources do (``terraform_configuration/``); the ``docker`` stand-in building
the image from the Dockerfile's install lines, the loopback API server with nodes, device plugins and a scheduler,
and the Training Operator and kubelets running the workers as processes in the image's environment."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from eksctl.helpers import AwsAnswers, Tools
from fsdp_sdk.aws.session import aws_client
from k8s.conftest import etcd_endpoint  # noqa: F401 - the real etcd of the cluster's etcd service
from k8s.fake_apiserver import FakeApiServer
from k8s.tools import cli

from . import docker_standin
from .operator import TrainingCluster

pytestmark = pytest.mark.usefixtures("eksctl_env")

STEPS = 4


def _trainer_copy(tmp_path: Path) -> Path:
    import fsdp_trainer

    source = Path(fsdp_trainer.__file__).resolve().parents[2]
    trainer = tmp_path / "trainer"
    shutil.copytree(source / "src", trainer / "src", ignore=shutil.ignore_patterns("__pycache__"))
    for name in ("pyproject.toml", "README.md"):
        if (source / name).exists():
            shutil.copy2(source / name, trainer / name)
    return trainer


def _checkpoints(bucket: str) -> list[str]:
    listing = aws_client("s3", "us-west-2").list_objects_v2(Bucket=bucket)
    return sorted(o["Key"] for o in listing.get("Contents", []) if "/checkpoints/" in o["Key"])


def _losses(out: str) -> dict[int, float]:
    """step -> loss of the leader's log as launch followed it (a step seen twice: its latest value)."""
    found = {}
    for line in out.splitlines():
        if line.startswith('{"step":'):
            record = json.loads(line)
            if "loss" in record:
                found[record["step"]] = record["loss"]
    return found


def _terraform(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, kubeconfig: Path) -> None:
    """The terraform backend on the rehearsal's configuration (the real terraform binary runs it)."""
    import sys

    from fsdp_sdk.plugins import get_plugins
    from fsdp_sdk_terraform import CONFIGURATION_DIR, plugin

    if shutil.which("terraform") is None:
        pytest.skip("terraform is not installed (https://developer.hashicorp.com/terraform/install)")
    get_plugins().register(plugin, name="terraform")
    configuration = tmp_path / "configuration"
    shutil.copytree(Path(__file__).with_name("terraform_configuration"), configuration)
    shutil.copy2(CONFIGURATION_DIR / "variables.tf", configuration / "variables.tf")
    monkeypatch.setenv("FSDP_SDK_TERRAFORM__CONFIGURATION", str(configuration))
    monkeypatch.setenv("FSDP_SDK_CLUSTER__AVAILABILITY_ZONES", "us-west-2a,us-west-2b")
    monkeypatch.setenv("FSDP_TF_TEST_PYTHON", sys.executable)
    monkeypatch.setenv("FSDP_TF_TEST_KUBECONFIG", str(kubeconfig))
    monkeypatch.setenv("FSDP_TF_TEST_STANDINS", str(Path(__file__).resolve().parents[1] / "eksctl"))
    monkeypatch.setenv("TF_PLUGIN_CACHE_DIR", str(tmp_path / "plugin-cache"))
    (tmp_path / "plugin-cache").mkdir()


@pytest.mark.parametrize("backend", ["eksctl", "terraform"])
def test_launch_from_nothing_to_a_finished_job_checkpointed_in_the_cluster_bucket(
    backend: str,
    tools: Tools,
    answers: AwsAnswers,
    cluster: FakeApiServer,
    etcd_endpoint: str,  # noqa: F811
    image_python: str,  # the image of these sources, built once for the session
    pod_identity: object,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    kubeconfig = tmp_path / "cluster-kubeconfig"
    docker_state = tmp_path / "docker"
    docker_standin.install(tools.bin_dir, docker_state)
    monkeypatch.setenv("FAKE_EKSCTL_KUBECONFIG", str(kubeconfig))
    monkeypatch.setenv("FSDP_SDK_CLUSTER__KUBECONFIG", str(kubeconfig))
    if backend == "terraform":
        _terraform(tmp_path, monkeypatch, kubeconfig)
    monkeypatch.setenv("FSDP_SDK_JOB__NPROC_PER_NODE", "1")  # CPU: one trainer process per node, not one per GPU
    trainer = _trainer_copy(tmp_path)
    common = ("--yes", "--backend", backend, "--preset", "tiny", "--nodes", "2", "--trainer-src", str(trainer))
    trainer_args = ("--", "--data.seq_len", "64", "--checkpoint.every_steps", "2")
    with TrainingCluster(cluster, tmp_path / "nodes", docker_state, etcd_endpoint):
        # From an empty state directory: the cluster, the image, the job, its checkpoints in the cluster's bucket
        code, out, err = cli(capsys, "launch", *common, "--steps", str(STEPS), *trainer_args)
        assert code == 0, err[-4000:]
        assert "final loss" in out, out[-2000:]
        first = _losses(out)
        assert sorted(first) == list(range(1, STEPS + 1)), out[-2000:]
        buckets = [b["Name"] for b in aws_client("s3", "us-west-2").list_buckets()["Buckets"]]
        (bucket,) = [b for b in buckets if b.startswith("fsdp-sdk-")]
        keys = _checkpoints(bucket)
        assert any(k.startswith(f"default/fsdp/checkpoints/step_{STEPS:08d}/") for k in keys), keys
        pods = {p["metadata"]["name"]: p["spec"]["nodeName"] for p in cluster.objects("Pod") if "nodeName" in p["spec"]}
        assert sorted(pods) == ["fsdp-worker-0", "fsdp-worker-1"] and len(set(pods.values())) == 2  # one per GPU node

        # launch again with more steps: the finished job is replaced and continues from its last checkpoint
        code, out, err = cli(capsys, "launch", *common, "--steps", str(STEPS + 2), *trainer_args)
        assert code == 0, err[-4000:]
        assert sorted(_losses(out)) == [STEPS + 1, STEPS + 2], out[-2000:]
        keys = _checkpoints(bucket)
        assert any(k.startswith(f"default/fsdp/checkpoints/step_{STEPS + 2:08d}/") for k in keys), keys

    # down: the cluster goes, its bucket stays (no --delete-checkpoints), and nothing of its IAM remains
    code, out, err = cli(capsys, "down", "--yes", "--backend", backend)
    assert code == 0, err[-3000:]
    assert bucket in [b["Name"] for b in aws_client("s3", "us-west-2").list_buckets()["Buckets"]]
    assert _checkpoints(bucket)
    iam = aws_client("iam", "us-west-2")
    roles = [r["RoleName"] for r in iam.list_roles()["Roles"] if "fsdp-sdk" in r["RoleName"]]
    policies = [p["PolicyName"] for p in iam.list_policies(Scope="Local")["Policies"] if "fsdp-sdk" in p["PolicyName"]]
    assert roles == [] and policies == [], (roles, policies)
    assert pod_identity.associations == {}, pod_identity.associations
