"""Installing, removing and inspecting the monitoring components plugins render.

Plugins render (``fsdp_sdk_monitoring_components``: plain objects and descriptions,
:mod:`fsdp_sdk.monitoring`); this module acts:

* :meth:`Monitoring.install` server-side applies the components' objects in dependency
  order (namespaces and CRDs, then service accounts and RBAC, configuration, services,
  workloads, then custom resources such as ``ServiceMonitor``), fills the keys of
  generated Secrets (:data:`~fsdp_sdk.monitoring.GENERATED_KEYS_ANNOTATION`) with random
  values the first time, and enables EKS add-ons through :mod:`fsdp_sdk.aws.addons`;
* :meth:`Monitoring.uninstall` deletes them in the reverse order (namespaces are left:
  other software may live in them);
* :meth:`Monitoring.status` reads each object back from the API server (workloads:
  ready replicas or pods) and each add-on from the EKS API;
* :meth:`Monitoring.top_command` and :meth:`Monitoring.port_forward` build the exact
  ``kubectl exec -it`` / ``kubectl port-forward`` commands ``fsdp-sdk monitor top`` and
  ``monitor open`` run.

:func:`serves_prometheus_operator` is the discovery core does before rendering, so
rendering stays pure: its answer goes into ``observability.prometheus_operator``.
"""

from __future__ import annotations

import base64
import contextlib
import secrets
import subprocess
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from fsdp_sdk.errors import ConfigError, KubernetesError
from fsdp_sdk.k8s.kube import ApiStatusError
from fsdp_sdk.monitoring import GENERATED_KEYS_ANNOTATION, MonitoringComponent, NodeTool, ServiceEndpoint
from fsdp_sdk.tools import ToolError, find_tool

if TYPE_CHECKING:
    from fsdp_sdk.config import Config
    from fsdp_sdk.k8s.kube import Kube

__all__ = [
    "APPLY_ORDER",
    "ComponentStatus",
    "Monitoring",
    "MonitoringStatus",
    "PortForward",
    "apply_objects",
    "ordered",
    "serves_prometheus_operator",
]

#: Kinds in the order they are applied (uninstall goes the other way); kinds not listed come last.
APPLY_ORDER: tuple[str, ...] = (
    "Namespace",
    "CustomResourceDefinition",
    "ServiceAccount",
    "ClusterRole",
    "ClusterRoleBinding",
    "Role",
    "RoleBinding",
    "Secret",
    "ConfigMap",
    "PersistentVolumeClaim",
    "Service",
    "Deployment",
    "StatefulSet",
    "DaemonSet",
)
PROMETHEUS_OPERATOR_API = "monitoring.coreos.com/v1"
_WORKLOADS = ("Deployment", "StatefulSet", "DaemonSet")
Progress = Callable[[str], None]


def _no_progress(line: str) -> None:
    pass


def ordered(objects: Sequence[Mapping[str, Any]]) -> list[Mapping[str, Any]]:
    """``objects`` sorted by :data:`APPLY_ORDER` (stable: the rendering's order within a kind is kept)."""
    rank = {kind: i for i, kind in enumerate(APPLY_ORDER)}
    return sorted(objects, key=lambda o: rank.get(str(o.get("kind")), len(APPLY_ORDER)))


def _ref(obj: Mapping[str, Any]) -> str:
    meta = obj.get("metadata") or {}
    where = f" in {meta['namespace']}" if meta.get("namespace") else ""
    return f"{obj.get('kind')}/{meta.get('name')}{where}"


def serves_prometheus_operator(kube: Kube) -> bool:
    """Whether the API server serves the Prometheus Operator's ``ServiceMonitor`` and ``PodMonitor`` kinds.

    :raises KubernetesError: the API server cannot be reached or refused the discovery request.
    """
    try:
        listing = kube.request("GET", f"/apis/{PROMETHEUS_OPERATOR_API}")
    except ApiStatusError as error:
        if error.status == 404:
            return False
        raise
    kinds = {r.get("kind") for r in (listing or {}).get("resources") or []}
    return {"ServiceMonitor", "PodMonitor"} <= kinds


