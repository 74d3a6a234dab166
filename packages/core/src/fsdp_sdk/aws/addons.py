"""Amazon EKS add-ons that monitoring components describe (:class:`~fsdp_sdk.monitoring.EksAddon`).

The add-on's permissions come through EKS Pod Identity: an IAM role that only the
add-on's service account can assume (trust policy for ``pods.eks.amazonaws.com``),
with the managed policies the add-on needs, associated in ``CreateAddon``
(``podIdentityAssociations``). Compared with attaching the policy to the node role,
only that one service account gets the permissions (not every pod on the nodes), the
node role that the cluster backend owns is left untouched, and no OIDC provider is
needed (IRSA). Pod Identity needs the ``eks-pod-identity-agent`` add-on, which
:func:`enable_addon` enables first when the description says so.

Every call goes through :func:`fsdp_sdk.aws.session.aws_errors`: one-line errors.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Mapping
from typing import Any

from fsdp_sdk.aws.session import aws_client, aws_errors
from fsdp_sdk.errors import BackendError
from fsdp_sdk.monitoring import EksAddon

__all__ = ["POD_IDENTITY_TRUST_POLICY", "addon_status", "disable_addon", "enable_addon", "role_tags"]

#: The trust policy of a role that EKS Pod Identity hands to a service account.
POD_IDENTITY_TRUST_POLICY: dict[str, Any] = {
    "Version": "2012-10-17",
    "Statement": [
        {
            "Effect": "Allow",
            "Principal": {"Service": "pods.eks.amazonaws.com"},
            "Action": ["sts:AssumeRole", "sts:TagSession"],
        }
    ],
}
_OWNER_TAG = "fsdp-sdk:cluster"
_FAILED = {"CREATE_FAILED", "DEGRADED", "UPDATE_FAILED", "DELETE_FAILED"}
Progress = Callable[[str], None]


def _no_progress(line: str) -> None:
    pass


def role_tags(cluster: str, addon: EksAddon) -> list[dict[str, str]]:
    """The tags of the role created for ``addon``: they mark it as the SDK's, so uninstall deletes only its own."""
    return [{"Key": _OWNER_TAG, "Value": cluster}, {"Key": "fsdp-sdk:addon", "Value": addon.name}]


def _clients(region: str, clients: Mapping[str, Any] | None) -> tuple[Any, Any]:
    given = clients or {}
    return given.get("eks") or aws_client("eks", region), given.get("iam") or aws_client("iam", region)


def _describe(eks: Any, cluster: str, name: str) -> dict[str, Any] | None:
    try:
        with aws_errors("eks", f"describe the {name} add-on"):
            addon: dict[str, Any] = eks.describe_addon(clusterName=cluster, addonName=name)["addon"]
            return addon
    except BackendError as error:
        if getattr(error, "code", "") == "ResourceNotFoundException":
            return None
        raise


def _wait(
    eks: Any, cluster: str, name: str, *, until: Callable[[dict[str, Any] | None], bool], timeout: float, poll: float
) -> dict[str, Any] | None:
    deadline = time.monotonic() + timeout
    while True:
        addon = _describe(eks, cluster, name)
        if until(addon):
            return addon
        if addon is not None and addon.get("status") in _FAILED:
            issues = "; ".join(i.get("message", "") for i in (addon.get("health") or {}).get("issues") or [])
            raise BackendError(f"EKS add-on {name} is {addon['status']}" + (f": {issues}" if issues else ""))
        if time.monotonic() > deadline:
            state = addon.get("status") if addon else "absent"
            raise BackendError(
                f"EKS add-on {name} is still {state} after {timeout:.0f}s; check 'aws eks describe-addon "
                f"--cluster-name {cluster} --addon-name {name}' and run the command again"
            )
        time.sleep(poll)


def _ensure_role(iam: Any, cluster: str, addon: EksAddon, progress: Progress) -> str:
    try:
        with aws_errors("iam", f"look up the IAM role {addon.role_name}"):
            arn = iam.get_role(RoleName=addon.role_name)["Role"]["Arn"]
    except BackendError as error:
        if getattr(error, "code", "") != "NoSuchEntity":
            raise
        with aws_errors("iam", f"create the IAM role {addon.role_name}"):
            arn = iam.create_role(
                RoleName=addon.role_name,
                AssumeRolePolicyDocument=json.dumps(POD_IDENTITY_TRUST_POLICY),
                Description=f"EKS Pod Identity role of the {addon.name} add-on on cluster {cluster} (fsdp-sdk)",
                Tags=role_tags(cluster, addon),
            )["Role"]["Arn"]
        progress(f"created IAM role {addon.role_name} (EKS Pod Identity)")
    for policy in addon.policy_arns:
        with aws_errors("iam", f"attach {policy} to the IAM role {addon.role_name}"):
            iam.attach_role_policy(RoleName=addon.role_name, PolicyArn=policy)
    return str(arn)


