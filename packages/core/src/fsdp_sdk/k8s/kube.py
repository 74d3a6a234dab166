"""A small, explicit layer over the ``kubernetes`` client's transport.

The job layer only handles plain dicts (what :mod:`fsdp_sdk.k8s.render` returns),
so instead of the typed models it talks REST through ``ApiClient`` and finds each
kind's URL with one discovery request per group/version (``GET /api/v1``,
``GET /apis/<group>/<version>``), cached in memory, never on disk.

Writes use server-side apply: ``PATCH`` with ``Content-Type:
application/apply-patch+yaml``, ``fieldManager=fsdp-sdk`` and ``force=true``, so
re-applying is idempotent and the SDK owns the fields it renders.

Errors come out as :class:`~fsdp_sdk.errors.KubernetesError` with one-line
messages built from the API server's ``Status`` object.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from fsdp_sdk.errors import ConfigError, KubernetesError

__all__ = ["FIELD_MANAGER", "ApiResource", "ApiStatusError", "Kube"]

#: The field manager name of every server-side apply the SDK makes.
FIELD_MANAGER = "fsdp-sdk"
_TIMEOUT_S = 30


class ApiStatusError(KubernetesError):
    """The API server answered with an error status; :attr:`status` is the HTTP code."""

    def __init__(self, message: str, status: int) -> None:
        super().__init__(message)
        self.status = status


@dataclass(frozen=True)
class ApiResource:
    """Where a kind lives in the API, from discovery."""

    api_version: str
    kind: str
    plural: str
    namespaced: bool

    def path(self, name: str | None = None, namespace: str | None = None) -> str:
        """The URL path of the collection, or of one object when ``name`` is given."""
        base = f"/api/{self.api_version}" if "/" not in self.api_version else f"/apis/{self.api_version}"
        if self.namespaced:
            if not namespace:
                raise ValueError(f"{self.kind} is namespaced: a namespace is required")
            base += f"/namespaces/{namespace}"
        base += f"/{self.plural}"
        return f"{base}/{name}" if name else base


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
}


class Kube:
    """REST access to one Kubernetes API server.

    :param api_client: a configured ``kubernetes.client.ApiClient``.
    :param field_manager: the server-side apply field manager.
    """

    def __init__(self, api_client: Any, *, field_manager: str = FIELD_MANAGER) -> None:
        self.api_client = api_client
        self.field_manager = field_manager
        self._resources: dict[str, dict[str, ApiResource]] = {}

    @classmethod
    def from_kubeconfig(cls, kubeconfig: str | os.PathLike[str] | None = None, *, context: str | None = None) -> Kube:
        """Connect with a kubeconfig file.

        The file is ``kubeconfig`` when given, else ``$KUBECONFIG`` (first entry), else
        ``~/.kube/config``; with none of them, the in-cluster service account is used.

        :raises ConfigError: the file does not exist or cannot be used.
        """
        from kubernetes import config as kube_config

        path = kubeconfig or (os.environ.get("KUBECONFIG", "").split(os.pathsep)[0] or None)
        if path is None and Path("~/.kube/config").expanduser().exists():
            path = str(Path("~/.kube/config").expanduser())
        try:
            if path is None:
                configuration = _in_cluster_configuration()
                from kubernetes.client import ApiClient

                return cls(ApiClient(configuration))
            if not Path(path).exists():
                raise ConfigError(
                    "--kubeconfig",
                    f"{path} does not exist",
                    "pass --kubeconfig, set KUBECONFIG, or run 'fsdp-sdk up' to create the cluster",
                )
            return cls(kube_config.new_client_from_config(config_file=str(path), context=context))
        except kube_config.ConfigException as error:
            raise ConfigError(
                "--kubeconfig",
                f"cannot use {path or 'in-cluster config'}: {error}",
                "check the file and the --context name",
            ) from error

    # ------------------------------------------------------------------ transport

    @property
    def host(self) -> str:
        """The API server URL."""
        return str(self.api_client.configuration.host)

    def request(
        self,
        method: str,
        path: str,
        *,
        query: Mapping[str, Any] | None = None,
        body: Any = None,
        content_type: str | None = None,
        stream: bool = False,
        timeout: float | None = _TIMEOUT_S,
        accept: str = "application/json",
    ) -> Any:
        """Send one request; return the decoded JSON body (or the raw urllib3 response with ``stream``).

        :raises KubernetesError: the server answered with an error status or could not be reached.
        """
        import urllib3
        from kubernetes.client.exceptions import ApiException

        params = [(k, v) for k, v in (query or {}).items() if v is not None]
        headers = {"Accept": accept}
        if body is not None or method in ("POST", "PUT", "PATCH"):
            headers["Content-Type"] = content_type or "application/json"
        serialized = self.api_client.param_serialize(
            method,
            path,
            query_params=params,
            header_params=headers,
            body=body,
            auth_settings=["BearerToken"],
        )
        try:
            response = self.api_client.call_api(*serialized, _request_timeout=None if stream else timeout)
        except (urllib3.exceptions.HTTPError, ApiException, OSError) as error:
            reason = getattr(error, "reason", None) or error
            raise KubernetesError(
                f"{method} {path}: cannot reach the API server at {self.host} ({' '.join(str(reason).split())[:200]}); "
                "check that the cluster is up and KUBECONFIG points at it"
            ) from error
        raw = response.response
        if not 200 <= response.status <= 299:
            data = raw.read()
            raw.release_conn()
            reason, message = _status_message(data)
            fix = _FIXES.get(response.status, "see the API server's message")
            raise ApiStatusError(
                f"{method} {path}: {response.status} {reason or 'Error'}: {message}; {fix}", response.status
            )
        if stream:
            return raw
        data = raw.read()
        raw.release_conn()
        if accept != "application/json":
            return data.decode(errors="replace")
        return json.loads(data) if data else None

    # ------------------------------------------------------------------ discovery

    def resource(self, api_version: str, kind: str) -> ApiResource:
        """Find ``kind`` of ``api_version`` by discovery.

        :raises KubernetesError: the server does not serve it (a CRD not installed).
        """
        if api_version not in self._resources:
            path = f"/api/{api_version}" if "/" not in api_version else f"/apis/{api_version}"
            try:
                listing = self.request("GET", path)
            except ApiStatusError as error:
                if error.status != 404:
                    raise
                listing = {"resources": []}
            self._resources[api_version] = {
                r["kind"]: ApiResource(api_version, r["kind"], r["name"], bool(r["namespaced"]))
                for r in listing.get("resources", [])
                if "/" not in r["name"]
            }
        found = self._resources[api_version].get(kind)
        if found is None:
            self._resources.pop(api_version, None)  # look again next time: it may get installed
            hint = (
                "install the Kubeflow Training Operator with 'fsdp-sdk prereqs install'"
                if "kubeflow.org" in api_version
                else "check the apiVersion and kind"
            )
            raise KubernetesError(
                f"{api_version} {kind}: the API server at {self.host} does not serve this kind; {hint}"
            )
        return found

    # ------------------------------------------------------------------ verbs on objects

    def apply(self, obj: Mapping[str, Any], *, dry_run: bool = False) -> dict[str, Any]:
        """Server-side apply ``obj`` (create or update), forcing ownership of its fields.

        :param obj: a full object with ``apiVersion``, ``kind`` and ``metadata.name``
            (and ``metadata.namespace`` for namespaced kinds).
        :param dry_run: ``dryRun=All``: the server validates and answers, nothing is stored.
        :returns: the object as the server returns it.
        """
        res = self.resource(obj["apiVersion"], obj["kind"])
        meta = obj["metadata"]
        path = res.path(meta["name"], meta.get("namespace") if res.namespaced else None)
        return self.request(
            "PATCH",
            path,
            body=dict(obj),
            content_type="application/apply-patch+yaml",
            query={"fieldManager": self.field_manager, "force": "true", "dryRun": "All" if dry_run else None},
        )

    def get(self, api_version: str, kind: str, name: str, namespace: str | None = None) -> dict[str, Any] | None:
        """The object, or ``None`` when it does not exist."""
        res = self.resource(api_version, kind)
        try:
            return self.request("GET", res.path(name, namespace if res.namespaced else None))
        except ApiStatusError as error:
            if error.status == 404:
                return None
            raise

    def list(
        self, api_version: str, kind: str, namespace: str | None = None, *, label_selector: str | None = None
    ) -> list[dict[str, Any]]:
        """Objects of ``kind`` in ``namespace`` (all namespaces when ``None``), optionally by label selector."""
        res = self.resource(api_version, kind)
        if res.namespaced and namespace:
            path = res.path(None, namespace)
        else:  # cluster-scoped, or namespaced across all namespaces
            path = ApiResource(api_version, kind, res.plural, namespaced=False).path()
        listing = self.request("GET", path, query={"labelSelector": label_selector})
        items = listing.get("items") or []
        for item in items:  # list items carry no apiVersion/kind
            item.setdefault("apiVersion", api_version)
            item.setdefault("kind", kind)
        return items

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
        """Delete one object; ``False`` when it did not exist."""
        res = self.resource(api_version, kind)
        try:
            self.request(
                "DELETE",
                res.path(name, namespace if res.namespaced else None),
                body={"kind": "DeleteOptions", "apiVersion": "v1", "propagationPolicy": propagation_policy},
                query={"propagationPolicy": propagation_policy, "dryRun": "All" if dry_run else None},
            )
        except ApiStatusError as error:
            if error.status == 404:
                return False
            raise
        return True

    # ------------------------------------------------------------------ pods

    def pod_log(
        self,
        name: str,
        namespace: str,
        *,
        limit_bytes: int | None = None,
        tail_lines: int | None = None,
        container: str | None = None,
    ) -> str:
        """The pod's log (or its first ``limit_bytes`` / last ``tail_lines``)."""
        return self.request(
            "GET",
            f"/api/v1/namespaces/{namespace}/pods/{name}/log",
            accept="text/plain",
            query={"limitBytes": limit_bytes, "tailLines": tail_lines, "container": container},
        )

    def follow_pod_log(self, name: str, namespace: str, *, container: str | None = None) -> Iterator[str]:
        """Yield the pod's log line by line as it is written, until the container ends."""
        raw = self.request(
            "GET",
            f"/api/v1/namespaces/{namespace}/pods/{name}/log",
            accept="text/plain",
            stream=True,
            query={"follow": "true", "container": container},
        )
        pending = b""
        try:
            for chunk in raw.stream(4096, decode_content=True):
                pending += chunk
                *lines, pending = pending.split(b"\n")
                for line in lines:
                    yield line.decode(errors="replace")
            if pending:
                yield pending.decode(errors="replace")
        finally:
            raw.release_conn()


def _in_cluster_configuration() -> Any:
    from kubernetes import client as kube_client
    from kubernetes import config as kube_config

    kube_config.load_incluster_config()
    return kube_client.Configuration.get_default_copy()