def _with_generated_keys(kube: Kube | None, obj: Mapping[str, Any], *, dry_run: bool) -> dict[str, Any]:
    """A Secret marked with :data:`GENERATED_KEYS_ANNOTATION`, with its keys filled: the values already on the
    cluster, random ones for keys it does not have yet (none on a dry run)."""
    body = dict(obj)
    keys = [
        k.strip() for k in ((obj["metadata"].get("annotations") or {}).get(GENERATED_KEYS_ANNOTATION) or "").split(",")
    ]
    keys = [k for k in keys if k]
    if obj.get("kind") != "Secret" or not keys or dry_run or kube is None:
        return body
    meta = obj["metadata"]
    current = kube.get("v1", "Secret", meta["name"], meta.get("namespace")) or {}
    existing = current.get("data") or {}
    data = {k: existing[k] for k in keys if existing.get(k)}
    fresh = {k: secrets.token_urlsafe(24) for k in keys if k not in data}
    data.update({k: base64.b64encode(v.encode()).decode() for k, v in fresh.items()})
    body["data"] = {**(obj.get("data") or {}), **data}
    return body


def apply_objects(
    kube: Kube, objects: Sequence[Mapping[str, Any]], *, dry_run: bool = False, progress: Progress = _no_progress
) -> list[dict[str, Any]]:
    """Server-side apply ``objects`` in :data:`APPLY_ORDER`, filling generated Secret keys.

    :param dry_run: the API server validates each object and stores nothing (``dryRun=All``).
    :returns: the objects as the server returned them (generated values are not logged).
    :raises KubernetesError: the API server refused an object or cannot be reached.
    """
    applied = []
    for obj in ordered(objects):
        body = _with_generated_keys(kube, obj, dry_run=dry_run)
        applied.append(kube.apply(body, dry_run=dry_run))
        progress(f"{'validated' if dry_run else 'applied'} {_ref(obj)}")
    return applied


@dataclass
class ComponentStatus:
    """What ``monitor status`` reports for one component."""

    name: str
    description: str
    installed: bool = False
    ready: bool = False
    objects: list[dict[str, Any]] = field(default_factory=list)
    """One entry per object: kind, name, namespace, present, and for workloads ready/desired."""
    addon: dict[str, Any] | None = None
    """The EKS add-on's status, for add-on components."""
    problems: list[str] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready form."""
        data: dict[str, Any] = {
            "name": self.name,
            "description": self.description,
            "installed": self.installed,
            "ready": self.ready,
            "objects": self.objects,
            "problems": self.problems,
        }
        if self.addon is not None:
            data["addon"] = self.addon
        return data


@dataclass
class MonitoringStatus:
    """The state of every selected component."""

    components: list[ComponentStatus]
    prometheus_operator: bool | None = None

    @property
    def healthy(self) -> bool:
        """Every component installed and ready."""
        return all(c.installed and c.ready for c in self.components)

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready form (``monitor status --json``)."""
        return {
            "healthy": self.healthy,
            "prometheus_operator": self.prometheus_operator,
            "components": [c.to_dict() for c in self.components],
        }


class PortForward:
    """A running ``kubectl port-forward`` (a context manager: leaving it stops kubectl).

    :param argv: the kubectl command.
    :param local_port: the local port it listens on.
    :param url: the local URL of the forwarded endpoint.
    """

    def __init__(self, argv: list[str], local_port: int, url: str) -> None:
        self.argv, self.local_port, self.url = argv, local_port, url
        self.process: subprocess.Popen[str] | None = None
        self.lines: list[str] = []
        self._ready = threading.Event()

    def start(self, *, timeout: float = 30.0) -> PortForward:
        """Start kubectl and wait until it says it forwards (its ``Forwarding from`` line).

        :raises ToolError: kubectl ended, or said nothing of the kind within ``timeout`` seconds.
        """
        self.process = subprocess.Popen(
            self.argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, start_new_session=True
        )
        threading.Thread(target=self._read, name="kubectl-port-forward", daemon=True).start()
        deadline = time.monotonic() + timeout
        while not self._ready.wait(0.05):
            if self.process.poll() is not None or time.monotonic() > deadline:
                self._ready.wait(0.2)  # the reader may still be collecting the last lines
                if self._ready.is_set():
                    break
                code = self.process.poll()
                self.stop()
                raise ToolError("kubectl", "port-forward", code if code is not None else -15, self.lines[-8:])
        return self

    def _read(self) -> None:
        assert self.process is not None and self.process.stdout is not None
        for line in self.process.stdout:
            self.lines.append(line.rstrip("\n"))
            if line.startswith("Forwarding from"):
                self._ready.set()

    def wait(self) -> int:
        """Block until kubectl ends (Ctrl-C stops it); return its exit status."""
        assert self.process is not None
        try:
            return self.process.wait()
        except KeyboardInterrupt:
            self.stop()
            return 0

    def stop(self) -> None:
        """Stop kubectl (SIGTERM, then SIGKILL)."""
        if self.process is None or self.process.poll() is not None:
            return
        self.process.terminate()
        try:
            self.process.wait(timeout=5)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait(timeout=5)

    def __enter__(self) -> PortForward:
        return self.start() if self.process is None else self

    def __exit__(self, *exc: object) -> None:
        self.stop()


