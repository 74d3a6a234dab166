"""A loopback Kubernetes API server for tests: real HTTP on 127.0.0.1, a thread per request.

It implements the parts of the API the SDK (through the ``kubernetes`` client's
``DynamicClient`` and ``CoreV1Api``) calls, with the same paths, verbs, status codes and
``Status`` bodies a real API server uses:

* discovery: ``/version``, ``/api``, ``/api/v1``, ``/apis``, ``/apis/<group>/<version>``,
  as ``APIVersions`` / ``APIGroupList`` / ``APIResourceList`` (subresources included), or as
  aggregated discovery (``apidiscovery.k8s.io/v2`` ``APIGroupDiscoveryList``) when the
  ``Accept`` header asks for it, as kubectl does;
* CRUD for the registered resources (namespaced and cluster-scoped): GET (one or a list,
  ``labelSelector`` with ``k=v`` / ``k!=v`` / ``k`` terms, ``fieldSelector`` on
  ``metadata.name`` / ``metadata.namespace``), POST, PUT, DELETE (``propagationPolicy``;
  ``Foreground`` keeps the object with a ``deletionTimestamp`` while :attr:`hold_deletions`),
  server-side apply (``PATCH`` with ``application/apply-patch+yaml``, ``fieldManager``
  required, ``force``); ``dryRun=All`` validates and answers without storing; objects
  whose ``ownerReferences`` name a deleted object are deleted with it;
* watches (``?watch=true``): ``ADDED`` / ``MODIFIED`` / ``DELETED`` events from a
  ``resourceVersion`` on (the current objects as ``ADDED`` first without one), ``BOOKMARK``
  before ``timeoutSeconds`` closes the stream, and the ``ERROR`` event with a 410 ``Expired``
  ``Status`` for a version older than the history (:meth:`expire_history`);
* pod logs (``/pods/<name>/log``): ``follow=true`` streamed until the container ends,
  ``timestamps``, ``sinceSeconds``, ``tailLines``, ``limitBytes``; a restarted container
  (:meth:`restart_container`) has a new log;
* the service proxy ``/api/v1/namespaces/<ns>/services/<name>:<port>/proxy/<path>``,
  forwarded to an upstream URL the test registers (a real local etcd);
* bearer-token authentication (401 without the token).

Every request body is validated before anything is stored: built-in kinds against the
Kubernetes OpenAPI (``kubernetes-validate``), custom resources against their CRD file;
an invalid body gets ``422 Unprocessable Entity`` with a ``Status`` object.

Faults, per test, matched by method and a regular expression on the path (and optionally
on the query), each for a number of requests: :meth:`fail` (an error status: 500, 503, 429
with ``Retry-After``, 409 ``Conflict``...), :meth:`drop` (the connection closes with no
answer; nothing done), :meth:`lose_answer` (the request is carried out, then the
connection closes before the answer), :meth:`slow` (the answer waits), :meth:`cut_stream`
(a watch or followed log breaks off after some events or lines). :attr:`requests` records
every request with the fault it met.

Test hooks: :meth:`set_status`, :meth:`add_pod`, :meth:`append_log`, :meth:`close_log`,
:meth:`restart_container`, :meth:`put`, :meth:`delete`, :meth:`get`, :meth:`objects`,
:meth:`writes`, :meth:`wait_for`.
"""

from __future__ import annotations

import base64
import contextlib
import copy
import io
import itertools
import json
import re
import socket
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
import uuid
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from datetime import datetime, timezone
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import yaml

from .server_apply import ApplyConflict, immutable_changes, record_update, server_side_apply

Validator = Callable[[dict], list[str]]

AGGREGATED_DISCOVERY = "application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList"
_VERBS = ["create", "delete", "deletecollection", "get", "list", "patch", "update", "watch"]


@dataclass(frozen=True)
class Resource:
    """One API resource the server serves."""

    group: str
    version: str
    kind: str
    plural: str
    namespaced: bool = True
    subresources: tuple[str, ...] = ()
    short_names: tuple[str, ...] = ()

    @property
    def group_version(self) -> str:
        return f"{self.group}/{self.version}" if self.group else self.version


BUILTIN_RESOURCES = (
    Resource("", "v1", "Namespace", "namespaces", namespaced=False, subresources=("status",), short_names=("ns",)),
    Resource("", "v1", "Pod", "pods", subresources=("log", "status"), short_names=("po",)),
    Resource("", "v1", "Service", "services", subresources=("proxy", "status"), short_names=("svc",)),
    Resource("", "v1", "Secret", "secrets"),
    Resource("", "v1", "ConfigMap", "configmaps", short_names=("cm",)),
    Resource("", "v1", "ServiceAccount", "serviceaccounts", short_names=("sa",)),
    Resource(
        "", "v1", "PersistentVolumeClaim", "persistentvolumeclaims", subresources=("status",), short_names=("pvc",)
    ),
    Resource("apps", "v1", "Deployment", "deployments", subresources=("status", "scale"), short_names=("deploy",)),
    Resource("apps", "v1", "DaemonSet", "daemonsets", subresources=("status",), short_names=("ds",)),
    Resource("rbac.authorization.k8s.io", "v1", "ClusterRole", "clusterroles", namespaced=False),
    Resource("rbac.authorization.k8s.io", "v1", "ClusterRoleBinding", "clusterrolebindings", namespaced=False),
    Resource(
        "apiextensions.k8s.io",
        "v1",
        "CustomResourceDefinition",
        "customresourcedefinitions",
        namespaced=False,
        subresources=("status",),
        short_names=("crd", "crds"),
    ),
    Resource("kubeflow.org", "v1", "PyTorchJob", "pytorchjobs", subresources=("status", "scale")),
    Resource("trainer.kubeflow.org", "v1alpha1", "TrainJob", "trainjobs", subresources=("status",)),
    Resource("trainer.kubeflow.org", "v1alpha1", "ClusterTrainingRuntime", "clustertrainingruntimes", namespaced=False),
)