def enable_addon(
    cluster: str,
    region: str,
    addon: EksAddon,
    *,
    clients: Mapping[str, Any] | None = None,
    progress: Progress = _no_progress,
    timeout: float = 900.0,
    poll: float = 10.0,
) -> dict[str, Any]:
    """Enable ``addon`` on EKS cluster ``cluster`` with its Pod Identity role; idempotent.

    Enables the add-ons it needs first, creates (or reuses) the IAM role and attaches its
    policies, creates the add-on with the role associated to its service account, and
    waits until it is ``ACTIVE``.

    :param clients: ``{"eks": ..., "iam": ...}`` boto3 clients to use instead of the cached ones.
    :param timeout: seconds to wait for each add-on to become active.
    :param poll: seconds between two checks.
    :returns: the add-on as ``DescribeAddon`` returns it.
    :raises BackendError: the cluster does not exist, or the add-on failed or stayed inactive.
    :raises AwsError: an AWS call failed (access denied names the IAM action).
    """
    eks, iam = _clients(region, clients)
    try:
        with aws_errors("eks", f"describe the cluster {cluster}"):
            eks.describe_cluster(name=cluster)
    except BackendError as error:
        if getattr(error, "code", "") == "ResourceNotFoundException":
            raise BackendError(f"EKS cluster {cluster!r} does not exist in {region}; run 'fsdp-sdk up' first") from None
        raise

    def active(found: dict[str, Any] | None) -> bool:
        return found is not None and found.get("status") == "ACTIVE"

    for needed in addon.needs:
        if _describe(eks, cluster, needed) is None:
            with aws_errors("eks", f"create the {needed} add-on"):
                eks.create_addon(clusterName=cluster, addonName=needed, resolveConflicts="OVERWRITE")
            progress(f"enabling the EKS add-on {needed} (needed by {addon.name})")
            _wait(eks, cluster, needed, until=active, timeout=timeout, poll=poll)
    role_arn = _ensure_role(iam, cluster, addon, progress)
    current = _describe(eks, cluster, addon.name)
    if current is None:
        request: dict[str, Any] = {
            "clusterName": cluster,
            "addonName": addon.name,
            "resolveConflicts": "OVERWRITE",
            "podIdentityAssociations": [{"serviceAccount": addon.service_account, "roleArn": role_arn}],
        }
        if addon.version:
            request["addonVersion"] = addon.version
        if addon.configuration is not None:
            request["configurationValues"] = json.dumps(addon.configuration)
        with aws_errors("eks", f"create the {addon.name} add-on"):
            eks.create_addon(**request)
        progress(f"enabling the EKS add-on {addon.name}; waiting until it is active")
    else:
        progress(f"the EKS add-on {addon.name} is already enabled ({current.get('status')})")
    found = _wait(eks, cluster, addon.name, until=active, timeout=timeout, poll=poll)
    progress(f"EKS add-on {addon.name} {found.get('addonVersion', '') if found else ''} is active".replace("  ", " "))
    return found or {}


def disable_addon(
    cluster: str,
    region: str,
    addon: EksAddon,
    *,
    clients: Mapping[str, Any] | None = None,
    progress: Progress = _no_progress,
    timeout: float = 900.0,
    poll: float = 10.0,
) -> bool:
    """Delete ``addon`` (and the resources it made on the cluster), then the IAM role created for it.

    The role is deleted only when it carries the SDK's tag for this cluster; add-ons it needed
    (the Pod Identity agent) stay, as other add-ons may use them.

    :returns: whether the add-on existed.
    """
    eks, iam = _clients(region, clients)
    existed = _describe(eks, cluster, addon.name) is not None
    if existed:
        with aws_errors("eks", f"delete the {addon.name} add-on"):
            eks.delete_addon(clusterName=cluster, addonName=addon.name, preserve=False)
        progress(f"deleting the EKS add-on {addon.name}")
        _wait(eks, cluster, addon.name, until=lambda found: found is None, timeout=timeout, poll=poll)
        progress(f"deleted the EKS add-on {addon.name}")
    try:
        with aws_errors("iam", f"look up the IAM role {addon.role_name}"):
            role = iam.get_role(RoleName=addon.role_name)["Role"]
    except BackendError as error:
        if getattr(error, "code", "") == "NoSuchEntity":
            return existed
        raise
    tags = {t["Key"]: t["Value"] for t in role.get("Tags") or []}
    if tags.get(_OWNER_TAG) != cluster:
        progress(f"left the IAM role {addon.role_name} in place: it was not created by fsdp-sdk for {cluster}")
        return existed
    with aws_errors("iam", f"list the policies of the IAM role {addon.role_name}"):
        attached = iam.list_attached_role_policies(RoleName=addon.role_name)["AttachedPolicies"]
    for policy in attached:
        with aws_errors("iam", f"detach {policy['PolicyArn']} from {addon.role_name}"):
            iam.detach_role_policy(RoleName=addon.role_name, PolicyArn=policy["PolicyArn"])
    with aws_errors("iam", f"delete the IAM role {addon.role_name}"):
        iam.delete_role(RoleName=addon.role_name)
    progress(f"deleted the IAM role {addon.role_name}")
    return existed


def addon_status(
    cluster: str, region: str, addon: EksAddon, *, clients: Mapping[str, Any] | None = None
) -> dict[str, Any]:
    """``{"name", "status", "version", "issues"}`` of ``addon``; status ``absent`` when it is not enabled."""
    eks, _ = _clients(region, clients)
    found = _describe(eks, cluster, addon.name)
    if found is None:
        return {"name": addon.name, "status": "absent", "version": None, "issues": []}
    issues = [i.get("message", "") for i in (found.get("health") or {}).get("issues") or []]
    return {"name": addon.name, "status": found.get("status"), "version": found.get("addonVersion"), "issues": issues}
