"""The idle scale-to-zero controller's AWS identity (acting): :func:`install_identity` at ``up`` gives its service
account an EKS Pod Identity role, :func:`remove_identity` at ``down`` deletes it. What the role is called, where it
lives, what its policy allows and what the plan says of it are :mod:`fsdp_sdk.k8s.idle`'s (pure).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

from fsdp_sdk.aws.checkpoint_plan import OWNER_TAG
from fsdp_sdk.aws.iam_roles import ASSOCIATION_DELAYS, ensure_association, ensure_role
from fsdp_sdk.k8s.idle import CONTROLLER_NAME, POLICY_NAME, owned_role, role_name, role_path, scaling_policy

if TYPE_CHECKING:
    from fsdp_sdk.config import Config

__all__ = ["ASSOCIATION_DELAYS", "install_identity", "remove_identity"]


def install_identity(
    config: Config,
    *,
    clients: Mapping[str, Any] | None = None,
    progress: Callable[[str], None] | None = None,
    sleep: Callable[[float], None] = time.sleep,
) -> str:
    """Give the controller's service account its AWS identity (idempotent); returns the role's ARN.

    Creates the IAM role (:func:`~fsdp_sdk.k8s.idle.role_name`, under :func:`~fsdp_sdk.k8s.idle.role_path`, tagged
    for the cluster) with the Pod Identity trust policy, or keeps it when it is this cluster's (tag and path); sets its
    one inline policy (:func:`~fsdp_sdk.k8s.idle.scaling_policy`), enables the ``eks-pod-identity-agent`` add-on when
    missing, and associates the role with the service account, trying again with a bounded backoff
    (:data:`ASSOCIATION_DELAYS`) while EKS does not see a role created a moment ago.

    :param clients: ``{"eks", "iam", "sts"}`` boto3 clients instead of the shared ones.
    :param sleep: waits between tries of the association (tests pass one that records).
    :raises BackendError: the role's name is taken by a role fsdp-sdk did not make for this cluster, the service
        account is associated with another role, or the new role stayed invisible to EKS; an AWS call failed
        (access denied names the IAM action).
    """
    from fsdp_sdk.aws.addons import POD_IDENTITY_TRUST_POLICY
    from fsdp_sdk.aws.session import aws_client, aws_errors, error_code

    say = progress or (lambda line: None)
    region, cluster = config.cluster.region, config.cluster.name
    given = clients or {}
    eks = given.get("eks") or aws_client("eks", region)
    iam = given.get("iam") or aws_client("iam", region)
    sts = given.get("sts") or aws_client("sts", region)
    name = role_name(config)
    with aws_errors("sts", "find the AWS account"):
        account = str(sts.get_caller_identity()["Account"])

    arn, _ = ensure_role(
        iam,
        name=name,
        path=role_path(config),
        trust_policy=POD_IDENTITY_TRUST_POLICY,
        description=f"fsdp-sdk idle scale-to-zero controller of EKS cluster {cluster} in {region}",
        tags=[{"Key": OWNER_TAG, "Value": cluster}, {"Key": "fsdp-sdk.io/region", "Value": region}],
        owned=lambda role: owned_role(role, config),
        not_owned=f"IAM role {name} exists but was not created by fsdp-sdk for cluster {cluster} in {region} "
        f"(it lacks the tag {OWNER_TAG}={cluster} or the path {role_path(config)}); delete it "
        f"('aws iam delete-role --role-name {name}') or use another cluster.name",
        policy_name=POLICY_NAME,
        policy=scaling_policy(config, account),
        progress=say,
        created_line=f"created IAM role {name} (EKS Pod Identity of the idle controller)",
    )
    with aws_errors("eks", "enable the eks-pod-identity-agent add-on"):
        try:
            eks.describe_addon(clusterName=cluster, addonName="eks-pod-identity-agent")
        except Exception as error:
            if error_code(error) != "ResourceNotFoundException":
                raise
            eks.create_addon(clusterName=cluster, addonName="eks-pod-identity-agent", resolveConflicts="OVERWRITE")
            say("enabling the EKS add-on eks-pod-identity-agent (needed by the idle controller)")
    ensure_association(
        eks,
        cluster=cluster,
        namespace=config.job.namespace,
        service_account=CONTROLLER_NAME,
        role_arn=arn,
        role_name=name,
        tags={OWNER_TAG: cluster},
        progress=say,
        sleep=sleep,
    )
    return arn


def remove_identity(
    config: Config, *, clients: Mapping[str, Any] | None = None, progress: Callable[[str], None] | None = None
) -> list[str]:
    """Delete what :func:`install_identity` made (idempotent): the service account's Pod Identity association (when
    the cluster still exists; EKS deletes it with the cluster), the role's inline policy and the role, when it is
    this cluster's (tag and path; another role of that name is left alone, and said so).

    :returns: what was deleted, one line each.
    """
    from fsdp_sdk.aws.session import aws_client, aws_errors
    from fsdp_sdk.errors import BackendError

    say = progress or (lambda line: None)
    region, cluster, namespace = config.cluster.region, config.cluster.name, config.job.namespace
    given = clients or {}
    eks = given.get("eks") or aws_client("eks", region)
    iam = given.get("iam") or aws_client("iam", region)
    name = role_name(config)
    deleted: list[str] = []
    try:
        with aws_errors("iam", f"look up the IAM role {name}"):
            role = iam.get_role(RoleName=name)["Role"]
    except BackendError as error:
        if getattr(error, "code", "") != "NoSuchEntity":
            raise
        return []  # never made (or already deleted): an association to it would be EKS's to drop with the cluster
    if not owned_role(role, config):
        say(f"left the IAM role {name} in place: it was not created by fsdp-sdk for {cluster} in {region}")
        return []
    try:
        with aws_errors("eks", f"list the EKS Pod Identity associations of {namespace}/{CONTROLLER_NAME}"):
            found = eks.list_pod_identity_associations(
                clusterName=cluster, namespace=namespace, serviceAccount=CONTROLLER_NAME
            )["associations"]
    except BackendError as error:
        if getattr(error, "code", "") != "ResourceNotFoundException":
            raise
        found = []  # the cluster is gone, and its associations with it
    for association in found:
        with aws_errors("eks", "delete the idle controller's EKS Pod Identity association"):
            eks.delete_pod_identity_association(clusterName=cluster, associationId=association["associationId"])
        deleted.append(f"Pod Identity association {association['associationId']} of {namespace}/{CONTROLLER_NAME}")
    with aws_errors("iam", f"delete the policies of the IAM role {name}"):
        for policy in iam.list_role_policies(RoleName=name)["PolicyNames"]:
            iam.delete_role_policy(RoleName=name, PolicyName=policy)
            deleted.append(f"inline policy {policy} of IAM role {name}")
    with aws_errors("iam", f"delete the IAM role {name}"):
        iam.delete_role(RoleName=name)
    deleted.append(f"IAM role {name}")
    for line in deleted:
        say(f"deleted the idle controller's {line}")
    return deleted
