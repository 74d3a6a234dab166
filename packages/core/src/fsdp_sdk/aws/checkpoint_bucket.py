"""The cluster's checkpoint bucket and the access its training pods get to it: a pure plan, then the acts.

Checkpoints on a node's disk are lost with the node; on S3 they survive it. A cluster's jobs
write them to ``s3://<bucket>/<job>/checkpoints`` (``default_checkpoint_dir``) in one bucket
per cluster, in the cluster's region: created by ``up`` (``fsdp-sdk-<account>-<cluster>`` by
default) or adopted (``cluster.checkpoint_bucket``). The training pods run as one service
account (:data:`SERVICE_ACCOUNT`) that EKS Pod Identity binds to one IAM role, whose only
permissions are listing that bucket and reading, writing and deleting its objects (with
``AbortMultipartUpload`` for the multipart uploads of large shards): no credentials in the pods'
spec, nothing beyond that bucket. A bucket the SDK creates has versioning off (a checkpoint
pruned by ``keep`` is gone, not kept as a noncurrent version) and a lifecycle rule that aborts
multipart uploads left incomplete by a killed save after :data:`ABORT_INCOMPLETE_UPLOADS_DAYS`;
an adopted bucket is left as its owner configured it.

:func:`plan_checkpoint_access` is pure (what would be created, for ``--dry-run`` and tests);
:func:`ensure_checkpoint_access` acts (idempotent: an existing bucket, role or association is
kept); :func:`checkpoint_objects` lists what :func:`delete_checkpoint_bucket` would delete.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from fsdp_sdk.aws.checkpoints import parse_s3_uri
from fsdp_sdk.aws.session import aws_client, aws_errors
from fsdp_sdk.errors import ConfigError

__all__ = [
    "ABORT_INCOMPLETE_UPLOADS_DAYS",
    "SERVICE_ACCOUNT",
    "CheckpointAccess",
    "checkpoint_objects",
    "default_checkpoint_dir",
    "delete_checkpoint_bucket",
    "ensure_checkpoint_access",
    "plan_checkpoint_access",
]

#: The service account the training pods run as (bound to the checkpoint role by EKS Pod Identity).
SERVICE_ACCOUNT = "fsdp-sdk-trainer"
#: Days after which S3 aborts a multipart upload a killed save left incomplete (its parts cost storage).
ABORT_INCOMPLETE_UPLOADS_DAYS = 1
#: The EKS Pod Identity service principal (the role's trust policy; EKS User Guide, "Pod Identity", 2026-12-02).
POD_IDENTITY_PRINCIPAL = "pods.eks.amazonaws.com"


def default_checkpoint_dir(bucket: str, job: str) -> str:
    """Where a job's checkpoints go in the cluster's bucket."""
    return f"s3://{bucket}/{job}/checkpoints"


@dataclass(frozen=True)
class CheckpointAccess:
    """What ``up`` creates (or adopts) for checkpoints on S3: the bucket, the role, the Pod Identity association.

    :param cluster: the EKS cluster name.
    :param region: the cluster's region (the bucket's).
    :param bucket: the bucket name.
    :param adopted: the bucket is the user's (``cluster.checkpoint_bucket``): used as it is, never deleted.
    :param namespaces: the namespaces whose :data:`SERVICE_ACCOUNT` gets the role.
    """

    cluster: str
    region: str
    bucket: str
    adopted: bool
    namespaces: tuple[str, ...] = ("default",)
    role_name: str = field(init=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "role_name", f"fsdp-sdk-{self.cluster}-checkpoints"[:64])

    def trust_policy(self) -> dict[str, Any]:
        """Who may assume the role: EKS Pod Identity, for the pods of this cluster only."""
        return {
            "Version": "2012-10-17",
            "Statement": [
                {
                    "Effect": "Allow",
                    "Principal": {"Service": POD_IDENTITY_PRINCIPAL},
                    "Action": ["sts:AssumeRole", "sts:TagSession"],
                    "Condition": {"StringEquals": {"aws:RequestTag/eks-cluster-name": self.cluster}},
                }
            ],
        }

    def access_policy(self) -> dict[str, Any]:
        """What the pods may do: list the bucket; get, put and delete its objects; abort their uploads. Nothing else."""
        arn = f"arn:aws:s3:::{self.bucket}"
        return {
            "Version": "2012-10-17",
            "Statement": [
                {"Sid": "ListCheckpoints", "Effect": "Allow", "Action": ["s3:ListBucket"], "Resource": arn},
                {
                    "Sid": "ReadWriteCheckpoints",
                    "Effect": "Allow",
                    "Action": ["s3:GetObject", "s3:PutObject", "s3:DeleteObject", "s3:AbortMultipartUpload"],
                    "Resource": f"{arn}/*",
                },
            ],
        }

    def lifecycle(self) -> dict[str, Any]:
        """The created bucket's lifecycle rule: abort multipart uploads a killed save left incomplete."""
        return {
            "Rules": [
                {
                    "ID": "fsdp-sdk-abort-incomplete-uploads",
                    "Status": "Enabled",
                    "Filter": {"Prefix": ""},
                    "AbortIncompleteMultipartUpload": {"DaysAfterInitiation": ABORT_INCOMPLETE_UPLOADS_DAYS},
                }
            ]
        }

    def describe(self) -> list[str]:
        """One line per thing, for plans and ``--dry-run``."""
        what = "adopt bucket" if self.adopted else "bucket"
        lines = [f"{what} s3://{self.bucket} in {self.region} (checkpoints at s3://{self.bucket}/<job>/checkpoints)"]
        if not self.adopted:
            lines.append(
                f"  versioning off; abort incomplete multipart uploads after {ABORT_INCOMPLETE_UPLOADS_DAYS} day"
            )
        lines.append(f"IAM role {self.role_name}: s3 list/get/put/delete on that bucket only, for EKS Pod Identity")
        lines += [f"Pod Identity association: {ns}/{SERVICE_ACCOUNT} -> {self.role_name}" for ns in self.namespaces]
        return lines


