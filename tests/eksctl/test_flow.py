"""``up`` -> ``run`` -> ``down`` through the CLI with the eksctl backend: the recording eksctl creates and deletes the
cluster in moto, the loopback API server is the cluster's Kubernetes (``cluster.kubeconfig`` points jobs at it),
and a thread plays the Training Operator: it starts the job's pods and moves the job to Succeeded. The GPU nodes are
scaled to 0 before the run (what the idle scale-to-zero controller does): ``run`` scales them back up. ``up`` gives the
cluster its checkpoint bucket (moto's S3) and the pods' access (moto's IAM, EKS Pod Identity through the Stubber),
the job checkpoints there, ``down`` keeps the bucket and ``down --delete-checkpoints`` deletes it after asking."""

from __future__ import annotations

import io
import json
import sys
import threading
from pathlib import Path
from typing import Any

import pytest

from fsdp_sdk.aws.session import aws_client
from k8s.fake_apiserver import FakeApiServer
from k8s.tools import cli

from .helpers import AwsAnswers, Tools, aws_resources, leader_line

pytestmark = pytest.mark.usefixtures("eksctl_env")

JOB_LABEL = "training.kubeflow.org/job-name"
SUMMARY = {"steps": 20, "final_loss": 1.25, "tokens_per_s_per_gpu": 812.5, "tflops_per_gpu": 41.0}
BUCKET = "fsdp-sdk-123456789012-us-west-2-fsdp-sdk"


def buckets() -> list[str]:
    return [b["Name"] for b in aws_client("s3", "us-west-2").list_buckets()["Buckets"]]


def checkpoint_roles() -> list[str]:
    return [r["RoleName"] for r in aws_client("iam", "us-west-2").list_roles(PathPrefix="/fsdp-sdk/")["Roles"]]


class Terminal(io.StringIO):
    """A standard input that is a terminal, answering the prompts with its text."""

    def isatty(self) -> bool:
        return True


def _conditions(*types: str) -> list[dict[str, str]]:
    return [{"type": t, "status": "True", "reason": t, "message": f"job {t.lower()}"} for t in types]


def play_the_operator(apiserver: FakeApiServer, stop: threading.Event) -> None:
    """Wait for the PyTorchJob, then do what the Training Operator and the trainer would: a running leader pod
    whose log has the trainer's lines and summary, then the job Succeeded."""
    # each wait is on the server's change signal (or the test's end), not a time
    apiserver.wait_for(lambda: stop.is_set() or apiserver.get("kubeflow.org/v1", "PyTorchJob", "fsdp"), timeout=600)
    if stop.is_set():
        return
    apiserver.add_pod(
        "fsdp-worker-0", labels={JOB_LABEL: "fsdp"}, log=f"{leader_line('fsdp-worker-0')}\n", follow_open=True
    )
    apiserver.add_pod("fsdp-worker-1", labels={JOB_LABEL: "fsdp"}, log="waiting for the rendezvous\n")
    apiserver.set_status("kubeflow.org/v1", "PyTorchJob", "fsdp", {"conditions": _conditions("Created", "Running")})
    apiserver.wait_for(  # training goes on while `run` follows the leader's log
        lambda: (
            stop.is_set()
            or any(
                r.path.endswith("/pods/fsdp-worker-0/log") and r.query.get("follow") == ["true"]
                for r in apiserver.requests
            )
        ),
        timeout=600,
    )
    for step in range(1, 3):
        apiserver.append_log("fsdp-worker-0", json.dumps({"step": step, "loss": 2.0 / step}) + "\n")
    apiserver.append_log("fsdp-worker-0", json.dumps(SUMMARY) + "\n")
    apiserver.set_status(
        "kubeflow.org/v1", "PyTorchJob", "fsdp", {"conditions": _conditions("Created", "Running", "Succeeded")}
    )
    apiserver.close_log("fsdp-worker-0")


