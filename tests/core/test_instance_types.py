"""InstanceType carries capabilities (accelerator resource, GPUDirect RDMA, EFA generation, intra-node link), so a
plugin's type renders like a built-in one: a Trainium-like type asks for Neuron devices, the B200 example for RDMA."""

from __future__ import annotations

import json
from typing import Any

import pytest

import fsdp_sdk_plugin_b200
from fsdp_sdk import hookimpl
from fsdp_sdk.config import Config
from fsdp_sdk.errors import PluginError
from fsdp_sdk.instance_types import InstanceType
from fsdp_sdk.k8s.render import render_job, worker_pods
from fsdp_sdk.plugins import Plugins, build_plugins

BASE: dict[str, Any] = dict(
    name="trn1.32xlarge",
    gpu_count=16,
    gpu_model="Trainium",
    gpu_memory_gib=32,
    efa_interfaces=8,
    vcpus=128,
    memory_gib=512,
    bf16_tflops_per_gpu=190.0,
    on_demand_usd_per_hour=None,
)
TRAINIUM_LIKE = InstanceType(
    **BASE,
    accelerator_resource="aws.amazon.com/neuron",
    efa_generation=2,
    gpudirect_rdma=True,
    intra_node_link="NeuronLink-v2",
    intra_node_gbytes_per_s=384.0,
)


def test_price_date_is_needed_only_with_a_price() -> None:
    assert InstanceType(**BASE).price_date is None  # no price, no date: fine
    with pytest.raises(PluginError, match="price_date is needed with a price"):
        InstanceType(**{**BASE, "on_demand_usd_per_hour": 21.5})
    assert InstanceType(**{**BASE, "on_demand_usd_per_hour": 21.5, "price_date": "2025-06-05"}).price_date
    with pytest.raises(PluginError, match="price_date must be an ISO date"):
        InstanceType(**{**BASE, "on_demand_usd_per_hour": 21.5, "price_date": "June 2025"})


def test_memory_is_the_vendors_figure() -> None:
    assert InstanceType(**{**BASE, "gpu_memory_gib": 179.2}).gpu_memory_gib == 179.2
    for wrong in (0, -1.5, True, "80"):
        with pytest.raises(PluginError, match="gpu_memory_gib must be a positive number"):
            InstanceType(**{**BASE, "gpu_memory_gib": wrong})


@pytest.mark.parametrize(
    "field, value, message",
    [
        ("accelerator_resource", "neuron", "is not a Kubernetes extended resource name"),
        ("accelerator_resource", "aws.amazon.com/Neuron Core", "is not a Kubernetes extended resource name"),
        ("efa_generation", 0, "efa_generation must be a positive integer"),
        ("intra_node_gbytes_per_s", -1, "intra_node_gbytes_per_s must be 0 or more"),
    ],
)
def test_capabilities_are_checked(field: str, value: object, message: str) -> None:
    with pytest.raises(PluginError, match=message):
        InstanceType(**{**BASE, field: value})


def test_gpudirect_rdma_needs_efa() -> None:
    with pytest.raises(PluginError, match=r"gpudirect_rdma needs EFA \(efa_interfaces > 0\)"):
        InstanceType(**{**BASE, "efa_interfaces": 0, "gpudirect_rdma": True})


def _plugins(*types: InstanceType) -> Plugins:
    class Types:
        @hookimpl
        def fsdp_sdk_register_instance_types(self, registry):
            for t in types:
                registry.add(t)

    plugins = build_plugins(autoload=False)
    plugins.register(Types(), name="types")
    return plugins


def _render(plugins: Plugins, instance_type: str, api: str = "pytorchjob") -> list[dict[str, Any]]:
    data = {"cluster": {"instance_type": instance_type}, "job": {"api": api, "registry": "registry.example.com/t"}}
    return render_job(Config.from_dict(data), rdzv_id="r1", plugins=plugins)


@pytest.mark.parametrize("api", ["pytorchjob", "trainjob"])
def test_a_trainium_like_type_asks_for_neuron_devices_and_no_nvidia_gpus(api: str) -> None:
    objects = _render(_plugins(TRAINIUM_LIKE), "trn1.32xlarge", api)
    (job,) = objects
    resources = (
        job["spec"]["trainer"]["resourcesPerNode"]
        if api == "trainjob"
        else job["spec"]["pytorchReplicaSpecs"]["Worker"]["template"]["spec"]["containers"][0]["resources"]
    )
    # the whole node's cpu and memory share too (Guaranteed), from the type's vCPUs and memory
    expected = {"cpu": "125", "memory": "478Gi", "aws.amazon.com/neuron": 16, "vpc.amazonaws.com/efa": 8}
    assert resources == {"limits": expected, "requests": expected}
    (pod,) = worker_pods(objects)
    assert pod.spec["tolerations"] == [{"key": "aws.amazon.com/neuron", "operator": "Exists", "effect": "NoSchedule"}]
    assert pod.spec["nodeSelector"] == {"node.kubernetes.io/instance-type": "trn1.32xlarge"}
    assert "nvidia" not in json.dumps(objects)


def test_the_b200_example_gets_gpudirect_rdma_and_a_type_without_it_does_not() -> None:
    plugins = build_plugins(autoload=False)
    plugins.register(fsdp_sdk_plugin_b200, name="b200")

    def env(instance_type: str) -> dict[str, str]:
        (job,) = _render(plugins, instance_type)
        container = job["spec"]["pytorchReplicaSpecs"]["Worker"]["template"]["spec"]["containers"][0]
        return {e["name"]: e.get("value") for e in container["env"]}

    b200 = env("p6-b200.48xlarge")
    assert (b200["FI_PROVIDER"], b200["FI_EFA_USE_DEVICE_RDMA"]) == ("efa", "1")
    g6e = env("g6e.48xlarge")  # EFA, but no GPUDirect RDMA on L40S
    assert g6e["FI_PROVIDER"] == "efa" and "FI_EFA_USE_DEVICE_RDMA" not in g6e


def test_the_instance_types_command_shows_the_capabilities(invoke) -> None:
    result = invoke("instance-types", "--json")
    assert result.exit_code == 0, result.stderr
    p5 = next(t for t in json.loads(result.stdout) if t["name"] == "p5.48xlarge")
    assert {k: p5[k] for k in ("accelerator_resource", "gpudirect_rdma", "efa_generation", "intra_node_link")} == {
        "accelerator_resource": "nvidia.com/gpu",
        "gpudirect_rdma": True,
        "efa_generation": 2,
        "intra_node_link": "NVLink 4",
    }
