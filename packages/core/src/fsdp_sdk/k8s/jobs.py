"""Running training jobs on Kubernetes: :class:`JobClient`.

Used by the ``fsdp-sdk job`` commands and by :class:`fsdp_sdk.Client`::

    from fsdp_sdk.k8s.jobs import JobClient

    jobs = JobClient(config)                    # kubeconfig: argument, $KUBECONFIG, backend, ~/.kube/config
    job = jobs.submit()                         # renders, applies (server-side apply), returns the JobRef
    status = jobs.wait_for_completion(job, timeout=3600)
    jobs.logs(job, follow=True, all_workers=True, out=print)
    jobs.stop(job)                              # deletes the job and clears its rendezvous keys in etcd

Status comes from the job's ``status.conditions`` (Created, Running, Restarting,
Succeeded, Failed, Suspended; a TrainJob's Complete counts as Succeeded) and its
per-replica counts (``replicaStatuses`` of a PyTorchJob, ``jobsStatus`` of a TrainJob).

The leader is the pod whose log starts with the trainer's ``master_addr=<host>``
line; pods are found by the operator's label ``training.kubeflow.org/job-name``
(``jobset.sigs.k8s.io/jobset-name`` for a TrainJob).

``fsdp-sdk job wait`` (:meth:`JobClient.wait_for_completion`) exits 0 when the job
succeeded, 1 when it failed, :data:`EXIT_TIMEOUT` (3) when it was still running
when the timeout passed.
"""

from __future__ import annotations

import copy
import json
import os
import queue
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from fsdp_sdk.errors import KubernetesError, RunError
from fsdp_sdk.k8s.render import HF_TOKEN_KEY, JOB_NAME_LABEL, RUN_ID_LABEL, render_job

if TYPE_CHECKING:
    from fsdp_sdk.config import Config
    from fsdp_sdk.k8s.kube import Kube
    from fsdp_sdk.plugins import Plugins
    from fsdp_sdk.runs import JobRef

__all__ = ["EXIT_TIMEOUT", "JobClient", "JobStatus", "StopResult", "resolve_kubeconfig"]

#: Exit status of ``fsdp-sdk job wait`` when the timeout passes before the job ends.
EXIT_TIMEOUT = 3
#: How many bytes of each pod's log are read to find the ``master_addr=`` line.
LOG_HEAD_BYTES = 64 * 1024

_APIS = {
    "pytorchjob": ("kubeflow.org/v1", "PyTorchJob", JOB_NAME_LABEL),
    "trainjob": ("trainer.kubeflow.org/v1alpha1", "TrainJob", "jobset.sigs.k8s.io/jobset-name"),
}
# When several conditions are true, the one that says the most wins.
_PHASE_ORDER = ("Failed", "Succeeded", "Suspended", "Restarting", "Running", "Created")
_CONDITION_PHASE = {"Complete": "Succeeded", "JobSucceeded": "Succeeded", "JobFailed": "Failed"}


def resolve_kubeconfig(kubeconfig: str | os.PathLike[str] | None = None) -> str | None:
    """The kubeconfig to use: ``kubeconfig``, else ``$KUBECONFIG``'s first entry, else ``None``
    (``~/.kube/config`` or in-cluster). :meth:`fsdp_sdk.Client.kubeconfig` puts the backend's first."""
    if kubeconfig:
        return str(kubeconfig)
    if os.environ.get("KUBECONFIG"):
        return os.environ["KUBECONFIG"].split(os.pathsep)[0]
    return None


