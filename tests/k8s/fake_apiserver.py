"""A loopback Kubernetes API server for tests: real HTTP on 127.0.0.1, a thread per request.

It implements the parts of the API the SDK calls, with the same paths, verbs,
status codes and ``Status`` bodies a real API server uses:

* discovery: ``/version``, ``/api``, ``/api/v1``, ``/apis``, ``/apis/<group>/<version>``;
* CRUD for the registered resources (namespaced and cluster-scoped): GET (one or a list,
  ``labelSelector`` with ``k=v`` / ``k!=v`` / ``k`` terms), POST, PUT, DELETE (records
  ``propagationPolicy``), and server-side apply (``PATCH`` with
  ``application/apply-patch+yaml``, ``fieldManager`` required, ``force``); ``dryRun=All``
  validates and answers without storing;
* pod logs (``/pods/<name>/log``, with ``follow=true`` streamed chunk by chunk until the
  test closes the log, ``tailLines``, ``limitBytes``);
* the service proxy ``/api/v1/namespaces/<ns>/services/<name>:<port>/proxy/<path>``,
  forwarded to an upstream URL the test registers (a real local etcd);
* bearer-token authentication (401 without the token).

Every request body is validated before anything is stored: built-in kinds against the
Kubernetes OpenAPI (``kubernetes-validate``), custom resources against their CRD file;
an invalid body gets ``422 Unprocessable Entity`` with a ``Status`` object.

Test hooks: :meth:`FakeApiServer.set_status`, :meth:`add_pod`, :meth:`append_log`,
:meth:`close_log`, :meth:`put`, and :attr:`requests` (every request received) with
:meth:`writes` (the mutating ones).
"""

from __future__ import annotations

import contextlib
import copy
import itertools
import json
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
import uuid
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import yaml

Validator = Callable[[dict], list[str]]


@dataclass(frozen=True)
class Resource:
    """One API resource the server serves."""

    group: str
    version: str
    kind: str
    plural: str
    namespaced: bool = True

    @property
    def group_version(self) -> str:
        return f"{self.group}/{self.version}" if self.group else self.version


BUILTIN_RESOURCES = (
    Resource("", "v1", "Namespace", "namespaces", namespaced=False),
    Resource("", "v1", "Pod", "pods"),
    Resource("", "v1", "Service", "services"),
    Resource("", "v1", "Secret", "secrets"),
    Resource("", "v1", "ConfigMap", "configmaps"),
    Resource("", "v1", "ServiceAccount", "serviceaccounts"),
    Resource("apps", "v1", "Deployment", "deployments"),
    Resource("apps", "v1", "DaemonSet", "daemonsets"),
    Resource("rbac.authorization.k8s.io", "v1", "ClusterRole", "clusterroles", namespaced=False),
    Resource("rbac.authorization.k8s.io", "v1", "ClusterRoleBinding", "clusterrolebindings", namespaced=False),
    Resource("apiextensions.k8s.io", "v1", "CustomResourceDefinition", "customresourcedefinitions", namespaced=False),
    Resource("kubeflow.org", "v1", "PyTorchJob", "pytorchjobs"),
    Resource("trainer.kubeflow.org", "v1alpha1", "TrainJob", "trainjobs"),
)


@dataclass
class RecordedRequest:
    """One request as the server received it."""

    method: str
    path: str
    query: dict[str, list[str]]
    content_type: str
    body: Any

    @property
    def dry_run(self) -> bool:
        return self.query.get("dryRun") == ["All"]


@dataclass
class _Log:
    text: str = ""
    closed: bool = True
    changed: threading.Condition = field(default_factory=threading.Condition)


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


