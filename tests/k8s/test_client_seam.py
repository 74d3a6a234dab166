"""``fsdp_sdk.Client.run`` on a Kubernetes backend goes through :class:`JobClient` (by the Kubernetes runner)."""

from __future__ import annotations

import threading
from pathlib import Path

import pytest

from fsdp_sdk.client import Client
from fsdp_sdk.config import Config
from fsdp_sdk.errors import ConfigError

from .fake_apiserver import FakeApiServer
from .tools import LEADER_LINE, kubernetes_plugins, play_two_worker_job

REGISTRY = "123456789012.dkr.ecr.us-west-2.amazonaws.com"


def test_client_run_submits_follows_and_returns_the_summary(apiserver: FakeApiServer, tmp_path: Path) -> None:
    plugins = kubernetes_plugins(apiserver.write_kubeconfig(tmp_path / "kubeconfig"))
    config = Config.from_dict({"cluster": {"backend": "fake-kube"}, "job": {"registry": REGISTRY}})
    client = Client(config, plugins=plugins)
    threading.Thread(target=play_two_worker_job, args=(apiserver,), daemon=True).start()
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


def test_run_resume_on_a_cluster_replaces_the_job_of_that_name_on_its_checkpoints(
    apiserver: FakeApiServer, tmp_path: Path
) -> None:
    """``run --resume NAME`` on Kubernetes: the job NAME is submitted again in place of the old one, checkpointing
    where the old one did (the checkpoint bucket's prefix of its name), so the trainer resumes from there."""
    from fsdp_sdk.k8s.cluster_objects import checkpoint_access
    from fsdp_sdk.k8s.render import render_job

    plugins = kubernetes_plugins(apiserver.write_kubeconfig(tmp_path / "kubeconfig"))
    data = {"cluster": {"backend": "fake-kube", "checkpoint_bucket": "team-checkpoints"}, "job": {"registry": REGISTRY}}
    config = Config.from_dict(data)
    for obj in checkpoint_access(config)[0].objects:
        apiserver.put(dict(obj))
    old = Config.from_dict({**data, "job": {**data["job"], "name": "exp1"}})
    apiserver.put(render_job(old, rdzv_id="exp1-first", plugins=plugins)[0])
    apiserver.set_status(
        "kubeflow.org/v1", "PyTorchJob", "exp1", {"conditions": [{"type": "Failed", "status": "True"}]}
    )
    client = Client(config, plugins=plugins)
    threading.Thread(target=play_two_worker_job, args=(apiserver, "exp1", "exp1-again"), daemon=True).start()
    result = client.run(
        trainer_overrides={"model.preset": "tiny", "train.steps": 5}, run_id="exp1-again", resume="exp1"
    )
    assert result.summary == {"steps": 5, "final_loss": 3.0} and result.job.name == "exp1"
    deletes = [r.path for r in apiserver.requests if r.method == "DELETE" and "/proxy/" not in r.path]
    assert deletes == ["/apis/kubeflow.org/v1/namespaces/default/pytorchjobs/exp1"]  # the old one, replaced
    job = apiserver.get("kubeflow.org/v1", "PyTorchJob", "exp1")
    assert job["metadata"]["labels"]["fsdp-sdk.io/run-id"] == "exp1-again"
    args = job["spec"]["pytorchReplicaSpecs"]["Worker"]["template"]["spec"]["containers"][0]["args"]
    assert args[args.index("--checkpoint.dir") + 1] == "s3://team-checkpoints/default/exp1/checkpoints"
    assert "--checkpoint.resume" not in args  # resume: auto, from the newest complete checkpoint there


def test_a_job_on_the_bucket_without_its_service_account_is_refused(apiserver: FakeApiServer, tmp_path: Path) -> None:
    plugins = kubernetes_plugins(apiserver.write_kubeconfig(tmp_path / "kubeconfig"))
    data = {
        "cluster": {"backend": "fake-kube", "checkpoint_bucket": "team-checkpoints"},
        "job": {"registry": REGISTRY, "namespace": "team-a"},
        "trainer": {"model": {"preset": "tiny"}},
    }
    client = Client(Config.from_dict(data), plugins=plugins)
    with pytest.raises(ConfigError) as refused:
        client.submit_job()
    assert str(refused.value) == (
        "cluster.checkpoint_bucket: the job's pods use the checkpoint bucket through ServiceAccount "
        "team-a/fsdp-trainer, which does not exist; run 'fsdp-sdk up' for this job.namespace (it creates the "
        "ServiceAccount and its EKS Pod Identity association), or set job.shared_storage_claim"
    )
    assert apiserver.writes() == []  # nothing sent
