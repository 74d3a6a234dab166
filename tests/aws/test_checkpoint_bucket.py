"""The checkpoint bucket and the pods' access (``fsdp_sdk.aws.checkpoint_bucket``): the pure plan, the policy evaluated
statement by statement, and the acting functions against moto's S3 and IAM over HTTP (EKS Pod Identity, which moto
lacks, through botocore's Stubber)."""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from typing import Any

import pytest

from fsdp_sdk import grammar
from fsdp_sdk.aws.checkpoint_bucket import (
    bucket_usage,
    delete_checkpoints,
    ensure_access,
    ensure_bucket,
    inspect_bucket,
    remove_access,
)
from fsdp_sdk.aws.checkpoint_plan import OWNER_TAG, CheckpointBucket, derived_bucket_name, plan_store, role_name
from fsdp_sdk.aws.session import aws_client
from fsdp_sdk.config import Config
from fsdp_sdk.errors import BackendError, ConfigError

from .pod_identity import PodIdentity

ACCOUNT = "123456789012"
REGION = "us-west-2"


def store(bucket: str = "fsdp-sdk-123456789012-us-west-2-demo", **fields: Any) -> CheckpointBucket:
    return CheckpointBucket(bucket, fields.pop("region", REGION), "demo", fields.pop("namespace", "default"), **fields)


# ---------------------------------------------------------------------------------------------- pure plan


def test_the_derived_name_is_deterministic_and_valid() -> None:
    assert derived_bucket_name(ACCOUNT, REGION, "demo") == "fsdp-sdk-123456789012-us-west-2-demo"
    assert derived_bucket_name(ACCOUNT, REGION, "Demo-GPU") == "fsdp-sdk-123456789012-us-west-2-demo-gpu"
    long_a = derived_bucket_name(ACCOUNT, "ap-southeast-2", "a" * 90)
    long_b = derived_bucket_name(ACCOUNT, "ap-southeast-2", "a" * 91)
    assert len(long_a) <= 63 and len(long_b) <= 63 and long_a != long_b  # cut, then told apart by a hash
    for name in (
        long_a,
        long_b,
        derived_bucket_name(ACCOUNT, REGION, "x-s3alias"),
        derived_bucket_name(ACCOUNT, REGION, "ends-"),
    ):
        assert grammar.bucket_name_problem(name) is None, name
    assert derived_bucket_name(ACCOUNT, REGION, "x-s3alias") != f"fsdp-sdk-{ACCOUNT}-{REGION}-x-s3alias"


def test_the_plan_names_the_bucket_role_and_association() -> None:
    config = Config.from_dict({"cluster": {"name": "demo"}, "job": {"namespace": "team-a"}})
    planned = plan_store(config, account=ACCOUNT)
    assert (planned.bucket, planned.named, planned.prefix) == ("fsdp-sdk-123456789012-us-west-2-demo", False, "team-a/")
    assert planned.role_name == role_name("demo", REGION, "team-a") and len(planned.role_name) <= 64
    assert role_name("demo", "eu-west-1", "team-a") != planned.role_name  # IAM names are global: one per region
    assert planned.steps()[1:] == [
        f"IAM role {planned.role_name} for EKS Pod Identity: read, write and delete "
        "s3://fsdp-sdk-123456789012-us-west-2-demo/team-a/*",
        f"EKS Pod Identity association: ServiceAccount team-a/fsdp-trainer -> {planned.role_name}",
    ]
    named = plan_store(
        Config.from_dict({"cluster": {"name": "demo", "checkpoint_bucket": "my-checkpoints"}}), account=None
    )
    assert (named.bucket, named.named) == ("my-checkpoints", True)
    assert CheckpointBucket.from_dict(json.loads(json.dumps(planned.to_dict()))) == planned
    with pytest.raises(ValueError):
        plan_store(config)


def _wildcard(pattern: str) -> re.Pattern[str]:
    return re.compile("^" + re.escape(pattern).replace(r"\*", ".*").replace(r"\?", ".") + "$", re.IGNORECASE)


def _listed(value: Any) -> list[Any]:
    return value if isinstance(value, list) else [value]