@dataclass
class JobStatus:
    """The state of one training job."""

    name: str
    namespace: str
    kind: str
    phase: str
    """Created, Running, Restarting, Succeeded, Failed, Suspended or Pending (no condition yet)."""
    replicas: dict[str, dict[str, int]] = field(default_factory=dict)
    """Per replica type (``Worker``, or a TrainJob's ``node``): active / succeeded / failed counts."""
    message: str = ""
    rdzv_id: str | None = None
    rdzv_backend: str | None = None
    created: str | None = None

    @property
    def finished(self) -> bool:
        return self.phase in ("Succeeded", "Failed")

    @property
    def succeeded(self) -> bool:
        return self.phase == "Succeeded"

    def to_dict(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "namespace": self.namespace,
            "kind": self.kind,
            "phase": self.phase,
            "replicas": self.replicas,
            "message": self.message,
            "rdzv_id": self.rdzv_id,
            "rdzv_backend": self.rdzv_backend,
            "created": self.created,
        }

    @classmethod
    def from_object(cls, obj: dict[str, Any]) -> JobStatus:
        """Read the status of a PyTorchJob or TrainJob object."""
        status = obj.get("status") or {}
        true = {c.get("type"): c for c in status.get("conditions") or [] if c.get("status") == "True"}
        phases = {_CONDITION_PHASE.get(t, t): c for t, c in true.items()}
        phase = next((p for p in _PHASE_ORDER if p in phases), "Pending")
        message = str((phases.get(phase) or {}).get("message") or "")
        replicas: dict[str, dict[str, int]] = {}
        for kind, counts in (status.get("replicaStatuses") or {}).items():
            replicas[kind] = {k: int(counts.get(k) or 0) for k in ("active", "succeeded", "failed")}
        for job in status.get("jobsStatus") or []:
            replicas[job.get("name", "?")] = {k: int(job.get(k) or 0) for k in ("active", "succeeded", "failed")}
        elastic = (obj.get("spec") or {}).get("elasticPolicy") or {}
        meta = obj.get("metadata") or {}
        return cls(
            name=meta.get("name", "?"),
            namespace=meta.get("namespace", ""),
            kind=obj.get("kind", "?"),
            phase=phase,
            replicas=replicas,
            message=message,
            rdzv_id=elastic.get("rdzvId") or (meta.get("labels") or {}).get(RUN_ID_LABEL),
            rdzv_backend=elastic.get("rdzvBackend"),
            created=meta.get("creationTimestamp"),
        )


@dataclass
class StopResult:
    """What :meth:`JobClient.stop` did."""

    deleted: bool
    rendezvous_keys: list[str] = field(default_factory=list)
    rendezvous_error: str | None = None