def _merge_apply(current: dict, applied: dict) -> dict:
    """Server-side apply, simplified: applied fields replace, status and server fields stay."""
    merged = copy.deepcopy(applied)
    merged["metadata"] = {**current.get("metadata", {}), **applied.get("metadata", {})}
    if "status" in current:
        merged["status"] = current["status"]
    return merged


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
        self._objects: dict[tuple[str, str, str, str], dict] = {}  # (group_version, plural, ns, name)
        self._logs: dict[tuple[str, str], _Log] = {}
        self._lock = threading.RLock()
        self._rv = itertools.count(1)
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
        if self._httpd is not None:
            for log in self._logs.values():
                self._close(log)
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

    # ------------------------------------------------------------------ test hooks

    def resource(self, api_version: str, kind: str) -> Resource:
        return next(r for r in self.resources if r.group_version == api_version and r.kind == kind)

    def put(self, obj: dict) -> dict:
        """Store ``obj`` as if created by someone else (no validation, not recorded)."""
        res = self.resource(obj["apiVersion"], obj["kind"])
        ns = obj["metadata"].get("namespace", "default") if res.namespaced else ""
        with self._lock:
            stored = self._stamp(copy.deepcopy(obj), ns if res.namespaced else None)
            self._objects[(res.group_version, res.plural, ns, obj["metadata"]["name"])] = stored
            return stored

    def get(self, api_version: str, kind: str, name: str, namespace: str = "default") -> dict | None:
        """The stored object, or ``None``."""
        res = self.resource(api_version, kind)
        with self._lock:
            obj = self._objects.get((res.group_version, res.plural, namespace if res.namespaced else "", name))
            return copy.deepcopy(obj) if obj else None

    def objects(self, kind: str | None = None) -> list[dict]:
        with self._lock:
            return [copy.deepcopy(o) for o in self._objects.values() if kind is None or o["kind"] == kind]

    def set_status(self, api_version: str, kind: str, name: str, status: dict, namespace: str = "default") -> None:
        """Set the ``status`` of a stored object, as a controller would."""
        res = self.resource(api_version, kind)
        with self._lock:
            self._objects[(res.group_version, res.plural, namespace, name)]["status"] = copy.deepcopy(status)

    def add_pod(
        self,
        name: str,
        *,
        labels: dict[str, str],
        log: str = "",
        phase: str = "Running",
        follow_open: bool = False,
        namespace: str = "default",
    ) -> None:
        """Add a pod with a log; with ``follow_open`` a followed log stays open until :meth:`close_log`."""
        self.put(
            {
                "apiVersion": "v1",
                "kind": "Pod",
                "metadata": {"name": name, "namespace": namespace, "labels": labels},
                "spec": {"containers": [{"name": "pytorch", "image": "trainer"}]},
                "status": {"phase": phase},
            }
        )
        with self._lock:
            self._logs[(namespace, name)] = _Log(text=log, closed=not follow_open)

    def append_log(self, name: str, text: str, namespace: str = "default") -> None:
        log = self._logs[(namespace, name)]
        with log.changed:
            log.text += text
            log.changed.notify_all()

    def close_log(self, name: str, namespace: str = "default") -> None:
        self._close(self._logs[(namespace, name)])

    @staticmethod
    def _close(log: _Log) -> None:
        with log.changed:
            log.closed = True
            log.changed.notify_all()

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

    # ------------------------------------------------------------------ internals

    def _stamp(self, obj: dict, namespace: str | None) -> dict:
        meta = obj.setdefault("metadata", {})
        if namespace is not None:
            meta["namespace"] = namespace
        meta.setdefault("uid", str(uuid.uuid4()))
        meta.setdefault("creationTimestamp", time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()))
        meta["resourceVersion"] = str(next(self._rv))
        return obj

    def validate(self, obj: dict) -> list[str]:
        validator = self.validators.get((obj.get("apiVersion"), obj.get("kind")))
        return validator(obj) if validator else []


