"""The checkpoint bucket of an EKS cluster and the training pods' access to it, as planned: pure (no AWS call).

What the rendered jobs and ``up --dry-run`` need: the bucket's name (``cluster.checkpoint_bucket``, else
:func:`derived_bucket_name`), the layout of a job's objects (``s3://<bucket>/<namespace>/<job>/checkpoints``,
:func:`checkpoint_url`), the ServiceAccount the pods run under (:data:`TRAINER_SERVICE_ACCOUNT`) and the pods'
role and policies (:class:`CheckpointBucket`, made by :func:`plan_store`). :mod:`fsdp_sdk.aws.checkpoint_bucket`
acts on it (creates, adopts, inspects, empties, deletes).
"""

from __future__ import annotations

import dataclasses
import hashlib
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal

from fsdp_sdk import grammar
from fsdp_sdk.aws.arn import partition

if TYPE_CHECKING:
    from fsdp_sdk.config import Config

__all__ = [
    "ABORT_INCOMPLETE_UPLOADS_DAYS",
    "OBJECT_ACTIONS",
    "OWNER_TAG",
    "POLICY_NAME",
    "TRAINER_SERVICE_ACCOUNT",
    "CheckpointBucket",
    "Found",
    "checkpoint_url",
    "derived_bucket_name",
    "job_prefix",
    "plan_store",
    "role_name",
    "role_path",
]

#: The ServiceAccount the rendered jobs' pods run under; the Pod Identity association names it.
TRAINER_SERVICE_ACCOUNT = "fsdp-trainer"
#: The tag that marks what fsdp-sdk created, with the cluster's name as its value (as the eksctl backend's).
OWNER_TAG = "fsdp-sdk.io/cluster"
#: Days after which S3 aborts a multipart upload that never completed (the parts of an interrupted save).
ABORT_INCOMPLETE_UPLOADS_DAYS = 3
#: The name of the role's inline policy.
POLICY_NAME = "fsdp-sdk-checkpoints"
#: What the pods may do to the objects under their prefix: read, write, delete (``keep``), abort an upload.
OBJECT_ACTIONS = ("s3:GetObject", "s3:PutObject", "s3:DeleteObject", "s3:AbortMultipartUpload")
_LIFECYCLE_RULE = "fsdp-sdk-abort-incomplete-multipart-uploads"

Found = Literal["absent", "ours", "adopted"]


def _digest(*parts: str, length: int = 8) -> str:
    return hashlib.sha256("/".join(parts).encode()).hexdigest()[:length]


def derived_bucket_name(account: str, region: str, cluster: str) -> str:
    """``fsdp-sdk-<account id>-<region>-<cluster>`` as S3 accepts it (lower case, at most 63 characters).

    Deterministic, so every machine with credentials of the account finds the same bucket. A cluster name
    too long for the rest, or one that would break a rule of S3's, is cut and followed by a short hash of
    the whole name (two clusters never share a bucket).
    """
    head = f"fsdp-sdk-{account}-{region}-"
    tail = cluster.lower().strip("-")
    name = head + tail
    if len(name) <= 63 and grammar.bucket_name_problem(name) is None:
        return name
    digest = _digest(account, region, cluster)
    room = 63 - len(head) - len(digest) - 1
    cut = tail[: max(room, 0)].strip("-")
    return f"{head}{cut}-{digest}" if cut else f"{head}{digest}"


def role_path(cluster: str, region: str) -> str:
    """The IAM path of the roles of ``cluster`` in ``region``: ``down`` finds them by it."""
    return f"/fsdp-sdk/{region}/{cluster}/"


def role_name(cluster: str, region: str, namespace: str) -> str:
    """The name of the pods' role (unique in the account: IAM names are global, so the region is in its hash)."""
    digest = _digest(region, cluster, namespace, length=6)
    base = f"fsdp-sdk-{cluster}-{namespace}"
    return f"{base[: 64 - len(digest) - 1]}-{digest}"


def job_prefix(namespace: str, job: str) -> str:
    """The key prefix of a job's objects in the bucket: ``<namespace>/<job>/``."""
    return f"{namespace}/{job}/"


def checkpoint_url(bucket: str, namespace: str, job: str) -> str:
    """The ``checkpoint.dir`` of a job: ``s3://<bucket>/<namespace>/<job>/checkpoints``."""
    return f"s3://{bucket}/{job_prefix(namespace, job)}checkpoints"