def plan_checkpoint_access(
    cluster: str, region: str, account: str, bucket: str | None, namespaces: tuple[str, ...] = ("default",)
) -> CheckpointAccess:
    """The plan: adopt ``bucket`` when given (``cluster.checkpoint_bucket``), else ``fsdp-sdk-<account>-<cluster>``.

    :raises ConfigError: ``bucket`` is not a valid bucket name.
    """
    if bucket:
        name, _ = parse_s3_uri("cluster.checkpoint_bucket", bucket if bucket.startswith("s3://") else f"s3://{bucket}")
        return CheckpointAccess(cluster, region, name, adopted=True, namespaces=namespaces)
    name = f"fsdp-sdk-{account}-{cluster}".lower()[:63].rstrip("-")
    return CheckpointAccess(cluster, region, name, adopted=False, namespaces=namespaces)


def ensure_checkpoint_access(plan: CheckpointAccess, *, eks: Any = None) -> dict[str, Any]:
    """Create (or check, when adopted) the bucket, the role and its policy, and the Pod Identity associations.

    Idempotent: what exists is kept. ``eks``: the EKS client (default: the session's, for the plan's region).

    :returns: ``{"bucket": ..., "created_bucket": bool, "role_arn": ..., "associations": [...]}``.
    :raises ConfigError: an adopted bucket does not exist or is in another region.
    """
    s3 = aws_client("s3", plan.region)
    created = False
    with aws_errors("s3", f"check bucket {plan.bucket}"):
        exists = _bucket_exists(s3, plan.bucket)
    if plan.adopted and not exists:
        raise ConfigError(
            "cluster.checkpoint_bucket", f"bucket {plan.bucket} does not exist", "create it, or leave the setting unset"
        )
    if exists:
        with aws_errors("s3", f"read the region of bucket {plan.bucket}"):
            location = s3.get_bucket_location(Bucket=plan.bucket).get("LocationConstraint") or "us-east-1"
        if location != plan.region:
            raise ConfigError(
                "cluster.checkpoint_bucket",
                f"bucket {plan.bucket} is in {location}, the cluster in {plan.region}",
                f"use a bucket in {plan.region} (cross-region checkpoint traffic is slow and billed)",
            )
    else:
        with aws_errors("s3", f"create bucket {plan.bucket}"):
            kwargs: dict[str, Any] = {"Bucket": plan.bucket}
            if plan.region != "us-east-1":
                kwargs["CreateBucketConfiguration"] = {"LocationConstraint": plan.region}
            s3.create_bucket(**kwargs)
            s3.put_public_access_block(
                Bucket=plan.bucket,
                PublicAccessBlockConfiguration={
                    "BlockPublicAcls": True,
                    "IgnorePublicAcls": True,
                    "BlockPublicPolicy": True,
                    "RestrictPublicBuckets": True,
                },
            )
            s3.put_bucket_lifecycle_configuration(Bucket=plan.bucket, LifecycleConfiguration=plan.lifecycle())
        created = True
    iam = aws_client("iam", plan.region)
    with aws_errors("iam", f"create role {plan.role_name}"):
        try:
            role_arn = iam.get_role(RoleName=plan.role_name)["Role"]["Arn"]
            iam.update_assume_role_policy(RoleName=plan.role_name, PolicyDocument=json.dumps(plan.trust_policy()))
        except iam.exceptions.NoSuchEntityException:
            role_arn = iam.create_role(
                RoleName=plan.role_name,
                AssumeRolePolicyDocument=json.dumps(plan.trust_policy()),
                Description=f"fsdp-sdk: checkpoints of cluster {plan.cluster} in s3://{plan.bucket}",
                Tags=[{"Key": "fsdp-sdk.io/cluster", "Value": plan.cluster}],
            )["Role"]["Arn"]
        iam.put_role_policy(
            RoleName=plan.role_name, PolicyName="checkpoints", PolicyDocument=json.dumps(plan.access_policy())
        )
    eks = eks if eks is not None else aws_client("eks", plan.region)
    associations = []
    with aws_errors("eks", "bind the training pods' service account to the checkpoint role"):
        existing = {
            (a["namespace"], a["serviceAccount"])
            for a in eks.list_pod_identity_associations(clusterName=plan.cluster).get("associations", [])
        }
        for namespace in plan.namespaces:
            if (namespace, SERVICE_ACCOUNT) not in existing:
                eks.create_pod_identity_association(
                    clusterName=plan.cluster, namespace=namespace, serviceAccount=SERVICE_ACCOUNT, roleArn=role_arn
                )
            associations.append(f"{namespace}/{SERVICE_ACCOUNT}")
    return {"bucket": plan.bucket, "created_bucket": created, "role_arn": role_arn, "associations": associations}