def allowed(policy: dict[str, Any], action: str, resource: str, context: dict[str, str] | None = None) -> bool:
    """IAM's evaluation for one identity policy: allowed when an Allow statement matches the action, the resource and
    every condition (StringLike / StringEquals; a missing key fails); otherwise denied."""
    context = context or {}
    for statement in policy["Statement"]:
        if statement["Effect"] != "Allow":
            continue
        if not any(_wildcard(a).match(action) for a in _listed(statement["Action"])):
            continue
        if not any(_wildcard(r).match(resource) for r in _listed(statement["Resource"])):
            continue
        matched = True
        for operator, keys in (statement.get("Condition") or {}).items():
            assert operator in ("StringLike", "StringEquals"), operator
            for key, values in keys.items():
                if key not in context:
                    matched = False
                elif operator == "StringLike":
                    matched = matched and any(_wildcard(v).match(context[key]) for v in _listed(values))
                else:
                    matched = matched and context[key] in _listed(values)
        if matched:
            return True
    return False


def test_the_policy_allows_nothing_outside_the_prefix() -> None:
    planned = store()
    policy = planned.access_policy()
    bucket = "arn:aws:s3:::fsdp-sdk-123456789012-us-west-2-demo"
    inside = f"{bucket}/default/fsdp/checkpoints/step_00000010/__0_0.distcp"
    for action in ("s3:GetObject", "s3:PutObject", "s3:DeleteObject", "s3:AbortMultipartUpload"):
        assert allowed(policy, action, inside)
        for outside in (
            f"{bucket}/other/fsdp/checkpoints/x",
            f"{bucket}/default-b/x",  # the prefix ends at its '/'
            f"{bucket}/defaultx",
            f"{bucket}/x",
            bucket,
            "arn:aws:s3:::another-bucket/default/x",
            "arn:aws:s3:::fsdp-sdk-123456789012-us-west-2-demo-2/default/x",
        ):
            assert not allowed(policy, action, outside), (action, outside)
    assert allowed(policy, "s3:ListBucket", bucket, {"s3:prefix": "default/fsdp/checkpoints/"})
    assert allowed(policy, "s3:ListBucket", bucket, {"s3:prefix": "default/"})
    for prefix in ("other/", "defaultx/", "", "default"):
        assert not allowed(policy, "s3:ListBucket", bucket, {"s3:prefix": prefix}), prefix
    assert not allowed(policy, "s3:ListBucket", bucket)  # listing the whole bucket
    for action in (
        "s3:DeleteBucket",
        "s3:PutBucketPolicy",
        "s3:PutBucketAcl",
        "s3:PutObjectAcl",
        "s3:GetBucketLocation",
        "s3:ListAllMyBuckets",
        "s3:PutLifecycleConfiguration",
        "s3:DeleteObjectVersion",
        "s3:GetObjectVersion",
        "iam:PassRole",
        "sts:AssumeRole",
    ):
        for resource in (inside, bucket, "*"):
            assert not allowed(policy, action, resource, {"s3:prefix": "default/"}), (action, resource)
    assert all(s["Effect"] == "Allow" and "*" not in _listed(s["Action"]) for s in policy["Statement"])
    trust = planned.trust_policy()["Statement"]
    assert trust == [
        {
            "Sid": "AllowEksAuthToAssumeRoleForPodIdentity",
            "Effect": "Allow",
            "Principal": {"Service": "pods.eks.amazonaws.com"},
            "Action": ["sts:AssumeRole", "sts:TagSession"],
        }
    ]
    assert store(region="cn-north-1").bucket_arn.startswith("arn:aws-cn:s3:::")


# ---------------------------------------------------------------------------------------------- against moto


@pytest.fixture
def clients(aws: str, pod_identity: PodIdentity) -> dict[str, Any]:
    """moto's S3, IAM, STS and EKS (with a cluster ``demo``); Pod Identity through the Stubber."""
    eks = aws_client("eks", REGION)
    role = aws_client("iam", REGION).create_role(RoleName="eks-cluster", AssumeRolePolicyDocument="{}")["Role"]["Arn"]
    eks.create_cluster(name="demo", roleArn=role, resourcesVpcConfig={"subnetIds": []})
    return {
        "s3": aws_client("s3", REGION),
        "iam": aws_client("iam", REGION),
        "sts": aws_client("sts", REGION),
        "eks": pod_identity,
    }


