"""The shipped Terraform configuration, checked without the AWS provider (which cannot be downloaded here):
``terraform fmt``, python-hcl2 parses every file, the variables the SDK writes match the declared ones,
every resource, data source, argument and nested block exists in the provider 6.62.0 schema with every
required argument set, and the variables' validation rules, run by terraform itself, refuse what the
SDK refuses."""

from __future__ import annotations

import functools
import json
import os
import re
import subprocess
from pathlib import Path
from typing import Any

import pytest

from fsdp_sdk.config.resolution import find_instance_type
from fsdp_sdk.errors import ConfigError
from fsdp_sdk.tools import ToolError
from fsdp_sdk_terraform import CONFIGURATION_DIR
from fsdp_sdk_terraform.inputs import check_inputs, terraform_inputs
from fsdp_sdk_terraform.tool import TerraformTool

from .conftest import make_config, needs_terraform

#: Terraform's meta-arguments and blocks, which no provider schema lists.
META = {"count", "for_each", "depends_on", "lifecycle", "provider", "provisioner", "connection"}
#: Attributes a provider computes: listed in the schema, never set in a configuration.
COMPUTED = {"id", "tags_all", "arn"}
FILES = sorted(CONFIGURATION_DIR.glob("*.tf"))


@functools.cache
def _parsed() -> dict[str, dict[str, Any]]:
    """Every file as python-hcl2 reads it: labels and strings keep their quotes, blocks carry ``__is_block__``."""
    import hcl2

    return {path.name: hcl2.loads(path.read_text()) for path in FILES}


def _unquote(value: Any) -> Any:
    return value[1:-1] if isinstance(value, str) and len(value) > 1 and value[0] == value[-1] == '"' else value


def _blocks(kind: str) -> list[tuple[str, str, dict[str, Any]]]:
    """Every ``resource`` (or ``data``) block as (type, name, body)."""
    found = []
    for document in _parsed().values():
        for entry in document.get(kind, []):
            for type_, named in entry.items():
                for name, body in named.items():
                    found.append((_unquote(type_), _unquote(name), body))
    return found


def _variables() -> dict[str, dict[str, Any]]:
    return {_unquote(name): body for entry in _parsed()["variables.tf"]["variable"] for name, body in entry.items()}


def _is_block(value: Any) -> bool:
    return isinstance(value, list) and bool(value) and all(isinstance(v, dict) and v.get("__is_block__") for v in value)


@needs_terraform
def test_terraform_fmt_check_passes() -> None:
    result = subprocess.run(
        ["terraform", "fmt", "-check", "-diff", "-recursive", str(CONFIGURATION_DIR)],
        capture_output=True,
        text=True,
        check=False,
    )
    assert result.returncode == 0, result.stdout


def test_python_hcl2_parses_every_file() -> None:
    assert {path.name for path in FILES} == {
        "versions.tf",
        "variables.tf",
        "network.tf",
        "iam.tf",
        "eks.tf",
        "efa.tf",
        "nodes.tf",
        "outputs.tf",
    }
    parsed = _parsed()
    assert all(parsed[name] for name in parsed)


def test_the_provider_and_terraform_are_pinned(provider_schema: dict[str, Any]) -> None:
    (terraform,) = _parsed()["versions.tf"]["terraform"]
    assert _unquote(terraform["required_version"]) == ">= 1.5"
    aws = terraform["required_providers"][0]["aws"]
    assert _unquote(aws["source"]) == "hashicorp/aws"
    assert _unquote(aws["version"]) == f"= {provider_schema['provider_version']}" == "= 6.62.0"


def _check_body(
    where: str, body: dict[str, Any], schema: dict[str, Any], problems: list[str], *, top: bool = True
) -> None:
    given: set[str] = set()
    for key, value in body.items():
        if key in META or key.startswith("__"):  # python-hcl2 adds __start_line__ / __end_line__
            continue
        if key == "dynamic":
            for dynamic in value:
                for label, spec in dynamic.items():
                    if label.startswith("__"):
                        continue
                    name = _unquote(label)
                    entry = schema.get(name)
                    if entry is None or "block" not in entry:
                        problems.append(f"{where}: dynamic {name!r} is not a nested block of the schema")
                        continue
                    given.add(name)
                    for content in spec.get("content", []):
                        _check_body(f"{where}.{name}", content, entry["block"], problems, top=False)
            continue
        entry = schema.get(key)
        if entry is None:
            problems.append(f"{where}: {key!r} is not in the schema")
            continue
        if key in COMPUTED and top:
            problems.append(f"{where}: {key!r} is computed by the provider")
        given.add(key)
        if "block" in entry:
            if not _is_block(value):
                problems.append(f"{where}: {key!r} is a nested block, given as an argument")
                continue
            blocks = value
            if len(blocks) > 1 and not entry.get("list"):
                problems.append(f"{where}: {key!r} is a single block, given {len(blocks)} times")
            for block in blocks:
                _check_body(f"{where}.{key}", block, entry["block"], problems, top=False)
        elif _is_block(value):
            problems.append(f"{where}: {key!r} is an argument, given as a block")
    for key, entry in schema.items():
        if entry.get("required") and key not in given:
            problems.append(f"{where}: required {key!r} is not set")


