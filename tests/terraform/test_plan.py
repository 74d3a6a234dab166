"""``plan()`` is pure and says exactly what ``apply()`` writes: the inputs (from the configuration and the
instance-type registry), the backend block, the steps, the device plugins core applies afterwards; bad
inputs are refused before terraform runs."""

from __future__ import annotations

from pathlib import Path

import pytest

from fsdp_sdk.config.resolution import find_instance_type
from fsdp_sdk.errors import ConfigError
from fsdp_sdk.pins import default_kubernetes_version, pin
from fsdp_sdk.plugins import Plugins
from fsdp_sdk_terraform.backend import TerraformBackend
from fsdp_sdk_terraform.inputs import check_inputs

from .conftest import make_config, resolve


def _inputs(plan) -> dict:
    return next(r["content"] for r in plan.resources if r["file"] == "terraform.tfvars.json")


def test_the_default_p5_plan(plugins: Plugins, tmp_path: Path) -> None:
    config = make_config(plugins, tmp_path / "state")
    plan = TerraformBackend().plan(resolve(config, plugins))
    inputs = _inputs(plan)
    assert inputs == {
        "cluster_name": "fsdp-sdk",
        "region": "us-west-2",
        "kubernetes_version": default_kubernetes_version(),
        "availability_zones": ["us-west-2a", "us-west-2b"],
        "vpc_cidr": "10.0.0.0/16",
        "endpoint_public_access": True,
        "public_access_cidrs": ["0.0.0.0/0"],
        "system_instance_type": "m5.xlarge",
        "system_nodes": 2,
        "gpu_instance_type": "p5.48xlarge",
        "gpu_nodes": 2,
        "gpu_min_nodes": 0,
        "gpu_max_nodes": 2,
        "gpu_ami_type": "AL2023_x86_64_NVIDIA",
        "gpu_labels": {"fsdp-sdk.io/node-role": "gpu", "fsdp-sdk.io/accelerator": "h100"},
        "gpu_taints": [{"key": "nvidia.com/gpu", "value": "true", "effect": "NO_SCHEDULE"}],
        "system_labels": {"fsdp-sdk.io/node-role": "system"},
        "gpu_network_interfaces": [
            {"network_card_index": 0, "device_index": 0, "interface_type": "efa"},
            *({"network_card_index": c, "device_index": 0, "interface_type": "efa-only"} for c in range(1, 32)),
        ],
        "capacity_type": "on-demand",
        "capacity_reservation_id": None,
        "placement_group": True,
        "gpu_volume": {"device_name": "/dev/xvda", "size_gib": 500, "iops": 16000, "throughput": 1000},
        "gpu_user_data": inputs["gpu_user_data"],
        "tags": {},
    }
    assert "application/node.eks.aws" in inputs["gpu_user_data"] and "strategy: RAID0" in inputs["gpu_user_data"]
    workdir = tmp_path / "state" / "terraform" / "fsdp-sdk"
    assert plan.details == {
        "cost": plan.details["cost"],
        "workdir": str(workdir),
        "configuration": plan.details["configuration"],
        "state": str(workdir / "terraform.tfstate"),
        "plan_file": "up.tfplan",
    }
    assert Path(plan.details["configuration"]).joinpath("nodes.tf").is_file()
    assert plan.steps[2] == f"terraform init: state in {workdir / 'terraform.tfstate'}"
    assert plan.steps[3] == (
        "terraform plan -out up.tfplan: VPC 10.0.0.0/16 with private subnets and a NAT gateway in us-west-2a, us-west-2b; "
        f"EKS {default_kubernetes_version()} cluster fsdp-sdk with its IAM roles and OIDC provider; system node group 2 x m5.xlarge; "
        "GPU node group 2 x p5.48xlarge in us-west-2a (32 EFA interfaces each, a cluster placement group of its own, "
        "500 GiB gp3 on /dev/xvda, local NVMe as RAID0, tainted nvidia.com/gpu=true:NO_SCHEDULE)"
    )
    assert [o["metadata"]["name"] for o in plan.kubernetes] == ["nvidia-device-plugin", "aws-efa-k8s-device-plugin"]
    cost = plan.details["cost"]
    assert cost["gpu_nodes_usd_per_hour"] == round(2 * find_instance_type(config, plugins).on_demand_usd_per_hour, 2)
    assert plan.hourly_cost_usd == cost["total_usd_per_hour"] > cost["gpu_nodes_usd_per_hour"]
    assert not (tmp_path / "state").exists()


