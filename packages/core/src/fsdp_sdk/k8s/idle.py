"""The idle scale-to-zero controller's objects (pure) and its AWS identity (acting).

``cluster.idle_scale_to_zero_minutes`` (``up --idle-scale-to-zero MINUTES``) makes ``up`` install, in the jobs'
namespace:

* a ConfigMap holding the controller's script (:mod:`fsdp_sdk.idle_controller`, standard library + boto3), and an
  empty one it keeps its state in (when a training pod was last seen);
* a ServiceAccount whose Role may get and list pods, and get and update that one state ConfigMap, and whose
  ClusterRole may get and update fsdp-sdk's Kueue ClusterQueue (its quota goes to 0 with the nodes): nothing else;
* a CronJob that runs the script every minute on a system node, in the pinned AWS Lambda Python image (boto3 in it).

Its AWS identity comes through EKS Pod Identity (:func:`install_identity`): an IAM role only that service account
can assume, whose one inline policy (:func:`scaling_policy`) allows ``eks:DescribeNodegroup`` and
``eks:UpdateNodegroupConfig`` on this cluster's GPU node group and nothing else. The role is named for the region
and the cluster (:func:`role_name`), lives under the cluster's IAM path and carries its owner tag: ``up`` adopts
only such a role, the plan says so (:func:`identity_steps`), ``down`` deletes it with its policy and association
(:func:`remove_identity`).
"""

from __future__ import annotations

import hashlib
import time
from collections.abc import Callable, Mapping
from importlib import resources
from typing import TYPE_CHECKING, Any

from fsdp_sdk.aws.arn import partition

if TYPE_CHECKING:
    from fsdp_sdk.config import Config

__all__ = [
    "ASSOCIATION_DELAYS",
    "CONTROLLER_NAME",
    "POLICY_NAME",
    "STATE_CONFIGMAP",
    "gpu_nodegroup",
    "identity_steps",
    "install_identity",
    "nodegroup_arn",
    "remove_identity",
    "render_idle_controller",
    "role_name",
    "role_path",
    "scaling_policy",
]

CONTROLLER_NAME = "fsdp-sdk-idle"
STATE_CONFIGMAP = "fsdp-sdk-idle-state"
_SCRIPT_CONFIGMAP = "fsdp-sdk-idle-controller"
_SCRIPT = "idle_controller.py"
_LABELS = {"app.kubernetes.io/name": CONTROLLER_NAME, "app.kubernetes.io/managed-by": "fsdp-sdk"}
#: The actions the controller's IAM role allows, and nothing else.
ACTIONS = ("eks:DescribeNodegroup", "eks:UpdateNodegroupConfig")
#: The role's one inline policy.
POLICY_NAME = "scale-gpu-nodegroup"
#: Seconds between tries of the Pod Identity association while EKS does not see a new role yet (about a minute).
ASSOCIATION_DELAYS = (1.0, 2.0, 4.0, 8.0, 15.0, 30.0)
_IAM_NAME_MAX = 64


def gpu_nodegroup(config: Config) -> str:
    """The name of the cluster's GPU node group: the backend's setting (``eksctl.gpu_nodegroup``), else ``gpu``."""
    from fsdp_sdk.contracts import gpu_nodegroup_settings

    section = gpu_nodegroup_settings(config)
    return section.gpu_nodegroup if section is not None and section.gpu_nodegroup else "gpu"


def nodegroup_arn(config: Config, account: str) -> str:
    """The ARN of this cluster's GPU node group; its last part (the node group's id) is a wildcard."""
    cluster = config.cluster
    return (
        f"arn:{partition(cluster.region)}:eks:{cluster.region}:{account}:nodegroup/"
        f"{cluster.name}/{gpu_nodegroup(config)}/*"
    )


def scaling_policy(config: Config, account: str) -> dict[str, Any]:
    """The controller role's only policy: describe and resize this cluster's GPU node group."""
    return {
        "Version": "2012-10-17",
        "Statement": [
            {
                "Sid": "ScaleTheGpuNodeGroupOnly",
                "Effect": "Allow",
                "Action": list(ACTIONS),
                "Resource": nodegroup_arn(config, account),
            }
        ],
    }


