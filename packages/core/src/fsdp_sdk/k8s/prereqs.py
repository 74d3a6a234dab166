"""Cluster prerequisites of a training job: etcd for the rendezvous and the Kubeflow Training Operator.

* etcd is rendered here (a ``Deployment`` and a ``Service`` named after
  ``job.rdzv_host`` in ``job.namespace``, v2 API on) and applied with server-side apply;
* the Training Operator is installed from its real upstream kustomize overlay at a
  pinned version with the tool its project documents::

      kubectl apply --server-side -k "github.com/kubeflow/training-operator.git/manifests/overlays/standalone?ref=v1.9.2"

  (server-side because the PyTorchJob CRD is too large for the client-side
  ``last-applied-configuration`` annotation). The SDK does not re-implement
  kustomize: it runs that command.

Both steps are idempotent: applying again changes nothing.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from fsdp_sdk.aws.eks import system_pod_scheduling
from fsdp_sdk.errors import ConfigError, KubernetesError
from fsdp_sdk.k8s.render import job_labels
from fsdp_sdk.tools import run_tool

if TYPE_CHECKING:
    from fsdp_sdk.config import Config
    from fsdp_sdk.k8s.kube import Kube

__all__ = [
    "ETCD_IMAGE",
    "TRAINING_OPERATOR_NAMESPACE",
    "TRAINING_OPERATOR_VERSION",
    "PrereqStatus",
    "Prereqs",
    "render_etcd",
    "training_operator_command",
    "training_operator_kustomize_url",
    "training_operator_scheduling_command",
]

#: etcd 3.5 is the last minor release that still serves the v2 API torch's etcd-v2 rendezvous uses.
ETCD_IMAGE = "quay.io/coreos/etcd:v3.5.17"
#: The Training Operator release installed by ``prereqs install``.
TRAINING_OPERATOR_VERSION = "v1.9.2"
#: Namespace of the standalone Training Operator overlay.
TRAINING_OPERATOR_NAMESPACE = "kubeflow"
TRAINING_OPERATOR_DEPLOYMENT = "training-operator"
PYTORCHJOB_CRD = "pytorchjobs.kubeflow.org"


def _etcd_name(config: Config) -> str:
    host = config.job.rdzv_host
    name = host.split(".", 1)[0]
    if "." in host and not host.startswith(f"{name}.{config.job.namespace}"):
        raise ConfigError(
            "job.rdzv_host",
            f"{host!r} points outside the job's namespace {config.job.namespace!r}",
            f"use the bare service name 'etcd' or etcd.{config.job.namespace}",
        )
    return name


def render_etcd(config: Config, *, image: str = ETCD_IMAGE) -> list[dict[str, Any]]:
    """The etcd ``Service`` and ``Deployment`` of the rendezvous (pure), preceded by the
    ``Namespace`` when it is not ``default`` (applied with only its name, so an existing
    namespace is left as it is).

    :param config: the configuration (``job.namespace``, ``job.rdzv_host``, ``job.rdzv_port``).
    :param image: the etcd image, pinned by default.
    """
    name, namespace, port = _etcd_name(config), config.job.namespace, config.job.rdzv_port
    labels = {**job_labels(config, "rendezvous"), "app.kubernetes.io/name": "etcd", "app.kubernetes.io/instance": name}
    selector = {"app.kubernetes.io/name": "etcd", "app.kubernetes.io/instance": name}
    probe = {"httpGet": {"path": "/health", "port": port}}
    service = {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {"name": name, "namespace": namespace, "labels": labels},
        "spec": {
            "selector": selector,
            "ports": [{"name": "client", "port": port, "targetPort": port, "protocol": "TCP"}],
        },
    }
    deployment = {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": name, "namespace": namespace, "labels": labels},
        "spec": {
            "replicas": 1,
            "strategy": {"type": "Recreate"},  # one member with its own data dir: never two at once
            "selector": {"matchLabels": selector},
            "template": {
                "metadata": {"labels": labels},
                "spec": {
                    **system_pod_scheduling(config),  # never on a GPU node a scale-down takes away
                    "containers": [
                        {
                            "name": "etcd",
                            "image": image,
                            "command": [
                                "/usr/local/bin/etcd",
                                "--name=etcd",
                                "--data-dir=/var/lib/etcd",
                                "--enable-v2=true",
                                f"--listen-client-urls=http://0.0.0.0:{port}",
                                f"--advertise-client-urls=http://{name}:{port}",
                                "--listen-peer-urls=http://127.0.0.1:2380",
                                "--initial-advertise-peer-urls=http://127.0.0.1:2380",
                                "--initial-cluster=etcd=http://127.0.0.1:2380",
                                "--initial-cluster-state=new",
                            ],
                            "ports": [{"name": "client", "containerPort": port, "protocol": "TCP"}],
                            "resources": {
                                "requests": {"cpu": "100m", "memory": "256Mi"},
                                "limits": {"cpu": "1", "memory": "1Gi"},
                            },
                            "readinessProbe": {**probe, "initialDelaySeconds": 2, "periodSeconds": 5},
                            "livenessProbe": {
                                **probe,
                                "initialDelaySeconds": 10,
                                "periodSeconds": 10,
                                "failureThreshold": 3,
                            },
                            "volumeMounts": [{"name": "data", "mountPath": "/var/lib/etcd"}],
                        }
                    ],
                    "volumes": [{"name": "data", "emptyDir": {}}],
                },
            },
        },
    }
    namespace_obj = {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": namespace}}
    return ([namespace_obj] if namespace != "default" else []) + [service, deployment]


def training_operator_kustomize_url(version: str = TRAINING_OPERATOR_VERSION) -> str:
    """The upstream kustomize overlay of the standalone Training Operator at ``version``."""
    return f"github.com/kubeflow/training-operator.git/manifests/overlays/standalone?ref={version}"


def training_operator_command(
    version: str = TRAINING_OPERATOR_VERSION,
    *,
    kubeconfig: str | None = None,
    context: str | None = None,
    dry_run: bool = False,
    kubectl: str = "kubectl",
) -> list[str]:
    """The exact ``kubectl`` command that installs the Training Operator.

    :param dry_run: add ``--dry-run=server`` (validate on the server, change nothing).
    """
    command = [kubectl, "apply", "--server-side", "-k", training_operator_kustomize_url(version)]
    if dry_run:
        command.append("--dry-run=server")
    if kubeconfig:
        command += ["--kubeconfig", str(kubeconfig)]
    if context:
        command += ["--context", context]
    return command


def training_operator_scheduling_command(
    config: Config, *, kubeconfig: str | None = None, context: str | None = None, kubectl: str = "kubectl"
) -> list[str]:
    """The ``kubectl patch`` that keeps the Training Operator on the system node group.

    The upstream overlay is applied as published (``-k``, pinned by its ``ref``); its Deployment
    (``kubeflow/training-operator``) gets the same placement as etcd right after (a merge patch; re-applying
    the overlay leaves it, since server-side apply owns no ``nodeSelector`` there).
    """
    import json

    patch = {"spec": {"template": {"spec": system_pod_scheduling(config)}}}
    command = [kubectl, "patch", "deployment", "training-operator", "--namespace", "kubeflow", "--type", "merge"]
    command += ["--patch", json.dumps(patch, separators=(",", ":"))]
    if kubeconfig:
        command += ["--kubeconfig", str(kubeconfig)]
    if context:
        command += ["--context", context]
    return command


@dataclass
class PrereqStatus:
    """What ``prereqs status`` reports."""

    etcd_deployment: bool = False
    etcd_ready_replicas: int = 0
    etcd_service: bool = False
    operator_deployment: bool = False
    operator_ready_replicas: int = 0
    operator_image: str | None = None
    pytorchjob_crd: bool = False
    problems: list[str] = field(default_factory=list)

    @property
    def healthy(self) -> bool:
        """Everything installed and ready."""
        return (
            self.etcd_deployment
            and self.etcd_ready_replicas > 0
            and self.etcd_service
            and self.operator_deployment
            and self.operator_ready_replicas > 0
            and self.pytorchjob_crd
        )

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready form (``prereqs status --json``)."""
        return {
            "healthy": self.healthy,
            "etcd": {
                "deployment": self.etcd_deployment,
                "ready_replicas": self.etcd_ready_replicas,
                "service": self.etcd_service,
            },
            "training_operator": {
                "deployment": self.operator_deployment,
                "ready_replicas": self.operator_ready_replicas,
                "image": self.operator_image,
                "namespace": TRAINING_OPERATOR_NAMESPACE,
            },
            "pytorchjob_crd": self.pytorchjob_crd,
            "problems": list(self.problems),
        }


