"""A job's pods and its leader, read from the API server: what the job client and the log follower share.

The leader is the pod whose trainer printed ``master_addr=`` at the head of its log (the
trainer prints it at start, on the rank that hosts the rendezvous's master).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from fsdp_sdk.k8s.render import JOB_NAME_LABEL
from fsdp_sdk.runs import is_leader_line

if TYPE_CHECKING:
    from fsdp_sdk.k8s.kube import Kube

__all__ = ["JOB_APIS", "LOG_DRAIN_S", "LOG_HEAD_BYTES", "find_leader", "job_api", "job_pods"]

#: How many bytes of each pod's log are read to find the ``master_addr=`` line.
LOG_HEAD_BYTES = 64 * 1024
#: Seconds the log follower may take to write the last lines once the job has ended.
LOG_DRAIN_S = 30.0

#: ``job.api`` -> (apiVersion, kind, the label its pods carry with the job's name).
JOB_APIS: dict[str, tuple[str, str, str]] = {
    "pytorchjob": ("kubeflow.org/v1", "PyTorchJob", JOB_NAME_LABEL),
    "trainjob": ("trainer.kubeflow.org/v1alpha1", "TrainJob", "jobset.sigs.k8s.io/jobset-name"),
}


def job_api(api: str) -> tuple[str, str, str]:
    """``(apiVersion, kind, pod label)`` of the jobs of ``api`` (``pytorchjob`` / ``trainjob``)."""
    return JOB_APIS[api]


def job_pods(kube: Kube, namespace: str, name: str, api: str) -> list[dict[str, Any]]:
    """The pods of job ``namespace/name``, by the operator's job-name label."""
    _, _, label = job_api(api)
    return kube.list("v1", "Pod", namespace, label_selector=f"{label}={name}")


def find_leader(kube: Kube, namespace: str, name: str, api: str) -> str | None:
    """The name of the job's pod whose log head has the trainer's ``master_addr=`` line; ``None`` while none has."""
    for pod in job_pods(kube, namespace, name, api):
        pod_name = pod["metadata"]["name"]
        if (pod.get("status") or {}).get("phase") == "Pending":
            continue
        head = kube.pod_log(pod_name, namespace, limit_bytes=LOG_HEAD_BYTES)
        if any(is_leader_line(line) for line in head.splitlines()):
            return pod_name
    return None