def test_the_bucket_is_created_once_with_its_settings(clients: dict[str, Any]) -> None:
    s3, lines = clients["s3"], []
    planned = store()
    assert inspect_bucket(planned, clients=clients).found == "absent"
    assert ensure_bucket(planned, clients=clients, progress=lines.append).found == "absent"
    assert ensure_bucket(planned, clients=clients, progress=lines.append).found == "ours"
    assert [line for line in lines if line.startswith("created")] == [
        f"created the S3 bucket {planned.bucket} in us-west-2 for checkpoints"
    ]
    bucket = planned.bucket
    assert s3.get_bucket_location(Bucket=bucket)["LocationConstraint"] == REGION
    assert "Status" not in s3.get_bucket_versioning(Bucket=bucket)  # versioning never turned on
    assert s3.get_public_access_block(Bucket=bucket)["PublicAccessBlockConfiguration"] == {
        "BlockPublicAcls": True,
        "IgnorePublicAcls": True,
        "BlockPublicPolicy": True,
        "RestrictPublicBuckets": True,
    }
    rules = s3.get_bucket_encryption(Bucket=bucket)["ServerSideEncryptionConfiguration"]["Rules"]
    assert rules[0]["ApplyServerSideEncryptionByDefault"]["SSEAlgorithm"] == "AES256"
    (rule,) = s3.get_bucket_lifecycle_configuration(Bucket=bucket)["Rules"]
    assert rule["Status"] == "Enabled" and rule["AbortIncompleteMultipartUpload"] == {"DaysAfterInitiation": 3}
    assert s3.get_bucket_tagging(Bucket=bucket)["TagSet"] == [{"Key": OWNER_TAG, "Value": "demo"}]


def test_an_existing_bucket_is_adopted_as_it_is(clients: dict[str, Any]) -> None:
    s3, lines = clients["s3"], []
    s3.create_bucket(Bucket="team-checkpoints", CreateBucketConfiguration={"LocationConstraint": REGION})
    s3.put_bucket_versioning(Bucket="team-checkpoints", VersioningConfiguration={"Status": "Enabled"})
    found = ensure_bucket(store("team-checkpoints", named=True), clients=clients, progress=lines.append)
    assert found.found == "adopted" and found.steps()[0].startswith("adopt the S3 bucket team-checkpoints")
    with pytest.raises(s3.exceptions.ClientError, match="NoSuchTagSet"):  # not tagged as ours: never deleted by down
        s3.get_bucket_tagging(Bucket="team-checkpoints")
    assert s3.get_bucket_versioning(Bucket="team-checkpoints")["Status"] == "Enabled"  # left as it was
    assert any("keeps object versions" in line for line in lines)
    assert any("aborts incomplete multipart uploads" in line for line in lines)


def test_a_bucket_in_another_region_is_refused_before_anything_is_made(clients: dict[str, Any]) -> None:
    aws_client("s3", "eu-west-1").create_bucket(
        Bucket="far-checkpoints", CreateBucketConfiguration={"LocationConstraint": "eu-west-1"}
    )
    with pytest.raises(ConfigError) as refused:
        ensure_bucket(store("far-checkpoints", named=True), clients=clients)
    assert str(refused.value) == (
        "cluster.checkpoint_bucket: the S3 bucket far-checkpoints is in eu-west-1, not in the cluster's region "
        "us-west-2; name a bucket of this account in us-west-2, or leave cluster.checkpoint_bucket unset "
        "('up' creates one)"
    )
    assert refused.value.exit_code == 2


def test_a_bucket_these_credentials_cannot_use_is_refused(
    clients: dict[str, Any], stubbed: Callable[..., tuple[Any, Any]]
) -> None:
    client, stubber = stubbed("s3")
    stubber.add_client_error("head_bucket", "403", "Forbidden", 403, expected_params={"Bucket": "someone-elses"})
    with pytest.raises(ConfigError, match=r"^cluster.checkpoint_bucket: the S3 bucket someone-elses exists but these "):
        inspect_bucket(store("someone-elses", named=True), clients={**clients, "s3": client})


def test_the_access_is_created_once_and_scoped(clients: dict[str, Any]) -> None:
    iam, eks, lines = clients["iam"], clients["eks"], []
    planned = store()
    first = ensure_access(planned, clients=clients, progress=lines.append)
    second = ensure_access(planned, clients=clients, progress=lines.append)
    assert first == second
    role = iam.get_role(RoleName=planned.role_name)["Role"]
    assert role["Path"] == "/fsdp-sdk/us-west-2/demo/" and role["Arn"] == first["role_arn"]
    assert role["AssumeRolePolicyDocument"]["Statement"] == planned.trust_policy()["Statement"]
    assert {t["Key"]: t["Value"] for t in role["Tags"]} == {OWNER_TAG: "demo"}
    assert iam.list_role_policies(RoleName=planned.role_name)["PolicyNames"] == ["fsdp-sdk-checkpoints"]
    document = iam.get_role_policy(RoleName=planned.role_name, PolicyName="fsdp-sdk-checkpoints")["PolicyDocument"]
    assert document == planned.access_policy()
    assert iam.list_attached_role_policies(RoleName=planned.role_name)["AttachedPolicies"] == []
    (association,) = eks.associations.values()
    assert (association["namespace"], association["serviceAccount"], association["roleArn"]) == (
        "default",
        "fsdp-trainer",
        first["role_arn"],
    )
    assert [op for op, _ in eks.calls].count("create_pod_identity_association") == 1
    assert [line for line in lines if line.startswith(("created", "associated"))] == [
        f"created the IAM role {planned.role_name} (EKS Pod Identity)",
        f"associated ServiceAccount default/fsdp-trainer with the IAM role {planned.role_name} (EKS Pod Identity)",
    ]


