"""Running training jobs on Kubernetes: :class:`JobClient`.

Used by the ``fsdp-sdk job`` commands and by :class:`fsdp_sdk.Client`::

    from fsdp_sdk.k8s.jobs import JobClient

    jobs = JobClient(config)                    # kubeconfig: argument, $KUBECONFIG, ~/.kube/config, in-cluster
    job = jobs.submit()                         # renders, applies (server-side apply), returns the JobRef
    result = jobs.follow(job, on_output=print)  # the leader's log as it is written, until the job ends
    status = jobs.wait_for_completion(job, timeout=3600)
    jobs.stop(job)                              # deletes the job and clears its rendezvous keys in etcd

Status comes from the job's ``status.conditions`` (Created, Running, Restarting,
Succeeded, Failed, Suspended; a TrainJob's Complete counts as Succeeded) and its
per-replica counts (``replicaStatuses`` of a PyTorchJob, ``jobsStatus`` of a TrainJob),
and its changes from the API's watch (:mod:`fsdp_sdk.k8s.follow`), not from polling.

The leader is the pod whose log starts with the trainer's ``master_addr=<host>``
line; pods are found by the operator's label ``training.kubeflow.org/job-name``
(``jobset.sigs.k8s.io/jobset-name`` for a TrainJob).

Submitting is all or nothing: the Secret goes first, the job last, and when anything
fails (or Ctrl-C comes) what this submission created is deleted again. Requests that
fail transiently are retried (:mod:`fsdp_sdk.k8s.retry`); a submission whose answer was
lost is recognised by its run id.

``fsdp-sdk job wait`` (:meth:`JobClient.wait_for_completion`) exits 0 when the job
succeeded, 1 when it failed, :data:`EXIT_TIMEOUT` (3) when it was still running
when the timeout passed.
"""

from __future__ import annotations

import builtins
import copy
import json
import os
import secrets
import string
import threading
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from fsdp_sdk.errors import BackendError, ConfigError, KubernetesError, RunError
from fsdp_sdk.k8s.job_pods import LOG_DRAIN_S, find_leader, job_api, job_pods
from fsdp_sdk.k8s.render import HF_TOKEN_KEY, RUN_ID_LABEL, render_job, worker_pod_specs

if TYPE_CHECKING:
    from fsdp_sdk.config import Config
    from fsdp_sdk.k8s.kube import Kube
    from fsdp_sdk.k8s.retry import RetryPolicy
    from fsdp_sdk.k8s.validate import CrdSchema
    from fsdp_sdk.plugins import Plugins
    from fsdp_sdk.resolved import Resolved
    from fsdp_sdk.runs import JobRef

__all__ = ["EXIT_TIMEOUT", "FollowResult", "JobClient", "JobStatus", "StopResult", "resolve_kubeconfig"]

