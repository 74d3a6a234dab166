"""The idle scale-to-zero controller's objects (pure) and its AWS identity (acting).

``cluster.idle_scale_to_zero_minutes`` (``up --idle-scale-to-zero MINUTES``) makes ``up`` install, in the jobs'
namespace:

* a ConfigMap holding the controller's script (:mod:`fsdp_sdk.idle_controller`, standard library + boto3), and an
  empty one it keeps its state in (when a training pod was last seen);
* a ServiceAccount whose Role may get and list pods, and get and update that one state ConfigMap: nothing else;
* a CronJob that runs the script every minute on a system node, in the pinned AWS Lambda Python image (boto3 in it).

Its AWS identity comes through EKS Pod Identity (:func:`install_identity`): an IAM role only that service account
can assume, whose one inline policy (:func:`scaling_policy`) allows ``eks:DescribeNodegroup`` and
``eks:UpdateNodegroupConfig`` on this cluster's GPU node group and nothing else.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from importlib import resources
from typing import TYPE_CHECKING, Any

from fsdp_sdk.aws.arn import partition

if TYPE_CHECKING:
    from fsdp_sdk.config import Config

__all__ = [
    "CONTROLLER_NAME",
    "STATE_CONFIGMAP",
    "gpu_nodegroup",
    "install_identity",
    "nodegroup_arn",
    "render_idle_controller",
    "role_name",
    "scaling_policy",
]

CONTROLLER_NAME = "fsdp-sdk-idle"
STATE_CONFIGMAP = "fsdp-sdk-idle-state"
_SCRIPT_CONFIGMAP = "fsdp-sdk-idle-controller"
_SCRIPT = "idle_controller.py"
_LABELS = {"app.kubernetes.io/name": CONTROLLER_NAME, "app.kubernetes.io/managed-by": "fsdp-sdk"}
#: The actions the controller's IAM role allows, and nothing else.
ACTIONS = ("eks:DescribeNodegroup", "eks:UpdateNodegroupConfig")


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
    """The controller's IAM role name (at most 64 characters)."""
    return f"fsdp-sdk-idle-{config.cluster.name}"[:64]


def controller_source() -> str:
    """The controller's script, as shipped in its ConfigMap."""
    return resources.files("fsdp_sdk").joinpath(_SCRIPT).read_text(encoding="utf-8")


def _schedule(minutes: int) -> str:
    return "* * * * *" if minutes < 10 else "*/5 * * * *"


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


def install_identity(
    config: Config,
    *,
    clients: Mapping[str, Any] | None = None,
    progress: Callable[[str], None] | None = None,
) -> str:
    """Give the controller's service account its AWS identity (idempotent); returns the role's ARN.

    Creates (or updates) the IAM role with the Pod Identity trust policy and its one inline policy
    (:func:`scaling_policy`), enables the ``eks-pod-identity-agent`` add-on when missing, and associates the role
    with the service account.

    :param clients: ``{"eks", "iam", "sts"}`` boto3 clients instead of the shared ones.
    :raises AwsError: an AWS call failed (access denied names the IAM action).
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
    with aws_errors("iam", f"create the IAM role {name}"):
        try:
            arn = str(iam.get_role(RoleName=name)["Role"]["Arn"])
        except Exception as error:
            if error_code(error) != "NoSuchEntity":
                raise
            arn = str(
                iam.create_role(
                    RoleName=name,
                    AssumeRolePolicyDocument=json.dumps(POD_IDENTITY_TRUST_POLICY),
                    Description=f"fsdp-sdk idle scale-to-zero controller of EKS cluster {cluster}",
                    Tags=[{"Key": "fsdp-sdk:cluster", "Value": cluster}],
                )["Role"]["Arn"]
            )
            say(f"created IAM role {name} (EKS Pod Identity of the idle controller)")
        iam.put_role_policy(
            RoleName=name, PolicyName="scale-gpu-nodegroup", PolicyDocument=json.dumps(scaling_policy(config, account))
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
    with aws_errors("eks", "associate the idle controller's role with its service account"):
        found = eks.list_pod_identity_associations(
            clusterName=cluster, namespace=namespace, serviceAccount=CONTROLLER_NAME
        )["associations"]
        if not found:
            eks.create_pod_identity_association(
                clusterName=cluster, namespace=namespace, serviceAccount=CONTROLLER_NAME, roleArn=arn
            )
            say(f"associated IAM role {name} with service account {namespace}/{CONTROLLER_NAME}")
    return arn
