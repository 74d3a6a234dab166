"""A stand-in for Kueue's controller on the loopback API server: what Kueue v0.19.2 does to queued jobs.

Read from kubernetes-sigs/kueue at tag v0.19.2 (commit 8eab68778fc1b52affe165fdf5af29d1e9b4f3cb):

* ``pkg/controller/jobframework/defaults.go`` (``ApplyDefaultForSuspend``): the jobs' webhook suspends a job that
  carries ``kueue.x-k8s.io/queue-name`` (PyTorchJob ``spec.runPolicy.suspend``, TrainJob ``spec.suspend``);
* ``pkg/controller/jobframework/reconciler.go``: one ``Workload`` per job, owned by it (controller reference),
  named by ``workload_names.go`` (``GetWorkloadNameForOwnerWithGVK``: ``<kind>-<name>-<hash>``), ``spec.queueName``
  from the label, one pod set per replica type; the job is unsuspended once its Workload is admitted, and the
  Workload gets ``Finished`` when the job ends (its quota is released);
* ``pkg/cache/queue/cluster_queue.go`` (``queueOrderingFunc``): pending Workloads in order of priority, creation
  time, then UID; ``StrictFIFO`` admits only the head;
* ``pkg/scheduler/flavorassigner/flavorassigner.go``: a ClusterQueue that covers ``pods`` counts a pod set's pods
  as a request; a Workload fits when usage + request <= the flavor's nominal quota for every resource, and one
  that can never fit stays pending with ``QuotaReserved`` False ("insufficient quota ... > maximum capacity");
* ``pkg/scheduler/scheduler.go`` / ``pkg/workload/admission.go``: admission sets ``status.admission`` and the
  ``QuotaReserved`` and ``Admitted`` conditions (no admission checks);
* ClusterQueue / LocalQueue status: ``pendingWorkloads``, ``reservingWorkloads``, ``admittedWorkloads`` and the
  flavors' reservation.

Not a thread: a test calls :meth:`KueueStandIn.reconcile` where Kueue's controllers would have run, so nothing
waits or sleeps.
"""

from __future__ import annotations

import hashlib
from typing import Any

from fsdp_sdk.k8s.queue import KUEUE_API, QUEUE_LABEL

from .fake_apiserver import FakeApiServer

