"""Kueue: a queue for the jobs of a shared cluster.

``prereqs install --queue`` installs Kueue (:func:`kueue`, pinned as ``pin("kueue")``: its release's
``manifests.yaml``, server-side applied with ``kubectl``) and then applies what :func:`render_queue` renders
(pure):

* a ``ResourceFlavor`` for the GPU node group: the nodes labelled with its instance type;
* a ``ClusterQueue`` sized to that node group: its GPUs, EFA interfaces, cpu and memory, and its node count as
  the ``pods`` quota (one worker pod per node), ``StrictFIFO`` so a job keeps its place;
* a ``LocalQueue`` in ``job.namespace`` pointing at it.

Kueue manages a kind only when its integration is on: v0.19.2's default manager configuration
(``config/components/manager/controller_manager_config.yaml``) enables ``trainer.kubeflow.org/trainjob`` but not
``kubeflow.org/pytorchjob``, so ``prereqs install --queue`` adds both (:func:`with_frameworks`) and restarts
Kueue's controller.

A job carries the LocalQueue's name in the ``kueue.x-k8s.io/queue-name`` label (:func:`queue_labels`; Kueue's
webhook then suspends it until its Workload is admitted: ``pkg/controller/jobframework/defaults.go``,
``ApplyDefaultForSuspend``, kubernetes-sigs/kueue v0.19.2). Reading back (:func:`queue_state`) uses Kueue's
``Workload`` objects: ``QuotaReserved`` / ``Admitted`` conditions, and the position among the pending
Workloads of the same ClusterQueue in Kueue's order (priority, then creation time, then UID:
``pkg/cache/queue/cluster_queue.go``, ``queueOrderingFunc``). :func:`check_fits` refuses at submit a job that
needs more than the ClusterQueue's quota at all, naming the quota.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from fsdp_sdk.errors import ConfigError
from fsdp_sdk.pins import pin

if TYPE_CHECKING:
    from fsdp_sdk.config import Config
    from fsdp_sdk.instance_types import InstanceType
    from fsdp_sdk.k8s.kube import Kube

__all__ = [
    "CLUSTER_QUEUE",
    "FLAVOR",
    "KUEUE_API",
    "KUEUE_DEPLOYMENT",
    "KUEUE_NAMESPACE",
    "LOCAL_QUEUE",
    "QUEUE_LABEL",
    "QueueState",
    "check_fits",
    "job_queue",
    "kueue_manifests_url",
    "queue_labels",
    "queue_state",
    "queue_states",
    "quota",
    "render_queue",
    "scale_quota",
    "update_quota",
]

#: The API version of Kueue's objects (v0.19's storage version; v1beta1 is deprecated).
KUEUE_API = "kueue.x-k8s.io/v1beta2"
#: The label that puts a job in a LocalQueue.
QUEUE_LABEL = "kueue.x-k8s.io/queue-name"
KUEUE_NAMESPACE = "kueue-system"
KUEUE_DEPLOYMENT = "kueue-controller-manager"
#: Names of fsdp-sdk's ResourceFlavor, ClusterQueue and LocalQueue.
FLAVOR = "fsdp-sdk-gpu"
CLUSTER_QUEUE = "fsdp-sdk"
LOCAL_QUEUE = "fsdp-sdk"
#: Kueue's manager configuration (``config/components/manager``, kustomize prefix ``kueue-``) and its key.
KUEUE_CONFIGMAP = "kueue-manager-config"
KUEUE_CONFIG_KEY = "controller_manager_config.yaml"
#: The integrations fsdp-sdk's jobs need: v0.19.2's default configuration enables TrainJob but leaves PyTorchJob
#: commented out (``config/components/manager/controller_manager_config.yaml``).
FRAMEWORKS = ("kubeflow.org/pytorchjob", "trainer.kubeflow.org/trainjob")
#: ``job.queue`` value that submits outside any queue.
NO_QUEUE = "no-queue"
_EFA = "vpc.amazonaws.com/efa"
_INSTANCE_LABEL = "node.kubernetes.io/instance-type"
_MANAGED = {"app.kubernetes.io/part-of": "fsdp-sdk", "app.kubernetes.io/managed-by": "fsdp-sdk"}


def kueue_manifests_url(version: str | None = None) -> str:
    """The release's ``manifests.yaml`` (what Kueue's README installs with ``kubectl apply --server-side -f``)."""
    version = version or pin("kueue").version
    return f"https://github.com/kubernetes-sigs/kueue/releases/download/{version}/manifests.yaml"


def with_frameworks(text: str, frameworks: Sequence[str] = FRAMEWORKS) -> str | None:
    """Kueue's manager configuration ``text`` with ``frameworks`` in ``integrations.frameworks`` (pure); ``None``
    when they are all there already.

    :raises ValueError: ``text`` is not a Kueue ``Configuration``.
    """
    import yaml

    data = yaml.safe_load(text) or {}
    if not isinstance(data, dict) or data.get("kind") != "Configuration":
        raise ValueError("not a Kueue Configuration")
    enabled = data.setdefault("integrations", {}).setdefault("frameworks", [])
    missing = [f for f in frameworks if f not in enabled]
    if not missing:
        return None
    enabled.extend(missing)
    return str(yaml.safe_dump(data, sort_keys=False))


def quota(instance: InstanceType, nodes: int) -> dict[str, str]:
    """The ClusterQueue's nominal quota for ``nodes`` nodes of ``instance``: what that many workers of a whole
    node each request (:func:`~fsdp_sdk.k8s.render._resources`), and one pod per node."""
    from fsdp_sdk.aws.eks import worker_cpu_memory

    cpu, memory = worker_cpu_memory(instance, instance.gpu_count)
    gib = int(memory.removesuffix("Gi"))
    amounts = {
        "cpu": str(int(cpu) * nodes),
        "memory": f"{gib * nodes}Gi",
        instance.accelerator_resource: str(instance.gpu_count * nodes),
        "pods": str(nodes),
    }
    if instance.efa_interfaces:
        amounts[_EFA] = str(instance.efa_interfaces * nodes)
    return amounts


def render_queue(config: Config, instance: InstanceType, *, nodes: int | None = None) -> list[dict[str, Any]]:
    """The ResourceFlavor, ClusterQueue and LocalQueue of the GPU node group (pure).

    :param nodes: the node count the quota is sized to (default ``cluster.nodes``).
    """
    nodes = config.cluster.nodes if nodes is None else nodes
    amounts = quota(instance, nodes)
    flavor = {
        "apiVersion": KUEUE_API,
        "kind": "ResourceFlavor",
        "metadata": {"name": FLAVOR, "labels": dict(_MANAGED)},
        "spec": {"nodeLabels": {_INSTANCE_LABEL: instance.name}},
    }
    cluster_queue = {
        "apiVersion": KUEUE_API,
        "kind": "ClusterQueue",
        "metadata": {"name": CLUSTER_QUEUE, "labels": dict(_MANAGED)},
        "spec": {
            "namespaceSelector": {},
            "queueingStrategy": "StrictFIFO",
            "resourceGroups": [
                {
                    "coveredResources": list(amounts),
                    "flavors": [
                        {
                            "name": FLAVOR,
                            "resources": [{"name": name, "nominalQuota": value} for name, value in amounts.items()],
                        }
                    ],
                }
            ],
        },
    }
    local_queue = {
        "apiVersion": KUEUE_API,
        "kind": "LocalQueue",
        "metadata": {"name": LOCAL_QUEUE, "namespace": config.job.namespace, "labels": dict(_MANAGED)},
        "spec": {"clusterQueue": CLUSTER_QUEUE},
    }
    return [flavor, cluster_queue, local_queue]


def queue_labels(queue: str | None) -> dict[str, str]:
    """The label that puts a job in LocalQueue ``queue`` (none for no queue)."""
    return {QUEUE_LABEL: queue} if queue and queue != NO_QUEUE else {}


def job_queue(config: Config, kube: Kube | None) -> str | None:
    """The LocalQueue a job of ``config`` goes to: ``job.queue``, else fsdp-sdk's LocalQueue when the cluster has
    it (Kueue installed with ``prereqs install --queue``), else none."""
    queue = getattr(config.job, "queue", None)
    if queue:
        return None if queue == NO_QUEUE else queue
    if kube is None or not _served(kube, "LocalQueue"):
        return None
    return LOCAL_QUEUE if kube.get(KUEUE_API, "LocalQueue", LOCAL_QUEUE, config.job.namespace) else None


def _served(kube: Kube, kind: str) -> bool:
    from fsdp_sdk.errors import KubernetesError

    try:
        kube.resource(KUEUE_API, kind)
    except KubernetesError:
        return False
    return True


_QUANTITY = re.compile(r"^([0-9.]+)([a-zA-Z]*)$")
_SUFFIX = {"": 1, "m": 1e-3, "k": 1e3, "M": 1e6, "G": 1e9, "T": 1e12, "Ki": 2**10, "Mi": 2**20, "Gi": 2**30,
           "Ti": 2**40}  # fmt: skip


def _amount(value: Any) -> float:
    match = _QUANTITY.match(str(value).strip())
    if not match or match.group(2) not in _SUFFIX:
        raise ValueError(f"not a Kubernetes quantity: {value!r}")
    return float(match.group(1)) * _SUFFIX[match.group(2)]


def job_requests(job: Mapping[str, Any]) -> dict[str, float]:
    """What a rendered PyTorchJob or TrainJob asks of the queue: its pods' requests summed, and its pods."""
    total: dict[str, float] = {}

    def add(requests: Mapping[str, Any], count: int) -> None:
        for name, value in requests.items():
            total[name] = total.get(name, 0.0) + _amount(value) * count
        total["pods"] = total.get("pods", 0.0) + count

    spec = job.get("spec") or {}
    if job.get("kind") == "TrainJob":
        trainer = spec.get("trainer") or {}
        add((trainer.get("resourcesPerNode") or {}).get("requests") or {}, int(trainer.get("numNodes") or 1))
        return total
    for replica in (spec.get("pytorchReplicaSpecs") or {}).values():
        count = int((replica or {}).get("replicas") or 1)
        requests: dict[str, float] = {}
        for container in (((replica or {}).get("template") or {}).get("spec") or {}).get("containers") or []:
            for name, value in ((container.get("resources") or {}).get("requests") or {}).items():
                requests[name] = requests.get(name, 0.0) + _amount(value)
        add(requests, count)
    return total


