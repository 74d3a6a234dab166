"""Every worker pod of a Trainium job gets our toleration and label; jobs on other types are left alone."""

from __future__ import annotations

from typing import Any

import pytest

from fsdp_sdk.config import Config
from fsdp_sdk.k8s.render import render_job, worker_pods
from fsdp_sdk.plugins import Plugins, build_plugins
from fsdp_sdk.resolved import Resolved
from fsdp_sdk_plugin_trainium import plugin
from fsdp_sdk_plugin_trainium.plugin import GENERATION_LABEL, TAINT_KEY

TOLERATION = {"key": TAINT_KEY, "operator": "Equal", "value": "true", "effect": "NoSchedule"}


@pytest.fixture
def plugins() -> Plugins:
    """fsdp-sdk's built-in plugins and this one; nothing else installed is loaded."""
    plugins = build_plugins(autoload=False)
    plugins.register(plugin, name="trainium")
    return plugins


def render(plugins: Plugins, instance_type: str, api: str) -> list[dict[str, Any]]:
    data = {
        "cluster": {"instance_type": instance_type, "nodes": 4},
        "job": {"api": api, "registry": "123456789012.dkr.ecr.us-west-2.amazonaws.com"},
    }
    return render_job(Config.from_dict(data), rdzv_id="test", plugins=plugins)


@pytest.mark.parametrize("api", ["pytorchjob", "trainjob"])
@pytest.mark.parametrize("instance_type, generation", [("trn1.32xlarge", "1"), ("trn2.48xlarge", "2")])
def test_trainium_jobs_tolerate_our_taint_and_carry_the_generation(
    plugins: Plugins, api: str, instance_type: str, generation: str
) -> None:
    objects = render(plugins, instance_type, api)
    pods = list(worker_pods(objects))
    assert pods
    for pod in pods:
        assert TOLERATION in pod.spec["tolerations"]
        assert pod.labels[GENERATION_LABEL] == generation
    # fsdp-sdk's own toleration of the accelerator taint is still there, named after the Neuron resource
    assert {"key": "aws.amazon.com/neuron", "operator": "Exists", "effect": "NoSchedule"} in pods[0].spec["tolerations"]


def test_rendering_twice_adds_the_toleration_once(plugins: Plugins) -> None:
    objects = render(plugins, "trn1n.32xlarge", "pytorchjob")
    config = Config.from_dict({"cluster": {"instance_type": "trn1n.32xlarge"}})
    plugin.fsdp_sdk_render_job(objects=objects, resolved=Resolved.of(config, plugins, validate_trainer=False))
    (pod,) = worker_pods(objects)
    assert pod.spec["tolerations"].count(TOLERATION) == 1


@pytest.mark.parametrize("api", ["pytorchjob", "trainjob"])
def test_jobs_on_other_types_are_left_alone(plugins: Plugins, api: str) -> None:
    objects = render(plugins, "p5.48xlarge", api)
    for pod in worker_pods(objects):
        assert TOLERATION not in pod.spec.get("tolerations", [])
        assert GENERATION_LABEL not in pod.labels


def test_trainium_workers_request_neuron_devices_and_efa_with_device_rdma(plugins: Plugins) -> None:
    (job,) = render(plugins, "trn2.48xlarge", "pytorchjob")
    container = job["spec"]["pytorchReplicaSpecs"]["Worker"]["template"]["spec"]["containers"][0]
    limits = container["resources"]["limits"]
    assert {k: v for k, v in limits.items() if k not in ("cpu", "memory")} == {
        "aws.amazon.com/neuron": 16,
        "vpc.amazonaws.com/efa": 16,
    }
    assert container["resources"]["requests"] == limits  # Guaranteed: cpu and memory sized from the type
    env = {e["name"]: e.get("value") for e in container["env"]}
    assert env["FI_EFA_USE_DEVICE_RDMA"] == "1" and env["FI_PROVIDER"] == "efa"