def _ours(plan: CheckpointAccess, key: str) -> bool:
    """Whether ``down --delete-checkpoints`` may delete ``key``: anything in a bucket the SDK created; in an adopted
    bucket only what jobs wrote (``<job>/checkpoints/...``)."""
    parts = key.split("/")
    return not plan.adopted or (len(parts) > 2 and parts[1] == "checkpoints")


def _bucket_exists(s3: Any, bucket: str) -> bool:
    try:
        s3.head_bucket(Bucket=bucket)
    except Exception as error:
        code = str(((getattr(error, "response", None) or {}).get("Error") or {}).get("Code") or "")
        if code in ("404", "NoSuchBucket", "NotFound"):
            return False
        raise
    return True


def checkpoint_objects(plan: CheckpointAccess) -> list[str]:
    """The object keys ``down --delete-checkpoints`` would delete (every version of each): the whole bucket when the
    SDK created it; the jobs' ``<job>/checkpoints/`` objects in an adopted one."""
    s3 = aws_client("s3", plan.region)
    keys: list[str] = []
    with aws_errors("s3", f"list bucket {plan.bucket}"):
        if not _bucket_exists(s3, plan.bucket):
            return []
        for page in s3.get_paginator("list_object_versions").paginate(Bucket=plan.bucket):
            keys += [
                v["Key"] for v in page.get("Versions", []) + page.get("DeleteMarkers", []) if _ours(plan, v["Key"])
            ]
    return sorted(set(keys))


def delete_checkpoint_bucket(plan: CheckpointAccess) -> int:
    """Delete what :func:`checkpoint_objects` lists (every version), the bucket unless adopted, and the role; returns
    the number of object versions deleted. Call it after the user confirmed that list."""
    s3 = aws_client("s3", plan.region)
    deleted = 0
    with aws_errors("s3", f"empty bucket {plan.bucket}"):
        if _bucket_exists(s3, plan.bucket):
            for page in s3.get_paginator("list_object_versions").paginate(Bucket=plan.bucket):
                batch = [
                    {"Key": v["Key"], "VersionId": v["VersionId"]}
                    for v in page.get("Versions", []) + page.get("DeleteMarkers", [])
                    if _ours(plan, v["Key"])
                ]
                for start in range(0, len(batch), 1000):
                    s3.delete_objects(Bucket=plan.bucket, Delete={"Objects": batch[start : start + 1000]})
                deleted += len(batch)
            if not plan.adopted:
                s3.delete_bucket(Bucket=plan.bucket)
    iam = aws_client("iam", plan.region)
    with aws_errors("iam", f"delete role {plan.role_name}"):
        try:
            iam.delete_role_policy(RoleName=plan.role_name, PolicyName="checkpoints")
            iam.delete_role(RoleName=plan.role_name)
        except iam.exceptions.NoSuchEntityException:
            pass
    return deleted