def test_a_new_placement_group_with_a_reservation_is_refused(plugins: Plugins, tmp_path: Path) -> None:
    config = make_config(
        plugins,
        tmp_path / "state",
        **{
            "cluster.capacity_reservation_id": "cr-0123456789abcdef0",
            "cluster.capacity_type": "capacity-block",
            "cluster.placement_group": "true",
        },
    )
    with pytest.raises(ConfigError, match=r"^cluster.placement_group: is on with a capacity reservation"):
        TerraformBackend().plan(resolve(config, plugins))


def test_a_capacity_block_and_s3_state(plugins: Plugins, tmp_path: Path) -> None:
    config = make_config(
        plugins,
        tmp_path / "state",
        **{
            "cluster.capacity_reservation_id": "cr-0123456789abcdef0",
            "cluster.capacity_type": "capacity-block",
            "cluster.nodes": 16,
            "terraform.state_bucket": "team-tf-state",
            "terraform.lock_table": "terraform-locks",
        },
    )
    plan = TerraformBackend().plan(resolve(config, plugins))
    inputs = _inputs(plan)
    assert (inputs["capacity_type"], inputs["capacity_reservation_id"], inputs["placement_group"]) == (
        "capacity-block",
        "cr-0123456789abcdef0",
        False,
    )
    assert inputs["gpu_nodes"] == inputs["gpu_max_nodes"] == 16
    backend = next(r["content"] for r in plan.resources if r["file"] == "backend.tf.json")
    assert backend == {
        "terraform": {
            "backend": {
                "s3": {
                    "bucket": "team-tf-state",
                    "key": "fsdp-sdk/fsdp-sdk/terraform.tfstate",
                    "region": "us-west-2",
                    "encrypt": True,
                    "dynamodb_table": "terraform-locks",
                }
            }
        }
    }
    assert "(32 EFA interfaces each, Capacity Block cr-0123456789abcdef0, 500 GiB" in plan.steps[3]
    assert plan.details["state"] == (
        "s3://team-tf-state/fsdp-sdk/fsdp-sdk/terraform.tfstate (us-west-2, locked with DynamoDB table terraform-locks)"
    )


def test_a_third_party_instance_type_gets_its_efa_count_from_the_registry(plugins: Plugins, tmp_path: Path) -> None:
    import fsdp_sdk_plugin_b200  # the example third-party plugin of the workspace

    plugins.register(fsdp_sdk_plugin_b200, name="b200")
    config = make_config(plugins, tmp_path / "state", **{"cluster.instance_type": "p6-b200.48xlarge"})
    instance = plugins.instance_types.get("p6-b200.48xlarge")
    assert instance is not None
    from fsdp_sdk_terraform.inputs import terraform_inputs

    inputs = terraform_inputs(config, instance, config.section("terraform"))
    assert inputs["gpu_instance_type"] == "p6-b200.48xlarge"
    assert len(inputs["gpu_network_interfaces"]) == instance.efa_interfaces > 0


def test_efa_off_and_neuron_devices(plugins: Plugins, tmp_path: Path) -> None:
    off = make_config(plugins, tmp_path, **{"cluster.efa": "false", "cluster.instance_type": "g5.48xlarge"})
    plan = TerraformBackend().plan(resolve(off, plugins))
    assert _inputs(plan)["gpu_network_interfaces"] == [] and "no EFA" in plan.steps[3]
    assert [o["metadata"]["name"] for o in plan.kubernetes] == ["nvidia-device-plugin"]
    none = make_config(plugins, tmp_path, **{"terraform.device_plugins": "false"})
    assert not TerraformBackend().plan(resolve(none, plugins)).kubernetes


