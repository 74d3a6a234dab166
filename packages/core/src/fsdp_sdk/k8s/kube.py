"""The job layer's connection to one Kubernetes API server, through the ``kubernetes`` client's public API.

* discovery, get, list, delete, watch and server-side apply go through
  ``kubernetes.dynamic.DynamicClient`` (discovery is kept in memory for the life of
  the connection, never written to disk);
* pod logs, read or followed, through the same client's ``pods/log`` subresource (the
  generated ``CoreV1Api`` would do the same requests, but importing it costs seconds);
* any other path (etcd behind the API server's service proxy) through
  ``DynamicClient.request``.

The job layer only handles plain dicts (what :mod:`fsdp_sdk.k8s.render` returns), so
objects go out and come back as JSON, never as typed models.

Writes use server-side apply (``fieldManager=fsdp-sdk``, ``force=true``): applying the
same object again changes nothing, and the SDK owns the fields it renders.

Every request is retried by a :class:`~fsdp_sdk.k8s.retry.RetryPolicy` when it failed
transiently (no answer, 429, 5xx); before re-sending an apply whose answer was lost, the
object is read back, and one that already holds everything applied counts as success.
Errors come out as :class:`~fsdp_sdk.errors.KubernetesError` with one-line messages
built from the API server's ``Status`` object.
"""

from __future__ import annotations

import base64
import builtins
import json
import os
import tempfile
import threading
import uuid
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

from fsdp_sdk.errors import ConfigError, KubernetesError
from fsdp_sdk.k8s import retry as retries
from fsdp_sdk.k8s.retry import RetryPolicy, TransientError

__all__ = [
    "FIELD_MANAGER",
    "ApiResource",
    "ApiStatusError",
    "ApiUnreachableError",
    "Kube",
    "TransientStatusError",
    "WatchEvent",
    "WatchExpired",
    "contains",
]

T = TypeVar("T")

#: The field manager name of every server-side apply the SDK makes.
FIELD_MANAGER = "fsdp-sdk"
#: Seconds to wait for a TCP connection to the API server.
CONNECT_TIMEOUT_S = 10.0
#: Seconds a followed log may stay silent before the stream counts as lost (and is resumed).
LOG_IDLE_TIMEOUT_S = 600.0


class ApiStatusError(KubernetesError):
    """The API server answered with an error status.

    :param message: the one-line message.
    :param status: the HTTP status code.
    :param reason: the ``Status`` object's reason (``NotFound``, ``Invalid``, ``AlreadyExists``...).
    """

    def __init__(self, message: str, status: int, reason: str = "") -> None:
        super().__init__(message)
        self.status = status
        self.reason = reason


class TransientStatusError(TransientError, ApiStatusError):
    """An error status that means "try again later": 429, 5xx, or a 409 Conflict on a write."""

    def __init__(self, message: str, status: int, reason: str = "", *, retry_after: float | None = None) -> None:
        ApiStatusError.__init__(self, message, status, reason)
        self.retry_after = retry_after
        self.line = message


class ApiUnreachableError(TransientError):
    """No answer came: the connection was refused, dropped or reset, or the answer took too long."""


class WatchExpired(KubernetesError):
    """The watch's resource version is too old (410 Gone): list again, then watch from the list's version."""


@dataclass(frozen=True)
class ApiResource:
    """Where a kind lives in the API, from discovery."""

    api_version: str
    kind: str
    plural: str
    namespaced: bool

    def path(self, name: str | None = None, namespace: str | None = None) -> str:
        """The URL path of the collection (all namespaces without ``namespace``), or of one object."""
        base = f"/api/{self.api_version}" if "/" not in self.api_version else f"/apis/{self.api_version}"
        if self.namespaced and namespace:
            base += f"/namespaces/{namespace}"
        base += f"/{self.plural}"
        return f"{base}/{name}" if name else base