def role_name(config: Config) -> str:
    """The controller's IAM role name: ``fsdp-sdk-idle-<region>-<cluster>``, at most IAM's 64 characters.

    IAM names are global to the account, so the region is in it: two clusters of one name in two regions get two
    roles. A name too long is cut and ends with a hash of region and cluster (two clusters never share one).
    """
    cluster = config.cluster
    name = f"fsdp-sdk-idle-{cluster.region}-{cluster.name}"
    if len(name) <= _IAM_NAME_MAX:
        return name
    digest = hashlib.sha256(f"{cluster.region}/{cluster.name}".encode()).hexdigest()[:8]
    return f"{name[: _IAM_NAME_MAX - len(digest) - 1].rstrip('-')}-{digest}"


def role_path(config: Config) -> str:
    """The role's IAM path, the one of the cluster's other roles (``/fsdp-sdk/<region>/<cluster>/``)."""
    from fsdp_sdk.aws.checkpoint_plan import role_path as cluster_role_path

    return cluster_role_path(config.cluster.name, config.cluster.region)


def controller_source() -> str:
    """The controller's script, as shipped in its ConfigMap."""
    return resources.files("fsdp_sdk").joinpath(_SCRIPT).read_text(encoding="utf-8")


def _schedule(minutes: int) -> str:
    return "* * * * *" if minutes < 10 else "*/5 * * * *"


def _queue_access(namespace: str) -> list[dict[str, Any]]:
    """The ClusterRole (and its binding) that lets the controller set fsdp-sdk's Kueue ClusterQueue's quota to 0
    when it scales the nodes to 0 (:func:`fsdp_sdk.idle_controller.zero_quota`); harmless without Kueue."""
    from fsdp_sdk.k8s.queue import CLUSTER_QUEUE

    name = f"{CONTROLLER_NAME}-queue"
    meta = {"name": name, "labels": dict(_LABELS)}
    return [
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "ClusterRole",
            "metadata": meta,
            "rules": [
                {
                    "apiGroups": ["kueue.x-k8s.io"],
                    "resources": ["clusterqueues"],
                    "resourceNames": [CLUSTER_QUEUE],
                    "verbs": ["get", "update"],
                }
            ],
        },
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "ClusterRoleBinding",
            "metadata": dict(meta),
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": name},
            "subjects": [{"kind": "ServiceAccount", "name": CONTROLLER_NAME, "namespace": namespace}],
        },
    ]


