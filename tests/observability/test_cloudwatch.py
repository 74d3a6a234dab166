"""``monitor install/uninstall cloudwatch``: the EKS add-on with its Pod Identity role, checked with botocore's
Stubber against the real EKS and IAM service models."""

from __future__ import annotations

import json
from typing import Any

import pytest
from botocore.stub import ANY

from fsdp_sdk.aws.addons import POD_IDENTITY_TRUST_POLICY, addon_status, disable_addon, enable_addon
from fsdp_sdk.errors import BackendError
from fsdp_sdk_observability.cloudwatch import addon_configuration

CLUSTER = "fsdp-sdk"
REGION = "us-west-2"
ROLE = "fsdp-sdk-fsdp-sdk-cloudwatch-agent"
ROLE_ARN = f"arn:aws:iam::123456789012:role/{ROLE}"
POLICY = "arn:aws:iam::aws:policy/CloudWatchAgentServerPolicy"
NOW = "2026-01-01T00:00:00Z"


@pytest.fixture
def addon(make_config: Any, plugins: Any) -> Any:
    config = make_config({"cluster.name": CLUSTER})
    [component] = [c for c in plugins.hooks.monitoring_components(config) if c.name == "cloudwatch"]
    return component.eks_addon


def _addon(name: str, status: str, **extra: Any) -> dict[str, Any]:
    return {
        "addon": {
            "addonName": name,
            "clusterName": CLUSTER,
            "status": status,
            "addonVersion": "v4.1.0-eksbuild.1",
            **extra,
        }
    }


def _not_found(stubber: Any, operation: str, params: dict[str, Any]) -> None:
    stubber.add_client_error(operation, "ResourceNotFoundException", "No addon: x", 404, expected_params=params)


def _role(arn: str = ROLE_ARN, tags: list[dict[str, str]] | None = None) -> dict[str, Any]:
    role = {"Path": "/", "RoleName": ROLE, "RoleId": "AROAEXAMPLEID0000000", "Arn": arn, "CreateDate": NOW}
    if tags is not None:
        role["Tags"] = tags
    return {"Role": role}


def test_enable_creates_the_pod_identity_role_and_the_addon(stubbed: Any, addon: Any) -> None:
    eks, eks_stub = stubbed("eks")
    iam, iam_stub = stubbed("iam")
    eks_stub.add_response("describe_cluster", {"cluster": {"name": CLUSTER, "status": "ACTIVE"}}, {"name": CLUSTER})
    agent = {"clusterName": CLUSTER, "addonName": "eks-pod-identity-agent"}
    _not_found(eks_stub, "describe_addon", agent)
    eks_stub.add_response(
        "create_addon", _addon("eks-pod-identity-agent", "CREATING"), {**agent, "resolveConflicts": "OVERWRITE"}
    )
    eks_stub.add_response("describe_addon", _addon("eks-pod-identity-agent", "ACTIVE"), agent)
    iam_stub.add_client_error(
        "get_role", "NoSuchEntity", "The role cannot be found.", 404, expected_params={"RoleName": ROLE}
    )
    iam_stub.add_response(
        "create_role",
        _role(),
        {
            "RoleName": ROLE,
            "AssumeRolePolicyDocument": json.dumps(POD_IDENTITY_TRUST_POLICY),
            "Description": ANY,
            "Tags": [{"Key": "fsdp-sdk:cluster", "Value": CLUSTER}, {"Key": "fsdp-sdk:addon", "Value": addon.name}],
        },
    )
    iam_stub.add_response("attach_role_policy", {}, {"RoleName": ROLE, "PolicyArn": POLICY})
    cw = {"clusterName": CLUSTER, "addonName": "amazon-cloudwatch-observability"}
    _not_found(eks_stub, "describe_addon", cw)
    eks_stub.add_response(
        "create_addon",
        _addon(cw["addonName"], "CREATING"),
        {
            **cw,
            "resolveConflicts": "OVERWRITE",
            "podIdentityAssociations": [{"serviceAccount": "cloudwatch-agent", "roleArn": ROLE_ARN}],
            # dcgm-exporter runs beside it and holds the DCGM profiling counters: the add-on collects no GPU metrics
            "configurationValues": json.dumps(addon_configuration(dcgm_exporter_installed=True)),
        },
    )
    eks_stub.add_response("describe_addon", _addon(cw["addonName"], "CREATING"), cw)
    eks_stub.add_response("describe_addon", _addon(cw["addonName"], "ACTIVE"), cw)
    lines: list[str] = []
    found = enable_addon(CLUSTER, REGION, addon, clients={"eks": eks, "iam": iam}, progress=lines.append, poll=0)
    assert found["status"] == "ACTIVE"
    assert any("created IAM role" in line for line in lines) and any("is active" in line for line in lines)
    trust = POD_IDENTITY_TRUST_POLICY["Statement"][0]
    assert trust["Principal"] == {"Service": "pods.eks.amazonaws.com"} and trust["Action"] == [
        "sts:AssumeRole",
        "sts:TagSession",
    ]


