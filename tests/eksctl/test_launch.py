"""``fsdp-sdk launch`` end to end with the eksctl backend: moto for AWS (ECR included), the recording eksctl, docker
and kubectl, the loopback API server as the cluster's Kubernetes, and a thread playing the Training Operator.

One test, in the order a user goes: refused without a terminal (nothing created), launched from zero (cluster
created, image built and pushed under its content tag, job followed to its summary), launched again with Ctrl-C
(no new cluster, no rebuild: ECR holds that tag; detached with the commands to reattach and stop), left idle until
the scale-to-zero controller's logic puts the GPU nodes at 0 (moto's EKS, the loopback API server's pods), and
launched after a change of the trainer's sources with --down (the nodes scaled back up, a rebuild under a new tag,
the cluster deleted after the summary), and once more with a job that fails (--down deletes the cluster anyway)."""

from __future__ import annotations

import datetime as dt
import json
import os
import re
import shutil
import signal
import threading
from pathlib import Path

import pytest

from fsdp_sdk import idle_controller
from fsdp_sdk.aws.session import aws_client
from fsdp_sdk.k8s.idle import STATE_CONFIGMAP
from k8s.conftest import etcd_endpoint  # noqa: F401 - the real etcd a replaced job's rendezvous keys are cleared in
from k8s.fake_apiserver import FakeApiServer
from k8s.tools import cli, install_fake_tools

from .helpers import AwsAnswers, Tools, aws_resources, leader_line

pytestmark = pytest.mark.usefixtures("eksctl_env")

JOB_LABEL = "training.kubeflow.org/job-name"
SUMMARY = {"steps": 20, "final_loss": 1.25, "tokens_per_s_per_gpu": 812.5, "tflops_per_gpu": 41.0}
REGISTRY = "123456789012.dkr.ecr.us-west-2.amazonaws.com"


def _conditions(*types: str) -> list[dict[str, str]]:
    return [{"type": t, "status": "True", "reason": t, "message": f"job {t.lower()}"} for t in types]


def _following(apiserver: FakeApiServer, since: int) -> bool:
    return any(
        r.path.endswith("/pods/fsdp-worker-0/log") and r.query.get("follow") == ["true"]
        for r in apiserver.requests[since:]
    )


def play_the_operator(apiserver: FakeApiServer, stop: threading.Event, *, end: str = "Succeeded") -> None:
    """Wait for a new PyTorchJob, start its leader pod; once launch follows its log, end the job (``Succeeded``:
    steps, summary; ``Failed``) or, for ``interrupt``, send SIGINT to this process (the user's Ctrl-C)."""
    since = len(apiserver.requests)

    def job_is_new() -> bool:
        job = apiserver.get("kubeflow.org/v1", "PyTorchJob", "fsdp")
        return job is not None and not (job.get("status") or {}).get("conditions")

    apiserver.wait_for(lambda: stop.is_set() or job_is_new(), timeout=600)  # on the server's change signal
    if stop.is_set():
        return
    for pod in ("fsdp-worker-0", "fsdp-worker-1"):
        if apiserver.get("v1", "Pod", pod) is not None:
            apiserver.delete("v1", "Pod", pod)
    apiserver.add_pod(
        "fsdp-worker-0", labels={JOB_LABEL: "fsdp"}, log=f"{leader_line('fsdp-worker-0')}\n", follow_open=True
    )
    apiserver.set_status("kubeflow.org/v1", "PyTorchJob", "fsdp", {"conditions": _conditions("Created", "Running")})
    apiserver.wait_for(lambda: stop.is_set() or _following(apiserver, since), timeout=600)
    apiserver.append_log("fsdp-worker-0", json.dumps({"step": 1, "loss": 2.0}) + "\n")
    if end == "interrupt":
        os.kill(os.getpid(), signal.SIGINT)  # Ctrl-C while launch follows the log
        return
    if end == "Succeeded":
        apiserver.append_log("fsdp-worker-0", json.dumps({"step": 2, "loss": 1.0}) + "\n")
        apiserver.append_log("fsdp-worker-0", json.dumps(SUMMARY) + "\n")
    apiserver.set_status(
        "kubeflow.org/v1", "PyTorchJob", "fsdp", {"conditions": _conditions("Created", "Running", end)}
    )
    apiserver.close_log("fsdp-worker-0")


def _launch(capsys: pytest.CaptureFixture[str], apiserver: FakeApiServer, *args: str, end: str = "Succeeded"):
    stop = threading.Event()
    operator = threading.Thread(target=play_the_operator, args=(apiserver, stop), kwargs={"end": end}, daemon=True)
    operator.start()
    try:
        return cli(capsys, "launch", *args)
    finally:
        stop.set()
        operator.join(timeout=10)