def test_a_role_or_association_that_is_not_ours_is_not_taken_over(clients: dict[str, Any]) -> None:
    iam, planned = clients["iam"], store()
    iam.create_role(RoleName=planned.role_name, AssumeRolePolicyDocument="{}")
    with pytest.raises(BackendError, match=rf"^IAM role {planned.role_name} exists but was not created by fsdp-sdk"):
        ensure_access(planned, clients=clients)
    iam.delete_role(RoleName=planned.role_name)
    other = iam.create_role(RoleName="someone", AssumeRolePolicyDocument="{}")["Role"]["Arn"]
    clients["eks"].create_pod_identity_association(
        clusterName="demo", namespace="default", serviceAccount="fsdp-trainer", roleArn=other
    )
    with pytest.raises(BackendError, match=r"^ServiceAccount default/fsdp-trainer of cluster demo is associated with"):
        ensure_access(planned, clients=clients)


def test_remove_access_deletes_what_it_made_and_nothing_else(clients: dict[str, Any]) -> None:
    iam, eks = clients["iam"], clients["eks"]
    ensure_access(store(), clients=clients)
    ensure_access(store(namespace="team-a"), clients=clients)
    iam.create_role(Path="/fsdp-sdk/us-west-2/demo/", RoleName="hand-made", AssumeRolePolicyDocument="{}")
    lines: list[str] = []
    deleted = remove_access("demo", REGION, clients=clients, progress=lines.append)
    assert sorted(deleted) == sorted([store().role_name, store(namespace="team-a").role_name])
    assert eks.associations == {}
    assert [r["RoleName"] for r in iam.list_roles(PathPrefix="/fsdp-sdk/")["Roles"]] == ["hand-made"]
    assert "left the IAM role hand-made in place: it was not created by fsdp-sdk for demo" in lines
    eks.delete_cluster(name="demo")  # afterwards (cluster gone, roles gone): nothing to do, no error
    assert remove_access("demo", REGION, clients=clients) == []


def test_usage_and_deletion_of_the_checkpoints(clients: dict[str, Any]) -> None:
    s3, planned = clients["s3"], store()
    ensure_bucket(planned, clients=clients)
    for key, size in (
        ("default/fsdp/checkpoints/step_00000010/__0_0.distcp", 2048),
        ("default/fsdp/checkpoints/step_00000010/COMPLETE", 0),
        ("default/llm/checkpoints/step_00000002/.metadata", 100),
    ):
        s3.put_object(Bucket=planned.bucket, Key=key, Body=b"x" * size)
    s3.create_multipart_upload(Bucket=planned.bucket, Key="default/fsdp/checkpoints/step_00000020/big")
    usage = bucket_usage(planned, clients=clients)
    assert [u.line() for u in usage or []] == ["default/fsdp/: 2 objects, 2.0 KiB", "default/llm/: 1 object, 100 B"]
    lines: list[str] = []
    assert delete_checkpoints(planned, clients=clients, progress=lines.append) is True
    assert lines[-1] == f"deleted the S3 bucket {planned.bucket}"
    assert planned.bucket not in [b["Name"] for b in s3.list_buckets()["Buckets"]]
    assert bucket_usage(planned, clients=clients) is None and delete_checkpoints(planned, clients=clients) is False


def test_deleting_checkpoints_of_an_adopted_bucket_keeps_the_bucket(clients: dict[str, Any]) -> None:
    s3 = clients["s3"]
    s3.create_bucket(Bucket="team-checkpoints", CreateBucketConfiguration={"LocationConstraint": REGION})
    s3.put_object(Bucket="team-checkpoints", Key="default/fsdp/checkpoints/a", Body=b"1")
    s3.put_object(Bucket="team-checkpoints", Key="datasets/train.bin", Body=b"12")
    adopted = store("team-checkpoints", named=True)
    assert [u.line() for u in bucket_usage(adopted, clients=clients) or []] == ["default/fsdp/: 1 object, 1 B"]
    assert delete_checkpoints(adopted, clients=clients) is False
    keys = [o["Key"] for o in s3.list_objects_v2(Bucket="team-checkpoints")["Contents"]]
    assert keys == ["datasets/train.bin"]