def test_every_resource_and_data_source_matches_the_provider_schema(provider_schema: dict[str, Any]) -> None:
    problems: list[str] = []
    resources = _blocks("resource")
    data_sources = _blocks("data")
    for type_, name, body in resources:
        if type_ not in provider_schema["resources"]:
            problems.append(f"resource {type_} is not in the AWS provider 6.62.0")
            continue
        _check_body(f"{type_}.{name}", body, provider_schema["resources"][type_], problems)
    for type_, name, body in data_sources:
        if type_ not in provider_schema["data_sources"]:
            problems.append(f"data source {type_} is not in the AWS provider 6.62.0")
            continue
        _check_body(f"data.{type_}.{name}", body, provider_schema["data_sources"][type_], problems)
    assert problems == []
    assert {t for t, _, _ in resources} >= {
        "aws_vpc",
        "aws_subnet",
        "aws_nat_gateway",
        "aws_eks_cluster",
        "aws_iam_openid_connect_provider",
        "aws_eks_node_group",
        "aws_launch_template",
        "aws_placement_group",
        "aws_vpc_security_group_ingress_rule",
        "aws_eks_addon",
    }


def test_the_schema_check_catches_what_it_should(provider_schema: dict[str, Any]) -> None:
    """The checker itself: an unknown argument, a missing required one, a block as an argument, a bad dynamic."""
    schema = provider_schema["resources"]["aws_eks_node_group"]
    problems: list[str] = []
    _check_body(
        "aws_eks_node_group.x",
        {
            "cluster_name": "x",
            "node_role_arn": "y",
            "subnet_ids": [],
            "instance_type": "p5.48xlarge",
            "scaling_config": "not a block",
            "dynamic": [{'"taints"': {"for_each": [], "content": [{"__is_block__": True}], "__is_block__": True}}],
        },
        schema,
        problems,
    )
    assert problems == [
        "aws_eks_node_group.x: 'instance_type' is not in the schema",
        "aws_eks_node_group.x: 'scaling_config' is a nested block, given as an argument",
        "aws_eks_node_group.x: dynamic 'taints' is not a nested block of the schema",
    ]
    missing: list[str] = []
    _check_body(
        "aws_eks_node_group.y",
        {"cluster_name": "x", "scaling_config": [{"min_size": 0, "__is_block__": True}]},
        schema,
        missing,
    )
    assert "aws_eks_node_group.y.scaling_config: required 'desired_size' is not set" in missing
    assert "aws_eks_node_group.y: required 'node_role_arn' is not set" in missing
    computed: list[str] = []
    _check_body("aws_eks_node_group.z", {"tags_all": {}}, schema, computed)
    assert "aws_eks_node_group.z: 'tags_all' is computed by the provider" in computed


def test_every_cluster_gets_the_pod_identity_agent() -> None:
    """The training pods get the checkpoint bucket's role through EKS Pod Identity: its agent is an add-on."""
    addons = {_unquote(body["addon_name"]): body for t, _, body in _blocks("resource") if t == "aws_eks_addon"}
    assert set(addons) == {"vpc-cni", "kube-proxy", "coredns", "eks-pod-identity-agent"}
    agent = addons["eks-pod-identity-agent"]
    assert "addon_version" not in agent  # EKS's default version for the cluster, like the other add-ons
    assert _unquote(agent["resolve_conflicts_on_create"]) == "OVERWRITE"