def _image_in_ecr(tag: str) -> None:
    """What the real ``docker push`` would have left in ECR (the recording docker pushes nothing)."""
    from fsdp_sdk.aws.session import aws_client

    manifest = {"schemaVersion": 2, "mediaType": "application/vnd.docker.distribution.manifest.v2+json"}
    aws_client("ecr", "us-west-2").put_image(
        repositoryName="fsdp-sdk-trainer", imageManifest=json.dumps(manifest), imageTag=tag
    )


def test_launch(
    eksctl_env: Path,
    tools: Tools,
    answers: AwsAnswers,
    apiserver: FakeApiServer,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
    pytorchjob_crd: Path,  # the submitted job is validated against it (skips without ../shared/schemas)
    etcd_endpoint: str,  # noqa: F811
) -> None:
    import fsdp_trainer

    apiserver.proxy_service("default", "etcd", "2379", etcd_endpoint)

    install_fake_tools(tools.bin_dir, tools.log, "docker")
    trainer = tmp_path / "trainer"
    source = Path(fsdp_trainer.__file__).resolve().parents[2]
    shutil.copytree(source / "src", trainer / "src", ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copy2(source / "pyproject.toml", trainer / "pyproject.toml")
    loopback = apiserver.write_kubeconfig(tmp_path / "loopback")
    monkeypatch.setenv("FSDP_SDK_CLUSTER__BACKEND", "eksctl")
    monkeypatch.setenv("FSDP_SDK_CLUSTER__INSTANCE_TYPE", "p4de.24xlarge")
    monkeypatch.setenv("FSDP_SDK_CLUSTER__KUBECONFIG", str(loopback))
    monkeypatch.setenv("FSDP_SDK_JOB__REGISTRY", REGISTRY)
    args = ("--preset", "tiny", "--steps", "20", "--trainer-src", str(trainer))

    # The plan alone (--dry-run --json): what would be done and what it costs, nothing changed.
    code, out, err = cli(capsys, "launch", *args, "--tokens", "300B", "--dry-run", "--json")
    assert code == 0, err
    plan = json.loads(out)
    speed = plan["estimate"]["speed"]
    assert plan["tokens"] == 300e9 and plan["hours_to_train"] == pytest.approx(300e9 / speed["tokens_per_s"] / 3600)
    assert plan["usd_to_train"] == pytest.approx(plan["hours_to_train"] * plan["hourly_cost_usd"])
    assert plan["cluster_state"] == "absent" and plan["build"] is True and plan["image_tag"].startswith("src-")
    assert plan["steps"][0].startswith("create the cluster") and plan["cluster_plan"]["backend"] == "eksctl"
    assert plan["hourly_cost_usd"] > 0 and plan["usd_to_train"] > 0 and plan["estimate"]["memory"]["fits"]

    # Without a terminal and without --yes: one line, exit 2, nothing created.
    code, out, err = cli(capsys, "launch", *args)
    assert code == 2, err
    error = [line for line in err.splitlines() if line.startswith("Error:")]
    assert len(error) == 1 and "--yes" in error[0] and "/hour" in error[0]
    assert "Cluster cost: $" in err and "to train 20 steps" in err  # the plan and its cost came first
    assert tools.eksctl() == [] and tools.calls("docker") == []
    assert aws_resources()["clusters"] == [] and not (eksctl_env / "costs").exists()

    # From zero: the cluster, the image (built and pushed under its content tag), the job, its summary.
    code, out, err = _launch(capsys, apiserver, *args, "--yes")
    assert code == 0, err
    assert [argv[:2] for argv in tools.eksctl()] == [["create", "cluster"]]
    docker = tools.calls("docker")
    assert [argv[0] for argv in docker] == ["build", "login", "tag", "push"]
    tag = docker[0][docker[0].index("-t") + 1].split(":")[1]
    assert tag.startswith("src-") and docker[-1] == ["push", f"{REGISTRY}/fsdp-sdk-trainer:{tag}"]
    job = apiserver.get("kubeflow.org/v1", "PyTorchJob", "fsdp")
    image = job["spec"]["pytorchReplicaSpecs"]["Worker"]["template"]["spec"]["containers"][0]["image"]
    assert image == f"{REGISTRY}/fsdp-sdk-trainer:{tag}"
    assert "Run " in out and "final loss 1.2500" in out
    assert '{"step": 2, "loss": 1.0}' in out  # the leader's log, followed (piped: as the trainer printed it)
    _image_in_ecr(tag)

    # What it has cost so far: the job (its nodes x hours x the plan's price), the cluster (from its ledger).
    code, out, err = cli(capsys, "job", "status", "fsdp")
    assert code == 0, err
    assert re.search(r"^cost: \$[\d,.]+ \(2 node\(s\) x \d+:\d\d:\d\d x \$[\d,.]+/node-hour\)$", out, re.M), out
    code, out, err = cli(capsys, "status", "--json")
    cost = json.loads(out)["cost"]
    assert cost["since"] is not None and cost["usd_per_hour"] > 0 and cost["usd"] >= 0

    # Again, interrupted: the cluster is there and ECR holds the tag, so nothing is created or built.
    code, out, err = _launch(capsys, apiserver, *args, "--yes", "--down", end="interrupt")
    assert code == 130, err
    assert [argv[:2] for argv in tools.eksctl()] == [["create", "cluster"]]
    assert len(tools.calls("docker")) == 4
    assert "ECR holds it" in err
    assert "fsdp-sdk job logs -f fsdp" in err and "fsdp-sdk job stop fsdp" in err
    assert aws_resources()["clusters"] == ["fsdp-sdk"]  # --down waits for the job's end; a detach is not one
    assert apiserver.get("kubeflow.org/v1", "PyTorchJob", "fsdp") is not None  # the job keeps running
    apiserver.set_status(
        "kubeflow.org/v1", "PyTorchJob", "fsdp", {"conditions": _conditions("Created", "Running", "Succeeded")}
    )
    apiserver.close_log("fsdp-worker-0")

    # Idle: the scale-to-zero controller's logic (its own Kubernetes client, EKS through boto3) scales the GPU node
    # group to 0 once no training pod was seen for the idle time.
    apiserver.set_pod_phase("fsdp-worker-0", "Succeeded")
    apiserver.put(
        {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": STATE_CONFIGMAP, "namespace": "default"}}
    )
    view = idle_controller.InCluster(
        "default", STATE_CONFIGMAP, server=apiserver.url, token=apiserver.token, ca_file=None
    )
    eks = aws_client("eks", "us-west-2")
    now = dt.datetime.now(dt.timezone.utc)
    for minutes, action in ((0, "idle"), (29, "idle"), (30, "scale-to-zero")):
        at = now + dt.timedelta(minutes=minutes)
        decision = idle_controller.run_once(view, eks, cluster="fsdp-sdk", nodegroup="gpu", idle_minutes=30, now=at)
        assert decision.action == action
    scaling = eks.describe_nodegroup(clusterName="fsdp-sdk", nodegroupName="gpu")["nodegroup"]["scalingConfig"]
    assert scaling["desiredSize"] == 0

    # A change in the trainer: a new tag, a rebuild; the GPU nodes scaled back up; --down deletes the cluster after
    # the summary.
    (trainer / "src" / "fsdp_trainer" / "__init__.py").write_text(
        (trainer / "src" / "fsdp_trainer" / "__init__.py").read_text() + "\n# changed\n"
    )
    code, out, err = _launch(capsys, apiserver, *args, "--yes", "--down")
    assert code == 0, err
    docker = tools.calls("docker")[4:]
    assert [argv[0] for argv in docker] == ["build", "login", "tag", "push"]
    new_tag = docker[0][docker[0].index("-t") + 1].split(":")[1]
    assert new_tag != tag and new_tag.startswith("src-")
    assert "replacing the finished job" in err and "scale the GPU nodes from 0 to 2" in err
    assert tools.eksctl()[1][:3] == ["scale", "nodegroup", "--cluster"] and "2" in tools.eksctl()[1]
    assert "final loss 1.2500" in out and "Deleted cluster 'fsdp-sdk' (--down)." in err
    assert "the job ended: deleting cluster 'fsdp-sdk' (--down)" in err
    assert [argv[:2] for argv in tools.eksctl()] == [
        ["create", "cluster"],
        ["scale", "nodegroup"],
        ["delete", "cluster"],
    ]
    assert aws_resources() == {"clusters": [], "nodegroups": [], "stacks": []}

    # A job that fails: --down deletes the cluster all the same, and launch exits 1 with the job's error.
    apiserver.delete("kubeflow.org/v1", "PyTorchJob", "fsdp")  # the loopback server outlives the deleted cluster
    code, out, err = _launch(capsys, apiserver, *args, "--yes", "--down", end="Failed")
    assert code == 1
    assert err.strip().splitlines()[-1] == "Error: job fsdp failed: job failed"
    assert "the job ended: deleting cluster 'fsdp-sdk' (--down)" in err and "final loss" not in out
    assert [argv[:2] for argv in tools.eksctl()][-2:] == [["create", "cluster"], ["delete", "cluster"]]
    assert aws_resources() == {"clusters": [], "nodegroups": [], "stacks": []}