def test_device_plugins_are_valid_kubernetes_objects(plugins: Plugins, tmp_path: Path) -> None:
    import kubernetes_validate

    plan = TerraformBackend().plan(resolve(make_config(plugins, tmp_path), plugins))
    for obj in plan.kubernetes:
        kubernetes_validate.validate(obj, "1.31", strict=True)
        spec = obj["spec"]["template"]["spec"]
        assert spec["nodeSelector"] == {
            "fsdp-sdk.io/node-role": "gpu",
            "node.kubernetes.io/instance-type": "p5.48xlarge",
        }
        assert {"key": "nvidia.com/gpu", "operator": "Equal", "value": "true", "effect": "NoSchedule"} in spec[
            "tolerations"
        ]
    efa = plan.kubernetes[1]["spec"]["template"]["spec"]["containers"][0]["image"]
    assert efa == pin("efa-device-plugin").image_ref(eks_registry="602401143452.dkr.ecr.us-west-2.amazonaws.com")


def test_the_efa_device_plugin_image_follows_the_region(plugins: Plugins, tmp_path: Path) -> None:
    for region, registry in (
        ("af-south-1", "877085696533.dkr.ecr.af-south-1.amazonaws.com/"),
        ("cn-north-1", "918309763551.dkr.ecr.cn-north-1.amazonaws.com.cn/"),
    ):
        zones = f"{region}a,{region}b"
        config = make_config(plugins, tmp_path, **{"cluster.region": region, "cluster.availability_zones": zones})
        plan = TerraformBackend().plan(resolve(config, plugins))
        assert plan.kubernetes[1]["spec"]["template"]["spec"]["containers"][0]["image"].startswith(registry)


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        (
            {"cluster.availability_zones": "us-west-2a"},
            r"^cluster.availability_zones: names 1 zone\(s\); EKS needs subnets in 2 zones",
        ),
        ({"cluster.node_volume_size_gib": 30}, r"^cluster.node_volume_size_gib: 30 GiB is outside 40..16384"),
        (
            {"terraform.gpu_ami_type": "AL2_x86_64_GPU"},
            r"^terraform.gpu_ami_type: 'AL2_x86_64_GPU' is not an accelerated",
        ),
    ],
)
def test_bad_inputs_are_refused_before_terraform_runs(plugins: Plugins, tmp_path: Path, overrides, message) -> None:
    config = make_config(plugins, tmp_path / "state", **overrides)
    backend = TerraformBackend()
    plan = backend.plan(resolve(config, plugins))  # planning is pure: it shows the values
    with pytest.raises(ConfigError, match=message):
        backend.apply(config, plan)
    assert not (tmp_path / "state").exists(), "nothing was written, terraform never ran"


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        ({"terraform.lock_table": "locks"}, r"^terraform.lock_table: is set but terraform.state_bucket is not"),
        ({"terraform.vpc_cidr": "10.0.0.0/24"}, r"^terraform.vpc_cidr: 10.0.0.0/24 is smaller than /20"),
        ({"terraform.public_access_cidrs": "1.2.3.4/40"}, r"^terraform.public_access_cidrs: '1.2.3.4/40' is not"),
        (
            {"terraform.state_bucket": "Bad_Bucket"},
            r"^terraform.state_bucket \(from overrides\): 'Bad_Bucket' is not an S3 bucket name",
        ),
        (
            {"terraform.lock_timeout_s": "-1"},
            r"^terraform.lock_timeout_s \(from overrides\): -1 is not between 0 and 3600",
        ),
        ({"terraform.configuration": "/nonexistent"}, r"^terraform.configuration: '/nonexistent' is not a directory"),
    ],
)
def test_bad_settings_are_one_line_errors(plugins: Plugins, tmp_path: Path, overrides, message) -> None:
    with pytest.raises(ConfigError, match=message):
        make_config(plugins, tmp_path, **overrides)


def test_a_plan_without_zones_is_refused_by_apply_with_the_fix(plugins: Plugins, tmp_path: Path) -> None:
    config = make_config(plugins, tmp_path / "state", **{"cluster.availability_zones": ""})
    plan = TerraformBackend().plan(resolve(config, plugins))
    with pytest.raises(ConfigError, match=r"leave it empty and let 'fsdp-sdk up' choose them$"):
        check_inputs(_inputs(plan))