#: Kueue's kinds (kueue.x-k8s.io/v1beta2, as Kueue v0.19 serves them): pass ``resources=BUILTIN_RESOURCES +
#: KUEUE_RESOURCES`` for a cluster with Kueue installed.
KUEUE_RESOURCES = (
    Resource("kueue.x-k8s.io", "v1beta2", "ResourceFlavor", "resourceflavors", namespaced=False, short_names=("rf",)),
    Resource(
        "kueue.x-k8s.io",
        "v1beta2",
        "ClusterQueue",
        "clusterqueues",
        namespaced=False,
        subresources=("status",),
        short_names=("cq",),
    ),
    Resource("kueue.x-k8s.io", "v1beta2", "LocalQueue", "localqueues", subresources=("status",), short_names=("lq",)),
    Resource("kueue.x-k8s.io", "v1beta2", "Workload", "workloads", subresources=("status",), short_names=("wl",)),
)
#: The files Kueue's CRDs would have in ../shared/schemas (``config/components/crd/bases`` of its release).
KUEUE_CRD_FILES = {
    "ResourceFlavor": "kueue.x-k8s.io_resourceflavors.yaml",
    "ClusterQueue": "kueue.x-k8s.io_clusterqueues.yaml",
    "LocalQueue": "kueue.x-k8s.io_localqueues.yaml",
    "Workload": "kueue.x-k8s.io_workloads.yaml",
}


def kueue_validators(schemas: Path) -> dict:
    """Validators for Kueue's kinds from their CRDs in ``schemas`` (those present; strict, as for the others)."""
    from fsdp_sdk.k8s.validate import load_crd_schema

    validators: dict[tuple[str, str], Validator] = {}
    for kind, name in KUEUE_CRD_FILES.items():
        if (schemas / name).exists():
            schema = load_crd_schema(schemas / name)
            validators[("kueue.x-k8s.io/v1beta2", kind)] = lambda obj, s=schema: s.errors(obj) + s.pruned(obj)
    return validators


@dataclass
class RecordedRequest:
    """One request as the server received it, and the fault it met (``None``: served normally)."""

    method: str
    path: str
    query: dict[str, list[str]]
    content_type: str
    body: Any
    accept: str = ""
    fault: str | None = None
    at: float = field(default_factory=time.monotonic)
    """When it arrived (``time.monotonic()``)."""
    answered: float | None = None
    """When the server was done with it (answered, dropped or cut), ``None`` until then."""

    @property
    def dry_run(self) -> bool:
        return self.query.get("dryRun") == ["All"]

    @property
    def watch(self) -> bool:
        return self.query.get("watch", [""])[0] in ("true", "1", "True")


@dataclass
class Fault:
    """A misbehaviour for the next ``times`` requests that match ``method``, ``path`` and ``query``.

    :param action: ``status`` (answer ``status`` with a ``Status`` body), ``drop`` (close the
        connection, nothing done), ``lose`` (do it, then close before the answer), ``slow``
        (wait ``seconds`` first), ``cut`` (break a stream off after ``after`` events or lines).
    """

    action: str
    method: str | None
    path: re.Pattern[str]
    times: int
    status: int = 500
    reason: str = ""
    message: str = ""
    retry_after: int | None = None
    seconds: float = 0.0
    after: int = 0
    query: dict[str, str] = field(default_factory=dict)
    hits: int = 0

    def matches(self, method: str, path: str, query: dict[str, list[str]]) -> bool:
        return (
            self.hits < self.times
            and (self.method is None or self.method == method)
            and self.path.search(path) is not None
            and all(query.get(k, [""])[0] == v for k, v in self.query.items())
        )


_REASONS = {
    409: "Conflict",
    429: "TooManyRequests",
    500: "InternalError",
    502: "BadGateway",
    503: "ServiceUnavailable",
    504: "Timeout",
}


@dataclass
class _Log:
    lines: list[tuple[float, str]] = field(default_factory=list)
    closed: bool = True
    changed: threading.Condition = field(default_factory=threading.Condition)

    def append(self, text: str) -> None:
        now = time.time()
        with self.changed:
            for line in text.splitlines(keepends=True):
                if self.lines and not self.lines[-1][1].endswith("\n"):
                    at, head = self.lines.pop()
                    self.lines.append((at, head + line))
                else:
                    self.lines.append((now, line))
            self.changed.notify_all()


def status_body(code: int, reason: str, message: str, details: dict | None = None) -> dict:
    """A ``meta/v1 Status`` failure object as the API server sends it."""
    body = {
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Failure",
        "message": message,
        "reason": reason,
        "code": code,
    }
    if details:
        body["details"] = details
    return body


def rfc3339(at: float) -> str:
    """A kubelet log timestamp: RFC 3339 in UTC with nanoseconds."""
    moment = datetime.fromtimestamp(at, tz=timezone.utc)
    return moment.strftime("%Y-%m-%dT%H:%M:%S.") + f"{moment.microsecond * 1000:09d}Z"


def _selector_matches(selector: str, labels: dict[str, str]) -> bool:
    for term in filter(None, (t.strip() for t in selector.split(","))):
        if "!=" in term:
            key, value = term.split("!=", 1)
            if labels.get(key.strip()) == value.strip():
                return False
        elif "=" in term:
            key, value = term.replace("==", "=").split("=", 1)
            if labels.get(key.strip()) != value.strip():
                return False
        elif term.startswith("!"):
            if term[1:] in labels:
                return False
        elif term not in labels:
            return False
    return True


def _fields_match(selector: str, obj: dict) -> bool:
    meta = obj.get("metadata") or {}
    for term in filter(None, (t.strip() for t in selector.split(","))):
        key, _, value = term.replace("==", "=").partition("=")
        if key == "metadata.name" and meta.get("name") != value:
            return False
        if key == "metadata.namespace" and meta.get("namespace") != value:
            return False
    return True