def test_enable_on_a_missing_cluster_is_one_line(stubbed: Any, addon: Any) -> None:
    eks, eks_stub = stubbed("eks")
    iam, _ = stubbed("iam")
    eks_stub.add_client_error(
        "describe_cluster", "ResourceNotFoundException", "No cluster found", 404, expected_params={"name": CLUSTER}
    )
    with pytest.raises(
        BackendError, match=r"EKS cluster 'fsdp-sdk' does not exist in us-west-2; run 'fsdp-sdk up' first"
    ):
        enable_addon(CLUSTER, REGION, addon, clients={"eks": eks, "iam": iam}, poll=0)


def test_a_failed_addon_reports_its_health_issues(stubbed: Any, addon: Any) -> None:
    eks, eks_stub = stubbed("eks")
    iam, iam_stub = stubbed("iam")
    eks_stub.add_response("describe_cluster", {"cluster": {"name": CLUSTER}}, {"name": CLUSTER})
    eks_stub.add_response(
        "describe_addon",
        _addon("eks-pod-identity-agent", "ACTIVE"),
        {"clusterName": CLUSTER, "addonName": "eks-pod-identity-agent"},
    )
    iam_stub.add_response("get_role", _role(), {"RoleName": ROLE})
    iam_stub.add_response("attach_role_policy", {}, {"RoleName": ROLE, "PolicyArn": POLICY})
    cw = {"clusterName": CLUSTER, "addonName": "amazon-cloudwatch-observability"}
    failed = _addon(
        cw["addonName"],
        "CREATE_FAILED",
        health={"issues": [{"code": "AccessDenied", "message": "pod identity agent missing"}]},
    )
    eks_stub.add_response("describe_addon", failed, cw)
    eks_stub.add_response("describe_addon", failed, cw)
    with pytest.raises(BackendError, match="CREATE_FAILED: pod identity agent missing"):
        enable_addon(CLUSTER, REGION, addon, clients={"eks": eks, "iam": iam}, poll=0)


def test_access_denied_names_the_iam_action(stubbed: Any, addon: Any) -> None:
    from fsdp_sdk.aws.session import AwsError

    eks, eks_stub = stubbed("eks")
    iam, iam_stub = stubbed("iam")
    eks_stub.add_response("describe_cluster", {"cluster": {"name": CLUSTER}}, {"name": CLUSTER})
    eks_stub.add_response(
        "describe_addon",
        _addon("eks-pod-identity-agent", "ACTIVE"),
        {"clusterName": CLUSTER, "addonName": "eks-pod-identity-agent"},
    )
    iam_stub.add_client_error("get_role", "AccessDenied", "not authorized", 403, expected_params={"RoleName": ROLE})
    with pytest.raises(AwsError, match="access denied to iam:GetRole"):
        enable_addon(CLUSTER, REGION, addon, clients={"eks": eks, "iam": iam}, poll=0)


