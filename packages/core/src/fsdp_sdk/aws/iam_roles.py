"""One way to give a piece of fsdp-sdk an IAM role: find it or create it, refuse one fsdp-sdk did not make for this
cluster, and set its inline policy. The checkpoint role (:mod:`fsdp_sdk.aws.checkpoint_bucket`) and the idle
controller's role (:mod:`fsdp_sdk.k8s.idle`) both go through :func:`ensure_role`."""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from fsdp_sdk.aws.session import aws_errors
from fsdp_sdk.errors import BackendError

__all__ = ["ensure_role"]


def ensure_role(
    iam: Any,
    *,
    name: str,
    path: str,
    trust_policy: Mapping[str, Any],
    description: str,
    tags: Sequence[Mapping[str, str]],
    owned: Callable[[Mapping[str, Any]], bool],
    not_owned: str,
    policy_name: str,
    policy: Mapping[str, Any],
    progress: Callable[[str], None],
    created_line: str,
) -> tuple[str, bool]:
    """The role's ARN, and whether this call created it.

    :param owned: whether an existing role (``get_role``'s ``Role``) is fsdp-sdk's for this cluster.
    :param not_owned: the one-line error for an existing role that is not.
    :param created_line: the progress line when the role is created.
    """
    created = False
    try:
        with aws_errors("iam", f"look up the IAM role {name}"):
            role = iam.get_role(RoleName=name)["Role"]
    except BackendError as error:
        if getattr(error, "code", "") != "NoSuchEntity":
            raise
        with aws_errors("iam", f"create the IAM role {name}"):
            role = iam.create_role(
                Path=path,
                RoleName=name,
                AssumeRolePolicyDocument=json.dumps(dict(trust_policy)),
                Description=description,
                Tags=[dict(tag) for tag in tags],
            )["Role"]
        created = True
        progress(created_line)
    else:
        if not owned(role):
            raise BackendError(not_owned)
    with aws_errors("iam", f"set the policy of the IAM role {name}"):
        iam.put_role_policy(RoleName=name, PolicyName=policy_name, PolicyDocument=json.dumps(dict(policy)))
    return str(role["Arn"]), created
