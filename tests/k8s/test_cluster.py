"""The same flows against a real cluster, named by ``KUBECONFIG``; skipped when there is none.

Run them with ``pytest -m cluster tests/k8s``. What they do to the cluster:

* always: read ``prereqs status``; server-side dry runs (``dryRun=All``) of the etcd
  objects and of the job (PyTorchJob, and TrainJob when its CRD is served), which
  store nothing; list jobs;
* only with ``FSDP_SDK_TEST_IMAGE=<registry>/<image>:<tag>`` (an image the cluster can
  pull) and ``FSDP_SDK_TEST_INSTANCE_TYPE``: a real submission of a tiny job named
  ``fsdp-sdk-test-<random>`` in ``FSDP_SDK_TEST_NAMESPACE`` (default ``default``),
  its status, its logs once it runs, and ``stop``, which deletes it and its rendezvous keys.
"""

from __future__ import annotations

import os
import time
import uuid
from pathlib import Path

import pytest

from fsdp_sdk.config import Config
from fsdp_sdk.errors import KubernetesError
from fsdp_sdk.k8s.jobs import JobClient
from fsdp_sdk.k8s.kube import Kube
from fsdp_sdk.k8s.prereqs import Prereqs, render_etcd
from fsdp_sdk.plugins import build_plugins

pytestmark = pytest.mark.cluster

NAMESPACE = os.environ.get("FSDP_SDK_TEST_NAMESPACE", "default")


@pytest.fixture(scope="module")
def cluster() -> Kube:
    path = os.environ.get("KUBECONFIG", "").split(os.pathsep)[0]
    if not path or not Path(path).is_file():
        pytest.skip("no cluster: set KUBECONFIG to a kubeconfig file to run the cluster tests")
    kube = Kube.from_kubeconfig(path)
    try:
        kube.request("GET", "/version")
    except KubernetesError as error:
        pytest.skip(f"the cluster in KUBECONFIG is not reachable: {error}")
    return kube


def _config(**job: object) -> Config:
    image = os.environ.get(
        "FSDP_SDK_TEST_IMAGE", "123456789012.dkr.ecr.us-west-2.amazonaws.com/fsdp-sdk-trainer:latest"
    )
    repository, _, tag = image.rpartition(":")
    registry, _, name = repository.rpartition("/")
    config = Config.from_dict(
        {
            "job": {"namespace": NAMESPACE, "registry": registry, "image": name, "tag": tag, "num_workers": 1, **job},
            "trainer": {"model": {"preset": "tiny"}, "train": {"steps": 5}},
        }
    )
    config.cluster.instance_type = os.environ.get("FSDP_SDK_TEST_INSTANCE_TYPE", config.cluster.instance_type)
    return config


def _served(kube: Kube, api_version: str, kind: str) -> bool:
    try:
        kube.resource(api_version, kind)
    except KubernetesError:
        return False
    return True


def test_prereqs_status_reads(cluster: Kube) -> None:
    status = Prereqs(_config(), cluster).status()
    assert isinstance(status.to_dict()["healthy"], bool)


def test_etcd_objects_pass_a_server_dry_run(cluster: Kube) -> None:
    for obj in render_etcd(_config()):
        assert cluster.apply(obj, dry_run=True)["metadata"]["name"] == "etcd"


@pytest.mark.parametrize(
    "api, api_version, kind",
    [
        ("pytorchjob", "kubeflow.org/v1", "PyTorchJob"),
        ("trainjob", "trainer.kubeflow.org/v1alpha1", "TrainJob"),
    ],
)
def test_job_passes_a_server_dry_run(cluster: Kube, api: str, api_version: str, kind: str) -> None:
    if not _served(cluster, api_version, kind):
        pytest.skip(f"{api_version} {kind} is not served by this cluster ('fsdp-sdk prereqs install')")
    name = f"fsdp-sdk-test-{uuid.uuid4().hex[:6]}"
    jobs = JobClient(_config(name=name, api=api), cluster, plugins=build_plugins(autoload=False))
    ref = jobs.submit(dry_run=True)
    assert ref.name == name
    assert cluster.get(api_version, kind, name, NAMESPACE) is None  # stored nothing
    assert isinstance(jobs.list(), list)


def test_submit_status_logs_stop(cluster: Kube) -> None:
    if "FSDP_SDK_TEST_IMAGE" not in os.environ or "FSDP_SDK_TEST_INSTANCE_TYPE" not in os.environ:
        pytest.skip("set FSDP_SDK_TEST_IMAGE and FSDP_SDK_TEST_INSTANCE_TYPE to submit a real job")
    if not _served(cluster, "kubeflow.org/v1", "PyTorchJob"):
        pytest.skip("the Training Operator is not installed ('fsdp-sdk prereqs install')")
    name = f"fsdp-sdk-test-{uuid.uuid4().hex[:6]}"
    jobs = JobClient(_config(name=name), cluster, plugins=build_plugins(autoload=False))
    ref = jobs.submit()
    try:
        deadline = time.monotonic() + float(os.environ.get("FSDP_SDK_TEST_TIMEOUT", "900"))
        status = jobs.status(ref)
        while status.phase not in ("Running", "Succeeded", "Failed") and time.monotonic() < deadline:
            time.sleep(10)
            status = jobs.status(ref)
        assert status.phase in ("Running", "Succeeded"), status.to_dict()
        lines: list[str] = []
        while time.monotonic() < deadline:
            try:
                jobs.logs(ref, out=lines.append)
                break
            except KubernetesError:
                time.sleep(10)
        # the trainer logs "[rank0] HH:MM:SS INFO fsdp_trainer.distributed: master_addr=<host>"
        assert any("master_addr=" in line for line in lines), lines[-20:]
    finally:
        result = jobs.stop(ref)
    assert result.deleted and result.rendezvous_error is None