def test_disable_deletes_the_addon_and_only_our_role(stubbed: Any, addon: Any) -> None:
    eks, eks_stub = stubbed("eks")
    iam, iam_stub = stubbed("iam")
    cw = {"clusterName": CLUSTER, "addonName": "amazon-cloudwatch-observability"}
    eks_stub.add_response("describe_addon", _addon(cw["addonName"], "ACTIVE"), cw)
    eks_stub.add_response("delete_addon", _addon(cw["addonName"], "DELETING"), {**cw, "preserve": False})
    eks_stub.add_response("describe_addon", _addon(cw["addonName"], "DELETING"), cw)
    _not_found(eks_stub, "describe_addon", cw)
    iam_stub.add_response("get_role", _role(tags=[{"Key": "fsdp-sdk:cluster", "Value": CLUSTER}]), {"RoleName": ROLE})
    iam_stub.add_response(
        "list_attached_role_policies",
        {"AttachedPolicies": [{"PolicyName": "CloudWatchAgentServerPolicy", "PolicyArn": POLICY}]},
        {"RoleName": ROLE},
    )
    iam_stub.add_response("detach_role_policy", {}, {"RoleName": ROLE, "PolicyArn": POLICY})
    iam_stub.add_response("delete_role", {}, {"RoleName": ROLE})
    assert disable_addon(CLUSTER, REGION, addon, clients={"eks": eks, "iam": iam}, poll=0) is True


def test_disable_leaves_a_role_it_did_not_create(stubbed: Any, addon: Any) -> None:
    eks, eks_stub = stubbed("eks")
    iam, iam_stub = stubbed("iam")
    _not_found(eks_stub, "describe_addon", {"clusterName": CLUSTER, "addonName": "amazon-cloudwatch-observability"})
    iam_stub.add_response("get_role", _role(tags=[]), {"RoleName": ROLE})
    lines: list[str] = []
    assert (
        disable_addon(CLUSTER, REGION, addon, clients={"eks": eks, "iam": iam}, progress=lines.append, poll=0) is False
    )
    assert any("left the IAM role" in line for line in lines)


def test_status_of_an_absent_addon(stubbed: Any, addon: Any) -> None:
    eks, eks_stub = stubbed("eks")
    _not_found(eks_stub, "describe_addon", {"clusterName": CLUSTER, "addonName": "amazon-cloudwatch-observability"})
    assert addon_status(CLUSTER, REGION, addon, clients={"eks": eks})["status"] == "absent"


def test_one_dcgm_client_per_gpu(make_config: Any, plugins: Any) -> None:
    """With dcgm-exporter installed the add-on's accelerated compute metrics are off; alone, the add-on keeps them."""
    beside = make_config({"cluster.name": CLUSTER})
    [component] = [c for c in plugins.hooks.monitoring_components(beside) if c.name == "cloudwatch"]
    kubernetes = component.eks_addon.configuration["agent"]["config"]["logs"]["metrics_collected"]["kubernetes"]
    assert kubernetes == {"enhanced_container_insights": True, "accelerated_compute_metrics": False}
    alone = make_config({"cluster.name": CLUSTER, "observability.components": ["cloudwatch"]})
    [component] = [c for c in plugins.hooks.monitoring_components(alone) if c.name == "cloudwatch"]
    assert component.eks_addon.configuration is None


def test_monitor_install_cloudwatch_through_the_client(stubbed: Any, make_config: Any, plugins: Any) -> None:
    """The core action: Monitoring.install of the cloudwatch component calls the add-on API (no Kubernetes objects)."""
    from fsdp_sdk.k8s.monitoring import Monitoring

    config = make_config({"cluster.name": CLUSTER})
    components = plugins.hooks.monitoring_components(config)
    eks, eks_stub = stubbed("eks")
    iam, iam_stub = stubbed("iam")
    eks_stub.add_response("describe_cluster", {"cluster": {"name": CLUSTER}}, {"name": CLUSTER})
    eks_stub.add_response(
        "describe_addon",
        _addon("eks-pod-identity-agent", "ACTIVE"),
        {"clusterName": CLUSTER, "addonName": "eks-pod-identity-agent"},
    )
    iam_stub.add_response("get_role", _role(), {"RoleName": ROLE})
    iam_stub.add_response("attach_role_policy", {}, {"RoleName": ROLE, "PolicyArn": POLICY})
    cw = {"clusterName": CLUSTER, "addonName": "amazon-cloudwatch-observability"}
    eks_stub.add_response("describe_addon", _addon(cw["addonName"], "ACTIVE"), cw)
    eks_stub.add_response("describe_addon", _addon(cw["addonName"], "ACTIVE"), cw)
    monitoring = Monitoring(config, components, None, aws_clients={"eks": eks, "iam": iam})
    assert monitoring.install(["cloudwatch"]) == []
