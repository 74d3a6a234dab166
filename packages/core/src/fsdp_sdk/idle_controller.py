"""The idle scale-to-zero controller: scales a cluster's GPU node group to 0 after a while without a training pod.

This file runs inside the cluster, as the script of a CronJob that ``fsdp-sdk up --idle-scale-to-zero MINUTES``
installs (:mod:`fsdp_sdk.k8s.idle` ships it in a ConfigMap): it needs the Python standard library and boto3 only,
and imports nothing of fsdp-sdk. Each run (one a minute or so) it

1. lists the pods of the jobs' namespace (its Role may read pods, and write only its own state ConfigMap);
2. reads the GPU node group (``eks:DescribeNodegroup``);
3. decides (:func:`decide`): a training pod pending or running marks the cluster busy now; otherwise the idle time
   runs from the last time one was seen, kept in the state ConfigMap across runs (and across jobs);
4. after ``IDLE_MINUTES`` without one, sets the node group's desired and minimum size to 0
   (``eks:UpdateNodegroupConfig``: the only change its IAM role allows, on that node group only), and the quota
   of fsdp-sdk's Kueue ClusterQueue to 0 when the cluster has one (``scale`` sizes it again).

``fsdp-sdk launch`` and ``fsdp-sdk run`` scale the nodes back up when they find them at 0.

Settings come from the environment: ``CLUSTER``, ``NODEGROUP``, ``AWS_REGION``, ``IDLE_MINUTES``, ``NAMESPACE``,
``STATE_CONFIGMAP``.
"""

from __future__ import annotations

import datetime as dt
import json
import os
import ssl
import sys
import urllib.request
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Protocol

#: Labels that mark a pod of a training job: the Training Operator's (PyTorchJob), JobSet's (TrainJob), ours.
TRAINING_LABELS = ("training.kubeflow.org/job-name", "jobset.sigs.k8s.io/jobset-name", "fsdp-sdk.io/run-id")
#: The key of the state ConfigMap that holds when a training pod was last seen (ISO 8601, UTC).
LAST_BUSY_KEY = "last-busy"
#: fsdp-sdk's Kueue ClusterQueue (``fsdp_sdk.k8s.queue.CLUSTER_QUEUE``; this file imports nothing of fsdp-sdk).
CLUSTER_QUEUE_PATH = "/apis/kueue.x-k8s.io/v1beta2/clusterqueues/fsdp-sdk"
_ACTIVE_PHASES = ("Pending", "Running")


def is_training_pod(pod: Mapping[str, Any]) -> bool:
    """Whether ``pod`` (a Kubernetes Pod as JSON) belongs to a training job and is pending or running."""
    labels = (pod.get("metadata") or {}).get("labels") or {}
    phase = (pod.get("status") or {}).get("phase")
    deleting = (pod.get("metadata") or {}).get("deletionTimestamp") is not None
    return any(label in labels for label in TRAINING_LABELS) and phase in _ACTIVE_PHASES and not deleting


@dataclass(frozen=True)
class Decision:
    """What one run of the controller decided.

    :param action: ``busy`` (a training pod), ``idle`` (waiting), ``scale-to-zero`` or ``at-zero``.
    :param last_busy: when a training pod was last seen (kept for the next run).
    :param idle_s: seconds without one so far.
    """

    action: str
    last_busy: dt.datetime
    idle_s: float


def decide(
    pods: Iterable[Mapping[str, Any]],
    *,
    desired: int,
    last_busy: dt.datetime | None,
    now: dt.datetime,
    idle_minutes: float,
) -> Decision:
    """The controller's decision, from what it sees (pure).

    With no record yet (first run), the idle time starts now: a cluster is never scaled down sooner than
    ``idle_minutes`` after the controller was installed.
    """
    if any(is_training_pod(pod) for pod in pods):
        return Decision("busy", now, 0.0)
    since = last_busy or now
    idle_s = max(0.0, (now - since).total_seconds())
    if desired == 0:
        return Decision("at-zero", since, idle_s)
    if idle_s >= idle_minutes * 60:
        return Decision("scale-to-zero", since, idle_s)
    return Decision("idle", since, idle_s)


class ClusterView(Protocol):
    """What the controller reads and writes in Kubernetes."""

    def pods(self) -> list[dict[str, Any]]:
        """The pods of the jobs' namespace."""
        ...

    def read_state(self) -> dict[str, str]:
        """The state ConfigMap's data."""
        ...

    def write_state(self, data: Mapping[str, str]) -> None:
        """Replace the state ConfigMap's data."""
        ...


