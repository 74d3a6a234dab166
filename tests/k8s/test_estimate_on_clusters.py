"""The estimate on a Kubernetes cluster: ``run`` and ``job submit`` refuse a job that will not fit (unless forced),
and ``bench scale`` scales the GPU node group, submits, follows and collects each point's summary."""

from __future__ import annotations

import json
import threading
from pathlib import Path
from typing import ClassVar

import pytest

from fsdp_sdk.backends.base import ClusterBackend, ClusterStatus, Plan
from fsdp_sdk.client import Client
from fsdp_sdk.config import Config
from fsdp_sdk.errors import ConfigError
from fsdp_sdk.hookspecs import hookimpl
from fsdp_sdk.plugins import build_plugins
from fsdp_sdk.resolved import Resolved
from fsdp_sdk.scaling import run_sweep

from .fake_apiserver import FakeApiServer
from .tools import cli

REGISTRY = "123456789012.dkr.ecr.us-west-2.amazonaws.com"
LEADER_LINE = "[rank0] 12:00:00 INFO fsdp_trainer.distributed: master_addr=fsdp-worker-0 host=fsdp-worker-0.fsdp"
#: A 70B on one g5 node (8 x 24 GiB A10G): far over the memory.
TOO_BIG = {"model.preset": "llama2-70b", "train.steps": 5}


class ScalingBackend(ClusterBackend):
    """A cluster behind the loopback API server whose node group records the sizes it is scaled to."""

    name: ClassVar[str] = "fake-kube"
    kubeconfig_path: ClassVar[Path]
    sizes: ClassVar[list[int]] = []

    def plan(self, resolved: Resolved) -> Plan:
        return Plan(backend=self.name, cluster=resolved.config.cluster.name, steps=[])

    def apply(self, config, plan, *, progress=None) -> ClusterStatus:
        return self.status(config)

    def down(self, config, *, dry_run=False, progress=None) -> ClusterStatus:
        return self.status(config)

    def scale(self, config, nodes, *, dry_run=False, progress=None) -> ClusterStatus:
        type(self).sizes.append(nodes)
        return self.status(config)

    def status(self, config: Config) -> ClusterStatus:
        nodes = type(self).sizes[-1] if type(self).sizes else 2
        return ClusterStatus(backend=self.name, cluster=config.cluster.name, state="ready", nodes=nodes)

    def kubeconfig(self, config: Config) -> Path:
        return type(self).kubeconfig_path


def _client(apiserver: FakeApiServer, tmp_path: Path, **cluster) -> Client:
    ScalingBackend.kubeconfig_path = apiserver.write_kubeconfig(tmp_path / "kubeconfig")
    ScalingBackend.sizes = []

    class Register:
        @hookimpl
        def fsdp_sdk_register_backends(self, registry) -> None:
            registry.add(ScalingBackend)

    plugins = build_plugins(autoload=False)
    plugins.register(Register(), name="fake-kube")
    config = Config.from_dict({"cluster": {"backend": "fake-kube", **cluster}, "job": {"registry": REGISTRY}})
    return Client(config, plugins=plugins)


def test_run_refuses_a_job_that_will_not_fit_unless_forced(apiserver: FakeApiServer, tmp_path: Path) -> None:
    client = _client(apiserver, tmp_path, instance_type="g5.48xlarge", nodes=2)
    with pytest.raises(ConfigError) as err:
        client.run(trainer_overrides=TOO_BIG)
    message = str(err.value)
    assert message.startswith("estimate: llama2-70b (69.0B) on 2 x g5.48xlarge = 16 GPUs")  # one worker per node
    assert "GiB per GPU, over the 20.4 GiB usable (85% of 24 GiB)" in message
    assert "'fsdp-sdk estimate --recommend' lists what fits" in message and "--force" in message
    assert "\n" not in message and err.value.exit_code == 2
    assert apiserver.writes() == []  # nothing was sent
    # forced: it is rendered (the runner's dry run: objects, nothing sent)
    result = client.run(trainer_overrides=TOO_BIG, dry_run=True, force=True)
    assert result.dry_run and result.extra["objects"][0]["kind"] == "PyTorchJob" and apiserver.writes() == []
    # what fits is not refused
    assert client.run(trainer_overrides={"model.preset": "llama2-7b"}, dry_run=True).dry_run


