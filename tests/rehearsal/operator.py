"""The Training Operator and the nodes' kubelets of the rehearsal cluster: PyTorchJob workers run as processes.

:class:`TrainingCluster` (a thread woken by every change on the loopback API server):

* as the Training Operator (kubeflow/training-operator ``pkg/controller.v1/pytorch``): for each PyTorchJob, one pod
  per worker replica, ``<job>-worker-<i>``, labelled ``training.kubeflow.org/job-name``, ``replica-type``,
  ``replica-index``, owned by the job, with the ``PET_*`` variables of its ``elasticPolicy`` (``envvar.go``,
  ``elastic.go``); a deleted pod of a running job is created again; the job's conditions follow its pods
  (``Created``, ``Running``, ``Succeeded`` when every worker succeeded, ``Failed`` when one failed);
* as the kubelet of the node a pod was bound to (:class:`rehearsal.nodes.Nodes` binds them): the container's
  command runs in its image's environment (the ``docker`` stand-in's record: an image never pushed is
  ``ErrImagePull``), its volume mounts directories of that node (:class:`k8s.kubelet.LocalNode`'s mapping), its
  env from the pod (Secrets resolved), the cluster's DNS names of the etcd service resolved to the real etcd the
  test runs, AWS reached through the role the pods are given (moto's endpoint and credentials); its output is the
  pod's log, its exit the pod's phase.

A pod deleted while its container runs is stopped as the kubelet stops it (:mod:`k8s.container_init`): SIGTERM to
the container's main process (torchrun, which passes it to its workers), SIGKILL to every process still in the
container once the pod's ``terminationGracePeriodSeconds`` (default 30) have passed; the operator creates the pod
again, under the same name, only once the old one's processes are gone, as on a cluster, where the deleted pod
stays ``Terminating`` (its name taken) until the kubelet has killed its containers (the operator's
``ReconcilePods``, kubeflow/training-operator@6372886 ``pkg/controller.v1/common/pod.go``, creates a pod for
each replica index that has none). Each stopped container is recorded in :attr:`TrainingCluster.stopped`.
"""

from __future__ import annotations

import base64
import copy
import os
import signal
import subprocess
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

from k8s import container_init
from k8s.fake_apiserver import FakeApiServer, _Log
from k8s.kubelet import LocalNode

from .docker_standin import images

JOB_LABEL = "training.kubeflow.org/job-name"
#: the pod's terminationGracePeriodSeconds when it sets none (the Kubernetes default)
DEFAULT_GRACE_S = 30


class Running:
    """One container the kubelet stand-in runs: its init process (:mod:`k8s.container_init`) and its log pump."""

    def __init__(self, process: subprocess.Popen[bytes], uid: str, grace_s: float) -> None:
        self.process = process
        self.uid = uid
        self.grace_s = grace_s
        self.pump: threading.Thread | None = None


class Stopped:
    """A container the kubelet stopped because its pod was deleted: what it held, and how it ended."""

    def __init__(self, pod: str, pids: set[int], killed: set[int], code: int) -> None:
        #: the pod's name
        self.pod = pod
        #: the container's processes when the stop began (its init, torchrun, the trainers)
        self.pids = pids
        #: those still there after the grace period, SIGKILLed (empty: it stopped on SIGTERM)
        self.killed = killed
        #: the container's exit status
        self.code = code

    def alive(self) -> set[int]:
        """The container's processes still alive (pids reused since would show here too: checked right after)."""
        return {pid for pid in self.pids if container_init._alive(pid)}