@dataclass(frozen=True)
class WatchEvent:
    """One event of a watch: ``ADDED``, ``MODIFIED``, ``DELETED`` or ``BOOKMARK``, and the object as a dict."""

    type: str
    object: dict[str, Any]

    @property
    def resource_version(self) -> str | None:
        """The object's ``metadata.resourceVersion``: where to resume the watch from."""
        return (self.object.get("metadata") or {}).get("resourceVersion")


def _status_message(body: bytes | str | None) -> tuple[str, str]:
    """``(reason, message)`` of a ``Status`` body, or of whatever text came back."""
    if isinstance(body, bytes):
        body = body.decode(errors="replace")
    try:
        status = json.loads(body or "")
    except ValueError:
        return "", " ".join((body or "").split())[:300]
    if isinstance(status, dict):
        return str(status.get("reason") or ""), " ".join(str(status.get("message") or "").split())
    return "", str(status)[:300]


_FIXES = {
    401: "refresh your credentials (for EKS: aws eks update-kubeconfig --name <cluster>)",
    403: "ask for RBAC permissions on this resource, or use another kubeconfig context",
    404: "check the name and namespace (fsdp-sdk job list)",
    409: "the object changed meanwhile; run the command again",
    422: "the rendered object was refused; run 'fsdp-sdk job render --validate' to see why",
    429: "the API server is throttling requests; wait and run the command again",
}


def contains(actual: Any, wanted: Any) -> bool:
    """Whether ``actual`` (an object as the server stores it) holds everything in ``wanted`` (as applied).

    Dicts may have more keys (fields the server defaulted); lists must have the same length and
    match item by item; a number and its string form (``8`` and ``"8"``, how quantities come back)
    are equal.
    """
    if isinstance(wanted, Mapping):
        return isinstance(actual, Mapping) and all(k in actual and contains(actual[k], v) for k, v in wanted.items())
    if isinstance(wanted, list):
        return (
            isinstance(actual, list)
            and len(actual) == len(wanted)
            and all(contains(a, w) for a, w in zip(actual, wanted, strict=True))
        )
    if isinstance(wanted, bool) or isinstance(actual, bool):
        return actual == wanted
    numbers = (int, float)
    if (isinstance(wanted, numbers) and isinstance(actual, str)) or (
        isinstance(actual, numbers) and isinstance(wanted, str)
    ):
        return str(actual) == str(wanted)
    return bool(actual == wanted)


def _as_stored(obj: Mapping[str, Any]) -> dict[str, Any]:
    """What the server keeps of an applied object: a Secret's ``stringData`` becomes base64 ``data``."""
    stored = dict(obj)
    if obj.get("kind") == "Secret" and obj.get("stringData"):
        data = dict(stored.get("data") or {})
        for key, value in stored.pop("stringData").items():
            data[key] = base64.b64encode(str(value).encode()).decode()
        stored["data"] = data
    return stored


def _read_json(response: Any) -> Any:
    """Read a raw (urllib3) response of the kubernetes client and decode its JSON body."""
    try:
        data = response.data
    finally:
        response.release_conn()
    return json.loads(data) if data else None


