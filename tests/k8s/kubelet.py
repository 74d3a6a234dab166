"""A stand-in for the Training Operator and one node's kubelet, for tests: it runs a rendered worker on this machine.

:class:`LocalNode` reads a one-worker PyTorchJob from the loopback API server and runs its
worker container's command as a local process (``torchrun`` on CPU), the way a node
would: each volume mount is a directory, ``hostPath`` volumes on the node's disk (they
outlive the container), ``persistentVolumeClaim`` volumes on a shared directory, and
``emptyDir`` volumes and the container's own filesystem (its working directory) fresh for
every container. Paths under a mount in the arguments and environment are mapped to
those directories. The container's output becomes the pod's log on the API server, and
the operator's conditions follow the container: Running, Restarting after a kill,
Succeeded or Failed at its exit.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import threading
from collections.abc import Callable
from pathlib import Path

from . import container_init
from .fake_apiserver import FakeApiServer

JOB_LABEL = "training.kubeflow.org/job-name"


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


class Container:
    """One run of the worker container: a process group whose output goes to the pod's log."""

    def __init__(self, process: subprocess.Popen[bytes], pump: threading.Thread, lines: list[str]) -> None:
        self.process = process
        self.pump = pump
        self.lines = lines
        self._seen = threading.Condition()

    def wait_for_line(self, predicate: Callable[[str], bool], timeout: float = 600) -> str:
        """Block until the container printed a matching line; fail if it ends or ``timeout`` passes first."""
        with self._seen:
            found = self._seen.wait_for(
                lambda: any(predicate(line) for line in self.lines) or self.process.poll() is not None, timeout=timeout
            )
        match = next((line for line in self.lines if predicate(line)), None)
        if not found or match is None:
            raise AssertionError(f"the container did not print the expected line; last lines: {self.lines[-15:]}")
        return match

    def kill(self) -> None:
        """SIGKILL the container's processes, all of them (what an OOM kill or a lost node does to them): its init
        reaps them (:mod:`k8s.container_init`; the agent's group alone would leave torchrun's workers running)."""
        container_init.kill_container(self.process.pid)
        self.process.wait(timeout=60)
        self.pump.join(timeout=60)

    def wait(self, timeout: float = 900) -> int:
        code = self.process.wait(timeout=timeout)
        self.pump.join(timeout=60)
        return code