class JobClient:
    """Submit and follow training jobs on one cluster.

    It also fulfils :class:`fsdp_sdk.client.JobLayer`, the seam :class:`fsdp_sdk.Client`
    uses (``submit`` / ``wait`` / ``stop`` with a :class:`~fsdp_sdk.runs.JobRef`).

    :param config: the configuration (resolved when rendering).
    :param kube: the API connection; made from the kubeconfig on first use when ``None``.
    :param kubeconfig: the kubeconfig file (see :func:`resolve_kubeconfig` for the fallbacks).
    :param context: the kubeconfig context.
    :param plugins: the plugin set (defaults to the process-wide one).
    """

    def __init__(
        self,
        config: Config,
        kube: Kube | None = None,
        *,
        kubeconfig: str | os.PathLike[str] | None = None,
        context: str | None = None,
        plugins: Plugins | None = None,
    ) -> None:
        self.config = config
        self.plugins = plugins
        self._kube = kube
        self._kubeconfig = kubeconfig
        self._context = context
        #: The objects of the last :meth:`submit`, as rendered (the Secret without its data).
        self.last_objects: list[dict[str, Any]] = []

    @property
    def kube(self) -> Kube:
        """The API connection (connects on first use)."""
        if self._kube is None:
            from fsdp_sdk.k8s.kube import Kube

            path = resolve_kubeconfig(self._kubeconfig)
            self._kube = Kube.from_kubeconfig(path, context=self._context)
        return self._kube

    # ------------------------------------------------------------------ helpers

    @property
    def namespace(self) -> str:
        return self.config.job.namespace

    def _api(self, api: str | None = None) -> tuple[str, str, str]:
        return _APIS[api or self.config.job.api]

    def _name(self, job: JobRef | str | None) -> str:
        if job is None:
            return self.config.job.name
        return job if isinstance(job, str) else job.name

    def _job(self, job: JobRef | str | None, api: str | None = None) -> dict[str, Any]:
        api_version, kind, _ = self._api(api)
        name = self._name(job)
        obj = self.kube.get(api_version, kind, name, self.namespace)
        if obj is None:
            raise KubernetesError(f"{kind} {self.namespace}/{name} does not exist; 'fsdp-sdk job list' shows the jobs")
        return obj

    # ------------------------------------------------------------------ submit

    def render(
        self, *, run_id: str | None = None, create_secret: bool | None = None, api: str | None = None
    ) -> list[dict[str, Any]]:
        """The job's objects (see :func:`fsdp_sdk.k8s.render.render_job`); ``run_id`` is the rendezvous id."""
        return render_job(self.config, rdzv_id=run_id, create_secret=create_secret, api=api, plugins=self.plugins)

    def submit(
        self,
        config: Config | None = None,
        *,
        run_id: str | None = None,
        create_secret: bool | None = None,
        api: str | None = None,
        dry_run: bool = False,
    ) -> JobRef:
        """Render and apply the job (server-side apply); with ``dry_run`` the server validates only (``dryRun=All``).

        Everything is rendered and checked before the first request, so a bad
        configuration sends nothing. The job object is applied last, after the
        Secret it references. The objects as rendered are kept in :attr:`last_objects`.

        :param config: another configuration than the client's (``Client.run`` passes one).
        :param run_id: the rendezvous id (``elasticPolicy.rdzvId``); a fresh one by default.
        :param create_secret: apply the Hugging Face token Secret; defaults to whether ``job.hf_token`` is set.
        :param api: ``pytorchjob`` or ``trainjob``; defaults to ``job.api``.
        :param dry_run: ask the server to validate only.
        :raises ConfigError: the configuration cannot make a valid job (nothing is sent).
        :raises KubernetesError: the job already exists, or the server refused an object.
        """
        from fsdp_sdk.runs import JobRef

        if config is not None and config is not self.config:
            return JobClient(
                config, self._kube, kubeconfig=self._kubeconfig, context=self._context, plugins=self.plugins
            ).submit(run_id=run_id, create_secret=create_secret, api=api, dry_run=dry_run)
        objects = self.render(run_id=run_id, create_secret=create_secret, api=api)
        self.last_objects = objects
        job = objects[0]
        existing = self.kube.get(job["apiVersion"], job["kind"], job["metadata"]["name"], self.namespace)
        if existing is not None and not dry_run:
            phase = JobStatus.from_object(existing).phase
            raise KubernetesError(
                f"{job['kind']} {self.namespace}/{job['metadata']['name']} already exists ({phase}); "
                "stop it first with 'fsdp-sdk job stop', or set job.name to another name"
            )
        for obj in [*objects[1:], job]:
            self.kube.apply(self._with_secret_data(obj), dry_run=dry_run)
        return JobRef(
            name=job["metadata"]["name"],
            backend=self.config.cluster.backend,
            run_id=job["metadata"]["labels"][RUN_ID_LABEL],
            namespace=self.namespace,
        )

    def _with_secret_data(self, obj: dict[str, Any]) -> dict[str, Any]:
        token = self.config.job.hf_token
        if obj["kind"] != "Secret" or obj["metadata"]["name"] != self.config.job.hf_token_secret or not token:
            return obj
        filled = copy.deepcopy(obj)
        filled["stringData"] = {HF_TOKEN_KEY: token.get_secret_value()}
        return filled

    # ------------------------------------------------------------------ inspect

    def status(self, job: JobRef | str | None = None, *, api: str | None = None) -> JobStatus:
        """The job's status (``job.name`` by default)."""
        return JobStatus.from_object(self._job(job, api))

    def list(self, *, api: str | None = None) -> list[JobStatus]:
        """Every job of the configured kind in the namespace."""
        api_version, kind, _ = self._api(api)
        return [JobStatus.from_object(o) for o in self.kube.list(api_version, kind, self.namespace)]

    def wait_for_completion(
        self,
        job: JobRef | str | None = None,
        *,
        timeout: float,
        poll: float = 5.0,
        api: str | None = None,
        on_change: Callable[[JobStatus], None] | None = None,
    ) -> JobStatus:
        """Poll until the job succeeds or fails, or ``timeout`` seconds pass; return the last status.

        Check :attr:`JobStatus.finished` to tell a timeout from an end.
        """
        deadline = time.monotonic() + timeout
        last_phase = None
        while True:
            status = self.status(job, api=api)
            if on_change is not None and status.phase != last_phase:
                on_change(status)
            last_phase = status.phase
            if status.finished or time.monotonic() >= deadline:
                return status
            time.sleep(max(0.0, min(poll, deadline - time.monotonic())))

    def wait(
        self,
        job: JobRef | str | None = None,
        *,
        on_output: Callable[[str], None] | None = None,
        timeout: float | None = None,
        poll: float = 5.0,
    ) -> dict[str, Any]:
        """Follow the job to its end, streaming the leader's log to ``on_output``; return the trainer's summary.

        The summary is the last line of the leader's log that is a JSON object
        (the trainer prints its ``summary.json`` there).

        :raises RunError: the job failed, timed out, or ended without a summary.
        """
        name = self._name(job)
        deadline = None if timeout is None else time.monotonic() + timeout
        summary: dict[str, Any] | None = None
        followed: set[str] = set()
        while True:
            status = self.status(name)
            if not status.finished:
                leader = self._find_leader(name)
                if leader is not None and leader not in followed:
                    followed.add(leader)
                    for line in self.kube.follow_pod_log(leader, self.namespace):
                        summary = _summary_line(line) or summary
                        if on_output is not None:
                            on_output(line)
                    continue  # the container ended: read the status again
            if status.finished:
                break
            if deadline is not None and time.monotonic() >= deadline:
                raise RunError(
                    f"job {name}: still {status.phase} after {timeout:g}s; "
                    "'fsdp-sdk job status' follows it, 'fsdp-sdk job stop' ends it"
                )
            time.sleep(poll)
        if not status.succeeded:
            raise RunError(f"job {name} failed: {status.message or 'see fsdp-sdk job logs --all'}")
        if summary is None:
            leader = self._find_leader(name)
            if leader is not None:
                for line in self.kube.pod_log(leader, self.namespace, tail_lines=20).splitlines():
                    summary = _summary_line(line) or summary
        if summary is None:
            raise RunError(f"job {name} succeeded but its leader printed no JSON summary line")
        return summary

    def pods(self, job: JobRef | str | None = None, *, api: str | None = None) -> list[dict[str, Any]]:
        """The job's pods, by the operator's job-name label."""
        _, _, label = self._api(api)
        return self.kube.list("v1", "Pod", self.namespace, label_selector=f"{label}={self._name(job)}")

    def _find_leader(self, name: str, api: str | None = None) -> str | None:
        for pod in self.pods(name, api=api):
            pod_name = pod["metadata"]["name"]
            if (pod.get("status") or {}).get("phase") == "Pending":
                continue
            head = self.kube.pod_log(pod_name, self.namespace, limit_bytes=LOG_HEAD_BYTES)
            if any(line.startswith("master_addr=") or " master_addr=" in line for line in head.splitlines()):
                return pod_name
        return None

    def leader_pod(self, job: JobRef | str | None = None, *, api: str | None = None) -> str:
        """The name of the pod whose log head has the trainer's ``master_addr=`` line.

        :raises KubernetesError: the job has no pods, or none has printed the line yet.
        """
        name = self._name(job)
        leader = self._find_leader(name, api)
        if leader is None:
            raise KubernetesError(
                f"no pod of job {self.namespace}/{name} has printed master_addr= yet; "
                "the trainer prints it at start: check 'fsdp-sdk job status', or use --all"
            )
        return leader

    def logs(
        self,
        job: JobRef | str | None = None,
        *,
        follow: bool = False,
        all_workers: bool = False,
        out: Callable[[str], None] = print,
        api: str | None = None,
    ) -> None:
        """Write the leader's log (or every worker's, each line prefixed ``[pod] ``) to ``out``.

        With ``follow``, keep writing lines as they come until the containers end.
        """
        if not all_workers:
            leader = self.leader_pod(job, api=api)
            lines = (
                self.kube.follow_pod_log(leader, self.namespace)
                if follow
                else iter(self.kube.pod_log(leader, self.namespace).splitlines())
            )
            for line in lines:
                out(line)
            return
        pods = sorted(p["metadata"]["name"] for p in self.pods(job, api=api))
        if not pods:
            raise KubernetesError(
                f"job {self.namespace}/{self._name(job)} has no pods yet; check 'fsdp-sdk job status'"
            )
        if not follow:
            for pod in pods:
                for line in self.kube.pod_log(pod, self.namespace).splitlines():
                    out(f"[{pod}] {line}")
            return
        for line in _merge([self._prefixed(pod) for pod in pods]):
            out(line)

    def _prefixed(self, pod: str) -> Iterator[str]:
        for line in self.kube.follow_pod_log(pod, self.namespace):
            yield f"[{pod}] {line}"

    # ------------------------------------------------------------------ stop

    def stop(
        self, job: JobRef | str | None = None, *, clear_rendezvous: bool = True, api: str | None = None
    ) -> StopResult:
        """Delete the job (propagation Background) and clear its rendezvous keys in etcd.

        etcd is reached through the API server's service proxy
        (``services/<rdzvHost>:<rdzvPort>/proxy``). A cleanup that fails does not
        undo the deletion: it is reported in :attr:`StopResult.rendezvous_error`
        (torch's keys also expire by TTL, after two hours).
        """
        from fsdp_sdk.rendezvous import EtcdV2
        from fsdp_sdk.rendezvous import clear_rendezvous as clear

        api_version, kind, _ = self._api(api)
        name = self._name(job)
        obj = self.kube.get(api_version, kind, name, self.namespace)
        if obj is None:
            return StopResult(deleted=False)
        status = JobStatus.from_object(obj)
        deleted = self.kube.delete(api_version, kind, name, self.namespace, propagation_policy="Background")
        result = StopResult(deleted=deleted)
        if clear_rendezvous and status.rdzv_id and status.rdzv_backend in ("etcd-v2", "etcd"):
            elastic = obj["spec"]["elasticPolicy"]
            host = str(elastic.get("rdzvHost") or "etcd").split(".")
            namespace = host[1] if len(host) > 1 and host[1] != "svc" else self.namespace
            try:
                etcd = EtcdV2.via_service_proxy(
                    self.kube, namespace=namespace, service=host[0], port=int(elastic.get("rdzvPort") or 2379)
                )
                result.rendezvous_keys = clear(etcd, status.rdzv_backend, status.rdzv_id)
            except KubernetesError as error:
                result.rendezvous_error = str(error)
        return result


def _summary_line(line: str) -> dict[str, Any] | None:
    text = line.strip()
    if not (text.startswith("{") and text.endswith("}")):
        return None
    try:
        value = json.loads(text)
    except ValueError:
        return None
    return value if isinstance(value, dict) else None


def _merge(iterators: list[Iterator[str]]) -> Iterator[str]:
    """Lines of several blocking iterators, in the order they arrive (one thread each)."""
    lines: queue.Queue[tuple[int, str | None, BaseException | None]] = queue.Queue()

    def pump(index: int, iterator: Iterator[str]) -> None:
        try:
            for line in iterator:
                lines.put((index, line, None))
        except BaseException as error:  # surfaced in the caller's thread
            lines.put((index, None, error))
            return
        lines.put((index, None, None))

    for index, iterator in enumerate(iterators):
        threading.Thread(target=pump, args=(index, iterator), daemon=True).start()
    running = len(iterators)
    while running:
        _, line, error = lines.get()
        if error is not None:
            raise error
        if line is None:
            running -= 1
        else:
            yield line
