"""``fsdp-sdk launch`` from an empty state directory to a finished job, offline, with each EKS backend: moto for
AWS; the recording eksctl acting on moto and on the cluster as the real one does, or the real terraform binary on
a configuration whose provisioners do what the shipped one's resources do (``terraform_configuration/``); the ``docker`` stand-in building
the image from the Dockerfile's install lines, the loopback API server with nodes, device plugins and a scheduler,
and the Training Operator and kubelets running the workers as processes in the image's environment.

With eksctl, a worker pod is deleted mid-run, after a checkpoint (issue 39): the kubelet stops its container as a
real one does and the operator makes the pod again (:mod:`rehearsal.operator`); the other node's torchrun agent
sees its workers fail, both agents meet again in the job's etcd rendezvous, and training resumes from the
checkpoint in the bucket with the losses of the run it interrupted."""

from __future__ import annotations

import json
import re
import shutil
from collections.abc import Callable
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

STEPS = 12
#: checkpoints every this many steps: the first comes well before the end, so a pod can be deleted after it
EVERY = 4


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


def _after_checkpoint(step: int) -> Callable[[str], bool]:
    """A predicate over the leader's log lines: true at the first step's metrics line after the checkpoint of
    ``step`` was saved (the save runs in the background, so it may be reported after later steps)."""
    saved = False

    def predicate(line: str) -> bool:
        nonlocal saved
        if "checkpoint: saved" in line and f"step_{step:08d}" in line:
            saved = True
        return saved and line.startswith('{"step":')

    return predicate


def _interrupted(log: str) -> tuple[dict[int, float], int, dict[int, float], list[int]]:
    """The leader's log of a run whose workers were restarted: (losses before the restart, the step resumed from,
    losses after it, steps of the checkpoints saved before it)."""
    before, _, after = log.partition("checkpoint: resumed from")
    assert after, log[-3000:]
    match = re.match(r" \S+ \(step (\d+)\)", after)
    assert match, after[:300]
    saved = [int(s) for s in re.findall(r"checkpoint: saved \S+/step_(\d+)", before)]
    return _losses(before), int(match.group(1)), _losses(after), saved


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
    trainer_args = ("--", "--data.seq_len", "64", "--checkpoint.every_steps", str(EVERY))
    with TrainingCluster(cluster, tmp_path / "nodes", docker_state, etcd_endpoint) as training:
        if backend == "eksctl":  # a worker pod is deleted mid-run, once the first checkpoint is in the bucket
            training.delete_pod_when(_after_checkpoint(EVERY))  # the leader's line: the other worker's pod goes
        # From an empty state directory: the cluster, the image, the job, its checkpoints in the cluster's bucket
        code, out, err = cli(capsys, "launch", *common, "--steps", str(STEPS), *trainer_args)
        assert code == 0, err[-4000:]
        assert "final loss" in out, out[-2000:]
        first = _losses(out)
        assert sorted(first) == list(range(1, STEPS + 1)), out[-2000:]
        if backend == "eksctl":
            # the pod was deleted after the checkpoint, and its container stopped with every process in it
            assert len(training.deleted) == 1, "no pod was deleted: no step logged after the first checkpoint"
            ((deleted, leader, _),) = training.deleted
            (stopped,) = training.stopped
            assert stopped.pod == deleted and len(stopped.pids) >= 3, vars(stopped)  # init, torchrun, trainer
            assert stopped.killed == set() and stopped.alive() == set(), vars(stopped)  # gone on SIGTERM, all of it
            # the other node's workers restarted and resumed from the newest checkpoint saved before the deletion,
            # past which the run had gone; the steps run again have the losses they had before
            before, resumed, after, saved = _interrupted(training.log(leader))
            assert saved and resumed == max(saved) and resumed + 1 in before, (resumed, saved, sorted(before))
            again = sorted(set(before) & set(after))
            assert again and again[0] == resumed + 1, (resumed, sorted(before), sorted(after))
            assert {s: after[s] for s in again} == pytest.approx({s: before[s] for s in again}, rel=1e-6)
            assert sorted(after) == list(range(resumed + 1, STEPS + 1)), sorted(after)
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