def run_once(
    cluster_view: ClusterView,
    eks: Any,
    *,
    cluster: str,
    nodegroup: str,
    idle_minutes: float,
    now: dt.datetime | None = None,
) -> Decision:
    """One run: look, decide, scale the node group to 0 when it has been idle long enough, keep the state."""
    now = now or dt.datetime.now(dt.timezone.utc)
    state = cluster_view.read_state()
    recorded = state.get(LAST_BUSY_KEY)
    last_busy = dt.datetime.fromisoformat(recorded) if recorded else None
    group = eks.describe_nodegroup(clusterName=cluster, nodegroupName=nodegroup)["nodegroup"]
    scaling = group.get("scalingConfig") or {}
    decision = decide(
        cluster_view.pods(),
        desired=int(scaling.get("desiredSize") or 0),
        last_busy=last_busy,
        now=now,
        idle_minutes=idle_minutes,
    )
    if decision.action == "scale-to-zero":
        eks.update_nodegroup_config(
            clusterName=cluster,
            nodegroupName=nodegroup,
            scalingConfig={"minSize": 0, "desiredSize": 0, "maxSize": max(1, int(scaling.get("maxSize") or 1))},
        )
        zero_queue = getattr(cluster_view, "zero_queue_quota", None)
        if zero_queue is not None:
            zero_queue()
    cluster_view.write_state(
        {
            LAST_BUSY_KEY: decision.last_busy.isoformat(),
            "last-action": decision.action,
            "last-run": now.isoformat(),
        }
    )
    return decision


def zero_quota(cluster_queue: Mapping[str, Any]) -> dict[str, Any]:
    """``cluster_queue`` with every flavor's nominal quota 0: nothing is admitted while the nodes are gone."""
    updated = json.loads(json.dumps(cluster_queue))
    for group in (updated.get("spec") or {}).get("resourceGroups") or []:
        for flavor in group.get("flavors") or []:
            for resource in flavor.get("resources") or []:
                resource["nominalQuota"] = "0"
    return updated


class InCluster:
    """The Kubernetes API from inside a pod: its service account's token and CA, the standard library's HTTP.

    :param server: the API server (default: ``https://$KUBERNETES_SERVICE_HOST:$KUBERNETES_SERVICE_PORT``).
    :param token: the bearer token (default: the service account's).
    :param ca_file: the CA bundle (default: the service account's; ``None`` with a plain ``http://`` server).
    """

    _SA = "/var/run/secrets/kubernetes.io/serviceaccount"

    def __init__(
        self,
        namespace: str,
        configmap: str,
        *,
        server: str | None = None,
        token: str | None = None,
        ca_file: str | None = _SA + "/ca.crt",
    ) -> None:
        self.namespace, self.configmap = namespace, configmap
        host, port = os.environ.get("KUBERNETES_SERVICE_HOST", ""), os.environ.get("KUBERNETES_SERVICE_PORT", "443")
        self.server = (server or f"https://{host}:{port}").rstrip("/")
        if token is None:
            with open(self._SA + "/token", encoding="utf-8") as file:
                token = file.read().strip()
        self.token = token
        self.context = ssl.create_default_context(cafile=ca_file) if self.server.startswith("https") else None

    def _call(self, method: str, path: str, body: Mapping[str, Any] | None = None) -> dict[str, Any]:
        data = json.dumps(body).encode() if body is not None else None
        request = urllib.request.Request(self.server + path, data=data, method=method)
        request.add_header("Authorization", f"Bearer {self.token}")
        request.add_header("Accept", "application/json")
        if data is not None:
            request.add_header("Content-Type", "application/json")
        with urllib.request.urlopen(request, context=self.context, timeout=30) as response:
            answer: dict[str, Any] = json.loads(response.read() or b"{}")
            return answer

    def pods(self) -> list[dict[str, Any]]:
        """The pods of the namespace."""
        return list(self._call("GET", f"/api/v1/namespaces/{self.namespace}/pods").get("items") or [])

    def read_state(self) -> dict[str, str]:
        """The state ConfigMap's data (empty when it has none)."""
        found = self._call("GET", f"/api/v1/namespaces/{self.namespace}/configmaps/{self.configmap}")
        return dict(found.get("data") or {})

    def zero_queue_quota(self) -> bool:
        """Set fsdp-sdk's Kueue ClusterQueue's quota to 0 (:func:`zero_quota`); ``False`` when there is none."""
        import urllib.error

        try:
            found = self._call("GET", CLUSTER_QUEUE_PATH)
        except urllib.error.HTTPError as error:
            if error.code == 404:  # no Kueue, or no queue of fsdp-sdk's
                return False
            raise
        self._call("PUT", CLUSTER_QUEUE_PATH, zero_quota(found))
        return True

    def write_state(self, data: Mapping[str, str]) -> None:
        """Merge ``data`` into the state ConfigMap."""
        path = f"/api/v1/namespaces/{self.namespace}/configmaps/{self.configmap}"
        found = self._call("GET", path)
        found["data"] = {**(found.get("data") or {}), **data}
        self._call("PUT", path, found)


def main() -> int:
    """The CronJob's entry point: one run with the settings of the environment; one line of output."""
    import boto3  # in the image (the AWS Lambda Python base image ships it)

    env = os.environ
    view = InCluster(env["NAMESPACE"], env["STATE_CONFIGMAP"])
    eks = boto3.client("eks", region_name=env["AWS_REGION"])
    decision = run_once(
        view, eks, cluster=env["CLUSTER"], nodegroup=env["NODEGROUP"], idle_minutes=float(env["IDLE_MINUTES"])
    )
    print(
        json.dumps(
            {
                "action": decision.action,
                "idle_s": round(decision.idle_s),
                "last_busy": decision.last_busy.isoformat(),
                "nodegroup": env["NODEGROUP"],
            }
        )
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
