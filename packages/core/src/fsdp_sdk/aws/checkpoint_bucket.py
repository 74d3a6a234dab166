"""The checkpoint bucket of an EKS cluster and the training pods' access to it: planned purely, then acted on.

``up`` on an EKS backend gives the cluster a place for checkpoints that outlives every node::

    s3://<bucket>/<namespace>/<job>/checkpoints      (checkpoint.dir of the rendered jobs)

* the **bucket**: ``cluster.checkpoint_bucket`` when set (an existing bucket is adopted: its settings are
  left as they are), else ``fsdp-sdk-<account id>-<region>-<cluster>`` (:func:`derived_bucket_name`),
  created in the cluster's region with versioning off, public access blocked, default encryption SSE-S3,
  a lifecycle rule that aborts incomplete multipart uploads (an interrupted save leaves parts that cost
  money until then) and the tag ``fsdp-sdk.io/cluster``;
* the **access**: an IAM role that only EKS Pod Identity may assume (``pods.eks.amazonaws.com``,
  ``sts:AssumeRole`` and ``sts:TagSession``), with one inline policy allowing ``s3:GetObject``,
  ``s3:PutObject``, ``s3:DeleteObject`` and ``s3:AbortMultipartUpload`` under ``<namespace>/`` of the
  bucket and ``s3:ListBucket`` of that prefix only; a Pod Identity association gives it to the
  ServiceAccount :data:`TRAINER_SERVICE_ACCOUNT` of the job namespace (the rendered jobs' pods run under
  it; the ``eks-pod-identity-agent`` add-on, which every cluster backend installs, hands the credentials
  to them). No credential is ever written into a Kubernetes object.

:func:`~fsdp_sdk.aws.checkpoint_plan.plan_store` (in the pure :mod:`fsdp_sdk.aws.checkpoint_plan`, with the names
and the layout) makes a :class:`~fsdp_sdk.aws.checkpoint_plan.CheckpointBucket` from the configuration and the
account id (what ``up --dry-run`` shows); this module acts on it: :func:`inspect_bucket` reads (is the bucket there, in which region, whose);
:func:`ensure_bucket`, :func:`ensure_access`, :func:`remove_access`, :func:`bucket_usage` and
:func:`delete_checkpoints` act, through :func:`fsdp_sdk.aws.session.aws_errors` (one-line errors). The
role and the association go with the cluster (``down``); the bucket stays unless ``down
--delete-checkpoints``.

The Pod Identity trust policy and the ``CreatePodIdentityAssociation`` request follow the Amazon EKS User
Guide ("Create IAM role with trust policy required by EKS Pod Identity",
docs.aws.amazon.com/eks/latest/userguide/pod-id-role.html) and botocore's EKS service model (2017-11-01),
checked 2026-12-02.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from fsdp_sdk.aws.checkpoint_plan import (
    OWNER_TAG,
    POLICY_NAME,
    TRAINER_SERVICE_ACCOUNT,
    CheckpointBucket,
    role_path,
)
from fsdp_sdk.aws.iam_roles import ensure_association, ensure_role
from fsdp_sdk.aws.session import aws_client, aws_errors
from fsdp_sdk.errors import BackendError, ConfigError

__all__ = [
    "BucketUsage",
    "account_id",
    "bucket_summary",
    "bucket_usage",
    "delete_checkpoints",
    "ensure_access",
    "ensure_bucket",
    "inspect_bucket",
    "remove_access",
]

_MISSING_BUCKET = ("404", "NoSuchBucket", "NotFound")
_DENIED = ("403", "AccessDenied", "Forbidden", "AllAccessDisabled")
#: How many times an association is tried while a new role is not yet visible to EKS (IAM is eventually consistent).

Clients = Mapping[str, Any]
Progress = Callable[[str], None]


def _no_progress(line: str) -> None:
    pass


def _client(clients: Clients | None, service: str, region: str) -> Any:
    return (clients or {}).get(service) or aws_client(service, region)


def account_id(region: str, *, clients: Clients | None = None) -> str:
    """The AWS account of the credentials (``sts:GetCallerIdentity``, which needs no permission).

    :raises ConfigError: no, expired or rejected credentials.
    """
    with aws_errors("sts", "find the AWS account the checkpoint bucket is named after"):
        return str(_client(clients, "sts", region).get_caller_identity()["Account"])


def _bucket_region(s3: Any, bucket: str) -> str:
    with aws_errors("s3", f"read the region of the S3 bucket {bucket}"):
        location = s3.get_bucket_location(Bucket=bucket).get("LocationConstraint") or "us-east-1"
    return "eu-west-1" if location == "EU" else str(location)  # no constraint: us-east-1; "EU": the old eu-west-1


def inspect_bucket(store: CheckpointBucket, *, clients: Clients | None = None) -> CheckpointBucket:
    """Look at the bucket (reads only): absent, ours, or someone's to adopt; ``store`` with :attr:`found` set.

    :raises ConfigError: the bucket is in another region, or these credentials cannot reach it (another
        account's bucket, or a policy that denies them): nothing has been created.
    """
    s3 = _client(clients, "s3", store.region)
    field = "cluster.checkpoint_bucket"
    fix_name = f"name a bucket of this account in {store.region}" + (
        ", or leave cluster.checkpoint_bucket unset ('up' creates one)" if store.named else ""
    )
    try:
        with aws_errors("s3", f"look up the S3 bucket {store.bucket}"):
            s3.head_bucket(Bucket=store.bucket)
    except BackendError as error:
        code = getattr(error, "code", "")
        if code in _MISSING_BUCKET:
            return dataclasses.replace(store, found="absent")
        if code in _DENIED:
            raise ConfigError(
                field,
                f"the S3 bucket {store.bucket} exists but these AWS credentials cannot use it (it may belong to "
                "another account)",
                fix_name,
            ) from None
        raise
    region = _bucket_region(s3, store.bucket)
    if region != store.region:
        raise ConfigError(
            field,
            f"the S3 bucket {store.bucket} is in {region}, not in the cluster's region {store.region}",
            fix_name,
        )
    try:
        with aws_errors("s3", f"read the tags of the S3 bucket {store.bucket}"):
            tags = s3.get_bucket_tagging(Bucket=store.bucket).get("TagSet") or []
    except BackendError as error:
        if getattr(error, "code", "") != "NoSuchTagSet":
            raise
        tags = []
    ours = any(t.get("Key") == OWNER_TAG and t.get("Value") == store.cluster for t in tags)
    return dataclasses.replace(store, found="ours" if ours else "adopted")


def _configure_bucket(s3: Any, store: CheckpointBucket) -> None:
    bucket = store.bucket
    with aws_errors("s3", f"block public access to the S3 bucket {bucket}"):
        s3.put_public_access_block(
            Bucket=bucket,
            PublicAccessBlockConfiguration={
                "BlockPublicAcls": True,
                "IgnorePublicAcls": True,
                "BlockPublicPolicy": True,
                "RestrictPublicBuckets": True,
            },
        )
    with aws_errors("s3", f"set the default encryption of the S3 bucket {bucket}"):
        s3.put_bucket_encryption(
            Bucket=bucket,
            ServerSideEncryptionConfiguration={
                "Rules": [{"ApplyServerSideEncryptionByDefault": {"SSEAlgorithm": "AES256"}}]
            },
        )
    with aws_errors("s3", f"set the lifecycle of the S3 bucket {bucket}"):
        s3.put_bucket_lifecycle_configuration(Bucket=bucket, LifecycleConfiguration=store.lifecycle_configuration())
    with aws_errors("s3", f"tag the S3 bucket {bucket}"):
        s3.put_bucket_tagging(Bucket=bucket, Tagging={"TagSet": store.tags()})


def _report_adopted(s3: Any, store: CheckpointBucket, progress: Progress) -> None:
    """Say what an adopted bucket lacks; change nothing (its lifecycle rules and versioning are its owner's)."""
    with aws_errors("s3", f"read the versioning of the S3 bucket {store.bucket}"):
        versioning = s3.get_bucket_versioning(Bucket=store.bucket).get("Status")
    if versioning == "Enabled":
        progress(
            f"warning: the S3 bucket {store.bucket} keeps object versions: checkpoints that 'keep' deletes stay "
            "billed as noncurrent versions until a lifecycle rule expires them"
        )
    try:
        with aws_errors("s3", f"read the lifecycle of the S3 bucket {store.bucket}"):
            rules = s3.get_bucket_lifecycle_configuration(Bucket=store.bucket).get("Rules") or []
    except BackendError as error:
        if getattr(error, "code", "") != "NoSuchLifecycleConfiguration":
            raise
        rules = []
    if not any(r.get("AbortIncompleteMultipartUpload") and r.get("Status") == "Enabled" for r in rules):
        progress(
            f"warning: no lifecycle rule of the S3 bucket {store.bucket} aborts incomplete multipart uploads: the "
            "parts of interrupted saves stay billed; add one (AbortIncompleteMultipartUpload)"
        )


def ensure_bucket(
    store: CheckpointBucket, *, clients: Clients | None = None, progress: Progress = _no_progress
) -> CheckpointBucket:
    """Create the bucket as planned, or adopt the existing one; idempotent.

    A bucket this SDK created for the cluster gets its settings again (they may have been changed); an adopted
    bucket is left as it is, and what it lacks is said on ``progress``.

    :returns: ``store`` with :attr:`~CheckpointBucket.found` as it was before the call.
    :raises ConfigError: the bucket is in another region, another account's, or its name is taken.
    """
    s3 = _client(clients, "s3", store.region)
    found = inspect_bucket(store, clients=clients)
    if found.found == "adopted":
        progress(f"adopted the S3 bucket {store.bucket} in {store.region} for checkpoints")
        _report_adopted(s3, found, progress)
        return found
    if found.found == "absent":
        request: dict[str, Any] = {"Bucket": store.bucket}
        if store.region != "us-east-1":  # us-east-1 refuses its own name as a location constraint
            request["CreateBucketConfiguration"] = {"LocationConstraint": store.region}
        try:
            with aws_errors("s3", f"create the S3 bucket {store.bucket}"):
                s3.create_bucket(**request)
        except BackendError as error:
            if getattr(error, "code", "") == "BucketAlreadyExists":
                raise ConfigError(
                    "cluster.checkpoint_bucket",
                    f"the S3 bucket name {store.bucket} is taken by another AWS account",
                    f"set cluster.checkpoint_bucket to another name (in {store.region})",
                ) from None
            if getattr(error, "code", "") != "BucketAlreadyOwnedByYou":
                raise
        progress(f"created the S3 bucket {store.bucket} in {store.region} for checkpoints")
    _configure_bucket(s3, store)
    return found


def _role_tags(role: Mapping[str, Any]) -> dict[str, str]:
    return {t["Key"]: t["Value"] for t in role.get("Tags") or []}


def _ensure_role(iam: Any, store: CheckpointBucket, progress: Progress) -> str:
    name = store.role_name
    arn, _ = ensure_role(
        iam,
        name=name,
        path=store.role_path,
        trust_policy=store.trust_policy(),
        description=f"fsdp-sdk: checkpoints of the jobs in {store.namespace} on EKS cluster {store.cluster}",
        tags=store.tags(),
        owned=lambda role: _role_tags(role).get(OWNER_TAG) == store.cluster,
        not_owned=f"IAM role {name} exists but was not created by fsdp-sdk for cluster {store.cluster}; "
        f"delete it ('aws iam delete-role --role-name {name}') or use another cluster.name",
        policy_name=POLICY_NAME,
        policy=store.access_policy(),
        progress=progress,
        created_line=f"created the IAM role {name} (EKS Pod Identity)",
    )
    return arn


def ensure_access(
    store: CheckpointBucket,
    *,
    clients: Clients | None = None,
    progress: Progress = _no_progress,
    sleep: Callable[[float], None] = time.sleep,
) -> dict[str, str]:
    """Create (or keep) the pods' role and its Pod Identity association; idempotent. The cluster must exist.

    :param sleep: waits between tries while a new role is not yet visible to EKS.
    :returns: ``{"role_arn", "association_id"}``.
    :raises BackendError: the role's name is taken by a role fsdp-sdk did not make for this cluster, or the
        ServiceAccount is associated with another role.
    """
    iam = _client(clients, "iam", store.region)
    eks = _client(clients, "eks", store.region)
    arn = _ensure_role(iam, store, progress)
    association = ensure_association(
        eks,
        cluster=store.cluster,
        namespace=store.namespace,
        service_account=store.service_account,
        role_arn=arn,
        role_name=store.role_name,
        tags={OWNER_TAG: store.cluster},
        progress=progress,
        sleep=sleep,
    )
    return {"role_arn": arn, "association_id": association}


def remove_access(
    cluster: str, region: str, *, clients: Clients | None = None, progress: Progress = _no_progress
) -> list[str]:
    """Delete the cluster's Pod Identity associations of :data:`TRAINER_SERVICE_ACCOUNT` (when the cluster still
    exists; EKS deletes them with it) and every role fsdp-sdk made for the cluster's checkpoints (found under
    :func:`role_path`, tagged for the cluster); idempotent.

    :returns: the names of the deleted roles.
    """
    iam = _client(clients, "iam", region)
    eks = _client(clients, "eks", region)
    try:
        associations: list[dict[str, Any]] = []
        token: str | None = None
        with aws_errors("eks", f"list the EKS Pod Identity associations of cluster {cluster}"):
            while True:
                page = eks.list_pod_identity_associations(
                    clusterName=cluster, **({"nextToken": token} if token else {})
                )
                associations += page.get("associations") or []
                token = page.get("nextToken")
                if not token:
                    break
    except BackendError as error:
        if getattr(error, "code", "") != "ResourceNotFoundException":
            raise
        associations = []  # the cluster is gone, and its associations with it
    for association in associations:
        if association.get("serviceAccount") != TRAINER_SERVICE_ACCOUNT:
            continue
        with aws_errors("eks", "delete the EKS Pod Identity association"):
            eks.delete_pod_identity_association(clusterName=cluster, associationId=association["associationId"])
        progress(f"deleted the Pod Identity association of {association.get('namespace')}/{TRAINER_SERVICE_ACCOUNT}")
    with aws_errors("iam", f"list the IAM roles of cluster {cluster}"):
        pages = iam.get_paginator("list_roles").paginate(PathPrefix=role_path(cluster, region))
        roles = [r["RoleName"] for page in pages for r in page.get("Roles") or []]
    deleted: list[str] = []
    for name in roles:
        with aws_errors("iam", f"look up the IAM role {name}"):
            role = iam.get_role(RoleName=name)["Role"]
        if _role_tags(role).get(OWNER_TAG) != cluster:
            progress(f"left the IAM role {name} in place: it was not created by fsdp-sdk for {cluster}")
            continue
        with aws_errors("iam", f"delete the policies of the IAM role {name}"):
            for policy in iam.list_role_policies(RoleName=name)["PolicyNames"]:
                iam.delete_role_policy(RoleName=name, PolicyName=policy)
            for attached in iam.list_attached_role_policies(RoleName=name)["AttachedPolicies"]:
                iam.detach_role_policy(RoleName=name, PolicyArn=attached["PolicyArn"])
        with aws_errors("iam", f"delete the IAM role {name}"):
            iam.delete_role(RoleName=name)
        progress(f"deleted the IAM role {name}")
        deleted.append(name)
    return deleted


@dataclass(frozen=True)
class BucketUsage:
    """What a job prefix of the bucket holds.

    :param prefix: ``<namespace>/<job>/`` (or the key's first part for objects outside that layout).
    :param objects: how many objects.
    :param bytes: their total size.
    """

    prefix: str
    objects: int
    bytes: int

    def summary(self) -> str:
        """``24 objects, 1.2 GiB``."""
        size, unit = float(self.bytes), "B"
        for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
            if size < 1024 or unit == "TiB":
                break
            size /= 1024
        shown = f"{size:.0f} {unit}" if unit == "B" else f"{size:.1f} {unit}"
        return f"{self.objects} object{'s' if self.objects != 1 else ''}, {shown}"

    def line(self) -> str:
        """``default/fsdp/: 24 objects, 1.2 GiB``."""
        return f"{self.prefix}: {self.summary()}"


def _usage_prefix(key: str) -> str:
    parts = key.split("/")
    return "/".join(parts[:2]) + "/" if len(parts) > 2 else parts[0] + ("/" if len(parts) > 1 else "")


def bucket_usage(store: CheckpointBucket, *, clients: Clients | None = None) -> list[BucketUsage] | None:
    """What :func:`delete_checkpoints` would delete, by job prefix (reads only); ``None`` when the bucket is absent.

    The whole bucket when it is ours; only the namespace's prefix of an adopted bucket.
    """
    found = inspect_bucket(store, clients=clients)
    if found.found == "absent":
        return None
    s3 = _client(clients, "s3", store.region)
    prefix = "" if found.found == "ours" else store.prefix
    totals: dict[str, list[int]] = {}
    with aws_errors("s3", f"list the objects of the S3 bucket {store.bucket}"):
        for page in s3.get_paginator("list_objects_v2").paginate(Bucket=store.bucket, Prefix=prefix):
            for item in page.get("Contents") or []:
                entry = totals.setdefault(_usage_prefix(item["Key"]), [0, 0])
                entry[0] += 1
                entry[1] += int(item.get("Size") or 0)
    return [BucketUsage(p, n, size) for p, (n, size) in sorted(totals.items())]


def delete_checkpoints(
    store: CheckpointBucket, *, clients: Clients | None = None, progress: Progress = _no_progress
) -> bool:
    """Empty and delete the bucket when fsdp-sdk created it for this cluster; of an adopted bucket, delete only the
    objects under the namespace's prefix and keep the bucket. Incomplete multipart uploads are aborted first.

    :returns: whether the bucket itself was deleted.
    """
    found = inspect_bucket(store, clients=clients)
    if found.found == "absent":
        return False
    s3 = _client(clients, "s3", store.region)
    prefix = "" if found.found == "ours" else store.prefix
    with aws_errors("s3", f"abort the incomplete uploads of the S3 bucket {store.bucket}"):
        for page in s3.get_paginator("list_multipart_uploads").paginate(Bucket=store.bucket, Prefix=prefix):
            for upload in page.get("Uploads") or []:
                s3.abort_multipart_upload(Bucket=store.bucket, Key=upload["Key"], UploadId=upload["UploadId"])
    deleted = 0
    with aws_errors("s3", f"delete the objects of the S3 bucket {store.bucket}"):
        for page in s3.get_paginator("list_object_versions").paginate(Bucket=store.bucket, Prefix=prefix):
            keys = [
                {"Key": v["Key"], "VersionId": v["VersionId"]}
                for v in [*(page.get("Versions") or []), *(page.get("DeleteMarkers") or [])]
            ]
            for start in range(0, len(keys), 1000):  # DeleteObjects takes up to 1000 keys
                answer = s3.delete_objects(Bucket=store.bucket, Delete={"Objects": keys[start : start + 1000]})
                errors = answer.get("Errors") or []
                if errors:
                    first = errors[0]
                    raise BackendError(
                        f"s3: could not delete s3://{store.bucket}/{first.get('Key')}: {first.get('Code')}: "
                        f"{first.get('Message')}; check the bucket's policy and run the command again"
                    )
                deleted += len(answer.get("Deleted") or [])
    progress(f"deleted {deleted} object(s) from s3://{store.bucket}/{prefix}")
    if found.found != "ours":
        progress(f"kept the S3 bucket {store.bucket}: it was adopted, not created by fsdp-sdk")
        return False
    with aws_errors("s3", f"delete the S3 bucket {store.bucket}"):
        s3.delete_bucket(Bucket=store.bucket)
    progress(f"deleted the S3 bucket {store.bucket}")
    return True


def bucket_summary(store: CheckpointBucket, *, clients: Clients | None = None) -> str:
    """One line for ``status``: ``s3://<bucket> (us-west-2)``, with ``absent`` when it does not exist."""
    found = inspect_bucket(store, clients=clients)
    where = f"s3://{store.bucket} ({store.region})"
    return where if found.found != "absent" else f"{where}, absent: 'fsdp-sdk up' creates it"