class FakeApiServer:
    """The server; use as a context manager or call :meth:`start` / :meth:`stop`.

    :param validators: ``(group/version, kind) -> validator`` returning error lines.
    :param token: the bearer token clients must send.
    :param resources: the resources to serve.
    """

    def __init__(
        self,
        validators: dict[tuple[str, str], Validator] | None = None,
        *,
        token: str = "fake-token",
        resources: Iterable[Resource] = BUILTIN_RESOURCES,
    ) -> None:
        self.validators = dict(validators or {})
        self.token = token
        self.resources = list(resources)
        self.requests: list[RecordedRequest] = []
        self.proxies: dict[tuple[str, str, str], str] = {}
        self.faults: list[Fault] = []
        #: While true, ``Foreground`` deletions wait (with a ``deletionTimestamp``) for :meth:`release_deletions`.
        self.hold_deletions = False
        self._objects: dict[tuple[str, str, str, str], dict] = {}  # (group_version, plural, ns, name)
        self._logs: dict[tuple[str, str], _Log] = {}
        self._lock = threading.RLock()
        self._changed = threading.Condition(self._lock)
        self._events: list[tuple[int, str, tuple[str, str, str, str], dict]] = []
        self._expired_before = 0  # watches from an older resourceVersion get 410 Expired
        self._rv = itertools.count(1)
        self._stopping = threading.Event()
        self._httpd: ThreadingHTTPServer | None = None

    # ------------------------------------------------------------------ lifecycle

    @property
    def url(self) -> str:
        assert self._httpd is not None, "server not started"
        host, port = self._httpd.server_address[:2]
        return f"http://{host}:{port}"

    def start(self) -> FakeApiServer:
        handler = type("Handler", (_Handler,), {"api": self})
        self._httpd = ThreadingHTTPServer(("127.0.0.1", 0), handler)
        self._httpd.daemon_threads = True
        threading.Thread(
            target=self._httpd.serve_forever, kwargs={"poll_interval": 0.05}, name="fake-apiserver", daemon=True
        ).start()
        return self

    def stop(self) -> None:
        self._stopping.set()
        with self._changed:
            self._changed.notify_all()
        for log in list(self._logs.values()):
            self._close(log)
        if self._httpd is not None:
            self._httpd.shutdown()
            self._httpd.server_close()
            self._httpd = None

    def __enter__(self) -> FakeApiServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def write_kubeconfig(self, path: Path, *, namespace: str = "default") -> Path:
        """Write a kubeconfig file that points at this server with its token."""
        config = {
            "apiVersion": "v1",
            "kind": "Config",
            "current-context": "fake",
            "clusters": [{"name": "fake", "cluster": {"server": self.url}}],
            "users": [{"name": "fake", "user": {"token": self.token}}],
            "contexts": [{"name": "fake", "context": {"cluster": "fake", "user": "fake", "namespace": namespace}}],
        }
        path.write_text(yaml.safe_dump(config))
        return path

    # ------------------------------------------------------------------ faults

    def _fault(self, action: str, method: str | None, path: str, times: int, **kwargs: Any) -> Fault:
        fault = Fault(action, method, re.compile(path), times, **kwargs)
        with self._lock:
            self.faults.append(fault)
        return fault

    def fail(
        self,
        method: str | None,
        path: str,
        status: int = 500,
        *,
        times: int = 1,
        reason: str | None = None,
        message: str | None = None,
        retry_after: int | None = None,
        query: dict[str, str] | None = None,
    ) -> Fault:
        """Answer the next ``times`` matching requests with ``status`` (and a ``Status`` body), doing nothing."""
        reason = reason or _REASONS.get(status, "InternalError")
        return self._fault(
            "status",
            method,
            path,
            times,
            status=status,
            reason=reason,
            message=message or f"injected {status} {reason}",
            retry_after=retry_after,
            query=query or {},
        )

    def drop(self, method: str | None, path: str, *, times: int = 1, query: dict[str, str] | None = None) -> Fault:
        """Close the connection of the next ``times`` matching requests without an answer; nothing is done."""
        return self._fault("drop", method, path, times, query=query or {})

    def lose_answer(
        self, method: str | None, path: str, *, times: int = 1, query: dict[str, str] | None = None
    ) -> Fault:
        """Carry out the next ``times`` matching requests, then close the connection before the answer."""
        return self._fault("lose", method, path, times, query=query or {})

    def slow(
        self, method: str | None, path: str, seconds: float, *, times: int = 1, query: dict[str, str] | None = None
    ) -> Fault:
        """Hold the answer of the next ``times`` matching requests for ``seconds`` (the request is then served)."""
        return self._fault("slow", method, path, times, seconds=seconds, query=query or {})

    def cut_stream(
        self, method: str | None, path: str, *, after: int = 0, times: int = 1, query: dict[str, str] | None = None
    ) -> Fault:
        """Break the next ``times`` matching watch or followed-log streams off after ``after`` events or lines."""
        return self._fault("cut", method, path, times, after=after, query=query or {})

    def take_fault(self, method: str, path: str, query: dict[str, list[str]]) -> Fault | None:
        with self._lock:
            for fault in self.faults:
                if fault.matches(method, path, query):
                    fault.hits += 1
                    return fault
        return None

    def faults_pending(self) -> list[Fault]:
        """The faults not yet used up."""
        with self._lock:
            return [f for f in self.faults if f.hits < f.times]

    def expire_history(self) -> None:
        """Forget the change history: a watch from any current resourceVersion now gets 410 Expired."""
        with self._lock:
            self._expired_before = next(self._rv)
            self._events.clear()

    # ------------------------------------------------------------------ test hooks

    def resource(self, api_version: str, kind: str) -> Resource:
        return next(r for r in self.resources if r.group_version == api_version and r.kind == kind)

    def put(self, obj: dict) -> dict:
        """Store ``obj`` as if created or updated by someone else (no validation, not recorded as a request)."""
        res = self.resource(obj["apiVersion"], obj["kind"])
        ns = obj["metadata"].get("namespace", "default") if res.namespaced else ""
        key = (res.group_version, res.plural, ns, obj["metadata"]["name"])
        with self._lock:
            existed = key in self._objects
            stored = self._stamp(copy.deepcopy(obj), ns if res.namespaced else None)
            self._objects[key] = stored
            self._record("MODIFIED" if existed else "ADDED", key, stored)
            return copy.deepcopy(stored)

    def get(self, api_version: str, kind: str, name: str, namespace: str = "default") -> dict | None:
        """The stored object, or ``None``."""
        res = self.resource(api_version, kind)
        with self._lock:
            obj = self._objects.get((res.group_version, res.plural, namespace if res.namespaced else "", name))
            return copy.deepcopy(obj) if obj else None

    def delete(self, api_version: str, kind: str, name: str, namespace: str = "default") -> None:
        """Delete a stored object as someone else would (its dependents go with it)."""
        res = self.resource(api_version, kind)
        with self._lock:
            self._remove((res.group_version, res.plural, namespace if res.namespaced else "", name))

    def objects(self, kind: str | None = None) -> list[dict]:
        with self._lock:
            return [copy.deepcopy(o) for o in self._objects.values() if kind is None or o["kind"] == kind]

    def set_status(self, api_version: str, kind: str, name: str, status: dict, namespace: str = "default") -> None:
        """Set the ``status`` of a stored object, as a controller would (a new resourceVersion, a MODIFIED event)."""
        res = self.resource(api_version, kind)
        key = (res.group_version, res.plural, namespace, name)
        with self._lock:
            obj = self._objects[key]
            obj["status"] = copy.deepcopy(status)
            obj["metadata"]["resourceVersion"] = str(next(self._rv))
            self._record("MODIFIED", key, obj)

    def wait_for(self, predicate: Callable[[], Any], timeout: float = 20) -> Any:
        """Block until ``predicate()`` is true after a change (or now), at most ``timeout`` seconds; return it."""
        deadline = time.monotonic() + timeout
        with self._changed:
            while True:
                value = predicate()
                if value:
                    return value
                left = deadline - time.monotonic()
                if left <= 0:
                    raise TimeoutError(f"the fake API server did not reach the expected state in {timeout}s")
                self._changed.wait(timeout=min(left, 0.5))

    def wait_for_request(
        self,
        method: str,
        path_part: str,
        *,
        since: float = 0.0,
        answered: bool = False,
        query: dict[str, str] | None = None,
        timeout: float = 20,
    ) -> RecordedRequest:
        """Block until a ``method`` request whose path contains ``path_part`` (and whose query has each of
        ``query``'s values, e.g. ``{"follow": "true"}`` for a followed log) arrived at or after ``since``
        (``time.monotonic()``; with ``answered``, until it was answered too): a test waits for what the client did,
        not for a time. The server signals each arrival and each answer, so nothing polls.

        Raises :class:`TimeoutError` after ``timeout`` seconds, naming the requests that did come to that path.
        """
        assert since <= time.monotonic(), "since is a time.monotonic() of the past (the requests it admits)"
        wanted = query or {}

        def found() -> RecordedRequest | None:
            for request in self.requests:
                if (
                    request.method == method
                    and path_part in request.path
                    and request.at >= since
                    and all(request.query.get(k, [""])[0] == v for k, v in wanted.items())
                    and (request.answered is not None or not answered)
                ):
                    return request
            return None

        deadline = time.monotonic() + timeout
        with self._changed:
            while (request := found()) is None:
                left = deadline - time.monotonic()
                if left <= 0 or self._stopping.is_set():
                    came = [f"{r.method} {r.path}?{urllib.parse.urlencode(r.query, doseq=True)}" for r in self.requests]
                    came = [c for c in came if path_part in c]
                    raise TimeoutError(
                        f"no {method} request to ...{path_part} with {wanted or 'any query'}"
                        f"{' answered' if answered else ''} within {timeout:g}s; to that path came: {came or 'none'}"
                    )
                self._changed.wait(timeout=left)
            return request

    def add_pod(
        self,
        name: str,
        *,
        labels: dict[str, str],
        log: str = "",
        phase: str = "Running",
        follow_open: bool = False,
        namespace: str = "default",
        owner: dict | None = None,
    ) -> None:
        """Add a pod with a log; with ``follow_open`` a followed log stays open until :meth:`close_log`.

        :param owner: an object the pod belongs to (its ``ownerReferences``): deleting it deletes the pod.
        """
        meta: dict[str, Any] = {"name": name, "namespace": namespace, "labels": labels}
        if owner is not None:
            meta["ownerReferences"] = [
                {
                    "apiVersion": owner["apiVersion"],
                    "kind": owner["kind"],
                    "name": owner["metadata"]["name"],
                    "uid": owner["metadata"]["uid"],
                    "controller": True,
                }
            ]
        log_entry = _Log(closed=not follow_open)
        log_entry.append(log)
        with self._lock:
            self._logs[(namespace, name)] = log_entry
        self.put(
            {
                "apiVersion": "v1",
                "kind": "Pod",
                "metadata": meta,
                "spec": {"containers": [{"name": "pytorch", "image": "trainer"}]},
                "status": {
                    "phase": phase,
                    "containerStatuses": [{"name": "pytorch", "restartCount": 0, "ready": phase == "Running"}],
                },
            }
        )

    def set_pod_phase(self, name: str, phase: str, namespace: str = "default") -> None:
        pod = self.get("v1", "Pod", name, namespace)
        assert pod is not None, f"no pod {name}"
        status = dict(pod.get("status") or {})
        status["phase"] = phase
        self.set_status("v1", "Pod", name, status, namespace)

    def append_log(self, name: str, text: str, namespace: str = "default") -> None:
        self._logs[(namespace, name)].append(text)

    def log_text(self, name: str, namespace: str = "default") -> str:
        log = self._logs[(namespace, name)]
        with log.changed:
            return "".join(line for _, line in log.lines)

    def close_log(self, name: str, namespace: str = "default") -> None:
        """End the container: followers of its log reach the end of the stream."""
        self._close(self._logs[(namespace, name)])

    def restart_container(self, name: str, *, log: str = "", namespace: str = "default") -> None:
        """The kubelet restarts the pod's container: the old log ends, a new (open) one starts, restartCount grows."""
        with self._lock:
            old = self._logs[(namespace, name)]
            new = _Log(closed=False)
            new.append(log)
            self._logs[(namespace, name)] = new
        self._close(old)
        pod = self.get("v1", "Pod", name, namespace)
        assert pod is not None
        status = copy.deepcopy(pod.get("status") or {})
        for container in status.get("containerStatuses") or []:
            container["restartCount"] = int(container.get("restartCount") or 0) + 1
        status["phase"] = "Running"
        self.set_status("v1", "Pod", name, status, namespace)

    @staticmethod
    def _close(log: _Log) -> None:
        with log.changed:
            log.closed = True
            log.changed.notify_all()

    def release_deletions(self) -> None:
        """Finish the Foreground deletions :attr:`hold_deletions` kept waiting."""
        with self._lock:
            self.hold_deletions = False
            for key, obj in list(self._objects.items()):
                if (obj.get("metadata") or {}).get("deletionTimestamp"):
                    self._remove(key)

    def proxy_service(self, namespace: str, service: str, port: str, upstream: str) -> None:
        """Forward ``services/<service>:<port>/proxy/...`` to ``upstream`` (e.g. ``http://127.0.0.1:2379``)."""
        self.proxies[(namespace, service, port)] = upstream.rstrip("/")

    def writes(self, *, include_dry_run: bool = True) -> list[RecordedRequest]:
        """The mutating requests received (POST, PUT, PATCH, DELETE), proxy calls excluded."""
        return [
            r
            for r in self.requests
            if r.method in ("POST", "PUT", "PATCH", "DELETE")
            and "/proxy/" not in r.path
            and (include_dry_run or not r.dry_run)
        ]

    # ------------------------------------------------------------------ internals (the lock is held)

    def _stamp(self, obj: dict, namespace: str | None) -> dict:
        meta = obj.setdefault("metadata", {})
        if namespace is not None:
            meta["namespace"] = namespace
        meta.setdefault("uid", str(uuid.uuid4()))
        meta.setdefault("creationTimestamp", time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()))
        meta["resourceVersion"] = str(next(self._rv))
        return obj

    def _record(self, kind: str, key: tuple[str, str, str, str], obj: dict) -> None:
        self._events.append((int(obj["metadata"]["resourceVersion"]), kind, key, copy.deepcopy(obj)))
        self._changed.notify_all()

    def _remove(self, key: tuple[str, str, str, str]) -> None:
        obj = self._objects.pop(key, None)
        if obj is None:
            return
        obj["metadata"]["resourceVersion"] = str(next(self._rv))
        self._record("DELETED", key, obj)
        if key[1] == "pods":
            log = self._logs.get((key[2], key[3]))
            if log is not None:
                self._close(log)
        uid = obj["metadata"].get("uid")
        for other_key, other in list(self._objects.items()):
            owners = (other.get("metadata") or {}).get("ownerReferences") or []
            if any(o.get("uid") == uid for o in owners):
                self._remove(other_key)

    def validate(self, obj: dict) -> list[str]:
        validator = self.validators.get((obj.get("apiVersion"), obj.get("kind")))
        return validator(obj) if validator else []