@dataclass(frozen=True)
class CheckpointBucket:
    """The checkpoint bucket of one cluster and the pods' access to it, as planned.

    :param bucket: the bucket's name.
    :param region: the cluster's region (the bucket's).
    :param cluster: the EKS cluster's name.
    :param namespace: the job namespace: its pods get access under ``<namespace>/``.
    :param named: the user named the bucket (``cluster.checkpoint_bucket``), rather than the derived name.
    :param found: what :func:`inspect_bucket` found: ``absent``, ``ours`` (tagged for this cluster),
        ``adopted`` (an existing bucket left as it is), or ``None`` when not looked at.
    """

    bucket: str
    region: str
    cluster: str
    namespace: str
    named: bool = False
    found: Found | None = None

    @property
    def prefix(self) -> str:
        """The key prefix the pods may use: ``<namespace>/``."""
        return f"{self.namespace}/"

    @property
    def service_account(self) -> str:
        """The ServiceAccount the association names."""
        return TRAINER_SERVICE_ACCOUNT

    @property
    def role_name(self) -> str:
        """The pods' IAM role."""
        return role_name(self.cluster, self.region, self.namespace)

    @property
    def role_path(self) -> str:
        """The IAM path of the role."""
        return role_path(self.cluster, self.region)

    @property
    def bucket_arn(self) -> str:
        """``arn:aws:s3:::<bucket>``."""
        return f"arn:{partition(self.region)}:s3:::{self.bucket}"

    def access_policy(self) -> dict[str, Any]:
        """The role's inline policy: the objects under :attr:`prefix`, and listing that prefix; nothing else."""
        return {
            "Version": "2012-10-17",
            "Statement": [
                {
                    "Sid": "CheckpointObjects",
                    "Effect": "Allow",
                    "Action": list(OBJECT_ACTIONS),
                    "Resource": f"{self.bucket_arn}/{self.prefix}*",
                },
                {
                    "Sid": "ListCheckpoints",
                    "Effect": "Allow",
                    "Action": "s3:ListBucket",
                    "Resource": self.bucket_arn,
                    "Condition": {"StringLike": {"s3:prefix": [self.prefix, f"{self.prefix}*"]}},
                },
            ],
        }

    def trust_policy(self) -> dict[str, Any]:
        """Who may assume the role: EKS Pod Identity (the Amazon EKS User Guide's trust policy)."""
        return {
            "Version": "2012-10-17",
            "Statement": [
                {
                    "Sid": "AllowEksAuthToAssumeRoleForPodIdentity",
                    "Effect": "Allow",
                    "Principal": {"Service": "pods.eks.amazonaws.com"},
                    "Action": ["sts:AssumeRole", "sts:TagSession"],
                }
            ],
        }

    def lifecycle_configuration(self) -> dict[str, Any]:
        """The bucket's lifecycle: incomplete multipart uploads are aborted after a few days."""
        return {
            "Rules": [
                {
                    "ID": _LIFECYCLE_RULE,
                    "Status": "Enabled",
                    "Filter": {"Prefix": ""},
                    "AbortIncompleteMultipartUpload": {"DaysAfterInitiation": ABORT_INCOMPLETE_UPLOADS_DAYS},
                }
            ]
        }

    def tags(self) -> list[dict[str, str]]:
        """The tags of the bucket and the role."""
        return [{"Key": OWNER_TAG, "Value": self.cluster}]

    def steps(self) -> list[str]:
        """The plan's sentences."""
        if self.found == "adopted":
            bucket = (
                f"adopt the S3 bucket {self.bucket} in {self.region} for checkpoints (its settings left as they are)"
            )
        else:
            verb = {"ours": "keep", None: "create (or adopt)"}.get(self.found, "create")
            bucket = (
                f"{verb} the S3 bucket {self.bucket} in {self.region} for checkpoints: versioning off, public access "
                f"blocked, SSE-S3, incomplete multipart uploads aborted after {ABORT_INCOMPLETE_UPLOADS_DAYS} days"
            )
        return [
            bucket,
            f"IAM role {self.role_name} for EKS Pod Identity: read, write and delete s3://{self.bucket}/{self.prefix}*",
            f"EKS Pod Identity association: ServiceAccount {self.namespace}/{self.service_account} -> {self.role_name}",
        ]

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready dict (the plan's ``details["checkpoints"]``)."""
        data = dataclasses.asdict(self)
        data.update(prefix=self.prefix, role_name=self.role_name, service_account=self.service_account)
        return data

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> CheckpointBucket:
        """The store of a plan's ``details["checkpoints"]``."""
        names = {f.name for f in dataclasses.fields(cls)}
        return cls(**{k: v for k, v in data.items() if k in names})


def plan_store(config: Config, *, account: str | None = None) -> CheckpointBucket:
    """The checkpoint store of ``config``'s cluster (pure).

    :param config: the resolved configuration (``cluster.checkpoint_bucket``, ``cluster.region``, ``cluster.name``,
        ``job.namespace``).
    :param account: the AWS account id; needed when ``cluster.checkpoint_bucket`` is unset (:func:`account_id`).
    :raises ValueError: neither a bucket nor an account is given.
    """
    cluster = config.cluster
    if cluster.checkpoint_bucket:
        bucket, named = cluster.checkpoint_bucket, True
    elif account:
        bucket, named = derived_bucket_name(account, cluster.region, cluster.name), False
    else:
        raise ValueError("plan_store needs the account id when cluster.checkpoint_bucket is unset")
    return CheckpointBucket(bucket, cluster.region, cluster.name, config.job.namespace, named=named)