class Kube:
    """Access to one Kubernetes API server.

    :param api_client: a configured ``kubernetes.client.ApiClient``
        (:meth:`from_kubeconfig` makes one with the client's own retries off, so that
        :attr:`retry` is the only retry policy).
    :param field_manager: the server-side apply field manager.
    :param retry: the retry policy; :data:`fsdp_sdk.k8s.retry.DEFAULT_POLICY` when ``None``.
    :param progress: receives one line per retry (the CLI prints them on stderr).
    """

    def __init__(
        self,
        api_client: Any,
        *,
        field_manager: str = FIELD_MANAGER,
        retry: RetryPolicy | None = None,
        progress: Callable[[str], None] | None = None,
    ) -> None:
        self.api_client = api_client
        self.field_manager = field_manager
        self._retry = retry
        self.progress = progress
        self._dynamic: Any = None
        self._resources: dict[tuple[str, str], tuple[ApiResource, Any]] = {}
        self._lock = threading.RLock()  # discovery is shared by the threads that follow logs

    @classmethod
    def from_kubeconfig(
        cls,
        kubeconfig: str | os.PathLike[str] | None = None,
        *,
        context: str | None = None,
        retry: RetryPolicy | None = None,
        progress: Callable[[str], None] | None = None,
    ) -> Kube:
        """Connect with a kubeconfig file.

        The file is ``kubeconfig`` when given, else ``$KUBECONFIG`` (first entry), else
        ``~/.kube/config``; with none of them, inside a pod, the pod's service account.

        :raises ConfigError: no kubeconfig and not in a cluster, the file does not exist, or it cannot be used.
        """
        from kubernetes import client as kube_client
        from kubernetes import config as kube_config

        path = kubeconfig or (os.environ.get("KUBECONFIG", "").split(os.pathsep)[0] or None)
        if path is None and Path("~/.kube/config").expanduser().exists():
            path = str(Path("~/.kube/config").expanduser())
        configuration = kube_client.Configuration()
        try:
            if path is None:
                if not os.environ.get("KUBERNETES_SERVICE_HOST"):
                    raise ConfigError(
                        "--kubeconfig",
                        "no cluster to talk to: no --kubeconfig, KUBECONFIG is not set, ~/.kube/config does not "
                        "exist and this is not a pod in a cluster",
                        "pass --kubeconfig FILE or set KUBECONFIG; 'fsdp-sdk up' writes one for the configured "
                        "cluster, 'aws eks update-kubeconfig --name <cluster>' for another EKS cluster",
                    )
                kube_config.load_incluster_config(client_configuration=configuration)
            else:
                if not Path(path).exists():
                    raise ConfigError(
                        "--kubeconfig",
                        f"{path} does not exist",
                        "pass --kubeconfig, set KUBECONFIG, or run 'fsdp-sdk up' to create the cluster",
                    )
                kube_config.load_kube_config(config_file=str(path), context=context, client_configuration=configuration)
        except kube_config.ConfigException as error:
            where = path or "the in-cluster service account"
            raise ConfigError(
                "--kubeconfig",
                f"cannot use {where}: {' '.join(str(error).split())}",
                "check the file and the --context name",
            ) from error
        configuration.retries = False  # one retry policy (ours): with backoff, counted, reported
        return cls(kube_client.ApiClient(configuration), retry=retry, progress=progress)

    # ------------------------------------------------------------------ plumbing

    @property
    def host(self) -> str:
        """The API server URL."""
        return str(self.api_client.configuration.host)

    @property
    def retry(self) -> RetryPolicy:
        """The retry policy in use."""
        return self._retry or retries.DEFAULT_POLICY

    @property
    def dynamic(self) -> Any:
        """The ``kubernetes.dynamic.DynamicClient`` (connects and reads ``/version`` and ``/apis`` on first use)."""
        with self._lock:
            if self._dynamic is None:
                self._dynamic = self._call("discover the API", lambda: _dynamic_client(self.api_client, self.retry))
            return self._dynamic

    def _timeout(self) -> tuple[float, float]:
        return (min(CONNECT_TIMEOUT_S, self.retry.request_timeout), self.retry.request_timeout)

    def report_retry(self, line: str) -> None:
        """Tell :attr:`progress` that a request is being retried (``line`` says why and when)."""
        if self.progress is not None:
            self.progress(f"API server: {line}")

    def _call(
        self,
        what: str,
        function: Callable[[], T],
        *,
        before_retry: Callable[[], T | None] | None = None,
    ) -> T:
        """Run one request under the retry policy, turning the client's exceptions into ours."""

        def attempt() -> T:
            try:
                return function()
            except KubernetesError:
                raise
            except Exception as error:
                raise self.error(what, error) from error

        return self.retry.call(attempt, on_retry=self.report_retry, before_retry=before_retry)

    def error(self, what: str, error: BaseException) -> KubernetesError:
        """The :class:`KubernetesError` for an exception the ``kubernetes`` client raised doing ``what``.

        :raises BaseException: ``error`` itself when it is not a transport or API error.
        """
        import urllib3
        from kubernetes.client.exceptions import ApiException

        if isinstance(error, ApiException) and error.status:
            reason, message = _status_message(error.body)
            reason = reason or str(error.reason or "")
            status = int(error.status)
            line = f"{what}: {status} {reason or 'Error'}: {message or error.reason}"
            if status == 410:
                return WatchExpired(f"{line}; list again and watch from the list's resource version")
            headers = error.headers or {}
            retry_after = _retry_after(headers.get("Retry-After") if hasattr(headers, "get") else None)
            conflict = status == 409 and reason != "AlreadyExists"
            if status in retries.TRANSIENT_STATUSES or conflict:
                fix = _FIXES.get(status, "the API server failed to answer, try again in a moment")
                return TransientStatusError(f"{line}; {fix}", status, reason, retry_after=retry_after)
            return ApiStatusError(f"{line}; {_FIXES.get(status, 'see the API server message')}", status, reason)
        ssl = isinstance(error, urllib3.exceptions.SSLError) or (
            isinstance(error, ApiException) and str(error.reason or "").startswith("SSLError")
        )
        if ssl:  # not a passing failure: the same certificate will fail again
            return KubernetesError(
                f"{what}: the TLS connection to {self.host} failed ({_transport_detail(error)}); check the "
                "certificate authority (certificate-authority-data) of the cluster in the kubeconfig"
            )
        if isinstance(error, ApiException | urllib3.exceptions.HTTPError | OSError):
            return ApiUnreachableError(
                f"{what}: no answer from the API server at {self.host} ({_transport_detail(error)}); "
                "check that the cluster is up and KUBECONFIG points at it"
            )
        raise error

    # ------------------------------------------------------------------ discovery

    def resource(self, api_version: str, kind: str) -> ApiResource:
        """Find ``kind`` of ``api_version`` by discovery.

        :raises KubernetesError: the server does not serve it (a CRD not installed).
        """
        return self._resource(api_version, kind)[0]

    def _resource(self, api_version: str, kind: str) -> tuple[ApiResource, Any]:
        key = (api_version, kind)
        with self._lock:
            if key not in self._resources:
                found = self._call(f"discover {api_version} {kind}", lambda: self._discover(api_version, kind))
                if found is None:
                    hint = (
                        "install the Kubeflow Training Operator with 'fsdp-sdk prereqs install'"
                        if api_version.endswith("kubeflow.org/v1")
                        else "install its CustomResourceDefinition, or check the apiVersion and kind"
                    )
                    raise KubernetesError(
                        f"{api_version} {kind}: the API server at {self.host} does not serve this kind; {hint}"
                    )
                self._resources[key] = (
                    ApiResource(api_version, kind, found.name, bool(found.namespaced)),
                    found,
                )
            return self._resources[key]

    def _discover(self, api_version: str, kind: str) -> Any:
        """The dynamic client's resource for the kind, or ``None`` when the server does not serve it."""
        from kubernetes.dynamic.exceptions import NotFoundError, ResourceNotFoundError

        prefix = "apis" if "/" in api_version else "api"
        dynamic = self.dynamic
        try:
            return dynamic.resources.get(prefix=prefix, api_version=api_version, kind=kind)
        except ResourceNotFoundError:
            pass
        # Not found: a group version the server does not serve, a kind it lacks, or a
        # discovery request that failed for a moment (the client takes a 503 as "no resources").
        try:
            listing = _read_json(
                dynamic.request("GET", f"/{prefix}/{api_version}", serialize=False, _request_timeout=self._timeout())
            )
        except NotFoundError:
            return None
        if kind not in {r.get("kind") for r in (listing or {}).get("resources") or []}:
            return None
        try:
            return dynamic.resources.get(prefix=prefix, api_version=api_version, kind=kind)
        except ResourceNotFoundError:  # listed, yet the discovery that followed failed again: try later
            raise ApiUnreachableError(
                f"discover {api_version} {kind}: the API server lists it but its discovery keeps failing; "
                "check the cluster's API server"
            ) from None

    # ------------------------------------------------------------------ verbs on objects

    def apply(self, obj: Mapping[str, Any], *, dry_run: bool = False) -> dict[str, Any]:
        """Server-side apply ``obj`` (create or update), forcing ownership of its fields.

        When an attempt gets no answer, the object is read back before the next one: if it
        already holds everything in ``obj``, the lost answer was a success and nothing is re-sent.

        :param obj: a full object with ``apiVersion``, ``kind`` and ``metadata.name``
            (and ``metadata.namespace`` for namespaced kinds).
        :param dry_run: ``dryRun=All``: the server validates and answers, nothing is stored.
        :returns: the object as the server returns it.
        """
        res, dynamic_res = self._resource(obj["apiVersion"], obj["kind"])
        meta = obj["metadata"]
        namespace = meta.get("namespace") if res.namespaced else None
        body = dict(obj)

        def send() -> dict[str, Any]:
            return _read_json(
                self.dynamic.server_side_apply(
                    dynamic_res,
                    body=body,
                    name=meta["name"],
                    namespace=namespace,
                    field_manager=self.field_manager,
                    force_conflicts=True,
                    dry_run="All" if dry_run else None,
                    serialize=False,
                    _request_timeout=self._timeout(),
                )
            )

        def applied_already() -> dict[str, Any] | None:
            if dry_run:
                return None
            current = self._get_once(res, dynamic_res, meta["name"], namespace)
            return current if current is not None and contains(current, _as_stored(obj)) else None

        return self._call(f"PATCH {res.path(meta['name'], namespace)}", send, before_retry=applied_already)

    def _get_once(self, res: ApiResource, dynamic_res: Any, name: str, namespace: str | None) -> dict[str, Any] | None:
        from kubernetes.dynamic.exceptions import NotFoundError

        try:
            return _read_json(
                self.dynamic.get(
                    dynamic_res, name=name, namespace=namespace, serialize=False, _request_timeout=self._timeout()
                )
            )
        except NotFoundError:
            return None
        except Exception as error:
            raise self.error(f"GET {res.path(name, namespace)}", error) from error

    def get(self, api_version: str, kind: str, name: str, namespace: str | None = None) -> dict[str, Any] | None:
        """The object, or ``None`` when it does not exist."""
        res, dynamic_res = self._resource(api_version, kind)
        namespace = namespace if res.namespaced else None
        return self._call(f"GET {res.path(name, namespace)}", lambda: self._get_once(res, dynamic_res, name, namespace))

    def list(
        self, api_version: str, kind: str, namespace: str | None = None, *, label_selector: str | None = None
    ) -> list[dict[str, Any]]:
        """Objects of ``kind`` in ``namespace`` (all namespaces when ``None``), optionally by label selector."""
        return self.list_with_version(api_version, kind, namespace, label_selector=label_selector)[0]

    def list_with_version(
        self,
        api_version: str,
        kind: str,
        namespace: str | None = None,
        *,
        label_selector: str | None = None,
    ) -> tuple[builtins.list[dict[str, Any]], str | None]:
        """Like :meth:`list`, with the list's ``resourceVersion`` (where a :meth:`watch` of the same objects starts)."""
        res, dynamic_res = self._resource(api_version, kind)
        namespace = namespace if res.namespaced else None

        def send() -> tuple[list[dict[str, Any]], str | None]:
            listing = _read_json(
                self.dynamic.get(
                    dynamic_res,
                    namespace=namespace,
                    label_selector=label_selector,
                    serialize=False,
                    _request_timeout=self._timeout(),
                )
            )
            items = listing.get("items") or []
            for item in items:  # list items carry no apiVersion/kind
                item.setdefault("apiVersion", api_version)
                item.setdefault("kind", kind)
            return items, (listing.get("metadata") or {}).get("resourceVersion")

        return self._call(f"GET {res.path(None, namespace)}", send)

    def delete(
        self,
        api_version: str,
        kind: str,
        name: str,
        namespace: str | None = None,
        *,
        propagation_policy: str = "Background",
        dry_run: bool = False,
    ) -> bool:
        """Delete one object; ``False`` when it did not exist.

        A ``404`` after an attempt that got no answer means that attempt deleted it: ``True``.
        """
        from kubernetes.dynamic.exceptions import NotFoundError

        res, dynamic_res = self._resource(api_version, kind)
        namespace = namespace if res.namespaced else None
        tries = 0

        def send() -> bool:
            nonlocal tries
            tries += 1
            try:
                _read_json(
                    self.dynamic.delete(
                        dynamic_res,
                        name=name,
                        namespace=namespace,
                        body={"kind": "DeleteOptions", "apiVersion": "v1", "propagationPolicy": propagation_policy},
                        propagation_policy=propagation_policy,
                        dry_run="All" if dry_run else None,
                        serialize=False,
                        _request_timeout=self._timeout(),
                    )
                )
            except NotFoundError:
                return tries > 1
            return True

        return self._call(f"DELETE {res.path(name, namespace)}", send)

    def watch(
        self,
        api_version: str,
        kind: str,
        namespace: str | None = None,
        *,
        name: str | None = None,
        label_selector: str | None = None,
        resource_version: str | None = None,
        timeout: float = 300,
    ) -> Iterator[WatchEvent]:
        """Stream the changes of matching objects from ``resource_version`` on, for up to ``timeout`` seconds.

        Without ``resource_version`` the stream starts with an ``ADDED`` event per existing object.
        Opening the stream is retried; a stream that breaks is not (it raises a :class:`TransientError`):
        the caller resumes from the last event's :attr:`WatchEvent.resource_version`.

        :raises WatchExpired: ``resource_version`` is too old: list again.
        """
        from kubernetes import watch as kube_watch

        res, dynamic_res = self._resource(api_version, kind)
        namespace = namespace if res.namespaced else None
        what = f"watch {res.path(None, namespace)}"
        watcher = kube_watch.Watch()
        seconds = max(1, int(timeout))
        stream = watcher.stream(
            dynamic_res.get,
            namespace=namespace,
            field_selector=f"metadata.name={name}" if name else None,
            label_selector=label_selector,
            resource_version=resource_version,
            timeout_seconds=seconds,
            allow_watch_bookmarks=True,
            serialize=False,
            _request_timeout=(self._timeout()[0], seconds + self.retry.request_timeout),
        )
        try:
            while True:
                try:
                    event = next(stream)
                except StopIteration:
                    return
                except KubernetesError:
                    raise
                except Exception as error:
                    raise self.error(what, error) from error
                obj = event.get("raw_object")
                if isinstance(obj, dict):
                    yield WatchEvent(str(event.get("type")), obj)
        finally:
            watcher.stop()
            stream.close()

    # ------------------------------------------------------------------ pods

    def _log_request(self, name: str, namespace: str, query: Mapping[str, Any], timeout: Any) -> Any:
        """Open ``pods/<name>/log`` (the ``log`` subresource, found by discovery) and return the raw response."""
        _, pods = self._resource("v1", "Pod")
        params = [(k, str(v).lower() if isinstance(v, bool) else v) for k, v in query.items() if v is not None]
        return self.dynamic.get(
            pods.subresources["log"],
            name=name,
            namespace=namespace,
            query_params=params,
            header_params={"Accept": "*/*"},
            serialize=False,
            _request_timeout=timeout,
        )

    def pod_log(
        self,
        name: str,
        namespace: str,
        *,
        limit_bytes: int | None = None,
        tail_lines: int | None = None,
        container: str | None = None,
        timestamps: bool = False,
    ) -> str:
        """The pod's log (or its first ``limit_bytes`` / last ``tail_lines``)."""
        query = {
            "container": container,
            "limitBytes": limit_bytes,
            "tailLines": tail_lines,
            "timestamps": timestamps or None,
        }

        def send() -> str:
            raw = self._log_request(name, namespace, query, self._timeout())
            try:
                return raw.data.decode(errors="replace")
            finally:
                raw.release_conn()

        return self._call(f"GET /api/v1/namespaces/{namespace}/pods/{name}/log", send)

    def follow_pod_log(
        self,
        name: str,
        namespace: str,
        *,
        container: str | None = None,
        timestamps: bool = False,
        since_seconds: int | None = None,
    ) -> Iterator[str]:
        """Yield the pod's log line by line as it is written, until the container ends.

        Opening the stream is retried; a stream that breaks raises a :class:`TransientError`
        (:mod:`fsdp_sdk.k8s.follow` resumes it where it stopped, by timestamp).

        :param timestamps: prefix each line with the kubelet's RFC 3339 timestamp and a space.
        :param since_seconds: start this many seconds back instead of at the container's start.
        """
        what = f"follow /api/v1/namespaces/{namespace}/pods/{name}/log"
        query = {
            "container": container,
            "follow": True,
            "timestamps": timestamps or None,
            "sinceSeconds": since_seconds,
        }
        raw = self._call(
            what, lambda: self._log_request(name, namespace, query, (self._timeout()[0], LOG_IDLE_TIMEOUT_S))
        )
        pending = b""
        try:
            try:
                for chunk in raw.stream(4096, decode_content=True):
                    pending += chunk
                    *lines, pending = pending.split(b"\n")
                    for line in lines:
                        yield line.decode(errors="replace")
            except Exception as error:
                raise self.error(what, error) from error
            if pending:
                yield pending.decode(errors="replace")
        finally:
            raw.release_conn()

    # ------------------------------------------------------------------ any path

    def request(
        self,
        method: str,
        path: str,
        *,
        query: Mapping[str, Any] | None = None,
        body: Any = None,
        content_type: str | None = None,
    ) -> Any:
        """Send one request to ``path`` (retried when it fails transiently); return the decoded JSON body (or text).

        For paths that are not objects of a kind, such as etcd's keys behind the service proxy.
        """
        params = [(k, v) for k, v in (query or {}).items() if v is not None]

        def send() -> Any:
            response = self.dynamic.request(
                method,
                path,
                body=body,
                query_params=list(params),
                content_type=content_type,
                serialize=False,
                _request_timeout=self._timeout(),
            )
            try:
                data = response.data
            finally:
                response.release_conn()
            try:
                return json.loads(data) if data else None
            except ValueError:
                return data.decode(errors="replace")

        return self._call(f"{method} {path}", send)


