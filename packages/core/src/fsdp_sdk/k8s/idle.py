"""The idle scale-to-zero controller's objects and the names of its AWS identity (pure: configuration in, plain data
out; :mod:`fsdp_sdk.aws.idle_identity` makes and deletes the identity).

``cluster.idle_scale_to_zero_minutes`` (``up --idle-scale-to-zero MINUTES``) makes ``up`` install, in the jobs'
namespace:

* a ConfigMap holding the controller's script (:mod:`fsdp_sdk.idle_controller`, standard library + boto3), and an
  empty one it keeps its state in (when a training pod was last seen);
* a ServiceAccount whose Role may get and list pods, and get and update that one state ConfigMap, and whose
  ClusterRole may get and update fsdp-sdk's Kueue ClusterQueue (its quota goes to 0 with the nodes): nothing else;
* a CronJob that runs the script every minute on a system node, in the pinned AWS Lambda Python image (boto3 in it).

Its AWS identity comes through EKS Pod Identity (:func:`fsdp_sdk.aws.idle_identity.install_identity`): an IAM role only that service account
can assume, whose one inline policy (:func:`scaling_policy`) allows ``eks:DescribeNodegroup`` and
``eks:UpdateNodegroupConfig`` on this cluster's GPU node group and nothing else. The role is named for the region
and the cluster (:func:`role_name`), lives under the cluster's IAM path and carries its owner tag: ``up`` adopts
only such a role, the plan says so (:func:`identity_steps`), ``down`` deletes it with its policy and association
(:func:`fsdp_sdk.aws.idle_identity.remove_identity`).
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from importlib import resources
from typing import TYPE_CHECKING, Any

from fsdp_sdk.aws.arn import partition
from fsdp_sdk.aws.checkpoint_plan import OWNER_TAG
from fsdp_sdk.aws.checkpoint_plan import role_path as cluster_role_path

if TYPE_CHECKING:
    from fsdp_sdk.config import Config

__all__ = [
    "ACTIONS",
    "CONTROLLER_NAME",
    "POLICY_NAME",
    "STATE_CONFIGMAP",
    "gpu_nodegroup",
    "identity_steps",
    "nodegroup_arn",
    "owned_role",
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
# What the plan says of it and which role is this cluster's; the calls are fsdp_sdk.aws.idle_identity's.


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


def owned_role(role: Mapping[str, Any], config: Config) -> bool:
    """Whether ``role`` is the one fsdp-sdk made for this cluster in this region: its tag and its path say so."""
    tags = {t["Key"]: t["Value"] for t in role.get("Tags") or []}
    return tags.get(OWNER_TAG) == config.cluster.name and role.get("Path") == role_path(config)
