"""The rendered eksctl ClusterConfig (pure): every variant validates against the real eksctl schema, and carries
the eksctl facts that matter (EFA in one zone, reservation targeting, Capacity Blocks, placement, sizes)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
import yaml

from fsdp_sdk.config.resolution import resolve
from fsdp_sdk.errors import ConfigError
from fsdp_sdk.pins import default_kubernetes_version, pin
from fsdp_sdk_eksctl.backend import _yaml
from fsdp_sdk_eksctl.device_plugins import device_plugin_objects
from fsdp_sdk_eksctl.render import render_cluster_config, uses_own_placement_group

from .helpers import RESERVATION, ZONES, configure, plugin_set


def gpu_group(document: dict[str, Any]) -> dict[str, Any]:
    return next(g for g in document["managedNodeGroups"] if g["name"] == "gpu")


VARIANTS: dict[str, dict[str, Any]] = {
    "p4de-odcr": {
        "cluster.instance_type": "p4de.24xlarge",
        "cluster.capacity_reservation_id": RESERVATION,
        "cluster.availability_zones": ZONES,
    },
    "p4de-odcr-placement-group": {
        "cluster.instance_type": "p4de.24xlarge",
        "cluster.capacity_reservation_id": RESERVATION,
        "cluster.availability_zones": ZONES,
        "cluster.placement_group": "true",
        "eksctl.placement_group_name": "p4de-odcr-pg",
    },
    "p5-capacity-block": {
        "cluster.instance_type": "p5.48xlarge",
        "cluster.capacity_type": "capacity-block",
        "cluster.capacity_reservation_id": RESERVATION,
        "cluster.availability_zones": ZONES,
    },
    "p5-on-demand-placement-group": {"cluster.instance_type": "p5.48xlarge", "cluster.placement_group": "true"},
    "one-node": {"cluster.nodes": 1},
    "two-nodes": {"cluster.nodes": 2, "cluster.availability_zones": ZONES},
    "sixteen-nodes": {"cluster.nodes": 16, "cluster.min_nodes": 4, "cluster.max_nodes": 32},
    "b200-plugin-type": {"cluster.instance_type": "p6-b200.48xlarge", "cluster.availability_zones": ZONES},
    "spot-bottlerocket": {"cluster.capacity_type": "spot", "eksctl.ami_family": "Bottlerocket"},
    "no-efa-public": {"cluster.efa": "false", "eksctl.private_networking": "false", "eksctl.node_repair": "true"},
    "pinned": {
        "eksctl.addon_versions": "vpc-cni=v1.19.2-eksbuild.1,aws-ebs-csi-driver=v1.40.0-eksbuild.1",
        "eksctl.tags": "team=ml,cost-center=42",
        "eksctl.gpu_ami": "ami-0123456789abcdef0",
        "eksctl.vpc_cidr": "10.42.0.0/16",
    },
}


@pytest.mark.parametrize("variant", VARIANTS)
def test_every_variant_validates_against_the_eksctl_schema(
    variant: str, validate_cluster_config: Callable[[dict[str, Any]], list[str]]
) -> None:
    validate = validate_cluster_config
    config, instance = configure(**VARIANTS[variant])
    document = render_cluster_config(config, instance)
    assert validate(document) == []
    written = yaml.safe_load(_yaml(document))  # the file eksctl reads is the same document
    assert written == document and validate(written) == []


def test_p4de_with_a_capacity_reservation_targets_it_in_its_zone() -> None:
    config, instance = configure(**VARIANTS["p4de-odcr"])
    document = render_cluster_config(config, instance)
    assert document["apiVersion"] == "eksctl.io/v1alpha5" and document["kind"] == "ClusterConfig"
    assert document["metadata"] == {
        "name": "demo",
        "region": "us-west-2",
        "version": default_kubernetes_version(),
        "tags": {"fsdp-sdk.io/cluster": "demo"},
    }
    assert document["availabilityZones"] == ["us-west-2b", "us-west-2a", "us-west-2c"]
    assert document["iam"] == {"withOIDC": True}
    # the Pod Identity agent hands the training pods the checkpoint bucket's role
    assert [a["name"] for a in document["addons"]] == ["vpc-cni", "coredns", "kube-proxy", "eks-pod-identity-agent"]
    system, gpu = document["managedNodeGroups"]
    assert (system["name"], system["instanceType"], system["desiredCapacity"]) == ("system", "m5.xlarge", 2)
    assert gpu == {
        "name": "gpu",
        "instanceType": "p4de.24xlarge",
        "amiFamily": "AmazonLinux2023",
        "desiredCapacity": 2,
        "minSize": 0,
        "maxSize": 2,
        "volumeSize": 500,
        "volumeType": "gp3",
        "volumeIOPS": 16000,
        "volumeThroughput": 1000,
        "privateNetworking": True,
        "labels": {"fsdp-sdk.io/node-role": "gpu", "fsdp-sdk.io/accelerator": "a100"},
        "taints": [{"key": "nvidia.com/gpu", "value": "true", "effect": "NoSchedule"}],
        "availabilityZones": ["us-west-2b"],
        "efaEnabled": True,
        "capacityReservation": {"capacityReservationTarget": {"capacityReservationID": RESERVATION}},
        "preBootstrapCommands": ["/usr/bin/setup-local-disks raid0"],
    }
    # a reservation keeps eksctl from adding a placement group of its own (a cause of partial fulfilment)
    assert not uses_own_placement_group(config, instance)


def test_a_capacity_block_sets_the_market_type() -> None:
    gpu = gpu_group(render_cluster_config(*configure(**VARIANTS["p5-capacity-block"])))
    assert gpu["instanceMarketOptions"] == {"marketType": "capacity-block"}
    assert gpu["capacityReservation"]["capacityReservationTarget"]["capacityReservationID"] == RESERVATION
    assert gpu["instanceType"] == "p5.48xlarge" and gpu["efaEnabled"] is True


def test_placement_group_on_and_off() -> None:
    on = gpu_group(render_cluster_config(*configure(**VARIANTS["p4de-odcr-placement-group"])))
    off = gpu_group(render_cluster_config(*configure(**VARIANTS["p4de-odcr"])))
    assert on["placement"] == {"groupName": "p4de-odcr-pg"} and "placement" not in off
    # On demand with EFA, eksctl adds a placement group itself, on or off: the plan says so.
    config, instance = configure(**VARIANTS["p5-on-demand-placement-group"])
    assert "placement" not in gpu_group(render_cluster_config(config, instance))
    assert uses_own_placement_group(config, instance)


@pytest.mark.parametrize(("nodes", "low", "high"), [(1, 0, 1), (2, 0, 2), (16, 4, 32)])
def test_node_counts(nodes: int, low: int, high: int) -> None:
    overrides = {"cluster.nodes": nodes, "cluster.min_nodes": low, "cluster.max_nodes": high}
    gpu = gpu_group(render_cluster_config(*configure(**overrides)))
    assert (gpu["desiredCapacity"], gpu["minSize"], gpu["maxSize"]) == (nodes, low, high)


def test_a_third_party_instance_type_gets_efa_and_its_device_plugins() -> None:
    config, instance = configure(**VARIANTS["b200-plugin-type"])
    gpu = gpu_group(render_cluster_config(config, instance))
    assert gpu["instanceType"] == "p6-b200.48xlarge" and gpu["efaEnabled"] is True
    assert gpu["labels"]["fsdp-sdk.io/accelerator"] == "b200"
    objects = {o["metadata"]["name"]: o for o in device_plugin_objects(config, instance)}
    assert sorted(objects) == ["aws-efa-k8s-device-plugin", "nvidia-device-plugin"]
    efa = objects["aws-efa-k8s-device-plugin"]["spec"]["template"]["spec"]
    assert efa["nodeSelector"] == {
        "fsdp-sdk.io/node-role": "gpu",
        "node.kubernetes.io/instance-type": "p6-b200.48xlarge",
    }
    assert efa["containers"][0]["image"] == pin("efa-device-plugin").image_ref(
        eks_registry="602401143452.dkr.ecr.us-west-2.amazonaws.com"
    )


def test_the_pinned_efa_plugin_on_every_efa_type_and_bottlerocket_its_own_nvidia_plugin() -> None:
    # eksctl's own EFA plugin does not tolerate the GPU taint: the pinned one serves the GPU nodes
    config, instance = configure(**VARIANTS["p4de-odcr"])
    names = [o["metadata"]["name"] for o in device_plugin_objects(config, instance)]
    assert names == ["nvidia-device-plugin", "aws-efa-k8s-device-plugin"]
    config, instance = configure(**VARIANTS["spot-bottlerocket"])
    assert [o["metadata"]["name"] for o in device_plugin_objects(config, instance)] == ["aws-efa-k8s-device-plugin"]
    gpu = gpu_group(render_cluster_config(config, instance))
    assert gpu["spot"] is True and gpu["amiFamily"] == "Bottlerocket"
    config, instance = configure(**VARIANTS["no-efa-public"])
    assert [o["metadata"]["name"] for o in device_plugin_objects(config, instance)] == ["nvidia-device-plugin"]


def test_device_plugins_are_valid_kubernetes_objects() -> None:
    from fsdp_sdk.k8s.validate import validate_builtin

    config, instance = configure(**VARIANTS["b200-plugin-type"])
    for obj in device_plugin_objects(config, instance):
        assert validate_builtin(obj, version="1.31") == [], obj["metadata"]["name"]


def test_efa_off_and_public_subnets() -> None:
    gpu = gpu_group(render_cluster_config(*configure(**VARIANTS["no-efa-public"])))
    assert "efaEnabled" not in gpu and gpu["privateNetworking"] is False
    assert gpu["nodeRepairConfig"] == {"enabled": True}


def test_pinned_addons_tags_ami_and_cidr() -> None:
    document = render_cluster_config(*configure(**VARIANTS["pinned"]))
    assert document["addons"] == [
        {"name": "vpc-cni", "version": "v1.19.2-eksbuild.1"},
        {"name": "coredns", "version": "latest"},
        {"name": "kube-proxy", "version": "latest"},
        {"name": "eks-pod-identity-agent", "version": "latest"},
        {"name": "aws-ebs-csi-driver", "version": "v1.40.0-eksbuild.1"},
    ]
    assert document["metadata"]["tags"] == {"fsdp-sdk.io/cluster": "demo", "team": "ml", "cost-center": "42"}
    assert gpu_group(document)["ami"] == "ami-0123456789abcdef0"
    assert document["vpc"] == {"cidr": "10.42.0.0/16", "nat": {"gateway": "Single"}}


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        (
            {"eksctl.system_nodegroup": "gpu"},
            "eksctl.gpu_nodegroup: is 'gpu', the same as eksctl.system_nodegroup; give the two node groups different names",
        ),
        (
            {"eksctl.ami_family": "AmazonLinux2", "cluster.kubernetes_version": "1.33"},
            "eksctl.ami_family: AmazonLinux2 has no EKS AMI for Kubernetes 1.33; use AmazonLinux2023 (or Bottlerocket)",
        ),
        (
            {"cluster.availability_zones": "us-west-2b"},
            "cluster.availability_zones: names one zone (us-west-2b) but EKS needs subnets in two at least; "
            "add a second zone of us-west-2 (the GPU nodes stay in the first)",
        ),
        (
            {"cluster.capacity_reservation_id": RESERVATION, "cluster.placement_group": "true"},
            "cluster.placement_group: is on with a capacity reservation, whose instances live in the placement group "
            "it was created in; set eksctl.placement_group_name to that group, or turn cluster.placement_group off",
        ),
        (
            {"cluster.efa": "false", "cluster.placement_group": "true"},
            "cluster.placement_group: is on without EFA: eksctl creates a placement group only for EFA node groups; "
            "set eksctl.placement_group_name to an existing cluster placement group, or turn cluster.efa on",
        ),
        (
            {"eksctl.placement_group_name": "pg"},
            "eksctl.placement_group_name: is set but cluster.placement_group is off; turn cluster.placement_group on, "
            "or unset eksctl.placement_group_name",
        ),
        (
            {"eksctl.addon_versions": "vpc-cni=newest"},
            "eksctl.addon_versions: vpc-cni=newest is not an EKS add-on name and version; write add-on=version, "
            "like vpc-cni=v1.19.2-eksbuild.1 (or latest)",
        ),
        (
            {"eksctl.vpc_cidr": "10.0.0.0/8"},
            "eksctl.vpc_cidr (from overrides): '10.0.0.0/8' is not an IPv4 network from /16 to /24; use a CIDR like 10.42.0.0/16",
        ),
        (
            {"eksctl.gpu_ami": "ubuntu"},
            "eksctl.gpu_ami (from overrides): 'ubuntu' is not an AMI id; use an id like ami-0123456789abcdef0",
        ),
        (
            {"eksctl.ami_family": "Ubuntu2204"},
            "eksctl.ami_family (from overrides): 'Ubuntu2204' is not one of AmazonLinux2023, AmazonLinux2, Bottlerocket; set "
            "eksctl.ami_family to one of: AmazonLinux2023, AmazonLinux2, Bottlerocket",
        ),
    ],
)
def test_settings_eksctl_would_refuse_are_one_line_errors(overrides: dict[str, Any], message: str) -> None:
    with pytest.raises(ConfigError) as error:
        configure(**overrides)
    assert str(error.value) == message
    assert error.value.exit_code == 2


def test_the_section_is_not_checked_for_other_backends() -> None:
    from fsdp_sdk.config import Config

    plugins = plugin_set()
    config = Config.from_dict({}, sections=plugins.settings).with_overrides(
        {"cluster.backend": "local", "eksctl.system_nodegroup": "gpu"}
    )
    assert resolve(config, plugins, validate_trainer=False).section("eksctl").system_nodegroup == "gpu"