def _nominal(cluster_queue: Mapping[str, Any]) -> dict[str, tuple[str, float, str]]:
    """``resource -> (flavor, amount, as written)``, summed over the ClusterQueue's flavors (largest kept)."""
    found: dict[str, tuple[str, float, str]] = {}
    for group in (cluster_queue.get("spec") or {}).get("resourceGroups") or []:
        for flavor in group.get("flavors") or []:
            for resource in flavor.get("resources") or []:
                amount = _amount(resource.get("nominalQuota", 0))
                if resource["name"] not in found or amount > found[resource["name"]][1]:
                    found[resource["name"]] = (flavor.get("name", "?"), amount, str(resource.get("nominalQuota")))
    return found


def check_fits(kube: Kube, job: Mapping[str, Any], queue: str) -> dict[str, Any]:
    """Refuse a job that can never be admitted by ``queue``'s ClusterQueue; else what it queues behind.

    :returns: ``{"cluster_queue", "admitted", "pending", "full"}``: the jobs the ClusterQueue has admitted and
        holds pending now, and whether the new job waits (pending ones first, or no free quota).
    :raises ConfigError: the LocalQueue is missing, or the job needs more of a resource than the quota holds
        (the message names the resource, the quota and the ClusterQueue).
    """
    namespace = (job.get("metadata") or {}).get("namespace") or "default"
    local = kube.get(KUEUE_API, "LocalQueue", queue, namespace)
    if local is None:
        raise ConfigError(
            "job.queue",
            f"LocalQueue {namespace}/{queue} does not exist",
            "run 'fsdp-sdk prereqs install --queue', or set job.queue to an existing LocalQueue (no-queue: no queue)",
        )
    name = (local.get("spec") or {}).get("clusterQueue") or ""
    cluster_queue = kube.get(KUEUE_API, "ClusterQueue", name) or {}
    nominal = _nominal(cluster_queue)
    needs = job_requests(job)
    first = ("pods", "nvidia.com/gpu", "aws.amazon.com/neuron", _EFA)  # the node count, then the devices
    for resource, amount in sorted(
        needs.items(), key=lambda item: (item[0] not in first, first.index(item[0]) if item[0] in first else 0)
    ):
        if amount <= 0:
            continue
        flavor, limit, written = nominal.get(resource, ("", 0.0, "0"))
        if amount > limit:
            what = "pods (one per node)" if resource == "pods" else resource
            raise ConfigError(
                "job.num_workers",
                f"the job needs {_show(amount)} {what}, more than ClusterQueue {name}'s quota of {written}"
                + (f" (flavor {flavor})" if flavor else " (the resource is not in its quota)"),
                "submit it on fewer nodes (--workers), or scale the cluster up ('fsdp-sdk scale --nodes N' "
                "raises the quota)",
            )
    status = cluster_queue.get("status") or {}
    used: dict[str, float] = {}
    for flavor_usage in status.get("flavorsReservation") or []:
        for resource in flavor_usage.get("resources") or []:
            used[resource["name"]] = used.get(resource["name"], 0.0) + _amount(resource.get("total", 0))
    pending = int(status.get("pendingWorkloads") or 0)
    admitted = int(status.get("reservingWorkloads") or status.get("admittedWorkloads") or 0)
    no_room = any(used.get(r, 0.0) + a > nominal.get(r, ("", 0.0, ""))[1] for r, a in needs.items() if a > 0)
    return {"cluster_queue": name, "admitted": admitted, "pending": pending, "full": bool(pending or no_room)}