def render_idle_controller(config: Config) -> list[dict[str, Any]]:
    """The controller's Kubernetes objects (pure); none when ``cluster.idle_scale_to_zero_minutes`` is unset."""
    from fsdp_sdk.pins import pin

    minutes = config.cluster.idle_scale_to_zero_minutes
    if not minutes:
        return []
    namespace = config.job.namespace

    def meta(name: str) -> dict[str, Any]:
        return {"name": name, "namespace": namespace, "labels": dict(_LABELS)}

    env = {
        "CLUSTER": config.cluster.name,
        "NODEGROUP": gpu_nodegroup(config),
        "AWS_REGION": config.cluster.region,
        "IDLE_MINUTES": str(minutes),
        "NAMESPACE": namespace,
        "STATE_CONFIGMAP": STATE_CONFIGMAP,
    }
    container = {
        "name": "controller",
        "image": pin("idle-controller").image_ref(),
        "command": ["python3", f"/controller/{_SCRIPT}"],
        "env": [{"name": k, "value": v} for k, v in env.items()],
        "resources": {"requests": {"cpu": "50m", "memory": "64Mi"}, "limits": {"memory": "256Mi"}},
        "volumeMounts": [{"name": "controller", "mountPath": "/controller", "readOnly": True}],
        "securityContext": {"allowPrivilegeEscalation": False, "runAsNonRoot": True, "runAsUser": 65534},
    }
    pod = {
        "serviceAccountName": CONTROLLER_NAME,
        "restartPolicy": "Never",
        "nodeSelector": {"fsdp-sdk.io/node-role": "system"},
        "containers": [container],
        "volumes": [{"name": "controller", "configMap": {"name": _SCRIPT_CONFIGMAP}}],
    }
    return [
        {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": meta(CONTROLLER_NAME)},
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "Role",
            "metadata": meta(CONTROLLER_NAME),
            "rules": [
                {"apiGroups": [""], "resources": ["pods"], "verbs": ["get", "list"]},
                {
                    "apiGroups": [""],
                    "resources": ["configmaps"],
                    "resourceNames": [STATE_CONFIGMAP],
                    "verbs": ["get", "update"],
                },
            ],
        },
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "RoleBinding",
            "metadata": meta(CONTROLLER_NAME),
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": CONTROLLER_NAME},
            "subjects": [{"kind": "ServiceAccount", "name": CONTROLLER_NAME, "namespace": namespace}],
        },
        *_queue_access(namespace),
        {
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "metadata": meta(_SCRIPT_CONFIGMAP),
            "data": {_SCRIPT: controller_source()},
        },
        {"apiVersion": "v1", "kind": "ConfigMap", "metadata": meta(STATE_CONFIGMAP)},
        {
            "apiVersion": "batch/v1",
            "kind": "CronJob",
            "metadata": meta(CONTROLLER_NAME),
            "spec": {
                "schedule": _schedule(minutes),
                "concurrencyPolicy": "Forbid",
                "successfulJobsHistoryLimit": 1,
                "failedJobsHistoryLimit": 3,
                "jobTemplate": {
                    "spec": {
                        "backoffLimit": 0,
                        "activeDeadlineSeconds": 120,
                        "ttlSecondsAfterFinished": 3600,
                        "template": {"metadata": {"labels": dict(_LABELS)}, "spec": pod},
                    }
                },
            },
        },
    ]


# ---------------------------------------------------------------------------------------------- AWS identity
# Acting (AWS calls): install_identity at ``up``, remove_identity at ``down``; identity_steps says both in the plan.


def identity_steps(config: Config) -> list[str]:
    """What ``up`` does for the controller's AWS identity, as the plan shows it (pure)."""
    name, namespace = role_name(config), config.job.namespace
    return [
        f"create (or keep, when tagged for this cluster) the IAM role {name} under {role_path(config)}: only "
        f"EKS Pod Identity may assume it; its one inline policy {POLICY_NAME} allows {' and '.join(ACTIONS)} on "
        f"node group {gpu_nodegroup(config)} of cluster {config.cluster.name}",
        f"associate the role with the ServiceAccount {namespace}/{CONTROLLER_NAME} (EKS Pod Identity; 'down' "
        "deletes the role, its policy and the association)",
    ]


def _owned(role: Mapping[str, Any], config: Config) -> bool:
    """Whether ``role`` is the one fsdp-sdk made for this cluster in this region: its tag and its path say so."""
    from fsdp_sdk.aws.checkpoint_plan import OWNER_TAG

    tags = {t["Key"]: t["Value"] for t in role.get("Tags") or []}
    return tags.get(OWNER_TAG) == config.cluster.name and role.get("Path") == role_path(config)


def _not_yet_visible(error: BaseException) -> bool:
    """EKS refusing a role IAM has not propagated yet (IAM is eventually consistent)."""
    return getattr(error, "code", "") == "InvalidParameterException" and "does not exist" in str(error)


