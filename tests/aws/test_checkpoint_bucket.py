"""The cluster's checkpoint bucket and its access (``fsdp_sdk.aws.checkpoint_bucket``), against moto's S3 and IAM;
EKS Pod Identity (which moto lacks) through botocore's Stubber, each request checked against the service model."""

from __future__ import annotations

import json

import boto3
import pytest

from fsdp_sdk.aws.checkpoint_bucket import (
    SERVICE_ACCOUNT,
    checkpoint_objects,
    default_checkpoint_dir,
    delete_checkpoint_bucket,
    ensure_checkpoint_access,
    plan_checkpoint_access,
)
from fsdp_sdk.errors import ConfigError

REGION = "us-west-2"


def _eks(stubbed, associations: list[dict], creates: list[str]):
    eks, stub = stubbed("eks", REGION)
    stub.add_response("list_pod_identity_associations", {"associations": associations}, {"clusterName": "demo"})
    for namespace in creates:
        stub.add_response(
            "create_pod_identity_association",
            {"association": {"clusterName": "demo", "namespace": namespace, "serviceAccount": SERVICE_ACCOUNT}},
            {
                "clusterName": "demo",
                "namespace": namespace,
                "serviceAccount": SERVICE_ACCOUNT,
                "roleArn": "arn:aws:iam::123456789012:role/fsdp-sdk-demo-checkpoints",
            },
        )
    return eks


def test_the_plan_is_pure_and_scoped_to_the_bucket():
    plan = plan_checkpoint_access("demo", REGION, "123456789012", None)
    assert plan.bucket == "fsdp-sdk-123456789012-demo" and not plan.adopted
    assert plan.role_name == "fsdp-sdk-demo-checkpoints"
    statements = plan.access_policy()["Statement"]
    assert [s["Resource"] for s in statements] == [
        "arn:aws:s3:::fsdp-sdk-123456789012-demo",
        "arn:aws:s3:::fsdp-sdk-123456789012-demo/*",
    ]
    actions = {a for s in statements for a in s["Action"]}
    assert actions == {"s3:ListBucket", "s3:GetObject", "s3:PutObject", "s3:DeleteObject", "s3:AbortMultipartUpload"}
    trust = plan.trust_policy()["Statement"][0]
    assert trust["Principal"] == {"Service": "pods.eks.amazonaws.com"}
    rule = plan.lifecycle()["Rules"][0]
    assert rule["AbortIncompleteMultipartUpload"] == {"DaysAfterInitiation": 1}
    assert default_checkpoint_dir(plan.bucket, "llama") == "s3://fsdp-sdk-123456789012-demo/llama/checkpoints"
    assert plan_checkpoint_access("demo", REGION, "1", "s3://mine").bucket == "mine"
    with pytest.raises(ConfigError, match=r"^cluster\.checkpoint_bucket: .* names no valid bucket"):
        plan_checkpoint_access("demo", REGION, "1", "Not_A_Bucket")


def test_up_creates_once_and_down_deletes_only_when_asked(aws, stubbed):
    plan = plan_checkpoint_access("demo", REGION, "123456789012", None)
    done = ensure_checkpoint_access(plan, eks=_eks(stubbed, [], ["default"]))
    assert done["created_bucket"] and done["associations"] == [f"default/{SERVICE_ACCOUNT}"]
    s3, iam = boto3.client("s3", region_name=REGION), boto3.client("iam", region_name=REGION)
    assert s3.get_bucket_location(Bucket=plan.bucket)["LocationConstraint"] == REGION
    assert "Status" not in s3.get_bucket_versioning(Bucket=plan.bucket), "versioning off"
    rules = s3.get_bucket_lifecycle_configuration(Bucket=plan.bucket)["Rules"]
    assert rules[0]["AbortIncompleteMultipartUpload"] == {"DaysAfterInitiation": 1}
    policy = iam.get_role_policy(RoleName=plan.role_name, PolicyName="checkpoints")["PolicyDocument"]
    policy = json.loads(policy) if isinstance(policy, str) else policy
    assert policy == plan.access_policy()

    # a second up: the bucket, the role and the association are kept (no second create)
    existing = [{"namespace": "default", "serviceAccount": SERVICE_ACCOUNT}]
    again = ensure_checkpoint_access(plan, eks=_eks(stubbed, existing, []))
    assert not again["created_bucket"] and again["role_arn"] == done["role_arn"]

    s3.put_object(Bucket=plan.bucket, Key="llama/checkpoints/step_00000010/COMPLETE", Body=b"10\n")
    s3.put_object(Bucket=plan.bucket, Key="llama/checkpoints/step_00000010/__0_0.distcp", Body=b"x")
    assert checkpoint_objects(plan) == [
        "llama/checkpoints/step_00000010/COMPLETE",
        "llama/checkpoints/step_00000010/__0_0.distcp",
    ]
    assert delete_checkpoint_bucket(plan) == 2
    assert plan.bucket not in [b["Name"] for b in s3.list_buckets()["Buckets"]]
    assert plan.role_name not in [r["RoleName"] for r in iam.list_roles()["Roles"]]


def test_an_adopted_bucket_is_checked_and_only_the_jobs_objects_are_ever_deleted(aws, stubbed):
    s3 = boto3.client("s3", region_name=REGION)
    s3.create_bucket(Bucket="team-data", CreateBucketConfiguration={"LocationConstraint": REGION})
    s3.put_object(Bucket="team-data", Key="datasets/train.jsonl", Body=b"{}")
    s3.put_object(Bucket="team-data", Key="llama/checkpoints/step_00000001/COMPLETE", Body=b"1\n")
    plan = plan_checkpoint_access("demo", REGION, "123456789012", "team-data")
    done = ensure_checkpoint_access(plan, eks=_eks(stubbed, [], ["default"]))
    assert not done["created_bucket"]
    assert "Rules" not in str(_lifecycle_or_none(s3, "team-data")), "an adopted bucket is left as it is"
    assert checkpoint_objects(plan) == ["llama/checkpoints/step_00000001/COMPLETE"]
    assert delete_checkpoint_bucket(plan) == 1
    assert [o["Key"] for o in s3.list_objects_v2(Bucket="team-data")["Contents"]] == ["datasets/train.jsonl"]

    boto3.client("s3", region_name="eu-west-1").create_bucket(
        Bucket="far-away", CreateBucketConfiguration={"LocationConstraint": "eu-west-1"}
    )
    for bucket, problem in (("far-away", "is in eu-west-1, the cluster in us-west-2"), ("missing", "does not exist")):
        with pytest.raises(ConfigError, match=rf"^cluster.checkpoint_bucket: bucket {bucket} {problem}"):
            ensure_checkpoint_access(plan_checkpoint_access("demo", REGION, "1", bucket), eks=object())


def _lifecycle_or_none(s3, bucket: str):
    try:
        return s3.get_bucket_lifecycle_configuration(Bucket=bucket)
    except s3.exceptions.ClientError:
        return None