class Monitoring:
    """The monitoring components of one configuration on one cluster.

    :param config: the resolved configuration the components were rendered for.
    :param components: the rendered components (:meth:`fsdp_sdk.Client.monitoring_components`).
    :param kube: the API connection (``None``: rendering and dry runs only).
    :param kubeconfig: passed on to ``kubectl``.
    :param context: passed on to ``kubectl``.
    :param aws_clients: boto3 clients by service (``eks``, ``iam``) to use instead of the cached ones (tests).
    """

    def __init__(
        self,
        config: Config,
        components: Sequence[MonitoringComponent],
        kube: Kube | None = None,
        *,
        kubeconfig: str | None = None,
        context: str | None = None,
        aws_clients: Mapping[str, Any] | None = None,
    ) -> None:
        self.config = config
        self.components = list(components)
        self.kube = kube
        self.kubeconfig = kubeconfig
        self.context = context
        self.aws_clients = aws_clients

    # ------------------------------------------------------------------ selection

    def select(self, names: Sequence[str] = ()) -> list[MonitoringComponent]:
        """The components named (all of them when ``names`` is empty).

        :raises ConfigError: a name is not a component of this configuration.
        """
        known = {c.name: c for c in self.components}
        unknown = [n for n in names if n not in known]
        if unknown:
            choices = ", ".join(known) or "none (is fsdp-sdk-observability installed and observability.enabled on?)"
            raise ConfigError("COMPONENT", f"unknown monitoring component {unknown[0]!r}", f"choose from: {choices}")
        return [known[n] for n in dict.fromkeys(names)] if names else list(self.components)

    def defaults(self) -> list[MonitoringComponent]:
        """What a command without component names acts on: ``observability.components`` when set, else every
        component marked ``default`` (not those that cost money, such as CloudWatch)."""
        wanted = self.config.observability.components
        return self.select(wanted) if wanted else [c for c in self.components if c.default]

    def objects(self, names: Sequence[str] = ()) -> list[Mapping[str, Any]]:
        """The Kubernetes objects of the selected components, in apply order, each once."""
        seen: dict[tuple[str, str, str, str], Mapping[str, Any]] = {}
        for component in self.select(names):
            for obj in component.objects:
                seen.setdefault(self._key(obj, component), obj)
        return ordered(list(seen.values()))

    def _key(self, obj: Mapping[str, Any], component: MonitoringComponent | None = None) -> tuple[str, str, str, str]:
        meta = obj["metadata"]
        namespace = meta.get("namespace") or ""
        return (str(obj["apiVersion"]), str(obj["kind"]), namespace, str(meta["name"]))

    def _need_kube(self, what: str) -> Kube:
        if self.kube is None:
            raise KubernetesError(f"monitor {what}: no cluster connection; pass --kubeconfig or set KUBECONFIG")
        return self.kube

    def _addon_target(self) -> tuple[str, str]:
        return self.config.cluster.name, self.config.cluster.region

    # ------------------------------------------------------------------ install / uninstall

    def install(
        self, names: Sequence[str] = (), *, dry_run: bool = False, progress: Progress = _no_progress
    ) -> list[dict[str, Any]]:
        """Apply the selected components (idempotent); with ``dry_run`` the API server only validates.

        :returns: the objects as the server returned them.
        :raises KubernetesError: the API server refused an object.
        :raises AwsError: enabling an EKS add-on failed.
        """
        selected = self.select(names)
        objects = self.objects(names)
        applied: list[dict[str, Any]] = []
        if objects:
            applied = apply_objects(self._need_kube("install"), objects, dry_run=dry_run, progress=progress)
        for component in selected:
            if component.eks_addon is not None and not dry_run:
                from fsdp_sdk.aws.addons import enable_addon

                cluster, region = self._addon_target()
                enable_addon(cluster, region, component.eks_addon, clients=self.aws_clients, progress=progress)
        return applied

    def uninstall(
        self, names: Sequence[str] = (), *, dry_run: bool = False, progress: Progress = _no_progress
    ) -> list[str]:
        """Delete the selected components' objects in reverse apply order (namespaces are left in place), and
        disable their EKS add-ons. Objects a component that stays installed also renders are kept.

        :returns: ``Kind/name`` of each object deleted (or, on a dry run, that would be).
        """
        selected = self.select(names)
        keep = {self._key(o) for c in self.components if c not in selected for o in c.objects}
        targets = [o for o in self.objects(names) if o["kind"] != "Namespace" and self._key(o) not in keep]
        deleted: list[str] = []
        if targets:
            kube = self._need_kube("uninstall")
            for obj in reversed(targets):
                meta = obj["metadata"]
                try:
                    gone = kube.delete(
                        str(obj["apiVersion"]), str(obj["kind"]), meta["name"], meta.get("namespace"), dry_run=dry_run
                    )
                except KubernetesError as error:
                    if "does not serve this kind" not in str(error):
                        raise
                    gone = False  # its CRD is gone, and so is the object
                if gone:
                    deleted.append(_ref(obj))
                    progress(f"{'would delete' if dry_run else 'deleted'} {_ref(obj)}")
        for component in selected:
            if component.eks_addon is not None and not dry_run:
                from fsdp_sdk.aws.addons import disable_addon

                cluster, region = self._addon_target()
                if disable_addon(cluster, region, component.eks_addon, clients=self.aws_clients, progress=progress):
                    deleted.append(f"EKS add-on {component.eks_addon.name}")
        return deleted

    # ------------------------------------------------------------------ status

    def status(self, names: Sequence[str] = ()) -> MonitoringStatus:
        """Read every selected component's objects (and add-ons) back; changes nothing."""
        result = []
        for component in self.select(names):
            status = ComponentStatus(component.name, component.description)
            if component.objects:
                self._object_status(self._need_kube("status"), component, status)
            if component.eks_addon is not None:
                from fsdp_sdk.aws.addons import addon_status

                cluster, region = self._addon_target()
                status.addon = addon_status(cluster, region, component.eks_addon, clients=self.aws_clients)
                if status.addon["status"] == "absent":
                    status.problems.append(
                        f"the EKS add-on {component.eks_addon.name} is not enabled: "
                        f"run 'fsdp-sdk monitor install {component.name}'"
                    )
                elif status.addon["status"] != "ACTIVE":
                    status.problems.append(f"the EKS add-on {component.eks_addon.name} is {status.addon['status']}")
            status.installed = all(o["present"] for o in status.objects) and (
                status.addon is None or status.addon["status"] != "absent"
            )
            status.ready = status.installed and not status.problems
            result.append(status)
        return MonitoringStatus(result, self.config.observability.prometheus_operator)

    def _object_status(self, kube: Kube, component: MonitoringComponent, status: ComponentStatus) -> None:
        for obj in ordered(component.objects):
            meta = obj["metadata"]
            entry: dict[str, Any] = {"kind": obj["kind"], "name": meta["name"], "namespace": meta.get("namespace")}
            try:
                found = kube.get(str(obj["apiVersion"]), str(obj["kind"]), meta["name"], meta.get("namespace"))
            except KubernetesError as error:
                if "does not serve this kind" not in str(error):
                    raise
                found = None
            entry["present"] = found is not None
            if found is None:
                status.problems.append(f"{_ref(obj)} is missing: run 'fsdp-sdk monitor install {component.name}'")
            elif obj["kind"] in _WORKLOADS:
                ready, desired = _readiness(found)
                entry.update(ready=ready, desired=desired)
                if obj["kind"] == "DaemonSet" and desired == 0:
                    entry["note"] = "no node matches its node selector yet"
                elif ready < desired or desired == 0:
                    status.problems.append(f"{_ref(obj)}: {ready} of {desired} ready")
            status.objects.append(entry)

    # ------------------------------------------------------------------ node tools and endpoints

    def _kubectl(self) -> list[str]:
        command = [find_tool("kubectl")]
        if self.kubeconfig:
            command += ["--kubeconfig", self.kubeconfig]
        if self.context:
            command += ["--context", self.context]
        return command

    def node_tools(self) -> dict[str, tuple[MonitoringComponent, NodeTool]]:
        """Every node tool of the installed configuration, by name."""
        return {tool.name: (c, tool) for c in self.components for tool in c.node_tools}

    def endpoints(self) -> dict[str, tuple[MonitoringComponent, ServiceEndpoint]]:
        """Every service endpoint of the configuration, by name."""
        return {e.name: (c, e) for c in self.components for e in c.endpoints}

    def top_command(self, node: str, tool: str = "htop") -> list[str]:
        """The ``kubectl exec -it`` command that runs ``tool`` in its DaemonSet's pod on ``node``.

        :raises ConfigError: no component provides ``tool``, or no pod of its DaemonSet runs on ``node``.
        """
        tools = self.node_tools()
        if tool not in tools:
            known = ", ".join(tools) or "none"
            raise ConfigError(
                "--tool",
                f"no installed monitoring component provides {tool!r} (node tools: {known})",
                "enable observability and run 'fsdp-sdk monitor install node-tools'",
            )
        component, spec = tools[tool]
        namespace = spec.namespace or component.namespace or self.config.observability.namespace
        kube = self._need_kube("top")
        daemonset = kube.get("apps/v1", "DaemonSet", spec.daemonset, namespace)
        if daemonset is None:
            raise ConfigError(
                "NODE",
                f"the {spec.daemonset} DaemonSet is not installed in {namespace}",
                f"run 'fsdp-sdk monitor install {component.name}'",
            )
        match = (daemonset["spec"].get("selector") or {}).get("matchLabels") or {}
        selector = ",".join(f"{k}={v}" for k, v in sorted(match.items()))
        pods = kube.list("v1", "Pod", namespace, label_selector=selector)
        on_node = [p for p in pods if (p.get("spec") or {}).get("nodeName") == node]
        if not on_node:
            nodes = sorted({(p.get("spec") or {}).get("nodeName") or "?" for p in pods})
            raise ConfigError(
                "NODE",
                f"no {spec.daemonset} pod runs on node {node!r}",
                f"choose one of: {', '.join(nodes)}" if nodes else "wait until its pods are scheduled (monitor status)",
            )
        pod = on_node[0]["metadata"]["name"]
        return [*self._kubectl(), "exec", "-it", "-n", namespace, pod, "-c", spec.container, "--", *spec.command]

    def port_forward_command(self, name: str, local_port: int) -> tuple[list[str], str]:
        """The ``kubectl port-forward`` command to endpoint ``name`` on ``127.0.0.1:local_port``, and its URL.

        :raises ConfigError: no component serves an endpoint of that name.
        """
        endpoints = self.endpoints()
        if name not in endpoints:
            known = ", ".join(endpoints) or "none"
            raise ConfigError("NAME", f"no installed monitoring component serves {name!r}", f"choose from: {known}")
        component, endpoint = endpoints[name]
        namespace = endpoint.namespace or component.namespace or self.config.observability.namespace
        argv = [
            *self._kubectl(),
            "port-forward",
            "-n",
            namespace,
            f"svc/{endpoint.service}",
            f"{local_port}:{endpoint.port}",
            "--address",
            "127.0.0.1",
        ]
        return argv, f"http://127.0.0.1:{local_port}{endpoint.path}"

    @contextlib.contextmanager
    def forwarded(self, name: str, local_port: int, *, timeout: float = 30.0) -> Iterator[PortForward]:
        """Port-forward to endpoint ``name`` for the duration of the block."""
        argv, url = self.port_forward_command(name, local_port)
        forward = PortForward(argv, local_port, url).start(timeout=timeout)
        try:
            yield forward
        finally:
            forward.stop()


def _readiness(obj: Mapping[str, Any]) -> tuple[int, int]:
    status = obj.get("status") or {}
    if obj["kind"] == "DaemonSet":
        return int(status.get("numberReady") or 0), int(status.get("desiredNumberScheduled") or 0)
    desired = (obj.get("spec") or {}).get("replicas")
    return int(status.get("readyReplicas") or 0), int(1 if desired is None else desired)