def install_identity(
    config: Config,
    *,
    clients: Mapping[str, Any] | None = None,
    progress: Callable[[str], None] | None = None,
    sleep: Callable[[float], None] = time.sleep,
) -> str:
    """Give the controller's service account its AWS identity (idempotent); returns the role's ARN.

    Creates the IAM role (:func:`role_name`, under :func:`role_path`, tagged for the cluster) with the Pod Identity
    trust policy, or keeps it when it is this cluster's (tag and path); sets its one inline policy
    (:func:`scaling_policy`), enables the ``eks-pod-identity-agent`` add-on when missing, and associates the role
    with the service account, trying again with a bounded backoff (:data:`ASSOCIATION_DELAYS`) while EKS does not
    see a role created a moment ago.

    :param clients: ``{"eks", "iam", "sts"}`` boto3 clients instead of the shared ones.
    :param sleep: waits between tries of the association (tests pass one that records).
    :raises BackendError: the role's name is taken by a role fsdp-sdk did not make for this cluster, the service
        account is associated with another role, or the new role stayed invisible to EKS; an AWS call failed
        (access denied names the IAM action).
    """
    from fsdp_sdk.aws.addons import POD_IDENTITY_TRUST_POLICY
    from fsdp_sdk.aws.checkpoint_plan import OWNER_TAG
    from fsdp_sdk.aws.session import aws_client, aws_errors, error_code
    from fsdp_sdk.errors import BackendError

    say = progress or (lambda line: None)
    region, cluster = config.cluster.region, config.cluster.name
    given = clients or {}
    eks = given.get("eks") or aws_client("eks", region)
    iam = given.get("iam") or aws_client("iam", region)
    sts = given.get("sts") or aws_client("sts", region)
    name = role_name(config)
    with aws_errors("sts", "find the AWS account"):
        account = str(sts.get_caller_identity()["Account"])
    from fsdp_sdk.aws.iam_roles import ensure_role

    arn, _ = ensure_role(
        iam,
        name=name,
        path=role_path(config),
        trust_policy=POD_IDENTITY_TRUST_POLICY,
        description=f"fsdp-sdk idle scale-to-zero controller of EKS cluster {cluster} in {region}",
        tags=[{"Key": OWNER_TAG, "Value": cluster}, {"Key": "fsdp-sdk.io/region", "Value": region}],
        owned=lambda role: _owned(role, config),
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
    namespace = config.job.namespace
    with aws_errors("eks", f"list the EKS Pod Identity associations of {namespace}/{CONTROLLER_NAME}"):
        found = eks.list_pod_identity_associations(
            clusterName=cluster, namespace=namespace, serviceAccount=CONTROLLER_NAME
        )["associations"]
    for association in found:
        with aws_errors("eks", "describe the EKS Pod Identity association"):
            current = eks.describe_pod_identity_association(
                clusterName=cluster, associationId=association["associationId"]
            )["association"]
        if current.get("roleArn") != arn:
            raise BackendError(
                f"ServiceAccount {namespace}/{CONTROLLER_NAME} of cluster {cluster} is associated with the IAM role "
                f"{current.get('roleArn')} (Pod Identity association {current['associationId']}); delete that "
                f"association ('aws eks delete-pod-identity-association --cluster-name {cluster} --association-id "
                f"{current['associationId']}') and run 'fsdp-sdk up' again"
            )
        return arn
    for attempt, delay in enumerate((*ASSOCIATION_DELAYS, None)):
        try:
            with aws_errors("eks", "associate the idle controller's role with its service account"):
                eks.create_pod_identity_association(
                    clusterName=cluster,
                    namespace=namespace,
                    serviceAccount=CONTROLLER_NAME,
                    roleArn=arn,
                    tags={OWNER_TAG: cluster},
                )
            break
        except BackendError as error:
            if not _not_yet_visible(error):
                raise
            if delay is None:
                waited = sum(ASSOCIATION_DELAYS)
                raise BackendError(
                    f"EKS does not see the IAM role {name} after {attempt + 1} tries over {waited:g} s (IAM is "
                    "eventually consistent); run 'fsdp-sdk up' again in a minute"
                ) from error
            say(f"IAM role {name} is not visible to EKS yet; trying again in {delay:g} s")
            sleep(delay)
    say(f"associated IAM role {name} with service account {namespace}/{CONTROLLER_NAME}")
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
    if not _owned(role, config):
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