class _Handler(BaseHTTPRequestHandler):
    api: FakeApiServer
    protocol_version = "HTTP/1.1"

    def log_message(self, format: str, *args: Any) -> None:  # quiet
        pass

    # ---------------------------------------------------------------- plumbing

    def _send_json(self, code: int, body: Any) -> None:
        data = json.dumps(body).encode()
        self.send_response(code)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def _fail(self, code: int, reason: str, message: str, details: dict | None = None) -> None:
        self._send_json(code, status_body(code, reason, message, details))

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
        self.api.requests.append(RecordedRequest(method, url.path, query, content_type, body))
        if self.headers.get("Authorization") != f"Bearer {self.api.token}":
            self._fail(401, "Unauthorized", "Unauthorized")
            return
        parts = [urllib.parse.unquote(p) for p in url.path.strip("/").split("/") if p]
        with contextlib.suppress(BrokenPipeError, ConnectionResetError):  # the client hung up
            self._route(method, parts, query, content_type, body, url.query)

    # ---------------------------------------------------------------- routing

    def _route(self, method: str, parts: list[str], query: dict, content_type: str, body: Any, raw_query: str) -> None:
        api = self.api
        if method == "GET" and parts == ["version"]:
            self._send_json(200, {"major": "1", "minor": "31", "gitVersion": "v1.31.0-fake"})
            return
        if method == "GET" and parts == ["api"]:
            self._send_json(200, {"kind": "APIVersions", "versions": ["v1"], "serverAddressByClientCIDRs": []})
            return
        if method == "GET" and parts == ["apis"]:
            groups: dict[str, list[str]] = {}
            for r in api.resources:
                if r.group and r.version not in groups.setdefault(r.group, []):
                    groups[r.group].append(r.version)
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
                    "resources": [
                        {
                            "name": r.plural,
                            "singularName": r.kind.lower(),
                            "namespaced": r.namespaced,
                            "kind": r.kind,
                            "verbs": ["create", "delete", "get", "list", "patch", "update"],
                        }
                        for r in served
                    ],
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
            selector = (query.get("labelSelector") or [""])[0]
            items = [
                o
                for (gv, plural, ns, _), o in sorted(api._objects.items())
                if gv == res.group_version
                and plural == res.plural
                and (not namespace or ns == namespace)
                and _selector_matches(selector, o["metadata"].get("labels") or {})
            ]
            self._send_json(
                200,
                {
                    "kind": f"{res.kind}List",
                    "apiVersion": res.group_version,
                    "metadata": {"resourceVersion": str(next(api._rv))},
                    "items": items,
                },
            )

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
            stored = _merge_apply(current, body) if (apply and current) else copy.deepcopy(body)
            if apply:
                stored["metadata"]["managedFields"] = [
                    {"manager": query["fieldManager"][0], "operation": "Apply", "apiVersion": res.group_version}
                ]
            stored = api._stamp(stored, namespace if res.namespaced else None)
            if not dry_run:
                api._objects[key] = stored
        self._send_json(201 if current is None else 200, stored)

    def _delete(self, res: Resource, namespace: str, name: str, query: dict) -> None:
        api = self.api
        with api._lock:
            key = self._key(res, namespace, name)
            if key not in api._objects:
                self._fail(404, "NotFound", f'{res.plural}.{res.group or "core"} "{name}" not found')
                return
            if query.get("dryRun") != ["All"]:
                del api._objects[key]
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
        follow = query.get("follow") == ["true"]
        with log.changed:
            full = text = log.text
        if tail is not None:
            text = "".join(text.splitlines(keepends=True)[-tail:]) if tail else ""
        if not follow:
            data = text.encode()[:limit] if limit is not None else text.encode()
            self.send_response(200)
            self.send_header("Content-Type", "text/plain")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)
            return
        self.send_response(200)
        self.send_header("Content-Type", "text/plain")
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()
        sent = len(full) - len(text)
        while True:
            with log.changed:
                while len(log.text) == sent and not log.closed:
                    log.changed.wait(timeout=0.5)
                chunk, closed = log.text[sent:], log.closed
            if chunk:
                data = chunk.encode()
                self.wfile.write(b"%x\r\n%s\r\n" % (len(data), data))
                self.wfile.flush()
                sent += len(chunk)
            if closed and sent == len(log.text):
                break
        self.wfile.write(b"0\r\n\r\n")
        self.wfile.flush()

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


def schema_validators(pytorchjob_crd: Path | None, trainjob_crd: Path | None, *, version: str = "1.31") -> dict:
    """Validators for the server built from ``fsdp_sdk.k8s.validate`` and the shared CRD files."""
    from fsdp_sdk.k8s.validate import load_crd_schema, validate_builtin, validate_pod_template

    def builtin(obj: dict) -> list[str]:
        return validate_builtin(obj, version=version)

    validators: dict[tuple[str, str], Validator] = {
        (r.group_version, r.kind): builtin for r in BUILTIN_RESOURCES if not r.group.endswith("kubeflow.org")
    }
    if pytorchjob_crd is not None:
        crd = load_crd_schema(pytorchjob_crd)

        def pytorchjob(obj: dict) -> list[str]:
            errors = crd.errors(obj)
            for kind, replica in ((obj.get("spec") or {}).get("pytorchReplicaSpecs") or {}).items():
                errors += validate_pod_template(replica.get("template") or {}, owner=kind, version=version)
            return errors

        validators[("kubeflow.org/v1", "PyTorchJob")] = pytorchjob
    if trainjob_crd is not None:
        validators[("trainer.kubeflow.org/v1alpha1", "TrainJob")] = load_crd_schema(trainjob_crd).errors
    return validators
