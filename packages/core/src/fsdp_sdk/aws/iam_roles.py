"""One way to give a piece of fsdp-sdk an IAM role: find it or create it, refuse one fsdp-sdk did not make for this
cluster, and set its inline policy (:func:`ensure_role`); then tie it to a ServiceAccount with an EKS Pod Identity
association, kept when it is there, refused when it names another role, made again while IAM's new role is not yet
visible to EKS (:func:`ensure_association`). The checkpoint role (:mod:`fsdp_sdk.aws.checkpoint_bucket`) and the idle
controller's role (:mod:`fsdp_sdk.aws.idle_identity`) both go through these."""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from fsdp_sdk.aws.session import aws_errors
from fsdp_sdk.errors import BackendError

__all__ = ["ASSOCIATION_DELAYS", "ensure_association", "ensure_role"]

#: Seconds between tries of a Pod Identity association while EKS does not see a role IAM just made (IAM is
#: eventually consistent; propagation usually takes seconds, rarely a minute).
ASSOCIATION_DELAYS = (1.0, 2.0, 4.0, 8.0, 15.0, 30.0)


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


def _not_yet_visible(error: BaseException) -> bool:
    """EKS refusing a role IAM has not propagated yet."""
    return getattr(error, "code", "") == "InvalidParameterException" and "does not exist" in str(error)


def ensure_association(
    eks: Any,
    *,
    cluster: str,
    namespace: str,
    service_account: str,
    role_arn: str,
    role_name: str,
    tags: Mapping[str, str],
    progress: Callable[[str], None],
    sleep: Callable[[float], None] = time.sleep,
) -> str:
    """The id of the Pod Identity association of ``namespace/service_account`` with ``role_arn``, made when missing.

    :raises BackendError: the ServiceAccount is associated with another role (how to free it is said), or EKS still
        does not see the role after :data:`ASSOCIATION_DELAYS`.
    """
    with aws_errors("eks", f"list the EKS Pod Identity associations of {namespace}/{service_account}"):
        found = eks.list_pod_identity_associations(
            clusterName=cluster, namespace=namespace, serviceAccount=service_account
        )["associations"]
    for association in found:
        with aws_errors("eks", "describe the EKS Pod Identity association"):
            current = eks.describe_pod_identity_association(
                clusterName=cluster, associationId=association["associationId"]
            )["association"]
        if current.get("roleArn") != role_arn:
            raise BackendError(
                f"ServiceAccount {namespace}/{service_account} of cluster {cluster} is associated with the IAM role "
                f"{current.get('roleArn')} (Pod Identity association {current['associationId']}); delete that "
                f"association ('aws eks delete-pod-identity-association --cluster-name {cluster} --association-id "
                f"{current['associationId']}') and run 'fsdp-sdk up' again"
            )
        return str(current["associationId"])
    for attempt, delay in enumerate((*ASSOCIATION_DELAYS, None)):
        try:
            with aws_errors("eks", f"associate the IAM role {role_name} with {namespace}/{service_account}"):
                created = eks.create_pod_identity_association(
                    clusterName=cluster,
                    namespace=namespace,
                    serviceAccount=service_account,
                    roleArn=role_arn,
                    tags=dict(tags),
                )["association"]
            break
        except BackendError as error:
            if not _not_yet_visible(error):
                raise
            if delay is None:
                raise BackendError(
                    f"EKS does not see the IAM role {role_name} after {attempt + 1} tries over "
                    f"{sum(ASSOCIATION_DELAYS):g} s (IAM is eventually consistent); run 'fsdp-sdk up' again in a minute"
                ) from error
            progress(f"IAM role {role_name} is not visible to EKS yet; trying again in {delay:g} s")
            sleep(delay)
    progress(
        f"associated ServiceAccount {namespace}/{service_account} with the IAM role {role_name} (EKS Pod Identity)"
    )
    return str(created["associationId"])
