"""The rehearsal of the image: an EKS job's worker, run by the kubelet stand-in in an environment built from the
Dockerfile's own install lines (:mod:`rehearsal.image`), checkpoints to the cluster's bucket (moto's S3) and, its
node lost mid-run, resumes from it on another node with the losses of a run never interrupted.

Issue 39: the image installed the trainer as ``[hub,prometheus]``, without ``s3``: every rank of every EKS job
failed its S3 check (``s3:// locations need s3torchconnector``) and exited. This test fails so without the fix.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from fsdp_sdk.aws.checkpoint_bucket import ensure_bucket
from fsdp_sdk.aws.checkpoint_plan import CheckpointBucket
from fsdp_sdk.aws.session import aws_client
from fsdp_sdk.config import Config
from fsdp_sdk.k8s.cluster_objects import checkpoint_access
from fsdp_sdk.k8s.render import render_job
from fsdp_sdk.plugins import build_plugins
from k8s.fake_apiserver import FakeApiServer
from k8s.kubelet import LocalNode

REGISTRY = "123456789012.dkr.ecr.us-west-2.amazonaws.com"
BUCKET = "fsdp-sdk-123456789012-us-west-2-fsdp-sdk"
STEPS = 4


def _config(bucket: str | None) -> Config:
    cluster = {"checkpoint_bucket": bucket, "region": "us-west-2"} if bucket else {"region": "us-west-2"}
    return Config.from_dict(
        {
            "cluster": cluster,
            "job": {"registry": REGISTRY, "num_workers": 1, "nproc_per_node": 1},
            "trainer": {
                "model": {"preset": "tiny"},
                "data": {"seq_len": 64},
                "train": {"steps": STEPS},
                "checkpoint": {"every_steps": 2},
            },
        }
    )


def _losses(lines: list[str]) -> dict[int, float]:
    found = {}
    for line in lines:
        if line.startswith('{"step":'):
            record = json.loads(line)
            if "loss" in record:
                found[record["step"]] = record["loss"]
    return found


def test_the_image_checkpoints_an_eks_job_to_the_bucket_and_resumes_from_it_on_another_node(
    aws: str, image_python: str, cluster: FakeApiServer, tmp_path: Path
) -> None:
    # the uninterrupted run, in the image, checkpoints on the node's disk: the losses to end with
    (plain,) = [
        o
        for o in render_job(_config(None), rdzv_id="fsdp-plain", plugins=build_plugins(autoload=False))
        if o["kind"] == "PyTorchJob"
    ]
    cluster.put(plain)
    node = LocalNode(cluster, tmp_path / "plain", python=image_python)
    run = node.start()
    assert node.finish(run) == 0, run.lines[-20:]
    straight = _losses(run.lines)
    assert sorted(straight) == list(range(1, STEPS + 1)), run.lines[-20:]
    cluster.delete("kubeflow.org/v1", "PyTorchJob", "fsdp")

    # what 'up' makes on EKS: the bucket, the ServiceAccount of the pods; then the job on the bucket
    config = _config(BUCKET)
    ensure_bucket(CheckpointBucket(BUCKET, "us-west-2", "fsdp-sdk", "default"))
    for prerequisite in checkpoint_access(config):
        for obj in prerequisite.objects:
            cluster.put(dict(obj))
    (job,) = [
        o
        for o in render_job(config, rdzv_id="fsdp-s3", plugins=build_plugins(autoload=False))
        if o["kind"] == "PyTorchJob"
    ]
    cluster.put(job)
    first_node = LocalNode(cluster, tmp_path / "node-a", python=image_python)
    second_node = LocalNode(cluster, tmp_path / "node-b", python=image_python)
    first = first_node.start()
    first.wait_for_line(lambda line: "checkpoint: saved" in line and "step_00000002" in line)
    first.kill()  # the node is lost with its disk: the pod's next container runs on another node
    second = second_node.start(restart=True)
    assert second_node.finish(second) == 0, second.lines[-20:]
    assert any("resumed from" in line for line in second.lines), second.lines[-20:]
    resumed = {**_losses(first.lines), **_losses(second.lines)}
    assert resumed == pytest.approx(straight, rel=1e-6)  # the same losses as the run never interrupted
    keys = [
        o["Key"]
        for o in aws_client("s3", "us-west-2").list_objects_v2(Bucket=BUCKET, Prefix="default/fsdp/")["Contents"]
    ]
    assert any(key.startswith("default/fsdp/checkpoints/step_00000004/") for key in keys), keys