_JOBS = (("kubeflow.org/v1", "PyTorchJob"), ("trainer.kubeflow.org/v1alpha1", "TrainJob"))
_UNITS = {"": 1, "m": 1e-3, "Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40, "k": 1e3, "M": 1e6, "G": 1e9}


def _quantity(value: Any) -> float:
    text = str(value)
    for unit in sorted(_UNITS, key=len, reverse=True):
        if unit and text.endswith(unit):
            return float(text[: -len(unit)]) * _UNITS[unit]
    return float(text)


def _ended(job: dict) -> bool:
    return any(
        c.get("type") in ("Succeeded", "Failed", "Complete") and c.get("status") == "True"
        for c in (job.get("status") or {}).get("conditions") or []
    )


def _pod_sets(job: dict) -> list[dict]:
    """The Workload's pod sets (``name``, ``count``, ``template``): one per replica type, as Kueue's integrations
    build them (a TrainJob's from ``trainer.resourcesPerNode`` over its runtime's ``node`` job)."""
    spec = job.get("spec") or {}
    if job["kind"] == "TrainJob":
        trainer = spec.get("trainer") or {}
        container = {"name": "node", "image": trainer.get("image", ""), "resources": trainer.get("resourcesPerNode")}
        template = {"spec": {"containers": [container]}}
        return [{"name": "node", "count": int(trainer.get("numNodes") or 1), "template": template}]
    return [
        {"name": kind.lower(), "count": int(replica.get("replicas") or 1), "template": replica["template"]}
        for kind, replica in (spec.get("pytorchReplicaSpecs") or {}).items()
    ]


def _pod_requests(pod_set: dict) -> dict[str, float]:
    requests: dict[str, float] = {}
    for container in pod_set["template"]["spec"].get("containers") or []:
        for name, value in ((container.get("resources") or {}).get("requests") or {}).items():
            requests[name] = requests.get(name, 0.0) + _quantity(value)
    return requests


class KueueStandIn:
    """Kueue's job reconciler and scheduler over ``server``'s objects (see the module's sources)."""

    def __init__(self, server: FakeApiServer) -> None:
        self.server = server

    # the job side ------------------------------------------------------------------------------------

    def _suspend(self, job: dict, suspend: bool) -> None:
        spec = job["spec"]
        where = spec if job["kind"] == "TrainJob" else spec.setdefault("runPolicy", {})
        if bool(where.get("suspend")) != suspend:
            where["suspend"] = suspend
            self.server.put(job)

    def _workload_name(self, job: dict) -> str:
        digest = hashlib.sha1(f"{job['kind']}/{job['metadata']['name']}/{job['metadata']['uid']}".encode()).hexdigest()
        return f"{job['kind'].lower()}-{job['metadata']['name']}-{digest[:5]}"

    def _workloads(self) -> list[dict]:
        return self.server.objects("Workload")

    def _sync_jobs(self) -> None:
        by_owner = {
            ref["uid"]: w
            for w in self._workloads()
            for ref in w["metadata"].get("ownerReferences") or []
            if ref.get("controller")
        }
        for api_version, kind in _JOBS:
            for job in self.server.objects(kind):
                queue = (job["metadata"].get("labels") or {}).get(QUEUE_LABEL)
                if not queue:
                    continue
                workload = by_owner.get(job["metadata"]["uid"])
                if workload is None:
                    self._suspend(job, True)  # the webhook's default
                    self.server.put(
                        {
                            "apiVersion": KUEUE_API,
                            "kind": "Workload",
                            "metadata": {
                                "name": self._workload_name(job),
                                "namespace": job["metadata"]["namespace"],
                                "labels": {"kueue.x-k8s.io/job-uid": job["metadata"]["uid"]},
                                "ownerReferences": [
                                    {
                                        "apiVersion": api_version,
                                        "kind": kind,
                                        "name": job["metadata"]["name"],
                                        "uid": job["metadata"]["uid"],
                                        "controller": True,
                                        "blockOwnerDeletion": True,
                                    }
                                ],
                            },
                            "spec": {"queueName": queue, "podSets": _pod_sets(job)},
                        }
                    )
                elif _ended(job) and not self._true(workload, "Finished"):
                    self._condition(workload, "Finished", "True", "JobFinished", "Job finished successfully")
                elif self._true(workload, "Admitted"):
                    self._suspend(job, False)

    # the scheduler side ------------------------------------------------------------------------------

    @staticmethod
    def _true(workload: dict, kind: str) -> bool:
        return any(
            c["type"] == kind and c["status"] == "True" for c in (workload.get("status") or {}).get("conditions") or []
        )

    def _condition(self, workload: dict, kind: str, status: str, reason: str, message: str) -> None:
        current = dict(workload.get("status") or {})
        conditions = [c for c in current.get("conditions") or [] if c["type"] != kind]
        conditions.append(
            {
                "type": kind,
                "status": status,
                "reason": reason,
                "message": message,
                "lastTransitionTime": "2026-12-06T00:00:00Z",
            }
        )
        current["conditions"] = conditions
        self.server.set_status(
            KUEUE_API, "Workload", workload["metadata"]["name"], current, workload["metadata"]["namespace"]
        )
        workload["status"] = current

    def _cluster_queue_of(self, workload: dict) -> str:
        local = self.server.get(
            KUEUE_API, "LocalQueue", workload["spec"]["queueName"], workload["metadata"]["namespace"]
        )
        return (local or {}).get("spec", {}).get("clusterQueue", "")

    @staticmethod
    def _requests(workload: dict, covered: set[str]) -> dict[str, float]:
        total: dict[str, float] = {}
        for pod_set in workload["spec"]["podSets"]:
            requests = _pod_requests(pod_set)
            if "pods" in covered:
                requests["pods"] = 1
            for name, amount in requests.items():
                total[name] = total.get(name, 0.0) + amount * pod_set["count"]
        return total

    def _schedule(self, cluster_queue: dict) -> None:
        name = cluster_queue["metadata"]["name"]
        group = cluster_queue["spec"]["resourceGroups"][0]
        flavor = group["flavors"][0]
        nominal = {r["name"]: _quantity(r["nominalQuota"]) for r in flavor["resources"]}
        covered = set(group["coveredResources"])
        mine = [w for w in self._workloads() if self._cluster_queue_of(w) == name]
        live = [w for w in mine if not self._true(w, "Finished")]
        used: dict[str, float] = {}
        for workload in live:
            if self._true(workload, "QuotaReserved"):
                for resource, amount in self._requests(workload, covered).items():
                    used[resource] = used.get(resource, 0.0) + amount
        pending = sorted(
            (w for w in live if not self._true(w, "QuotaReserved")),
            key=lambda w: (-(w["spec"].get("priority") or 0), w["metadata"]["creationTimestamp"], w["metadata"]["uid"]),
        )
        for workload in pending:  # StrictFIFO: the head blocks those behind it
            wanted = self._requests(workload, covered)
            never = [r for r, a in wanted.items() if a > nominal.get(r, 0.0)]
            short = [r for r, a in wanted.items() if used.get(r, 0.0) + a > nominal.get(r, 0.0)]
            if never or short:
                resource = (never or short)[0]
                self._condition(
                    workload,
                    "QuotaReserved",
                    "False",
                    "Pending",
                    f"couldn't assign flavors to pod set {workload['spec']['podSets'][0]['name']}: insufficient quota "
                    f"for {resource} in flavor {flavor['name']}, request > maximum capacity"
                    if never
                    else f"couldn't assign flavors to pod set {workload['spec']['podSets'][0]['name']}: insufficient "
                    f"unused quota for {resource} in flavor {flavor['name']}",
                )
                break
            for resource, amount in wanted.items():
                used[resource] = used.get(resource, 0.0) + amount
            status = dict(workload.get("status") or {})
            status["admission"] = {
                "clusterQueue": name,
                "podSetAssignments": [
                    {
                        "name": p["name"],
                        "count": p["count"],
                        "flavors": {r: flavor["name"] for r in covered if r in _pod_requests(p) or r == "pods"},
                    }
                    for p in workload["spec"]["podSets"]
                ],
            }
            workload["status"] = status
            self._condition(
                workload, "QuotaReserved", "True", "QuotaReserved", f"Quota reserved in ClusterQueue {name}"
            )
            self._condition(workload, "Admitted", "True", "Admitted", "The workload is admitted")
        self._write_queue_status(cluster_queue, flavor["name"], used)

    def _write_queue_status(self, cluster_queue: dict, flavor: str, used: dict[str, float]) -> None:
        name = cluster_queue["metadata"]["name"]
        live = [w for w in self._workloads() if self._cluster_queue_of(w) == name and not self._true(w, "Finished")]
        admitted = [w for w in live if self._true(w, "Admitted")]
        pending = len(live) - len(admitted)
        resources = [{"name": r, "total": str(int(a)) if a == int(a) else str(a)} for r, a in used.items()]
        self.server.set_status(
            KUEUE_API,
            "ClusterQueue",
            name,
            {
                "pendingWorkloads": pending,
                "reservingWorkloads": len(admitted),
                "admittedWorkloads": len(admitted),
                "flavorsReservation": [{"name": flavor, "resources": resources}],
                "flavorsUsage": [{"name": flavor, "resources": resources}],
            },
            "",
        )
        for local in self.server.objects("LocalQueue"):
            if local["spec"].get("clusterQueue") != name:
                continue
            ns, queue = local["metadata"]["namespace"], local["metadata"]["name"]
            here = [w for w in live if w["metadata"]["namespace"] == ns and w["spec"]["queueName"] == queue]
            admitted_here = sum(1 for w in here if self._true(w, "Admitted"))
            self.server.set_status(
                KUEUE_API,
                "LocalQueue",
                queue,
                {
                    "pendingWorkloads": len(here) - admitted_here,
                    "reservingWorkloads": admitted_here,
                    "admittedWorkloads": admitted_here,
                },
                ns,
            )

    def reconcile(self) -> None:
        """One pass of Kueue's controllers: Workloads for new jobs, finished ones released, admission in order,
        admitted jobs unsuspended, the queues' status."""
        self._sync_jobs()
        for cluster_queue in self.server.objects("ClusterQueue"):
            self._schedule(cluster_queue)
        self._sync_jobs()  # unsuspend what was just admitted