class _Handler(BaseHTTPRequestHandler):
    api: FakeApiServer
    protocol_version = "HTTP/1.1"
    _cut_after: int | None = None

    def log_message(self, format: str, *args: Any) -> None:  # quiet
        pass

    # ---------------------------------------------------------------- plumbing

    def _send_json(
        self, code: int, body: Any, *, content_type: str = "application/json", headers: dict | None = None
    ) -> None:
        data = json.dumps(body).encode()
        self.send_response(code)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(data)))
        for key, value in (headers or {}).items():
            self.send_header(key, value)
        self.end_headers()
        self.wfile.write(data)

    def _fail(
        self, code: int, reason: str, message: str, details: dict | None = None, headers: dict | None = None
    ) -> None:
        self._send_json(code, status_body(code, reason, message, details), headers=headers)

    def _drop(self) -> None:
        """Close the connection without (the rest of) an answer."""
        self.close_connection = True
        with contextlib.suppress(OSError):
            self.wfile.flush()
        with contextlib.suppress(OSError):
            self.connection.shutdown(socket.SHUT_RDWR)

    def _read_body(self) -> tuple[str, Any]:
        length = int(self.headers.get("Content-Length") or 0)
        raw = self.rfile.read(length) if length else b""
        content_type = (self.headers.get("Content-Type") or "").split(";")[0].strip()
        if not raw:
            return content_type, None
        if content_type.endswith("yaml"):
            return content_type, yaml.safe_load(raw)
        try:
            return content_type, json.loads(raw)
        except ValueError:
            return content_type, raw.decode(errors="replace")

    def do_GET(self) -> None:
        self._dispatch("GET")

    def do_POST(self) -> None:
        self._dispatch("POST")

    def do_PUT(self) -> None:
        self._dispatch("PUT")

    def do_PATCH(self) -> None:
        self._dispatch("PATCH")

    def do_DELETE(self) -> None:
        self._dispatch("DELETE")

    def _dispatch(self, method: str) -> None:
        url = urllib.parse.urlsplit(self.path)
        query = urllib.parse.parse_qs(url.query, keep_blank_values=True)
        content_type, body = self._read_body()
        record = RecordedRequest(method, url.path, query, content_type, body, self.headers.get("Accept") or "")
        with self.api._changed:  # a test may wait for this request (wait_for_request)
            self.api.requests.append(record)
            self.api._changed.notify_all()
        try:
            if self.headers.get("Authorization") != f"Bearer {self.api.token}":
                self._fail(401, "Unauthorized", "Unauthorized")
                return
            parts = [urllib.parse.unquote(p) for p in url.path.strip("/").split("/") if p]
            fault = self.api.take_fault(method, url.path, query)
            record.fault = fault.action if fault else None
            self._serve(fault, method, parts, query, content_type, body, url.query)
        finally:
            record.answered = time.monotonic()
            with self.api._changed:
                self.api._changed.notify_all()

    def _serve(
        self, fault: Fault | None, method: str, parts: list[str], query: dict, content_type: str, body: Any, raw: str
    ) -> None:
        with contextlib.suppress(BrokenPipeError, ConnectionResetError):  # the client hung up
            if fault is None:
                self._route(method, parts, query, content_type, body, raw)
            elif fault.action == "status":
                headers = {"Retry-After": str(fault.retry_after)} if fault.retry_after is not None else None
                self._fail(fault.status, fault.reason, fault.message, headers=headers)
            elif fault.action == "drop":
                self._drop()
            elif fault.action == "lose":
                real, self.wfile = self.wfile, io.BytesIO()
                try:
                    self._route(method, parts, query, content_type, body, raw)
                finally:
                    self.wfile = real
                self._drop()
            elif fault.action == "slow":
                self.api._stopping.wait(fault.seconds)
                self._route(method, parts, query, content_type, body, raw)
            elif fault.action == "cut":
                self._cut_after = fault.after
                self._route(method, parts, query, content_type, body, raw)

    # ---------------------------------------------------------------- discovery

    def _aggregated(self) -> bool:
        return any(
            "as=APIGroupDiscoveryList" in part and "g=apidiscovery.k8s.io" in part and "v=v2" in part
            for part in (self.headers.get("Accept") or "").split(",")
        )

    @staticmethod
    def _resource_entries(served: list[Resource]) -> list[dict]:
        entries = []
        for r in served:
            entries.append(
                {
                    "name": r.plural,
                    "singularName": r.kind.lower(),
                    "namespaced": r.namespaced,
                    "kind": r.kind,
                    "verbs": _VERBS,
                    **({"shortNames": list(r.short_names)} if r.short_names else {}),
                }
            )
            for sub in r.subresources:
                verbs = {"log": ["get"], "proxy": ["create", "delete", "get", "patch", "update"]}.get(
                    sub, ["get", "patch", "update"]
                )
                kind = {"log": "Pod", "proxy": "ServiceProxyOptions", "scale": "Scale"}.get(sub, r.kind)
                entries.append(
                    {
                        "name": f"{r.plural}/{sub}",
                        "singularName": "",
                        "namespaced": r.namespaced,
                        "kind": kind,
                        "verbs": verbs,
                    }
                )
        return entries

    @staticmethod
    def _discovery_entries(served: list[Resource]) -> list[dict]:
        entries = []
        for r in served:
            entry: dict[str, Any] = {
                "resource": r.plural,
                "responseKind": {"group": r.group, "version": r.version, "kind": r.kind},
                "scope": "Namespaced" if r.namespaced else "Cluster",
                "singularResource": r.kind.lower(),
                "verbs": _VERBS,
            }
            if r.short_names:
                entry["shortNames"] = list(r.short_names)
            if r.subresources:
                entry["subresources"] = [
                    {
                        "subresource": sub,
                        "responseKind": {"group": "", "version": "", "kind": "Pod"}
                        if sub == "log"
                        else {"group": r.group, "version": r.version, "kind": r.kind},
                        "verbs": ["get"] if sub == "log" else ["get", "patch", "update"],
                    }
                    for sub in r.subresources
                ]
            entries.append(entry)
        return entries

    def _discovery(self, parts: list[str]) -> bool:
        """Answer the discovery paths; ``False`` when ``parts`` is not one."""
        api = self.api
        if parts == ["version"]:
            self._send_json(
                200,
                {
                    "major": "1",
                    "minor": "31",
                    "gitVersion": "v1.31.0-fake",
                    "gitCommit": "0" * 40,
                    "gitTreeState": "clean",
                    "buildDate": "2024-08-13T00:00:00Z",
                    "goVersion": "go1.22.5",
                    "compiler": "gc",
                    "platform": "linux/amd64",
                },
            )
            return True
        if parts in (["api"], ["apis"]):
            core = parts == ["api"]
            groups: dict[str, list[str]] = {}
            for r in api.resources:
                if bool(r.group) != core and r.version not in groups.setdefault(r.group, []):
                    groups[r.group].append(r.version)
            if self._aggregated():
                items = [
                    {
                        "metadata": {"name": g} if g else {},
                        "versions": [
                            {
                                "version": v,
                                "resources": self._discovery_entries(
                                    [r for r in api.resources if r.group == g and r.version == v]
                                ),
                                "freshness": "Current",
                            }
                            for v in vs
                        ],
                    }
                    for g, vs in groups.items()
                ]
                self._send_json(
                    200,
                    {
                        "kind": "APIGroupDiscoveryList",
                        "apiVersion": "apidiscovery.k8s.io/v2",
                        "metadata": {},
                        "items": items,
                    },
                    content_type=AGGREGATED_DISCOVERY,
                )
            elif core:
                self._send_json(
                    200,
                    {
                        "kind": "APIVersions",
                        "versions": ["v1"],
                        "serverAddressByClientCIDRs": [{"clientCIDR": "0.0.0.0/0", "serverAddress": "127.0.0.1:6443"}],
                    },
                )
            else:
                self._send_json(
                    200,
                    {
                        "kind": "APIGroupList",
                        "apiVersion": "v1",
                        "groups": [
                            {
                                "name": g,
                                "versions": [{"groupVersion": f"{g}/{v}", "version": v} for v in vs],
                                "preferredVersion": {"groupVersion": f"{g}/{vs[0]}", "version": vs[0]},
                            }
                            for g, vs in groups.items()
                        ],
                    },
                )
            return True
        if parts[:1] == ["apis"] and len(parts) == 2:
            versions = sorted({r.version for r in api.resources if r.group == parts[1]})
            if not versions:
                return False
            self._send_json(
                200,
                {
                    "kind": "APIGroup",
                    "apiVersion": "v1",
                    "name": parts[1],
                    "versions": [{"groupVersion": f"{parts[1]}/{v}", "version": v} for v in versions],
                    "preferredVersion": {"groupVersion": f"{parts[1]}/{versions[0]}", "version": versions[0]},
                },
            )
            return True
        return False

    # ---------------------------------------------------------------- routing

    def _route(self, method: str, parts: list[str], query: dict, content_type: str, body: Any, raw_query: str) -> None:
        api = self.api
        if method == "GET" and self._discovery(parts):
            return
        if parts[:1] == ["api"] and len(parts) >= 2:
            group_version, rest = parts[1], parts[2:]
        elif parts[:1] == ["apis"] and len(parts) >= 3:
            group_version, rest = f"{parts[1]}/{parts[2]}", parts[3:]
        else:
            self._fail(404, "NotFound", f"the server could not find the requested resource ({'/'.join(parts)})")
            return
        served = [r for r in api.resources if r.group_version == group_version]
        if not served:
            self._fail(404, "NotFound", f"the server could not find the requested resource ({group_version})")
            return
        if not rest:
            if method != "GET":
                self._fail(405, "MethodNotAllowed", "method not allowed")
                return
            self._send_json(
                200,
                {
                    "kind": "APIResourceList",
                    "apiVersion": "v1",
                    "groupVersion": group_version,
                    "resources": self._resource_entries(served),
                },
            )
            return
        namespace = ""
        if rest[0] == "namespaces" and len(rest) >= 3:
            namespace, rest = rest[1], rest[2:]
        plural, name, sub = rest[0], (rest[1] if len(rest) > 1 else ""), rest[2:]
        res = next((r for r in served if r.plural == plural), None)
        if res is None or (res.namespaced != bool(namespace) and not (method == "GET" and not name)):
            self._fail(404, "NotFound", f"the server could not find the requested resource ({plural})")
            return
        if res.kind == "Service" and sub[:1] == ["proxy"]:
            self._proxy(method, namespace, name, sub[1:], raw_query, body, content_type)
        elif res.kind == "Pod" and sub == ["log"]:
            self._pod_log(namespace, name, query)
        elif sub:
            self._fail(404, "NotFound", f"subresource {'/'.join(sub)} is not served")
        elif method == "GET" and not name and query.get("watch", [""])[0] in ("true", "1", "True"):
            self._watch(res, namespace, query)
        elif method == "GET":
            self._get(res, namespace, name, query)
        elif method == "POST" and not name:
            self._write(
                res,
                namespace,
                body.get("metadata", {}).get("name", "") if isinstance(body, dict) else "",
                body,
                query,
                create=True,
            )
        elif method in ("PUT", "PATCH") and name:
            if method == "PATCH" and content_type != "application/apply-patch+yaml":
                self._fail(
                    415, "UnsupportedMediaType", f"the fake server only supports server-side apply, not {content_type}"
                )
            elif method == "PATCH" and not query.get("fieldManager"):
                self._fail(400, "BadRequest", "PATCH, fieldManager: Required value: is required for apply patch")
            else:
                self._write(res, namespace, name, body, query, create=False, apply=method == "PATCH")
        elif method == "DELETE" and name:
            self._delete(res, namespace, name, query)
        else:
            self._fail(405, "MethodNotAllowed", f"{method} is not allowed here")

    # ---------------------------------------------------------------- verbs

    def _key(self, res: Resource, namespace: str, name: str) -> tuple[str, str, str, str]:
        return (res.group_version, res.plural, namespace, name)

    def _matching(self, res: Resource, namespace: str, query: dict) -> Callable[[tuple, dict], bool]:
        labels = (query.get("labelSelector") or [""])[0]
        fields = (query.get("fieldSelector") or [""])[0]

        def matches(key: tuple, obj: dict) -> bool:
            gv, plural, ns, _ = key
            return (
                gv == res.group_version
                and plural == res.plural
                and (not namespace or ns == namespace)
                and _selector_matches(labels, obj["metadata"].get("labels") or {})
                and _fields_match(fields, obj)
            )

        return matches

    def _get(self, res: Resource, namespace: str, name: str, query: dict) -> None:
        api = self.api
        with api._lock:
            if name:
                obj = api._objects.get(self._key(res, namespace, name))
                if obj is None:
                    self._fail(
                        404,
                        "NotFound",
                        f'{res.plural}.{res.group or "core"} "{name}" not found',
                        {"name": name, "group": res.group, "kind": res.plural},
                    )
                else:
                    self._send_json(200, obj)
                return
            matches = self._matching(res, namespace, query)
            items = [o for key, o in sorted(api._objects.items()) if matches(key, o)]
            self._send_json(
                200,
                {
                    "kind": f"{res.kind}List",
                    "apiVersion": res.group_version,
                    "metadata": {"resourceVersion": str(next(api._rv))},
                    "items": items,
                },
            )

    def _start_chunked(self, content_type: str) -> None:
        self.send_response(200)
        self.send_header("Content-Type", content_type)
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()

    def _chunk(self, data: bytes) -> None:
        self.wfile.write(b"%x\r\n%s\r\n" % (len(data), data))
        self.wfile.flush()

    def _end_chunked(self) -> None:
        self.wfile.write(b"0\r\n\r\n")
        self.wfile.flush()

    def _watch(self, res: Resource, namespace: str, query: dict) -> None:
        api = self.api
        matches = self._matching(res, namespace, query)
        timeout = float((query.get("timeoutSeconds") or ["1800"])[0])
        bookmarks = (query.get("allowWatchBookmarks") or [""])[0] in ("true", "1")
        since = (query.get("resourceVersion") or [""])[0]
        deadline = time.monotonic() + timeout
        self._start_chunked("application/json")
        sent = 0
        pending: list[dict] = []
        with api._lock:
            if since and since != "0" and int(since) < api._expired_before:
                message = f"too old resource version: {since} ({api._expired_before})"
                pending.append({"type": "ERROR", "object": status_body(410, "Expired", message)})
                cursor = None
            elif since and since != "0":
                cursor = int(since)
            else:
                pending += [
                    {"type": "ADDED", "object": copy.deepcopy(o)}
                    for key, o in sorted(api._objects.items())
                    if matches(key, o)
                ]
                cursor = max((e[0] for e in api._events), default=0)
        while True:
            for event in pending:
                if self._cut_after is not None and sent >= self._cut_after:
                    break
                self._chunk(json.dumps(event).encode() + b"\n")
                sent += 1
            if self._cut_after is not None and sent >= self._cut_after:
                self._drop()
                return
            pending = []
            if cursor is None:
                break
            with api._lock:
                while True:
                    news = [e for e in api._events if e[0] > cursor and matches(e[2], e[3])]
                    cursor = max([cursor, *(e[0] for e in api._events if e[0] > cursor)])
                    left = deadline - time.monotonic()
                    if news or left <= 0 or api._stopping.is_set():
                        break
                    api._changed.wait(timeout=min(left, 0.5))
                pending = [{"type": kind, "object": copy.deepcopy(obj)} for _, kind, _, obj in news]
            if not pending and (deadline - time.monotonic() <= 0 or api._stopping.is_set()):
                if bookmarks:
                    mark = {
                        "kind": res.kind,
                        "apiVersion": res.group_version,
                        "metadata": {"resourceVersion": str(cursor)},
                    }
                    self._chunk(json.dumps({"type": "BOOKMARK", "object": mark}).encode() + b"\n")
                break
        self._end_chunked()

    def _write(
        self, res: Resource, namespace: str, name: str, body: Any, query: dict, *, create: bool, apply: bool = False
    ) -> None:
        api = self.api
        if not isinstance(body, dict):
            self._fail(400, "BadRequest", "the request body is not an object")
            return
        if body.get("apiVersion") != res.group_version or body.get("kind") != res.kind:
            self._fail(
                400,
                "BadRequest",
                f"the body's apiVersion/kind {body.get('apiVersion')}/{body.get('kind')} does not match "
                f"{res.group_version}/{res.kind}",
            )
            return
        meta = body.get("metadata") or {}
        if meta.get("name") != name or not name:
            self._fail(400, "BadRequest", "the name of the object does not match the name on the URL")
            return
        if res.namespaced and meta.get("namespace", namespace) != namespace:
            self._fail(400, "BadRequest", "the namespace of the object does not match the namespace on the URL")
            return
        errors = api.validate(body)
        if errors:
            self._fail(
                422,
                "Invalid",
                f'{res.kind} "{name}" is invalid: ' + "; ".join(errors),
                {
                    "name": name,
                    "group": res.group,
                    "kind": res.kind,
                    "causes": [{"reason": "FieldValueInvalid", "message": e} for e in errors],
                },
            )
            return
        dry_run = query.get("dryRun") == ["All"]
        key = self._key(res, namespace, name)
        with api._lock:
            current = api._objects.get(key)
            if create and current is not None:
                self._fail(409, "AlreadyExists", f'{res.plural}.{res.group or "core"} "{name}" already exists')
                return
            if not create and not apply and current is None:
                self._fail(404, "NotFound", f'{res.plural}.{res.group or "core"} "{name}" not found')
                return
            if current is not None and (current.get("metadata") or {}).get("deletionTimestamp"):
                self._fail(
                    409, "Conflict", f'{res.plural}.{res.group or "core"} "{name}" is being deleted; try again later'
                )
                return
            manager = (query.get("fieldManager") or [self.headers.get("User-Agent", "unknown").split("/")[0]])[0]
            if apply:
                try:
                    stored = server_side_apply(
                        current,
                        body,
                        manager,
                        force=query.get("force", [""])[0] in ("true", "1"),
                        api_version=res.group_version,
                    )
                except ApplyConflict as conflict:
                    self._fail(
                        409,
                        "Conflict",
                        conflict.message(res.kind, name),
                        {
                            "name": name,
                            "group": res.group,
                            "kind": res.plural,
                            "causes": [
                                {"reason": "FieldManagerConflict", "message": f'conflict with "{m}"', "field": f".{f}"}
                                for m, f in conflict.conflicts
                            ],
                        },
                    )
                    return
            else:
                stored = record_update(current, body, manager, api_version=res.group_version)
            immutable = immutable_changes(res.kind, current, stored) if current is not None else []
            if immutable:
                self._fail(
                    422,
                    "Invalid",
                    f'{res.kind}.{res.group or "core"} "{name}" is invalid: ' + "; ".join(immutable),
                    {
                        "name": name,
                        "group": res.group,
                        "kind": res.kind,
                        "causes": [
                            {"reason": "FieldValueInvalid", "message": e, "field": e.split(":")[0]} for e in immutable
                        ],
                    },
                )
                return
            if res.kind == "Secret" and stored.get("stringData"):
                data = dict(stored.get("data") or {})
                for k, v in stored.pop("stringData").items():
                    data[k] = base64.b64encode(str(v).encode()).decode()
                stored["data"] = data
            stored = api._stamp(stored, namespace if res.namespaced else None)
            if not dry_run:
                api._objects[key] = stored
                api._record("ADDED" if current is None else "MODIFIED", key, stored)
        self._send_json(201 if current is None else 200, stored)

    def _delete(self, res: Resource, namespace: str, name: str, query: dict) -> None:
        api = self.api
        policy = (query.get("propagationPolicy") or [""])[0]
        with api._lock:
            key = self._key(res, namespace, name)
            obj = api._objects.get(key)
            if obj is None:
                self._fail(404, "NotFound", f'{res.plural}.{res.group or "core"} "{name}" not found')
                return
            if query.get("dryRun") != ["All"]:
                if policy == "Foreground" and api.hold_deletions:
                    meta = obj["metadata"]
                    meta.setdefault("deletionTimestamp", time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()))
                    meta["finalizers"] = sorted({*meta.get("finalizers", []), "foregroundDeletion"})
                    meta["resourceVersion"] = str(next(api._rv))
                    api._record("MODIFIED", key, obj)
                    self._send_json(200, obj)
                    return
                api._remove(key)
        self._send_json(
            200,
            {"kind": "Status", "apiVersion": "v1", "status": "Success", "details": {"name": name, "kind": res.plural}},
        )

    def _pod_log(self, namespace: str, name: str, query: dict) -> None:
        log = self.api._logs.get((namespace, name))
        if log is None:
            self._fail(404, "NotFound", f'pods "{name}" not found')
            return
        limit = int(query["limitBytes"][0]) if "limitBytes" in query else None
        tail = int(query["tailLines"][0]) if "tailLines" in query else None
        since = float(query["sinceSeconds"][0]) if "sinceSeconds" in query else None
        stamps = (query.get("timestamps") or [""])[0] in ("true", "1")
        follow = query.get("follow") == ["true"]

        def render(entries: list[tuple[float, str]]) -> bytes:
            return "".join(f"{rfc3339(at)} {line}" if stamps else line for at, line in entries).encode()

        with log.changed:
            start = 0
            if since is not None:
                cutoff = time.time() - since
                start = next((i for i, (at, _) in enumerate(log.lines) if at >= cutoff), len(log.lines))
            if tail is not None:
                start = max(start, len(log.lines) - tail)
            entries = list(log.lines[start:])
        if not follow:
            data = render(entries)
            data = data[:limit] if limit is not None else data
            self.send_response(200)
            self.send_header("Content-Type", "text/plain")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)
            return
        self._start_chunked("text/plain")
        sent_lines = 0
        position = start
        while True:
            if self._cut_after is not None and sent_lines >= self._cut_after:
                self._drop()
                return
            with log.changed:
                while len(log.lines) == position and not log.closed and not self.api._stopping.is_set():
                    log.changed.wait(timeout=0.5)
                entries, closed = list(log.lines[position:]), log.closed or self.api._stopping.is_set()
            for entry in entries:
                if self._cut_after is not None and sent_lines >= self._cut_after:
                    self._drop()
                    return
                self._chunk(render([entry]))
                sent_lines += 1
                position += 1
            if closed and position == len(log.lines):
                break
        self._end_chunked()

    def _proxy(
        self, method: str, namespace: str, service: str, path: list[str], raw_query: str, body: Any, content_type: str
    ) -> None:
        name, _, port = service.partition(":")
        upstream = self.api.proxies.get((namespace, name, port))
        if upstream is None:
            self._fail(503, "ServiceUnavailable", f'no endpoints available for service "{service}"')
            return
        target = upstream + "/" + "/".join(urllib.parse.quote(p) for p in path) + (f"?{raw_query}" if raw_query else "")
        data = None if body is None else (body if isinstance(body, str) else json.dumps(body)).encode()
        request = urllib.request.Request(target, data=data, method=method)
        if content_type:
            request.add_header("Content-Type", content_type)
        try:
            with urllib.request.urlopen(request, timeout=10) as response:
                code, payload, ctype = response.status, response.read(), response.headers.get("Content-Type", "")
        except urllib.error.HTTPError as error:
            code, payload, ctype = error.code, error.read(), error.headers.get("Content-Type", "")
        self.send_response(code)
        self.send_header("Content-Type", ctype or "application/octet-stream")
        self.send_header("Content-Length", str(len(payload)))
        self.end_headers()
        self.wfile.write(payload)


