"""A Kubernetes worker whose pod comes back on another node resumes from the cluster's checkpoint bucket.

The job is rendered for a cluster with a checkpoint bucket (``cluster.checkpoint_bucket``, moto's S3 over HTTP),
so its ``checkpoint.dir`` is ``s3://<bucket>/default/fsdp/checkpoints``; the stand-in operator and kubelet
(:class:`k8s.kubelet.LocalNode`) run its one worker as a real trainer on this machine, SIGKILL it after a
checkpoint, and start the pod's next container on a *different* node (a fresh disk): nothing of the first node
survives, and the worker resumes from S3.

The trainer reads and writes ``s3://`` through ``fsdp_trainer.storage`` (s3torchconnector); where that module or
s3torchconnector is not installed, the test is skipped saying so.
"""

from __future__ import annotations

import importlib.util
import os
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from fsdp_sdk.aws.checkpoint_bucket import ensure_bucket
from fsdp_sdk.aws.checkpoint_plan import CheckpointBucket
from fsdp_sdk.aws.session import aws_client
from fsdp_sdk.client import Client
from fsdp_sdk.config import Config
from fsdp_sdk.k8s.cluster_objects import checkpoint_access
from fsdp_sdk.plugins import reset_plugins
from k8s.conftest import PYTORCHJOB_CRD, TRAINJOB_CRD
from k8s.fake_apiserver import FakeApiServer, schema_validators
from k8s.kubelet import LocalNode
from k8s.tools import Lines, kubernetes_plugins

REGISTRY = "123456789012.dkr.ecr.us-west-2.amazonaws.com"
BUCKET = "fsdp-sdk-123456789012-us-west-2-fsdp-sdk"
JOB = ("kubeflow.org/v1", "PyTorchJob", "fsdp")


def _trainer_writes_s3() -> str | None:
    """Why the trainer cannot checkpoint to ``s3://`` here, or ``None`` when it can."""
    for module in ("fsdp_trainer.storage", "s3torchconnector"):
        if importlib.util.find_spec(module) is None:
            return f"{module} is not installed: the trainer cannot checkpoint to s3:// here"
    return None


@pytest.fixture
def api(aws: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[FakeApiServer]:
    """The loopback API server (validating against the real schemas) as the cluster of KUBECONFIG; moto as AWS."""
    reason = _trainer_writes_s3()
    if reason:
        pytest.skip(reason)
    for path in (PYTORCHJOB_CRD, TRAINJOB_CRD):
        if not path.exists():
            pytest.skip(f"{path.name} not found at ../shared/schemas/ (the shared schemas sit beside the project root)")
    monkeypatch.chdir(tmp_path)
    for name in list(os.environ):
        if name.startswith("FSDP_SDK_"):
            monkeypatch.delenv(name)
    monkeypatch.setenv("FSDP_SDK_DISABLE_PLUGIN_AUTOLOAD", "1")
    reset_plugins()
    with FakeApiServer(schema_validators(PYTORCHJOB_CRD, TRAINJOB_CRD)) as server:
        monkeypatch.setenv("KUBECONFIG", str(server.write_kubeconfig(tmp_path / "kubeconfig")))
        yield server
    reset_plugins()


@pytest.mark.slow
def test_a_worker_recreated_on_another_node_resumes_from_the_bucket(api: FakeApiServer, tmp_path: Path) -> None:
    steps = 4
    config = Config.from_dict(
        {
            "cluster": {"backend": "fake-kube", "checkpoint_bucket": BUCKET, "region": "us-west-2"},
            "job": {"registry": REGISTRY, "num_workers": 1, "nproc_per_node": 1},
            "trainer": {
                "model": {"preset": "tiny"},
                "data": {"seq_len": 64},
                "train": {"steps": steps},
                "checkpoint": {"every_steps": 2},
            },
        }
    )
    # what 'up' makes on EKS: the bucket, and the ServiceAccount the pods run under
    ensure_bucket(CheckpointBucket(BUCKET, "us-west-2", "fsdp-sdk", "default"))
    for prerequisite in checkpoint_access(config):
        for obj in prerequisite.objects:
            api.put(dict(obj))
    client = Client(config, plugins=kubernetes_plugins(Path(os.environ["KUBECONFIG"])))
    first_node, second_node = LocalNode(api, tmp_path / "node-a"), LocalNode(api, tmp_path / "node-b")
    outcome: list[object] = []
    lines = Lines()

    def run() -> None:
        try:
            outcome.append(client.run(run_id="fsdp-s3resume", on_output=lines))
        except BaseException as error:
            outcome.append(error)

    runner = threading.Thread(target=run, daemon=True)
    runner.start()
    job = api.wait_for(lambda: api.get(*JOB))
    pod = job["spec"]["pytorchReplicaSpecs"]["Worker"]["template"]["spec"]
    assert pod["serviceAccountName"] == "fsdp-trainer"
    args = pod["containers"][0]["args"]
    assert args[args.index("--checkpoint.dir") + 1] == f"s3://{BUCKET}/default/fsdp/checkpoints"

    first = first_node.start()
    first.wait_for_line(lambda line: "checkpoint: saved" in line and "step_00000002" in line)
    first.kill()  # the node is lost with its disk: the pod's next container runs on another node
    second = second_node.start(restart=True)
    assert second_node.finish(second) == 0
    runner.join(timeout=120)
    assert outcome and not isinstance(outcome[0], BaseException), outcome
    summary = outcome[0].summary  # type: ignore[attr-defined]
    assert summary["steps"] == steps and summary["steps_run"] < steps  # the second container did not start over
    assert any("resumed from" in line for line in second.lines), second.lines[-20:]
    keys = [
        o["Key"]
        for o in aws_client("s3", "us-west-2").list_objects_v2(Bucket=BUCKET, Prefix="default/fsdp/")["Contents"]
    ]
    assert any(key.startswith("default/fsdp/checkpoints/step_00000004/") for key in keys), keys
    for node in ("node-a", "node-b"):  # nothing of the checkpoints on either node's disk
        assert not (tmp_path / node / "node" / "mnt/k8s-disks/0/fsdp-sdk/default/fsdp/checkpoints").exists()
