"""The controllers of the rehearsal cluster that are not the project's: device plugins, the scheduler, and the
status the DaemonSet and Deployment controllers report.

:class:`Nodes` runs in a thread woken by every change on the loopback API server (no polling): each Node's
allocatable gets the GPUs and EFA devices of its instance type only where a device plugin pod can run on it
(:func:`rehearsal.scheduling.advertised`); DaemonSets report how many nodes they run on; a Deployment is ready
when its pods fit a node; a pod without a node is bound to the first node it fits, or stays ``Pending`` with the
scheduler's ``Unschedulable`` condition.
"""

from __future__ import annotations

import copy
import threading
from typing import Any

from eksctl.eksctl_in_cluster import NODE_TYPES
from k8s.fake_apiserver import FakeApiServer

from .scheduling import advertised, place, requests, unschedulable_reason


def devices(node: dict[str, Any]) -> dict[str, int]:
    """What the node's hardware has for the device plugins to advertise (by its instance type)."""
    instance = (node["metadata"].get("labels") or {}).get("node.kubernetes.io/instance-type", "")
    _, _, gpus, efa = NODE_TYPES.get(instance, (0, 0, 0, 0))
    return {"nvidia.com/gpu": gpus, "vpc.amazonaws.com/efa": efa}


class Nodes:
    """The controllers above, on ``server``; a context manager (the thread stops on exit)."""

    def __init__(self, server: FakeApiServer) -> None:
        self.server = server
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="rehearsal-nodes", daemon=True)
        self.errors: list[BaseException] = []

    def __enter__(self) -> Nodes:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        with self.server._changed:
            self.server._changed.notify_all()
        self._thread.join(timeout=30)
        assert not self._thread.is_alive(), "the rehearsal's node controller did not stop"
        if self.errors:
            raise self.errors[0]

    def _run(self) -> None:
        seen = -1
        while not self._stop.is_set():
            with self.server._changed:
                while len(self.server._events) == seen and not self._stop.is_set():
                    self.server._changed.wait()
                seen = len(self.server._events)
            if self._stop.is_set():
                return
            try:
                self.reconcile()
            except BaseException as error:  # surfaced when the fixture ends
                self.errors.append(error)
                return

    def reconcile(self) -> None:
        """One pass of every controller (idempotent: writes only what changed)."""
        server = self.server
        daemonsets = server.objects("DaemonSet")
        nodes = server.objects("Node")
        for node in nodes:
            status = copy.deepcopy(node.get("status") or {})
            allocatable = dict(status.get("allocatable") or {})
            capacity = dict(status.get("capacity") or {})
            served = advertised(node, daemonsets, devices(node))
            for resource in ("nvidia.com/gpu", "vpc.amazonaws.com/efa"):
                for table in (allocatable, capacity):
                    if resource in served:
                        table[resource] = str(served[resource])
                    else:
                        table.pop(resource, None)
            if allocatable != status.get("allocatable") or capacity != status.get("capacity"):
                status.update(allocatable=allocatable, capacity=capacity)
                server.set_status("v1", "Node", node["metadata"]["name"], status, namespace="")
        nodes = server.objects("Node")
        for daemonset in daemonsets:
            pod = daemonset["spec"]["template"]["spec"]
            count = sum(unschedulable_reason(pod, n) is None for n in nodes)
            wanted = {
                "desiredNumberScheduled": count,
                "currentNumberScheduled": count,
                "numberReady": count,
                "numberAvailable": count,
                "updatedNumberScheduled": count,
                "numberMisscheduled": 0,
                "observedGeneration": daemonset["metadata"].get("generation", 1),
            }
            if (daemonset.get("status") or {}) != wanted:
                server.set_status(
                    "apps/v1", "DaemonSet", daemonset["metadata"]["name"], wanted, daemonset["metadata"]["namespace"]
                )
        for deployment in server.objects("Deployment"):
            pod = deployment["spec"]["template"]["spec"]
            fits = place(pod, nodes, {})[0] is not None
            replicas = int(deployment["spec"].get("replicas", 1))
            ready = replicas if fits else 0
            wanted = {
                "replicas": replicas,
                "readyReplicas": ready,
                "availableReplicas": ready,
                "updatedReplicas": replicas,
                "observedGeneration": deployment["metadata"].get("generation", 1),
            }
            if not fits:
                wanted = {
                    "replicas": replicas,
                    "unavailableReplicas": replicas,
                    "observedGeneration": deployment["metadata"].get("generation", 1),
                }
            if (deployment.get("status") or {}) != wanted:
                server.set_status(
                    "apps/v1", "Deployment", deployment["metadata"]["name"], wanted, deployment["metadata"]["namespace"]
                )
        self._schedule(nodes)

    def _schedule(self, nodes: list[dict[str, Any]]) -> None:
        server = self.server
        pods = server.objects("Pod")
        used: dict[str, dict[str, float]] = {}
        for pod in pods:
            where = (pod.get("spec") or {}).get("nodeName")
            if where and (pod.get("status") or {}).get("phase") not in ("Succeeded", "Failed"):
                for resource, amount in requests(pod["spec"]).items():
                    used.setdefault(where, {})[resource] = used.get(where, {}).get(resource, 0.0) + amount
        for pod in pods:
            spec = pod.get("spec") or {}
            if spec.get("nodeName") or "containers" not in spec:
                continue
            if (pod.get("status") or {}).get("phase") not in (None, "Pending"):
                continue  # placed and started by someone else (a test's kubelet)
            name, message = place(spec, nodes, used)
            meta = pod["metadata"]
            if name is None:
                condition = {"type": "PodScheduled", "status": "False", "reason": "Unschedulable", "message": message}
                if (pod.get("status") or {}).get("conditions") != [condition]:
                    server.set_status(
                        "v1",
                        "Pod",
                        meta["name"],
                        {"phase": "Pending", "conditions": [condition]},
                        meta.get("namespace", "default"),
                    )
                continue
            bound = copy.deepcopy(pod)
            bound["spec"]["nodeName"] = name
            bound["status"] = {"phase": "Pending", "conditions": [{"type": "PodScheduled", "status": "True"}]}
            server.put(bound)
            for resource, amount in requests(spec).items():
                used.setdefault(name, {})[resource] = used.get(name, {}).get(resource, 0.0) + amount