def schema_validators(
    pytorchjob_crd: Path | None,
    trainjob_crd: Path | None,
    *,
    version: str | None = None,
    runtime_crd: Path | None = None,
) -> dict:
    """Validators for the server built from ``fsdp_sdk.k8s.validate`` and the shared CRD files.

    A custom resource with a field its CRD would prune is refused too, as the API server does with
    strict field validation (``kubectl --validate=strict``).
    """
    from fsdp_sdk.k8s.validate import (
        DEFAULT_KUBERNETES_VERSION,
        load_crd_schema,
        validate_builtin,
        validate_pod_template,
    )

    version = version or DEFAULT_KUBERNETES_VERSION

    def builtin(obj: dict) -> list[str]:
        return validate_builtin(obj, version=version)

    validators: dict[tuple[str, str], Validator] = {
        (r.group_version, r.kind): builtin for r in BUILTIN_RESOURCES if not r.group.endswith("kubeflow.org")
    }
    if pytorchjob_crd is not None:
        crd = load_crd_schema(pytorchjob_crd)

        def pytorchjob(obj: dict) -> list[str]:
            errors = crd.errors(obj) + crd.pruned(obj)
            for kind, replica in ((obj.get("spec") or {}).get("pytorchReplicaSpecs") or {}).items():
                errors += validate_pod_template(replica.get("template") or {}, owner=kind, version=version)
            return errors

        validators[("kubeflow.org/v1", "PyTorchJob")] = pytorchjob
    for path, kind in ((trainjob_crd, "TrainJob"), (runtime_crd, "ClusterTrainingRuntime")):
        if path is not None:
            schema = load_crd_schema(path)
            validators[("trainer.kubeflow.org/v1alpha1", kind)] = lambda obj, s=schema: s.errors(obj) + s.pruned(obj)
    return validators