class Prereqs:
    """Install and inspect the prerequisites on one cluster.

    :param config: the configuration.
    :param kube: the API connection (``None`` is enough for rendering and dry runs).
    :param kubeconfig: passed on to ``kubectl``.
    :param context: passed on to ``kubectl``.
    """

    def __init__(
        self, config: Config, kube: Kube | None = None, *, kubeconfig: str | None = None, context: str | None = None
    ) -> None:
        self.config = config
        self.kube = kube
        self.kubeconfig = kubeconfig
        self.context = context

    def objects(self) -> list[dict[str, Any]]:
        """The objects the SDK applies itself (etcd)."""
        return render_etcd(self.config)

    def apply(
        self, objects: Sequence[Mapping[str, Any]], *, progress: Callable[[str], None] = lambda line: None
    ) -> list[dict[str, Any]]:
        """Server-side apply ``objects`` in order (what a plan's ``kubernetes`` holds).

        :returns: the objects as the server returned them.
        :raises KubernetesError: no connection, or the API server refused an object.
        """
        if self.kube is None:
            raise KubernetesError("prereqs: no cluster connection; pass --kubeconfig or set KUBECONFIG")
        applied = []
        for obj in objects:
            applied.append(self.kube.apply(obj))
            meta = obj["metadata"]
            where = f" in {meta['namespace']}" if "namespace" in meta else ""
            progress(f"applied {obj['kind']}/{meta['name']}{where}")
        return applied

    def operator_command(self, version: str | None = None, *, dry_run: bool = False) -> list[str]:
        """The ``kubectl`` command that installs the Training Operator on this cluster."""
        return training_operator_command(
            version or TRAINING_OPERATOR_VERSION, kubeconfig=self.kubeconfig, context=self.context, dry_run=dry_run
        )

    def install_operator(
        self, version: str | None = None, *, progress: Callable[[str], None] = lambda line: None
    ) -> None:
        """Install the Training Operator with ``kubectl apply --server-side -k`` (its output streams to ``progress``).

        :raises ToolNotFoundError: kubectl is not installed.
        :raises ToolError: kubectl failed (the message holds its last lines).
        """
        command = self.operator_command(version)
        progress("installing the Training Operator: " + " ".join(command))
        run_tool(command, step="install the Kubeflow Training Operator", progress=progress)
        pin = training_operator_scheduling_command(self.config, kubeconfig=self.kubeconfig, context=self.context)
        run_tool(pin, step="keep the Training Operator on the system nodes", progress=progress)

    def install(
        self,
        *,
        dry_run: bool = False,
        operator: bool = True,
        operator_version: str | None = None,
        progress: Callable[[str], None] = lambda line: None,
    ) -> list[dict[str, Any]]:
        """Apply etcd and install the Training Operator; with ``dry_run`` change nothing.

        :returns: the etcd objects (as the server returned them; as rendered on a dry run).
        :raises KubernetesError: the API server refused an object.
        :raises ToolError: ``kubectl`` failed.
        """
        objects = self.objects()
        if dry_run:
            return objects
        applied = self.apply(objects, progress=progress)
        if operator:
            self.install_operator(operator_version, progress=progress)
        return applied

    def status(self) -> PrereqStatus:
        """Read what is installed; changes nothing."""
        if self.kube is None:
            raise KubernetesError("prereqs status: no cluster connection; pass --kubeconfig or set KUBECONFIG")
        status = PrereqStatus()
        name, namespace = _etcd_name(self.config), self.config.job.namespace
        etcd = self.kube.get("apps/v1", "Deployment", name, namespace)
        if etcd is None:
            status.problems.append(f"etcd deployment {namespace}/{name} is missing: run 'fsdp-sdk prereqs install'")
        else:
            status.etcd_deployment = True
            status.etcd_ready_replicas = int((etcd.get("status") or {}).get("readyReplicas") or 0)
            if not status.etcd_ready_replicas:
                status.problems.append(f"etcd deployment {namespace}/{name} has no ready replica")
            args = " ".join(etcd["spec"]["template"]["spec"]["containers"][0].get("command") or [])
            if "--enable-v2=true" not in args:
                status.problems.append("etcd runs without --enable-v2=true: torch's etcd-v2 rendezvous needs it")
        status.etcd_service = self.kube.get("v1", "Service", name, namespace) is not None
        if not status.etcd_service:
            status.problems.append(f"etcd service {namespace}/{name} is missing: run 'fsdp-sdk prereqs install'")
        operator = self.kube.get("apps/v1", "Deployment", TRAINING_OPERATOR_DEPLOYMENT, TRAINING_OPERATOR_NAMESPACE)
        if operator is None:
            status.problems.append("the Training Operator is not installed: run 'fsdp-sdk prereqs install'")
        else:
            status.operator_deployment = True
            status.operator_ready_replicas = int((operator.get("status") or {}).get("readyReplicas") or 0)
            containers = operator["spec"]["template"]["spec"].get("containers") or [{}]
            status.operator_image = containers[0].get("image")
            if not status.operator_ready_replicas:
                status.problems.append("the Training Operator deployment has no ready replica")
        status.pytorchjob_crd = (
            self.kube.get("apiextensions.k8s.io/v1", "CustomResourceDefinition", PYTORCHJOB_CRD) is not None
        )
        if not status.pytorchjob_crd:
            status.problems.append(f"the {PYTORCHJOB_CRD} CRD is missing: run 'fsdp-sdk prereqs install'")
        return status