def test_up_run_down(
    eksctl_env: Path,
    tools: Tools,
    answers: AwsAnswers,
    apiserver: FakeApiServer,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
    pytorchjob_crd: Path,  # the submitted job is validated against it (skips without ../shared/schemas)
    pod_identity: Any,
) -> None:
    loopback = apiserver.write_kubeconfig(tmp_path / "loopback")
    monkeypatch.setenv("FSDP_SDK_CLUSTER__BACKEND", "eksctl")
    monkeypatch.setenv("FSDP_SDK_CLUSTER__INSTANCE_TYPE", "p4de.24xlarge")
    monkeypatch.setenv("FSDP_SDK_CLUSTER__KUBECONFIG", str(loopback))
    monkeypatch.setenv("FSDP_SDK_JOB__REGISTRY", "123456789012.dkr.ecr.us-west-2.amazonaws.com")

    code, out, err = cli(capsys, "up", "--yes")
    assert code == 0, err
    assert "state: ready" in out.splitlines()
    assert apiserver.get("apps/v1", "Deployment", "etcd") is not None
    assert apiserver.get("apps/v1", "DaemonSet", "nvidia-device-plugin", namespace="kube-system") is not None
    assert apiserver.get("v1", "ServiceAccount", "fsdp-trainer") is not None
    assert buckets() == [BUCKET] and len(checkpoint_roles()) == 1
    (association,) = pod_identity.associations.values()
    assert (association["namespace"], association["serviceAccount"]) == ("default", "fsdp-trainer")
    assert association["roleArn"].endswith(f"/fsdp-sdk/us-west-2/fsdp-sdk/{checkpoint_roles()[0]}")
    code, out, err = cli(capsys, "up")  # again: the bucket and its access are kept, nothing made twice
    assert code == 0, err
    assert buckets() == [BUCKET] and len(checkpoint_roles()) == 1 and len(pod_identity.associations) == 1
    code, out, err = cli(capsys, "status")
    assert code == 0 and f"checkpoint_bucket: s3://{BUCKET} (us-west-2)" in out, out

    code, out, err = cli(capsys, "scale", "0")  # as the idle scale-to-zero controller would: run scales back up
    assert code == 0, err

    stop = threading.Event()
    operator = threading.Thread(target=play_the_operator, args=(apiserver, stop), daemon=True)
    operator.start()
    try:
        code, out, err = cli(capsys, "run", "--preset", "tiny", "--steps", "20", "--json")
    finally:
        stop.set()
        operator.join(timeout=10)
    assert code == 0, err
    err_run = err
    result = json.loads(out.strip().splitlines()[-1])
    assert result.pop("run_id") and result.pop("output_dir") is None  # a cluster run's outputs live in the pods
    assert result == SUMMARY
    assert leader_line("fsdp-worker-0") in err and '{"step": 2, "loss": 1.0}' in err  # the leader's log, streamed
    job = apiserver.get("kubeflow.org/v1", "PyTorchJob", "fsdp")
    worker = job["spec"]["pytorchReplicaSpecs"]["Worker"]["template"]["spec"]
    assert worker["nodeSelector"] == {"node.kubernetes.io/instance-type": "p4de.24xlarge"}
    limits = worker["containers"][0]["resources"]["limits"]
    assert limits["nvidia.com/gpu"] == 8 and limits["vpc.amazonaws.com/efa"] == 4
    # the two workers checkpoint to the bucket, as the ServiceAccount Pod Identity gives its role; no credential
    args = worker["containers"][0]["args"]
    assert args[args.index("--checkpoint.dir") + 1] == f"s3://{BUCKET}/default/fsdp/checkpoints"
    assert worker["serviceAccountName"] == "fsdp-trainer"
    assert {"name": "AWS_REGION", "value": "us-west-2"} in worker["containers"][0]["env"]
    assert "AWS_SECRET_ACCESS_KEY" not in json.dumps(job) and "AWS_ACCESS_KEY_ID" not in json.dumps(job)
    s3 = aws_client("s3", "us-west-2")
    s3.put_object(Bucket=BUCKET, Key="default/fsdp/checkpoints/step_00000020/COMPLETE", Body=b"")
    s3.put_object(Bucket=BUCKET, Key="default/fsdp/checkpoints/step_00000020/__0_0.distcp", Body=b"x" * 4096)

    code, out, err = cli(capsys, "down", "--yes")
    assert code == 0, err
    assert f"checkpoint_bucket: s3://{BUCKET} (kept; 'down --delete-checkpoints' deletes it)" in out
    assert buckets() == [BUCKET] and checkpoint_roles() == [] and pod_identity.associations == {}
    assert tools.eksctl()[-1] == [
        "delete",
        "cluster",
        "--name",
        "fsdp-sdk",
        "--region",
        "us-west-2",
        "--wait",
        "--timeout",
        "40m",
    ]
    assert "state: absent" in out
    assert aws_resources() == {"clusters": [], "nodegroups": [], "stacks": []}
    assert not (eksctl_env / "eksctl" / "fsdp-sdk").exists()
    assert [argv[:2] for argv in tools.eksctl()] == [
        ["create", "cluster"],
        ["scale", "nodegroup"],
        ["scale", "nodegroup"],
        ["delete", "cluster"],
    ]
    assert [argv[argv.index("--nodes") + 1] for argv in tools.eksctl()[1:3]] == ["0", "2"]
    assert "the GPU nodes of cluster 'fsdp-sdk' are at 0: scaling them to 2" in err_run

    # the checkpoints outlive the cluster; deleting them asks first, listing what they are
    monkeypatch.setattr(sys, "stdin", io.StringIO(""))
    code, out, err = cli(capsys, "down", "--delete-checkpoints")
    assert code == 2 and err.strip().splitlines()[-1] == (
        f"Error: --yes: deleting the checkpoint bucket s3://{BUCKET} (2 objects) needs a confirmation; "
        "pass --yes to delete without a prompt"
    )
    monkeypatch.setattr(sys, "stdin", Terminal("n\n"))
    code, out, err = cli(capsys, "down", "--delete-checkpoints")
    assert code == 130 and buckets() == [BUCKET]  # answered no: aborted, nothing deleted
    assert f"--delete-checkpoints deletes s3://{BUCKET}: 2 objects, 4.0 KiB" in err
    assert "  default/fsdp/: 2 objects, 4.0 KiB" in err.splitlines()
    monkeypatch.setattr(sys, "stdin", Terminal("y\n"))
    code, out, err = cli(capsys, "down", "--delete-checkpoints")
    assert code == 0, err
    assert f"Delete the checkpoint bucket s3://{BUCKET} (2 objects)? [y/N]" in err
    assert f"checkpoint_bucket: s3://{BUCKET} (deleted)" in out and buckets() == []