def test_the_gpu_launch_template_has_efa_reservations_capacity_blocks_and_placement() -> None:
    (template,) = [body for t, n, body in _blocks("resource") if (t, n) == ("aws_launch_template", "gpu")]
    dynamics = {_unquote(name): spec for entry in template["dynamic"] for name, spec in entry.items()}
    assert set(dynamics) == {
        "network_interfaces",
        "capacity_reservation_specification",
        "instance_market_options",
        "placement",
    }
    (interface,) = dynamics["network_interfaces"]["content"]
    assert interface["interface_type"] == "${network_interfaces.value.interface_type}"
    assert dynamics["network_interfaces"]["for_each"] == "${var.gpu_network_interfaces}"
    (market,) = dynamics["instance_market_options"]["content"]
    assert "capacity-block" in dynamics["instance_market_options"]["for_each"]
    assert market["market_type"] == "${instance_market_options.value}"
    (nodes,) = [body for t, n, body in _blocks("resource") if (t, n) == ("aws_eks_node_group", "gpu")]
    (taints,) = [spec for entry in nodes["dynamic"] for name, spec in entry.items() if _unquote(name) == "taint"]
    assert taints["for_each"] == "${var.gpu_taints}"


def test_every_variable_has_a_type_a_description_and_validations() -> None:
    for name, body in _variables().items():
        assert "type" in body and _unquote(body.get("description")), name
        if body["type"] != "bool":
            assert body.get("validation"), f"variable {name} has no validation"


def test_the_sdk_writes_every_required_variable_and_only_declared_ones(plugins, tmp_path: Path) -> None:
    declared = _variables()
    required = {name for name, body in declared.items() if "default" not in body}
    for overrides in (
        {},
        {"cluster.capacity_reservation_id": "cr-0123456789abcdef0", "cluster.capacity_type": "capacity-block"},
        {"cluster.efa": "false", "cluster.instance_type": "g5.48xlarge", "cluster.placement_group": "true"},
        {"terraform.gpu_ami_type": "BOTTLEROCKET_x86_64_NVIDIA"},
    ):
        config = make_config(plugins, tmp_path, **overrides)
        written = terraform_inputs(config, find_instance_type(config, plugins), config.section("terraform"))
        assert set(written) <= set(declared), set(written) - set(declared)
        assert required <= set(written), required - set(written)
        json.dumps(written)  # plain JSON data


# ---------------------------------------------------------------------- validations, run by terraform itself

GOOD = {
    "cluster_name": "demo",
    "region": "us-west-2",
    "kubernetes_version": "1.31",
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
    "gpu_labels": {"fsdp-sdk.io/node-role": "gpu"},
    "gpu_taints": [{"key": "nvidia.com/gpu", "value": "true", "effect": "NO_SCHEDULE"}],
    "system_labels": {"fsdp-sdk.io/node-role": "system"},
    "gpu_network_interfaces": [{"network_card_index": 0, "device_index": 0, "interface_type": "efa"}],
    "capacity_type": "on-demand",
    "capacity_reservation_id": None,
    "placement_group": True,
    "gpu_volume": {"device_name": "/dev/xvda", "size_gib": 500, "iops": 16000, "throughput": 1000},
    "gpu_user_data": "",
    "tags": {},
}

BAD = [
    ("availability_zones", ["us-west-2a"], "availability_zones must name 2 to 6 zones: EKS needs subnets in two zones"),
    ("gpu_ami_type", "AL2_x86_64_GPU", "gpu_ami_type must be one of"),
    (
        "gpu_volume",
        {"device_name": "/dev/xvdb", "size_gib": 20, "iops": 3000, "throughput": 125},
        "gpu_volume: device /dev/xvda or /dev/xvdb, 40 to 16384 GiB",
    ),
    (
        "gpu_network_interfaces",
        [{"network_card_index": 0, "device_index": 0, "interface_type": "efa-only"}],
        "gpu_network_interfaces: at most 64, of type efa or efa-only, card 0 holding the primary efa interface",
    ),
    ("gpu_taints", [{"key": "nvidia.com/gpu", "value": "true", "effect": "NoSchedule"}], "gpu_taints effects must be"),
    ("vpc_cidr", "10.0.0.0/24", "vpc_cidr must be an IPv4 CIDR block of /20 or larger"),
    ("system_nodes", 0, "system_nodes must be a whole number between 1 and 100"),
    ("tags", {"aws:owner": "me"}, "tags must have keys of 1-128 characters not starting with aws:"),
]