def test_job_submit_refuses_unless_forced(
    isolated_cli: None, kubeconfig: Path, apiserver: FakeApiServer, capsys: pytest.CaptureFixture[str]
) -> None:
    base = ["job", "submit", "--kubeconfig", str(kubeconfig), "--set", f"job.registry={REGISTRY}"]
    big = ["--set", "cluster.instance_type=g5.48xlarge", "--set", "model.preset=llama2-70b"]
    code, out, err = cli(capsys, *base, *big)
    assert code == 2 and err.startswith("Error: estimate: llama2-70b (69.0B)"), err
    assert err.count("\n") == 1 and out == "" and apiserver.writes() == []
    code, out, err = cli(capsys, *base, *big, "--force", "--dry-run")
    assert code == 0, err
    assert "would submit" in out


def _operator(apiserver: FakeApiServer, stop: threading.Event, per_gpu: dict[int, float]) -> None:
    """Play the Training Operator and the trainer for every PyTorchJob that appears."""
    seen: set[str] = set()

    def new_job_or_stop() -> bool:
        return stop.is_set() or any(j["metadata"]["name"] not in seen for j in apiserver.objects("PyTorchJob"))

    while not stop.is_set():
        for job in apiserver.objects("PyTorchJob"):
            name = job["metadata"]["name"]
            if name in seen:
                continue
            seen.add(name)
            workers = job["spec"]["pytorchReplicaSpecs"]["Worker"]["replicas"]
            labels = {"training.kubeflow.org/job-name": name}
            apiserver.add_pod(f"{name}-worker-0", labels=labels, log=f"{LEADER_LINE}\n", follow_open=True)
            apiserver.set_status(
                "kubeflow.org/v1", "PyTorchJob", name, {"conditions": [{"type": "Running", "status": "True"}]}
            )
            summary = {
                "world_size": workers * 8,
                "tokens_per_s_per_gpu": per_gpu[workers],
                "mfu": 0.5,
                "peak_mem_gib": 60.0,
                "config": {"train": {"micro_batch_size": 1, "grad_accum_steps": 1}, "data": {"seq_len": 4096}},
            }
            apiserver.append_log(f"{name}-worker-0", json.dumps(summary) + "\n")
            apiserver.set_status(
                "kubeflow.org/v1", "PyTorchJob", name, {"conditions": [{"type": "Succeeded", "status": "True"}]}
            )
            apiserver.close_log(f"{name}-worker-0")
        apiserver.wait_for(new_job_or_stop, timeout=600)  # on the server's change signal, not a time


def test_sweep_on_a_cluster_scales_submits_and_collects(apiserver: FakeApiServer, tmp_path: Path) -> None:
    client = _client(apiserver, tmp_path, instance_type="p5.48xlarge")
    stop = threading.Event()
    per_gpu = {1: 1000.0, 2: 900.0}
    threading.Thread(target=_operator, args=(apiserver, stop, per_gpu), daemon=True).start()
    try:
        sweep = run_sweep(client, [1, 2], tmp_path / "out", trainer_overrides={"model.preset": "llama2-7b"})
    finally:
        stop.set()
    assert ScalingBackend.sizes == [1, 2]  # the node group, scaled for each point
    one, two = sweep.points
    assert (one["gpus"], one["tokens_per_s"], one["step_time_s"]) == (8, 8000.0, pytest.approx(4096 / 1000))
    assert (two["gpus"], two["tokens_per_s"], two["efficiency"]) == (16, 14400.0, pytest.approx(0.9))
    assert one["job"].startswith("fsdp-1n-") and two["job"].startswith("fsdp-2n-")
    jobs = [w.body for w in apiserver.writes() if w.method in ("PATCH", "POST") and w.body.get("kind") == "PyTorchJob"]
    assert [j["spec"]["pytorchReplicaSpecs"]["Worker"]["replicas"] for j in jobs] == [1, 2]
    assert apiserver.objects("PyTorchJob") == []  # each measured job was deleted
    assert two["estimated_tokens_per_s_per_gpu"] > 0 and two["estimated_efficiency"] < 1
