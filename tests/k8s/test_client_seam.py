"""``fsdp_sdk.Client.run`` on a Kubernetes backend goes through :class:`JobClient` (the JobLayer seam)."""

from __future__ import annotations

import threading
import time
from pathlib import Path

from fsdp_sdk.client import Client
from fsdp_sdk.config import Config

from .fake_apiserver import FakeApiServer
from .tools import kubernetes_plugins

REGISTRY = "123456789012.dkr.ecr.us-west-2.amazonaws.com"
#: What the trainer's rank 0 logs at start (fsdp_trainer.logs format); it marks the leader pod.
LEADER_LINE = "[rank0] 12:00:00 INFO fsdp_trainer.distributed: master_addr=fsdp-worker-0"


def _operator(apiserver: FakeApiServer) -> None:
    """Play the Training Operator and the trainer: pods, logs, conditions."""
    deadline = time.monotonic() + 20
    while apiserver.get("kubeflow.org/v1", "PyTorchJob", "fsdp") is None and time.monotonic() < deadline:
        time.sleep(0.05)
    labels = {"training.kubeflow.org/job-name": "fsdp"}
    apiserver.add_pod("fsdp-worker-1", labels=labels, log="torchrun starting\n")
    apiserver.add_pod("fsdp-worker-0", labels=labels, log=f"{LEADER_LINE}\n", follow_open=True)
    apiserver.set_status(
        "kubeflow.org/v1",
        "PyTorchJob",
        "fsdp",
        {"conditions": [{"type": "Running", "status": "True"}], "replicaStatuses": {"Worker": {"active": 2}}},
    )
    time.sleep(0.3)
    apiserver.append_log("fsdp-worker-0", '{"step": 5, "loss": 3.0}\n{"steps": 5, "final_loss": 3.0}\n')
    apiserver.set_status(
        "kubeflow.org/v1",
        "PyTorchJob",
        "fsdp",
        {"conditions": [{"type": "Succeeded", "status": "True"}], "replicaStatuses": {"Worker": {"succeeded": 2}}},
    )
    apiserver.close_log("fsdp-worker-0")


def test_client_run_submits_follows_and_returns_the_summary(apiserver: FakeApiServer, tmp_path: Path) -> None:
    plugins = kubernetes_plugins(apiserver.write_kubeconfig(tmp_path / "kubeconfig"))
    config = Config.from_dict({"cluster": {"backend": "fake-kube"}, "job": {"registry": REGISTRY}})
    client = Client(config, plugins=plugins)
    threading.Thread(target=_operator, args=(apiserver,), daemon=True).start()
    lines: list[str] = []
    result = client.run(
        trainer_overrides={"model.preset": "tiny", "train.steps": 5}, run_id="fsdp-seam1", on_output=lines.append
    )
    assert result.summary == {"steps": 5, "final_loss": 3.0}
    assert result.job.name == "fsdp" and result.job.run_id == "fsdp-seam1"
    assert lines[0] == LEADER_LINE
    job = apiserver.writes()[0].body
    assert job["spec"]["elasticPolicy"]["rdzvId"] == "fsdp-seam1"
    args = job["spec"]["pytorchReplicaSpecs"]["Worker"]["template"]["spec"]["containers"][0]["args"]
    assert args[args.index("--train.steps") + 1] == "5"