@pytest.fixture(scope="module")
def variables_only(tmp_path_factory: pytest.TempPathFactory) -> TerraformTool:
    """The shipped variables.tf with an output, initialised: validations run without the AWS provider."""
    from .conftest import terraform_path

    if terraform_path() is None:
        pytest.skip("terraform is not installed")
    directory = tmp_path_factory.mktemp("variables-only")
    (directory / "variables.tf").write_text((CONFIGURATION_DIR / "variables.tf").read_text())
    (directory / "main.tf").write_text(
        'terraform {\n  required_version = ">= 1.5"\n}\n\noutput "name" {\n  value = var.cluster_name\n}\n'
    )
    runner = TerraformTool(directory)
    runner.init()
    return runner


def _terraform_plan(runner: TerraformTool, inputs: dict[str, Any]) -> None:
    (runner.workdir / "terraform.tfvars.json").write_text(json.dumps(inputs))
    runner.plan("check.tfplan")


def test_terraform_accepts_what_the_sdk_accepts(variables_only: TerraformTool) -> None:
    check_inputs(GOOD)
    _terraform_plan(variables_only, GOOD)


@pytest.mark.parametrize(("variable", "value", "message"), BAD, ids=[b[0] for b in BAD])
def test_terraform_and_the_sdk_refuse_the_same_bad_values(
    variables_only: TerraformTool, variable: str, value: Any, message: str
) -> None:
    bad = {**GOOD, variable: value}
    with pytest.raises(ConfigError):
        check_inputs(bad)
    with pytest.raises(ToolError) as refused:
        _terraform_plan(variables_only, bad)
    assert f"Error: Invalid value for variable: {message}" in str(refused.value)


@needs_terraform
def test_terraform_itself_loads_the_configuration_and_needs_only_the_pinned_aws_provider(tmp_path: Path) -> None:
    """``terraform providers`` parses every file (duplicate names, bad blocks...) without downloading anything."""
    result = subprocess.run(
        ["terraform", f"-chdir={CONFIGURATION_DIR}", "providers", "-no-color"],
        capture_output=True,
        text=True,
        check=False,
        env={**os.environ, "TF_CLI_CONFIG_FILE": os.devnull, "CHECKPOINT_DISABLE": "1"},
    )
    assert result.returncode == 0, result.stderr
    assert re.findall(r"provider\[([^\]]+)\] (\S+)", result.stdout) == [
        ("registry.terraform.io/hashicorp/aws", "6.62.0")
    ]


def test_every_reference_names_something_declared() -> None:
    """``var.X``, ``local.X``, ``aws_T.N`` and ``data.aws_T.N`` each name a variable, local, resource or data source."""
    text = "\n".join(path.read_text() for path in FILES)
    variables = set(_variables())
    locals_ = {name for document in _parsed().values() for block in document.get("locals", []) for name in block}
    resources = {f"{t}.{n}" for t, n, _ in _blocks("resource")}
    data_sources = {f"data.{t}.{n}" for t, n, _ in _blocks("data")}
    assert set(re.findall(r"\bvar\.(\w+)", text)) <= variables
    assert set(re.findall(r"\blocal\.(\w+)", text)) <= locals_
    assert {f"{t}.{n}" for t, n in re.findall(r"(?<![.\w])(aws_\w+)\.(\w+)", text)} <= resources
    assert {f"data.{t}.{n}" for t, n in re.findall(r"\bdata\.(aws_\w+)\.(\w+)", text)} <= data_sources
    assert variables <= set(re.findall(r"\bvar\.(\w+)", text)), "every variable is used"


CORE_CHECKED = [
    ("cluster_name", "1bad", "cluster.name", "cluster_name must start with a letter"),
    ("region", "mars", "cluster.region", "region must be an AWS region name like us-west-2."),
    ("gpu_nodes", -1, "cluster.nodes", "gpu_nodes must be a whole number of 0 or more."),
    ("capacity_reservation_id", "cr-xyz", "cluster.capacity_reservation_id", "capacity_reservation_id must be a"),
]


@pytest.mark.parametrize(("variable", "value", "setting", "message"), CORE_CHECKED, ids=[c[0] for c in CORE_CHECKED])
def test_values_the_configuration_refuses_are_refused_by_terraform_too(
    variables_only: TerraformTool, plugins, tmp_path: Path, variable: str, value: Any, setting: str, message: str
) -> None:
    with pytest.raises(ConfigError, match=rf"^{re.escape(setting)} \(from overrides\): "):
        make_config(plugins, tmp_path, **{setting: value})
    with pytest.raises(ToolError) as refused:
        _terraform_plan(variables_only, {**GOOD, variable: value})
    assert f"Error: Invalid value for variable: {message}" in str(refused.value)