class LocalNode:
    """One node with a disk that outlives its containers (``node_dir``), running the worker of one PyTorchJob.

    :param apiserver: the loopback API server holding the job.
    :param root: a directory for the node's disk, the shared volumes and the containers' own files.
    :param python: the image's Python (``bin/python`` of an environment built as the image is, see
        :mod:`rehearsal.image`); default: this test's own, with its environment.
    """

    def __init__(
        self,
        apiserver: FakeApiServer,
        root: Path,
        *,
        job: str = "fsdp",
        namespace: str = "default",
        python: str | None = None,
    ) -> None:
        self.apiserver = apiserver
        self.python = python
        self.root = root
        self.job = job
        self.namespace = namespace
        self.pod = f"{job}-worker-0"
        self.containers: list[Container] = []

    def _set_conditions(self, *types: str) -> None:
        conditions = [{"type": t, "status": "True", "reason": t, "message": f"job {t.lower()}"} for t in types]
        self.apiserver.set_status("kubeflow.org/v1", "PyTorchJob", self.job, {"conditions": conditions}, self.namespace)

    def _paths(self, spec: dict, container: dict, number: int) -> dict[str, Path]:
        """Mount path -> local directory, for this container."""
        volumes = {v["name"]: v for v in spec.get("volumes") or []}
        mounts: dict[str, Path] = {}
        for mount in container.get("volumeMounts") or []:
            volume = volumes[mount["name"]]
            if "hostPath" in volume:
                local = self.root / "node" / volume["hostPath"]["path"].lstrip("/")
            elif "persistentVolumeClaim" in volume:
                local = self.root / "claims" / volume["persistentVolumeClaim"]["claimName"]
            else:
                local = self.root / f"container-{number}" / "volumes" / mount["name"]
            local.mkdir(parents=True, exist_ok=True)
            mounts[mount["mountPath"]] = local
        return mounts

    @staticmethod
    def _map(value: str, mounts: dict[str, Path]) -> str:
        for mount, local in sorted(mounts.items(), key=lambda item: -len(item[0])):
            if value == mount or value.startswith(mount.rstrip("/") + "/"):
                return str(local) + value[len(mount.rstrip("/")) :]
        return value

    def start(self, *, restart: bool = False) -> Container:
        """Start the worker container (a new pod the first time, the same pod's next container on ``restart``)."""
        job = self.apiserver.get("kubeflow.org/v1", "PyTorchJob", self.job, self.namespace)
        assert job is not None, "no job to run"
        replica = job["spec"]["pytorchReplicaSpecs"]["Worker"]
        assert replica["replicas"] == 1, "LocalNode runs one-worker jobs"
        spec = replica["template"]["spec"]
        container = spec["containers"][0]
        number = len(self.containers)
        mounts = self._paths(spec, container, number)
        workdir = self.root / f"container-{number}" / "workdir"  # the container's own filesystem
        workdir.mkdir(parents=True, exist_ok=True)
        command = [self._map(a, mounts) for a in [*container["command"], *container.get("args", [])]]
        assert command[0] == "torchrun", command
        python = self.python or sys.executable
        command = [python, container_init.__file__, python, "-m", "torch.distributed.run", *command[1:]]
        elastic = job["spec"]["elasticPolicy"]
        # an image's Python gets nothing of this test's Python setup
        dropped = ("FSDP_SDK_", "PET_", *(("PYTHON", "VIRTUAL_ENV") if self.python else ()))
        env = {k: v for k, v in os.environ.items() if not k.startswith(dropped)}
        env.update({e["name"]: self._map(e["value"], mounts) for e in container.get("env", []) if "value" in e})
        env.update(
            {
                "PET_NNODES": "1",
                "PET_NPROC_PER_NODE": str(job["spec"]["nprocPerNode"]),
                "PET_RDZV_BACKEND": "c10d",  # the job names the cluster's etcd; this node has none
                "PET_RDZV_ENDPOINT": f"127.0.0.1:{_free_port()}",
                "PET_RDZV_ID": elastic["rdzvId"],
                "PET_MAX_RESTARTS": "0",
                "PYTHONUNBUFFERED": "1",
                "OMP_NUM_THREADS": "1",
            }
        )
        if restart:
            self._set_conditions("Created", "Running", "Restarting")
            self.apiserver.restart_container(self.pod, namespace=self.namespace)
        else:
            self.apiserver.add_pod(
                self.pod, labels={JOB_LABEL: self.job}, follow_open=True, namespace=self.namespace, owner=job
            )
        process = subprocess.Popen(
            command,
            cwd=workdir,
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        lines: list[str] = []
        run = Container(process, threading.Thread(target=lambda: None), lines)

        def pump() -> None:
            assert process.stdout is not None
            for raw in process.stdout:
                line = raw.decode(errors="replace")
                self.apiserver.append_log(self.pod, line, namespace=self.namespace)
                with run._seen:
                    lines.append(line.rstrip("\n"))
                    run._seen.notify_all()
            with run._seen:
                run._seen.notify_all()

        run.pump = threading.Thread(target=pump, daemon=True)
        run.pump.start()
        self.containers.append(run)
        self._set_conditions("Created", "Running")
        return run

    def finish(self, container: Container) -> int:
        """Wait for the container to exit; the job then succeeds or fails with it, and the log ends."""
        code = container.wait()
        self._set_conditions("Created", "Running", "Succeeded" if code == 0 else "Failed")
        self.apiserver.close_log(self.pod, namespace=self.namespace)
        return code