class TrainingCluster:
    """See the module docstring.

    :param server: the loopback API server.
    :param root: where the nodes' disks go.
    :param docker_state: the ``docker`` stand-in's state directory (which image is which environment).
    :param etcd: the real etcd's URL the cluster's ``etcd`` service stands for.
    """

    def __init__(self, server: FakeApiServer, root: Path, docker_state: Path, etcd: str) -> None:
        self.server = server
        self.root = root
        self.docker_state = docker_state
        self.etcd = etcd.removeprefix("http://")
        self.containers: dict[tuple[str, str], Running] = {}
        #: the containers stopped because their pod was deleted, in order
        self.stopped: list[Stopped] = []
        self.runs: dict[str, int] = {}
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self._thread = threading.Thread(target=self._loop, name="rehearsal-operator", daemon=True)
        self.errors: list[BaseException] = []
        self._delete_when: Callable[[str], bool] | None = None
        #: the pods deleted by :meth:`delete_pod_when`: (the pod, the pod whose line triggered it, the line)
        self.deleted: list[tuple[str, str, str]] = []

    def delete_pod_when(self, predicate: Callable[[str], bool]) -> None:
        """Once a worker's container prints a line matching ``predicate``, delete the job's first other worker pod
        (as ``kubectl delete pod`` does: gracefully, see the module docstring)."""
        self._delete_when = predicate

    def __enter__(self) -> TrainingCluster:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        with self.server._changed:
            self.server._changed.notify_all()
        self._thread.join(timeout=60)
        with self._lock:
            running = list(self.containers.values())
        for container in running:  # the cluster goes away: its nodes' containers with it
            if container.process.poll() is None:
                container_init.kill_container(container.process.pid)
            container.process.wait(timeout=60)
            if container.pump is not None:
                container.pump.join(timeout=60)
        if self.errors:
            raise self.errors[0]

    def _loop(self) -> None:
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
            except BaseException as error:
                self.errors.append(error)
                return

    # ------------------------------------------------------------------ operator

    def reconcile(self) -> None:
        pods = {
            (p["metadata"].get("namespace", "default"), p["metadata"]["name"]): p for p in self.server.objects("Pod")
        }
        with self._lock:
            gone = [
                (key, container)
                for key, container in self.containers.items()
                if (pods.get(key) or {}).get("metadata", {}).get("uid") != container.uid
            ]
        for key, container in gone:  # the pod was deleted: the kubelet stops its container before it is gone
            self._stop_container(key, container)
            with self._lock:
                del self.containers[key]
        for job in self.server.objects("PyTorchJob"):
            self._job(job, pods)
        for pod in pods.values():
            if (pod.get("spec") or {}).get("nodeName") and (pod.get("status") or {}).get("phase") == "Pending":
                self._start(pod)

    def _job(self, job: dict[str, Any], pods: dict[tuple[str, str], dict[str, Any]]) -> None:
        meta = job["metadata"]
        namespace, name = meta.get("namespace", "default"), meta["name"]
        conditions = [c["type"] for c in (job.get("status") or {}).get("conditions") or []]
        if "Succeeded" in conditions or "Failed" in conditions:
            return
        replica = job["spec"]["pytorchReplicaSpecs"]["Worker"]
        workers = [f"{name}-worker-{i}" for i in range(int(replica.get("replicas", 1)))]
        mine = [pods.get((namespace, w)) for w in workers]
        for index, (worker, pod) in enumerate(zip(workers, mine, strict=True)):
            if pod is None:
                self._create_pod(job, worker, index)
        phases = [(p.get("status") or {}).get("phase") for p in mine if p is not None]
        wanted = ["Created"]
        if len(phases) == len(workers) and all(p in ("Running", "Succeeded") for p in phases):
            wanted.append("Running")
        if len(phases) == len(workers) and all(p == "Succeeded" for p in phases):
            wanted = ["Created", "Running", "Succeeded"]
        elif "Failed" in phases:
            wanted = ["Created", "Running", "Failed"]
        if wanted != conditions:
            self.server.set_status(
                "kubeflow.org/v1",
                "PyTorchJob",
                name,
                {
                    "conditions": [
                        {"type": t, "status": "True", "reason": t, "message": f"job {t.lower()}"} for t in wanted
                    ]
                },
                namespace,
            )

    def _create_pod(self, job: dict[str, Any], worker: str, index: int) -> None:
        meta = job["metadata"]
        spec = job["spec"]
        template = copy.deepcopy(spec["pytorchReplicaSpecs"]["Worker"]["template"])
        elastic = spec.get("elasticPolicy") or {}
        worker0 = f"{meta['name']}-worker-0"
        pet = {
            "PET_NPROC_PER_NODE": str(spec.get("nprocPerNode", "auto")),
            "PET_NNODES": f"{elastic.get('minReplicas', 1)}:{elastic.get('maxReplicas', 1)}",
            "PET_RDZV_BACKEND": elastic.get("rdzvBackend", "c10d"),
            "PET_RDZV_ENDPOINT": f"{elastic.get('rdzvHost', worker0)}:{elastic.get('rdzvPort', 29400)}",
            "PET_RDZV_ID": elastic.get("rdzvId", meta["name"]),
            "PET_MAX_RESTARTS": str(elastic.get("maxRestarts", 3)),
            "PYTHONUNBUFFERED": "1",
        }
        for container in template["spec"]["containers"]:
            container["env"] = [*container.get("env", []), *({"name": k, "value": v} for k, v in pet.items())]
        labels = {
            **(template["metadata"].get("labels") or {}),
            JOB_LABEL: meta["name"],
            "training.kubeflow.org/replica-type": "worker",
            "training.kubeflow.org/replica-index": str(index),
            "training.kubeflow.org/operator-name": "pytorchjob-controller",
        }
        pod = {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {
                "name": worker,
                "namespace": meta.get("namespace", "default"),
                "labels": labels,
                "ownerReferences": [
                    {
                        "apiVersion": job["apiVersion"],
                        "kind": job["kind"],
                        "name": meta["name"],
                        "uid": meta["uid"],
                        "controller": True,
                    }
                ],
            },
            "spec": template["spec"],
            "status": {"phase": "Pending"},
        }
        with self.server._lock:
            self.server._logs[(pod["metadata"]["namespace"], worker)] = _Log(closed=False)
        self.server.put(pod)

    # ------------------------------------------------------------------ kubelet

    def _status(self, pod: dict[str, Any], phase: str, state: dict[str, Any], restarts: int = 0) -> None:
        meta = pod["metadata"]
        container = pod["spec"]["containers"][0]["name"]
        status = {
            "phase": phase,
            "conditions": [{"type": "PodScheduled", "status": "True"}],
            "containerStatuses": [
                {"name": container, "restartCount": restarts, "ready": phase == "Running", "state": state}
            ],
        }
        self.server.set_status("v1", "Pod", meta["name"], status, meta.get("namespace", "default"))

    def _env(self, pod: dict[str, Any], container: dict[str, Any], mounts: dict[str, Path]) -> dict[str, str]:
        env = {k: v for k, v in os.environ.items() if k.startswith("AWS_") or k in ("PATH", "HOME", "LANG", "TMPDIR")}
        namespace = pod["metadata"].get("namespace", "default")
        for item in container.get("env") or []:
            if "value" in item:
                env[item["name"]] = LocalNode._map(str(item["value"]), mounts)
                continue
            ref = (item.get("valueFrom") or {}).get("secretKeyRef")
            if ref:
                secret = self.server.get("v1", "Secret", ref["name"], namespace)
                data = (secret or {}).get("data") or {}
                if ref["key"] in data:
                    env[item["name"]] = base64.b64decode(data[ref["key"]]).decode()
                elif not ref.get("optional"):
                    raise AssertionError(f"secret {ref['name']}/{ref['key']} missing: CreateContainerConfigError")
        # the cluster's DNS: the etcd service is the test's real etcd
        host = env.get("PET_RDZV_ENDPOINT", "").partition(":")[0]
        if host.split(".")[0] == "etcd":
            env["PET_RDZV_ENDPOINT"] = self.etcd
        env["OMP_NUM_THREADS"] = "1"
        return env

    def _stop_container(self, key: tuple[str, str], container: Running) -> None:
        """Stop a deleted pod's container: SIGTERM to its main process, after the grace period SIGKILL to all of it
        (``killContainer``, see :mod:`k8s.container_init`); wait until it and its log are done."""
        init = container.process.pid
        pids = container_init.container_pids(init)
        ran = container.process.poll() is None
        killed: set[int] = set()
        if ran:
            container.process.send_signal(signal.SIGTERM)  # the init passes it to the container's command
            try:
                container.process.wait(timeout=container.grace_s)
            except subprocess.TimeoutExpired:
                killed = container_init.kill_container(init) - {init}
        code = container.process.wait(timeout=60)
        if container.pump is not None:
            container.pump.join(timeout=60)
        log = self.server._logs.get(key)
        if log is not None:
            self.server._close(log)  # the deleted pod's log ends (the pod made again gets a new one)
        if ran:
            self.stopped.append(Stopped(key[1], pids, killed, code))

    def _start(self, pod: dict[str, Any]) -> None:
        meta = pod["metadata"]
        key = (meta.get("namespace", "default"), meta["name"])
        with self._lock:
            if key in self.containers:
                return  # started already (a deleted pod's container is stopped, and forgotten, before this)
        container = pod["spec"]["containers"][0]
        image = images(self.docker_state).get(container["image"])
        if image is None or not image.get("pushed"):
            self._status(pod, "Pending", {"waiting": {"reason": "ErrImagePull", "message": container["image"]}})
            return
        number = self.runs.get(meta["name"], 0)
        self.runs[meta["name"]] = number + 1
        node = LocalNode(self.server, self.root / pod["spec"]["nodeName"], job=meta["name"])
        mounts = node._paths(pod["spec"], container, number)
        workdir = self.root / pod["spec"]["nodeName"] / f"{meta['name']}-{number}" / "workdir"
        workdir.mkdir(parents=True, exist_ok=True)
        command = [LocalNode._map(a, mounts) for a in [*container["command"], *container.get("args", [])]]
        assert command[0] == "torchrun", command
        python = str(Path(image["venv"]) / "bin" / "python")
        process = subprocess.Popen(
            [python, container_init.__file__, python, "-m", "torch.distributed.run", *command[1:]],
            cwd=workdir,
            env=self._env(pod, container, mounts),
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        grace = pod["spec"].get("terminationGracePeriodSeconds", DEFAULT_GRACE_S)
        running = Running(process, meta.get("uid", ""), float(grace))
        with self._lock:
            self.containers[key] = running
        self._status(pod, "Running", {"running": {}})
        running.pump = threading.Thread(target=self._pump, args=(pod, process), daemon=True)
        running.pump.start()

    def _pump(self, pod: dict[str, Any], process: subprocess.Popen[bytes]) -> None:
        meta = pod["metadata"]
        namespace, name = meta.get("namespace", "default"), meta["name"]
        assert process.stdout is not None
        for raw in process.stdout:
            line = raw.decode(errors="replace")
            log = self.server._logs.get((namespace, name))
            if log is not None:
                log.append(line)
            predicate = self._delete_when
            if predicate is not None and predicate(line):
                self._delete_when = None
                job = meta["labels"][JOB_LABEL]
                others = sorted(
                    p["metadata"]["name"]
                    for p in self.server.objects("Pod")
                    if (p["metadata"].get("labels") or {}).get(JOB_LABEL) == job and p["metadata"]["name"] != name
                )
                self.deleted.append((others[0], name, line.strip()))
                self.server.delete("v1", "Pod", others[0], namespace)
        code = process.wait()
        current = self.server.get("v1", "Pod", name, namespace)
        if current is None or current["metadata"].get("uid") != meta.get("uid"):
            return  # deleted: nothing to report
        log = self.server._logs.get((namespace, name))
        if log is not None:
            self.server._close(log)
        state = {"terminated": {"exitCode": code, "reason": "Completed" if code == 0 else "Error"}}
        self._status(current, "Succeeded" if code == 0 else "Failed", state)

    def log(self, name: str, namespace: str = "default") -> str:
        """The pod's log so far."""
        return self.server.log_text(name, namespace)