def _transport_detail(error: BaseException) -> str:
    """The innermost cause of a transport error, in a few words (``Remote end closed connection without response``)."""
    detail: BaseException = error
    for _ in range(5):
        reason = getattr(detail, "reason", None)
        args: tuple[object, ...] = getattr(detail, "args", ())
        if isinstance(reason, BaseException):
            detail = reason
        elif len(args) >= 2 and isinstance(args[1], BaseException):
            detail = args[1]
        else:
            break
    text = " ".join(str(detail).split()) or type(detail).__name__
    return text[:200]


def _retry_after(value: Any) -> float | None:
    try:
        seconds = float(str(value).strip())
    except (TypeError, ValueError):
        return None
    return seconds if seconds >= 0 else None


def _dynamic_client(api_client: Any, policy: RetryPolicy) -> Any:
    """A ``DynamicClient`` whose requests time out and whose discovery stays in memory."""
    from kubernetes.dynamic import DynamicClient, LazyDiscoverer

    timeout = (min(CONNECT_TIMEOUT_S, policy.request_timeout), policy.request_timeout)

    class MemoryDiscoverer(LazyDiscoverer):
        """Discovery for the life of this connection: read from the server, never from or to a file."""

        def __init__(self, client: Any, cache_file: Any) -> None:
            unused = os.path.join(tempfile.gettempdir(), f"fsdp-sdk-discovery-{uuid.uuid4().hex}.json")
            super().__init__(client, unused)

        def _write_cache(self) -> None:
            pass

    class TimedDynamicClient(DynamicClient):
        """Every request gets a timeout unless it brings its own (discovery calls bring none)."""

        def request(self, method: str, path: str, body: Any = None, **params: Any) -> Any:
            params.setdefault("_request_timeout", timeout)
            return super().request(method, path, body, **params)

    return TimedDynamicClient(api_client, discoverer=MemoryDiscoverer)