#: Exit status of ``fsdp-sdk job wait`` when the timeout passes before the job ends.
EXIT_TIMEOUT = 3
#: Seconds ``--replace`` waits for the old job and its pods to be gone.
REPLACE_TIMEOUT_S = 600.0
# When several conditions are true, the one that says the most wins.
_PHASE_ORDER = ("Failed", "Succeeded", "Suspended", "Restarting", "Running", "Created")
_CONDITION_PHASE = {"Complete": "Succeeded", "JobSucceeded": "Succeeded", "JobFailed": "Failed"}
_SUFFIX_ALPHABET = string.ascii_lowercase + string.digits
#: The CRDs of the job kinds fsdp-sdk renders, read from the cluster for the pruning check after render hooks.
_JOB_CRDS = ("pytorchjobs.kubeflow.org", "trainjobs.trainer.kubeflow.org")


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
    """Created, Running, Restarting, Succeeded, Failed, Suspended or Pending (no condition yet); in a Kueue queue
    also Queued (waiting for quota) or Admitted (quota reserved, not yet running)."""
    replicas: dict[str, dict[str, int]] = field(default_factory=dict)
    """Per replica type (``Worker``, or a TrainJob's ``node``): active / succeeded / failed counts."""
    message: str = ""
    rdzv_id: str | None = None
    rdzv_backend: str | None = None
    created: str | None = None
    completed: str | None = None
    """When the job ended (``status.completionTime``, else its last condition's time once it has ended)."""
    nodes: int = 0
    """Nodes (replicas) the job asked for; 0 when the object does not say."""
    queue: dict[str, Any] | None = None
    """Where Kueue has the job (:meth:`fsdp_sdk.k8s.queue.QueueState.to_dict`); ``None`` outside a queue."""

    @property
    def finished(self) -> bool:
        """Whether the job has ended (succeeded or failed)."""
        return self.phase in ("Succeeded", "Failed")

    @property
    def succeeded(self) -> bool:
        """Whether the job ended successfully."""
        return self.phase == "Succeeded"

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready dict."""
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
            "completed": self.completed,
            "nodes": self.nodes,
            **({"queue": self.queue} if self.queue is not None else {}),
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
        spec = obj.get("spec") or {}
        elastic = spec.get("elasticPolicy") or {}
        meta = obj.get("metadata") or {}
        completed = status.get("completionTime")
        if completed is None and phase in ("Succeeded", "Failed"):
            completed = (phases.get(phase) or {}).get("lastTransitionTime")
        nodes = sum(int((r or {}).get("replicas") or 0) for r in (spec.get("pytorchReplicaSpecs") or {}).values())
        nodes = nodes or int((spec.get("trainer") or {}).get("numNodes") or 0)
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
            completed=completed,
            nodes=nodes,
        )


@dataclass
class StopResult:
    """What :meth:`JobClient.stop` did."""

    deleted: bool
    rendezvous_keys: list[str] = field(default_factory=list)
    rendezvous_error: str | None = None


@dataclass
class FollowResult:
    """How :meth:`JobClient.follow` ended.

    :param status: the job's last status.
    :param summary: the trainer's summary (the last JSON object line of the leader's log), if one was printed.
    :param log_error: why the log could not be followed to its end, when it could not.
    """

    status: JobStatus
    summary: dict[str, Any] | None = None
    log_error: str | None = None

    @property
    def timed_out(self) -> bool:
        """Whether the job was still running when the timeout passed."""
        return not self.status.finished


class JobClient:
    """Submit and follow training jobs on one cluster.

    :class:`fsdp_sdk.runner.KubernetesRunner` drives it for :class:`fsdp_sdk.Client`
    (``apply`` / ``wait`` / ``stop`` with a :class:`~fsdp_sdk.runs.JobRef`).

    :param config: the resolved value (:class:`~fsdp_sdk.resolved.Resolved`), or a configuration (resolved when
        rendering).
    :param kube: the API connection; made from the kubeconfig on first use when ``None``.
    :param kubeconfig: the kubeconfig file (see :func:`resolve_kubeconfig` for the fallbacks).
    :param context: the kubeconfig context.
    :param plugins: the plugin set: a ``Resolved``'s own by default, else the installed plugins
        (:func:`~fsdp_sdk.plugins.build_plugins`, built when first needed).
    :param progress: receives progress lines (retries, waiting for the leader, replacing a job).
    :param retry: the retry policy of the connection it makes.
    """

    #: Seconds between two looks for the leader while its pods run but none has printed ``master_addr=`` yet.
    leader_recheck_s: float = 2.0

    def __init__(
        self,
        config: Config | Resolved,
        kube: Kube | None = None,
        *,
        kubeconfig: str | os.PathLike[str] | None = None,
        context: str | None = None,
        plugins: Plugins | None = None,
        progress: Callable[[str], None] | None = None,
        retry: RetryPolicy | None = None,
    ) -> None:
        from fsdp_sdk.resolved import Resolved

        self._resolved = config if isinstance(config, Resolved) else None
        self.config: Config = config.config if isinstance(config, Resolved) else config
        self.plugins = plugins if plugins is not None or self._resolved is None else self._resolved.plugins
        self.progress = progress
        self._kube = kube
        self._kubeconfig = kubeconfig
        self._context = context
        self._retry = retry
        #: The objects of the last :meth:`submit`, as rendered (the Secret without its data).
        self.last_objects: list[dict[str, Any]] = []
        #: The Kueue queue of the last submission and what it found there (``None``: no queue).
        self.last_queue: dict[str, Any] | None = None

    @property
    def kube(self) -> Kube:
        """The API connection (connects on first use)."""
        if self._kube is None:
            from fsdp_sdk.k8s.kube import Kube

            path = resolve_kubeconfig(self._kubeconfig)
            self._kube = Kube.from_kubeconfig(path, context=self._context, retry=self._retry, progress=self.progress)
        return self._kube

    # ------------------------------------------------------------------ helpers

    @property
    def namespace(self) -> str:
        """The namespace of the jobs (``job.namespace``)."""
        return self.config.job.namespace

    def _say(self, line: str) -> None:
        if self.progress is not None:
            self.progress(line)

    def _api(self, api: str | None = None) -> tuple[str, str, str]:
        return job_api(api or self.config.job.api)

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

    def plugin_set(self) -> Plugins:
        """The plugin set (the installed plugins, built now, when none was given)."""
        if self.plugins is None:
            from fsdp_sdk.plugins import build_plugins

            self.plugins = build_plugins()
        return self.plugins

    def _with(self, config: Config | Resolved | None) -> JobClient:
        """A client for another configuration, on the same connection."""
        if config is None or config is self.config or config is self._resolved:
            return self
        other = JobClient(
            config,
            self.kube,
            kubeconfig=self._kubeconfig,
            context=self._context,
            plugins=self.plugins,
            progress=self.progress,
            retry=self._retry,
        )
        return other

    # ------------------------------------------------------------------ submit

    def render(
        self,
        *,
        run_id: str | None = None,
        create_secret: bool | None = None,
        api: str | None = None,
        crds: Sequence[CrdSchema] = (),
    ) -> list[dict[str, Any]]:
        """The job's objects (see :func:`fsdp_sdk.k8s.render.render_job`); ``run_id`` is the rendezvous id.

        :param crds: CRDs to check what the plugins' render hooks set against (a warning per field pruned).
        """
        return render_job(
            self._resolved or self.config,
            rdzv_id=run_id,
            create_secret=create_secret,
            api=api,
            plugins=self.plugin_set(),
            crds=crds,
        )

    def installed_crds(self) -> list[CrdSchema]:
        """The cluster's CRDs of the job kinds fsdp-sdk renders (PyTorchJob, TrainJob), those it has and lets us read:
        what its API server prunes by, for the check after the plugins' render hooks."""
        from fsdp_sdk.k8s.validate import crd_from_object

        found = []
        for name in _JOB_CRDS:
            try:
                crd = self.kube.get("apiextensions.k8s.io/v1", "CustomResourceDefinition", name)
            except KubernetesError:
                continue  # not allowed to read CRDs: the check is skipped, the server still prunes
            if crd is not None:
                found.append(crd_from_object(crd))
        return found

    def submit(
        self,
        config: Config | Resolved | None = None,
        *,
        run_id: str | None = None,
        create_secret: bool | None = None,
        api: str | None = None,
        dry_run: bool = False,
        replace: bool = False,
        unique: bool = False,
    ) -> JobRef:
        """Render and apply the job (server-side apply); with ``dry_run`` the server validates only (``dryRun=All``).

        Everything is rendered and checked before the first write, so a bad configuration
        sends nothing. The Secret is applied before the job that references it; when a write
        fails for good (or the command is interrupted), what this submission created is
        deleted again, so no Secret is left without its job and no job without its Secret.
        The objects as rendered are kept in :attr:`last_objects`.

        A job of the same name that carries this submission's run id is this submission,
        already applied (an earlier try whose answer was lost): it is returned as it is.

        :param config: another configuration than the client's (``Client.run`` passes one).
        :param run_id: the rendezvous id (``elasticPolicy.rdzvId``); a fresh one by default.
        :param create_secret: apply the Hugging Face token Secret; defaults to whether ``job.hf_token`` is set.
        :param api: ``pytorchjob`` or ``trainjob``; defaults to ``job.api``.
        :param dry_run: ask the server to validate only.
        :param replace: delete a job of the same name first, and wait until it and its pods are gone
            (the new one resumes from the checkpoints the old one left under the same name).
        :param unique: submit under ``job.name`` plus a fresh suffix (``fsdp-k3x9p``): a new job next
            to the others, starting from no checkpoint.
        :raises ConfigError: the configuration cannot make a valid job, its shared storage claim
            is missing or unusable, or a TrainJob's cluster has no Kubeflow Trainer (nothing is sent).
        :raises KubernetesError: another job of the same name exists (without ``replace``), or the server
            refused an object.
        """
        from fsdp_sdk.config import Setting
        from fsdp_sdk.resolved import Resolved

        if unique:
            suffix = "".join(secrets.choice(_SUFFIX_ALPHABET) for _ in range(5))
            base = config.config if isinstance(config, Resolved) else config or self.config
            renamed = base.with_overrides(
                [Setting("job.name", f"{base.job.name}-{suffix}", "--unique", "command line")]
            )
            config = Resolved.of(renamed, self.plugin_set(), validate_trainer=False)
        if config is not None and config is not self.config and config is not self._resolved:
            other = self._with(config)
            ref = other.submit(run_id=run_id, create_secret=create_secret, api=api, dry_run=dry_run, replace=replace)
            self.last_objects = other.last_objects
            self.last_queue = other.last_queue
            return ref
        objects = self.render(run_id=run_id, create_secret=create_secret, api=api, crds=self.installed_crds())
        return self.apply(objects, dry_run=dry_run, replace=replace)

    def apply(self, rendered: Sequence[Mapping[str, Any]], *, dry_run: bool = False, replace: bool = False) -> JobRef:
        """Apply exactly ``rendered``, as :meth:`render` returned them (the job first, the Secret without its data):
        what a dry run showed is what is sent. The checks and the clean-up on failure are :meth:`submit`'s.

        :param dry_run: ask the server to validate only.
        :param replace: delete a job of the same name first (see :meth:`submit`).
        """
        from fsdp_sdk.runs import JobRef

        objects: list[dict[str, Any]] = [copy.deepcopy(dict(obj)) for obj in rendered]
        self.last_objects = objects
        job = objects[0]
        name, kind = job["metadata"]["name"], job["kind"]
        run_id = job["metadata"]["labels"][RUN_ID_LABEL]
        ref = JobRef(name=name, backend=self.config.cluster.backend, run_id=run_id, namespace=self.namespace)
        self._check_storage()
        if kind == "TrainJob":
            from fsdp_sdk.k8s.trainer_v2 import check_trainer_installed

            check_trainer_installed(self.kube)
        self._check_service_account(job)
        queued = self._check_queue(job)
        existing = self.kube.get(job["apiVersion"], kind, name, self.namespace)
        if existing is not None and not dry_run:
            if (existing["metadata"].get("labels") or {}).get(RUN_ID_LABEL) == run_id:
                self._say(f"{kind} {self.namespace}/{name} with run id {run_id} is already submitted")
                return ref
            if not replace:
                phase = JobStatus.from_object(existing).phase
                raise KubernetesError(
                    f"{kind} {self.namespace}/{name} already exists ({phase}); pass --replace to delete it and "
                    "submit again (resuming from its checkpoints), or --unique to submit a new job next to it"
                )
            self._replace(existing)
        self._apply_all([*objects[1:], job], run_id=run_id, dry_run=dry_run)
        if queued:
            self._say(queued)
        return ref

    def _check_queue(self, job: dict[str, Any]) -> str | None:
        """Put ``job`` in its Kueue LocalQueue (``job.queue``; unset: fsdp-sdk's when the cluster has it), refuse
        it when it can never fit the quota, and say what it queues behind (:mod:`fsdp_sdk.k8s.queue`)."""
        from fsdp_sdk.k8s import queue as kueue

        self.last_queue = None
        labels = job["metadata"].setdefault("labels", {})
        name = labels.get(kueue.QUEUE_LABEL) or kueue.job_queue(self.config, self.kube)
        if not name:
            return None
        labels[kueue.QUEUE_LABEL] = name
        found = kueue.check_fits(self.kube, job, name)
        self.last_queue = {"queue": name, **found}
        return kueue.queued_line(found, name) if found["full"] else None

    def _apply_all(self, objects: list[dict[str, Any]], *, run_id: str, dry_run: bool) -> None:
        """Apply ``objects`` in order; on failure delete again those this call created."""
        created: list[dict[str, Any]] = []
        try:
            for obj in objects:
                meta = obj["metadata"]
                new = (
                    not dry_run and self.kube.get(obj["apiVersion"], obj["kind"], meta["name"], self.namespace) is None
                )
                if new:
                    created.append(obj)  # before applying: an unanswered apply may have created it
                self.kube.apply(self._with_secret_data(obj), dry_run=dry_run)
        except BaseException as error:
            leftovers = self._roll_back(created, run_id)
            if leftovers and isinstance(error, KubernetesError):
                raise KubernetesError(f"{error}; also left behind: {leftovers}") from error
            raise

    def _roll_back(self, created: list[dict[str, Any]], run_id: str) -> str:
        """Delete the objects of a failed submission; return what could not be deleted (empty when all went)."""
        left = []
        for obj in reversed(created):
            meta = obj["metadata"]
            where = f"{obj['kind']} {self.namespace}/{meta['name']}"
            try:
                current = self.kube.get(obj["apiVersion"], obj["kind"], meta["name"], self.namespace)
                labels = (current or {}).get("metadata", {}).get("labels") or {}
                if current is not None and labels.get(RUN_ID_LABEL, run_id) == run_id:
                    self.kube.delete(obj["apiVersion"], obj["kind"], meta["name"], self.namespace)
                    self._say(f"removed {where}, which this failed submission had created")
            except KubernetesError as error:
                left.append(
                    f"{where} (could not delete it: {error}; remove it with "
                    f"'kubectl delete {obj['kind'].lower()} -n {self.namespace} {meta['name']}')"
                )
        return "; ".join(left)

    def _replace(self, existing: dict[str, Any]) -> None:
        """Delete ``existing`` with its pods (foreground) and wait until it is gone; clear its rendezvous keys."""
        from fsdp_sdk.k8s.follow import watch_object

        api_version, kind = existing["apiVersion"], existing["kind"]
        name = existing["metadata"]["name"]
        status = JobStatus.from_object(existing)
        self._say(f"replacing {kind} {self.namespace}/{name} ({status.phase}): deleting it and its pods")
        self.kube.delete(api_version, kind, name, self.namespace, propagation_policy="Foreground")
        deadline = self.kube.retry.clock() + REPLACE_TIMEOUT_S
        left = watch_object(
            self.kube, api_version, kind, name, self.namespace, until=lambda obj: obj is None, deadline=deadline
        )
        if left is not None:
            raise KubernetesError(
                f"{kind} {self.namespace}/{name} is still being deleted after {REPLACE_TIMEOUT_S:g}s "
                "(its pods have not ended); check 'kubectl get pods', then submit again"
            )
        _, problem = self._clear_rendezvous(existing, status)
        if problem:
            self._say(f"warning: the old job's rendezvous keys were not cleared: {problem}")

    def _check_storage(self) -> None:
        """Refuse a shared storage claim that does not exist, or that the job's nodes cannot all mount."""
        claim = self.config.job.shared_storage_claim
        if not claim:
            return
        pvc = self.kube.get("v1", "PersistentVolumeClaim", claim, self.namespace)
        if pvc is None:
            raise ConfigError(
                "job.shared_storage_claim",
                f"PersistentVolumeClaim {self.namespace}/{claim} does not exist",
                "create it in the job's namespace (a ReadWriteMany claim on FSx for Lustre or EFS), "
                "or unset job.shared_storage_claim to keep checkpoints on the node's disk",
            )
        modes = set((pvc.get("spec") or {}).get("accessModes") or [])
        if self.config.job.num_workers > 1 and "ReadWriteMany" not in modes:
            raise ConfigError(
                "job.shared_storage_claim",
                f"PersistentVolumeClaim {self.namespace}/{claim} is {', '.join(sorted(modes)) or 'without access modes'}: "
                f"the {self.config.job.num_workers} workers cannot all mount it",
                "use a ReadWriteMany claim (FSx for Lustre, EFS)",
            )

    def _check_service_account(self, job: dict[str, Any]) -> None:
        """Refuse a job whose pods would run under a ServiceAccount that does not exist (the checkpoint bucket's,
        which ``up`` creates): the operator could not make its pods."""
        specs = worker_pod_specs([copy.deepcopy(job)])  # a read: missing levels are not added to the job
        for name in sorted({s["serviceAccountName"] for s in specs if s.get("serviceAccountName")}):
            if self.kube.get("v1", "ServiceAccount", name, self.namespace) is None:
                raise ConfigError(
                    "cluster.checkpoint_bucket",
                    f"the job's pods use the checkpoint bucket through ServiceAccount {self.namespace}/{name}, "
                    "which does not exist",
                    "run 'fsdp-sdk up' for this job.namespace (it creates the ServiceAccount and its EKS Pod Identity "
                    "association), or set job.shared_storage_claim",
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
        return self._queued([self._job(job, api)])[0]

    def list(self, *, api: str | None = None) -> list[JobStatus]:
        """Every job of the configured kind in the namespace."""
        api_version, kind, _ = self._api(api)
        return self._queued(self.kube.list(api_version, kind, self.namespace))

    def _queued(self, objects: builtins.list[dict[str, Any]]) -> builtins.list[JobStatus]:
        """The jobs' statuses, with where Kueue has them (:func:`fsdp_sdk.k8s.queue.queue_states`)."""
        from fsdp_sdk.k8s.queue import queue_states

        states = queue_states(self.kube, objects)
        found = []
        for obj in objects:
            status = JobStatus.from_object(obj)
            state = states.get((status.kind, status.name))
            if state is not None:
                status.queue = state.to_dict()
                waiting = status.phase in ("Pending", "Suspended")
                if state.state == "Queued" or (state.state == "Admitted" and waiting):
                    status.phase = state.state
            found.append(status)
        return found

    def wait_for_completion(
        self,
        job: JobRef | str | None = None,
        *,
        timeout: float | None,
        api: str | None = None,
        on_change: Callable[[JobStatus], None] | None = None,
    ) -> JobStatus:
        """Follow the job's status through the API's watch until it succeeds or fails, or ``timeout`` seconds pass.

        The API server may fail meanwhile (5xx, 429, dropped connections): the watch is
        resumed after a backoff, for as long as the timeout allows. Check
        :attr:`JobStatus.finished` to tell a timeout from an end.

        :param timeout: seconds to wait; ``None`` waits for the end.
        :param on_change: called with the status at the start and at each change of phase.
        :raises KubernetesError: the job does not exist or was deleted meanwhile.
        """
        from fsdp_sdk.k8s.follow import watch_object

        api_version, kind, _ = self._api(api)
        name = self._name(job)
        deadline = None if timeout is None else self.kube.retry.clock() + timeout
        seen: list[JobStatus] = []

        def until(obj: dict[str, Any] | None) -> bool:
            if obj is None:
                gone = "was deleted" if seen else "does not exist"
                raise KubernetesError(f"{kind} {self.namespace}/{name} {gone}; 'fsdp-sdk job list' shows the jobs")
            status = JobStatus.from_object(obj)
            if on_change is not None and (not seen or seen[-1].phase != status.phase):
                on_change(status)
            seen.append(status)
            return status.finished

        watch_object(self.kube, api_version, kind, name, self.namespace, until=until, deadline=deadline)
        return seen[-1]

    def follow(
        self,
        job: JobRef | str | None = None,
        *,
        on_output: Callable[[str], None] | None = None,
        timeout: float | None = None,
        all_workers: bool = False,
        api: str | None = None,
        on_change: Callable[[JobStatus], None] | None = None,
    ) -> FollowResult:
        """Follow the job to its end: its status through the watch, the leader's log (or every worker's) as written.

        The log survives what happens meanwhile: a leader not started yet is waited for, a
        container that restarts is followed again (its new lines only), a dropped stream is
        resumed where it stopped. ``on_output`` is called from a thread of its own.

        :param on_output: receives each log line (with ``all_workers``, prefixed ``[pod] ``).
        :param timeout: seconds to follow; ``None`` until the job ends.
        :param all_workers: every worker's log instead of the leader's.
        :param on_change: called with the status at the start and at each change of phase.
        """
        from fsdp_sdk.k8s.follow import LogFollower

        name = self._name(job)
        deadline = None if timeout is None else self.kube.retry.clock() + timeout  # connects before the thread starts
        finished = threading.Event()
        summaries: list[dict[str, Any]] = []

        def out(line: str) -> None:
            summary = _summary_line(line)
            if summary is not None:
                summaries.append(summary)
            if on_output is not None:
                on_output(line)

        follower = LogFollower(
            self, name, out=out, finished=finished, deadline=deadline, api=api or self.config.job.api
        )
        thread = threading.Thread(target=follower.run, args=(all_workers,), name=f"fsdp-sdk-logs-{name}", daemon=True)
        thread.start()
        try:
            status = self.wait_for_completion(name, timeout=timeout, api=api, on_change=on_change)
        finally:
            finished.set()
        thread.join(timeout=LOG_DRAIN_S)
        error = follower.error
        if thread.is_alive() and error is None:
            error = f"the log was still streaming {LOG_DRAIN_S:g}s after the job ended"
        return FollowResult(status, summaries[-1] if summaries else None, error)

    def wait(
        self,
        job: JobRef | str | None = None,
        *,
        on_output: Callable[[str], None] | None = None,
        timeout: float | None = None,
    ) -> dict[str, Any]:
        """Follow the job to its end, streaming the leader's log to ``on_output``; return the trainer's summary.

        The summary is the last line of the leader's log that is a JSON object
        (the trainer prints its ``summary.json`` there).

        :raises RunError: the job failed, timed out, or ended without a summary.
        """
        name = self._name(job)
        result = self.follow(job, on_output=on_output, timeout=timeout)
        status = result.status
        if not status.finished:
            raise RunError(
                f"job {name}: still {status.phase} after {timeout:g}s; "
                "'fsdp-sdk job logs -f' follows it, 'fsdp-sdk job stop' ends it"
            )
        if not status.succeeded:
            raise RunError(f"job {name} failed: {status.message or 'see fsdp-sdk job logs --all'}")
        summary = result.summary
        if summary is None:
            leader = find_leader(self.kube, self.namespace, name, self.config.job.api)
            if leader is not None:
                for line in self.kube.pod_log(leader, self.namespace, tail_lines=20).splitlines():
                    summary = _summary_line(line) or summary
        if summary is None:
            raise RunError(f"job {name} succeeded but its leader printed no JSON summary line")
        return summary

    def pods(self, job: JobRef | str | None = None, *, api: str | None = None) -> builtins.list[dict[str, Any]]:
        """The job's pods, by the operator's job-name label."""
        return job_pods(self.kube, self.namespace, self._name(job), api or self.config.job.api)

    def leader_pod(self, job: JobRef | str | None = None, *, api: str | None = None) -> str:
        """The name of the pod whose log head has the trainer's ``master_addr=`` line.

        :raises KubernetesError: the job has no pods, or none has printed the line yet.
        """
        name = self._name(job)
        leader = find_leader(self.kube, self.namespace, name, api or self.config.job.api)
        if leader is None:
            raise KubernetesError(
                f"no pod of job {self.namespace}/{name} has printed master_addr= yet; "
                "the trainer prints it at start: 'fsdp-sdk job logs -f' waits for it, or use --all"
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

        With ``follow``, wait for the leader if it has not started, and keep writing lines
        as they come until the job ends (see :meth:`follow`).
        """
        if follow:
            self._job(job, api)  # a job that does not exist is an error now, not a wait
            result = self.follow(job, on_output=out, all_workers=all_workers, api=api)
            if result.log_error:
                self._say(f"warning: {result.log_error}")
            return
        if not all_workers:
            leader = self.leader_pod(job, api=api)
            for line in self.kube.pod_log(leader, self.namespace).splitlines():
                out(line)
            return
        pods = sorted(p["metadata"]["name"] for p in self.pods(job, api=api))
        if not pods:
            raise KubernetesError(
                f"job {self.namespace}/{self._name(job)} has no pods yet; check 'fsdp-sdk job status', "
                "or follow it with 'fsdp-sdk job logs -f --all'"
            )
        for pod in pods:
            for line in self.kube.pod_log(pod, self.namespace).splitlines():
                out(f"[{pod}] {line}")

    # ------------------------------------------------------------------ stop

    def stop(
        self, job: JobRef | str | None = None, *, clear_rendezvous: bool = True, api: str | None = None
    ) -> StopResult:
        """Delete the job (propagation Background) and clear its rendezvous keys in etcd.

        etcd is reached through the API server's service proxy
        (``services/<rdzvHost>:<rdzvPort>/proxy``). A cleanup that fails does not
        undo the deletion: it is reported in :attr:`StopResult.rendezvous_error`
        (torch's keys also expire by TTL, after two hours). A delete whose answer was lost
        is retried; the job found gone then counts as deleted.
        """
        api_version, kind, _ = self._api(api)
        name = self._name(job)
        obj = self.kube.get(api_version, kind, name, self.namespace)
        if obj is None:
            return StopResult(deleted=False)
        status = JobStatus.from_object(obj)
        deleted = self.kube.delete(api_version, kind, name, self.namespace, propagation_policy="Background")
        result = StopResult(deleted=deleted)
        if clear_rendezvous:
            result.rendezvous_keys, result.rendezvous_error = self._clear_rendezvous(obj, status)
        return result

    def _clear_rendezvous(self, obj: dict[str, Any], status: JobStatus) -> tuple[builtins.list[str], str | None]:
        """Delete the job's rendezvous keys in etcd: ``(keys deleted, problem)``."""
        from fsdp_sdk.k8s.rendezvous import etcd_via_service_proxy
        from fsdp_sdk.rendezvous import clear_rendezvous

        if not status.rdzv_id or status.rdzv_backend not in ("etcd-v2", "etcd"):
            return [], None
        elastic = obj["spec"]["elasticPolicy"]
        host = str(elastic.get("rdzvHost") or "etcd").split(".")
        namespace = host[1] if len(host) > 1 and host[1] != "svc" else self.namespace
        try:
            etcd = etcd_via_service_proxy(
                self.kube, namespace=namespace, service=host[0], port=int(elastic.get("rdzvPort") or 2379)
            )
            return clear_rendezvous(etcd, status.rdzv_backend, status.rdzv_id), None
        except (KubernetesError, BackendError) as error:
            return [], str(error)


def _summary_line(line: str) -> dict[str, Any] | None:
    text = line.strip()
    if not (text.startswith("{") and text.endswith("}")):
        return None
    try:
        value = json.loads(text)
    except ValueError:
        return None
    return value if isinstance(value, dict) else None