def _show(amount: float) -> str:
    return str(int(amount)) if amount == int(amount) else f"{amount:g}"


@dataclass(frozen=True)
class QueueState:
    """Where a job stands in Kueue: ``Queued`` (with its 1-based ``position`` among the pending Workloads of its
    ClusterQueue), ``Admitted`` (quota reserved and admitted), or ``Finished``."""

    state: str
    queue: str
    cluster_queue: str = ""
    workload: str = ""
    position: int | None = None
    message: str = ""

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready form (``job status --json``'s ``queue``)."""
        return {
            "state": self.state,
            "queue": self.queue,
            "cluster_queue": self.cluster_queue,
            "workload": self.workload,
            "position": self.position,
            "message": self.message,
        }


def _true(workload: Mapping[str, Any], kind: str) -> bool:
    return any(
        c.get("type") == kind and c.get("status") == "True"
        for c in (workload.get("status") or {}).get("conditions") or []
    )


def _order(workload: Mapping[str, Any]) -> tuple[int, str, str]:
    meta = workload.get("metadata") or {}
    priority = int((workload.get("spec") or {}).get("priority") or 0)
    return -priority, str(meta.get("creationTimestamp") or ""), str(meta.get("uid") or "")


def _owner(workload: Mapping[str, Any]) -> tuple[str, str, str] | None:
    """``(namespace, kind, name)`` of the job that owns ``workload``."""
    meta = workload.get("metadata") or {}
    for ref in meta.get("ownerReferences") or []:
        if ref.get("controller"):
            return str(meta.get("namespace") or ""), str(ref.get("kind") or ""), str(ref.get("name") or "")
    return None


def queue_states(kube: Kube, jobs: Iterable[Mapping[str, Any]]) -> dict[tuple[str, str], QueueState]:
    """The Kueue state of every job in ``jobs`` that carries the queue label, by ``(kind, name)``; none when
    the cluster does not serve Kueue's Workloads."""
    labelled = [j for j in jobs if ((j.get("metadata") or {}).get("labels") or {}).get(QUEUE_LABEL)]
    if not labelled or not _served(kube, "Workload"):
        return {}
    workloads = kube.list(KUEUE_API, "Workload")
    mine = {_owner(w): w for w in workloads if _owner(w) is not None}
    pending: dict[str, list[Mapping[str, Any]]] = {}
    queues: dict[tuple[str, str], str] = {}
    for workload in workloads:
        if _true(workload, "QuotaReserved") or _true(workload, "Finished"):
            continue
        meta = workload.get("metadata") or {}
        local = (meta.get("namespace") or "", (workload.get("spec") or {}).get("queueName") or "")
        if local not in queues:
            found = kube.get(KUEUE_API, "LocalQueue", local[1], local[0]) or {}
            queues[local] = (found.get("spec") or {}).get("clusterQueue") or ""
        pending.setdefault(queues[local], []).append(workload)
    for waiting in pending.values():
        waiting.sort(key=_order)
    states: dict[tuple[str, str], QueueState] = {}
    for job in labelled:
        meta = job.get("metadata") or {}
        key = (str(job.get("kind") or ""), str(meta.get("name") or ""))
        queue = meta["labels"][QUEUE_LABEL]
        owned = mine.get((str(meta.get("namespace") or ""), *key))
        if owned is None:
            states[key] = QueueState("Queued", queue, message="waiting for Kueue to make its Workload")
            continue
        wl_meta = owned.get("metadata") or {}
        admission = (owned.get("status") or {}).get("admission") or {}
        if _true(owned, "Finished"):
            states[key] = QueueState("Finished", queue, admission.get("clusterQueue", ""), wl_meta.get("name", ""))
        elif _true(owned, "QuotaReserved") or _true(owned, "Admitted"):
            states[key] = QueueState("Admitted", queue, admission.get("clusterQueue", ""), wl_meta.get("name", ""))
        else:
            cluster_queue = queues.get((wl_meta.get("namespace") or "", queue), "")
            waiting = pending.get(cluster_queue, [])
            position = next(
                (i + 1 for i, w in enumerate(waiting) if (w.get("metadata") or {}).get("uid") == wl_meta.get("uid")),
                None,
            )
            message = next(
                (
                    str(c.get("message") or "")
                    for c in (owned.get("status") or {}).get("conditions") or []
                    if c.get("type") == "QuotaReserved"
                ),
                "",
            )
            states[key] = QueueState("Queued", queue, cluster_queue, wl_meta.get("name", ""), position, message)
    return states


def queue_state(kube: Kube, job: Mapping[str, Any]) -> QueueState | None:
    """The Kueue state of one job (``None`` when it is in no queue)."""
    meta = job.get("metadata") or {}
    return queue_states(kube, [job]).get((str(job.get("kind") or ""), str(meta.get("name") or "")))


def queued_line(found: Mapping[str, Any], queue: str) -> str:
    """What ``job submit`` says of a job that waits (:func:`check_fits`'s answer)."""
    ahead = int(found["admitted"]) + int(found["pending"])
    return (
        f"queued behind {ahead} job{'s' if ahead != 1 else ''} in ClusterQueue {found['cluster_queue']} "
        f"(LocalQueue {queue}: {found['admitted']} admitted, {found['pending']} pending); Kueue admits it when "
        "quota frees"
    )


def update_quota(kube: Kube, config: Config, instance: InstanceType, nodes: int) -> dict[str, Any] | None:
    """Size fsdp-sdk's ClusterQueue to ``nodes`` (``scale``): server-side apply of its rendered quota; nothing
    when the cluster has no such ClusterQueue."""
    if not _served(kube, "ClusterQueue") or kube.get(KUEUE_API, "ClusterQueue", CLUSTER_QUEUE) is None:
        return None
    return kube.apply(render_queue(config, instance, nodes=nodes)[1])


def queue_status(kube: Kube, config: Config, problems: list[str]) -> dict[str, Any] | None:
    """``prereqs status``'s Kueue part: its controller, fsdp-sdk's ClusterQueue (quota, admitted and pending
    Workloads) and the LocalQueue of ``job.namespace``; what is missing goes to ``problems``. ``None`` when the
    cluster does not serve Kueue's kinds (no queue installed: nothing is wrong)."""
    if not _served(kube, "ClusterQueue"):
        return None
    install = "run 'fsdp-sdk prereqs install --queue'"
    deployment = kube.get("apps/v1", "Deployment", KUEUE_DEPLOYMENT, KUEUE_NAMESPACE)
    ready = int(((deployment or {}).get("status") or {}).get("readyReplicas") or 0)
    if deployment is None:
        problems.append(f"Kueue's controller {KUEUE_NAMESPACE}/{KUEUE_DEPLOYMENT} is missing: {install}")
    elif not ready:
        problems.append(f"Kueue's controller {KUEUE_NAMESPACE}/{KUEUE_DEPLOYMENT} has no ready replica")
    cluster_queue = kube.get(KUEUE_API, "ClusterQueue", CLUSTER_QUEUE)
    local = kube.get(KUEUE_API, "LocalQueue", LOCAL_QUEUE, config.job.namespace)
    if cluster_queue is None:
        problems.append(f"the ClusterQueue {CLUSTER_QUEUE} is missing: {install}")
    if local is None:
        problems.append(f"the LocalQueue {config.job.namespace}/{LOCAL_QUEUE} is missing: {install}")
    found = (cluster_queue or {}).get("status") or {}
    return {
        "controller_ready_replicas": ready,
        "cluster_queue": CLUSTER_QUEUE if cluster_queue is not None else None,
        "quota": {name: written for name, (_, _, written) in _nominal(cluster_queue or {}).items()},
        "admitted": int(found.get("admittedWorkloads") or 0),
        "pending": int(found.get("pendingWorkloads") or 0),
        "local_queue": f"{config.job.namespace}/{LOCAL_QUEUE}" if local is not None else None,
    }


def scale_quota(
    connect: Callable[[], Kube],
    config: Config,
    instance: InstanceType,
    nodes: int,
    *,
    progress: Callable[[str], None],
) -> dict[str, Any] | None:
    """After ``scale``: size fsdp-sdk's ClusterQueue to ``nodes`` when the cluster has one (:func:`update_quota`).
    Without a kubeconfig (``connect`` raises :class:`~fsdp_sdk.errors.ConfigError`) nothing is tried; a cluster it
    cannot reach is said in a progress line, not raised: the nodes have been scaled already.

    :param connect: the connection to the cluster (called once).
    """
    from fsdp_sdk.errors import FsdpSdkError

    try:
        kube = connect()
    except ConfigError:
        return None  # no connection to the cluster configured: no queue of ours to know of
    try:
        updated = update_quota(kube, config, instance, nodes)
    except FsdpSdkError as error:
        progress(f"warning: Kueue's ClusterQueue {CLUSTER_QUEUE} was not resized to {nodes} nodes: {error}")
        return None
    if updated is not None:
        progress(f"ClusterQueue {CLUSTER_QUEUE}: quota sized to {nodes} nodes")
    return updated


def queue_objects(objects: Sequence[Mapping[str, Any]]) -> list[Mapping[str, Any]]:
    """The Kueue objects among ``objects``."""
    return [o for o in objects if str(o.get("apiVersion", "")).startswith("kueue.x-k8s.io/")]
