"""What core puts on a Kubernetes cluster once it exists, rendered without touching it.

``up`` (after the backend made the cluster) and ``prereqs install`` apply lists of
:class:`Prerequisite`; :func:`cluster_prerequisites` and :func:`job_prerequisites` render them
from the configuration, the backend's plan and the monitoring components, so ``up --dry-run``
and ``prereqs install --dry-run`` show exactly what is applied. Each prerequisite is

* Kubernetes objects core server-side applies: the backend's device plugins (its plan's
  ``kubernetes``), etcd (a ``Deployment`` and a ``Service`` named after ``job.rdzv_host`` in
  ``job.namespace``, v2 API on), the monitoring components' objects;
* upstream kustomize overlays applied with the tool their projects document, e.g. the
  Training Operator at a pinned version::

      kubectl apply --server-side -k "github.com/kubeflow/training-operator.git/manifests/overlays/standalone?ref=v1.9.2"

  (server-side because the PyTorchJob CRD is too large for the client-side
  ``last-applied-configuration`` annotation; the SDK does not re-implement kustomize);
* EKS add-ons that monitoring components are;
* the ServiceAccount the jobs' pods run under when the cluster has a checkpoint bucket
  (``cluster.checkpoint_bucket``): EKS Pod Identity gives its pods the bucket's role
  (:mod:`fsdp_sdk.aws.checkpoint_bucket` creates the role and the association).

Nothing here connects anywhere: :mod:`fsdp_sdk.k8s.prereqs` acts on these lists.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from fsdp_sdk.aws.eks import system_pod_scheduling
from fsdp_sdk.errors import ConfigError
from fsdp_sdk.k8s.render import job_labels
from fsdp_sdk.pins import pin

if TYPE_CHECKING:
    from fsdp_sdk.config import Config
    from fsdp_sdk.instance_types import InstanceType
    from fsdp_sdk.monitoring import EksAddon, MonitoringComponent

__all__ = [
    "ETCD_IMAGE",
    "PYTORCHJOB_CRD",
    "TRAINING_OPERATOR_DEPLOYMENT",
    "TRAINING_OPERATOR_NAMESPACE",
    "TRAINING_OPERATOR_VERSION",
    "Prerequisite",
    "checkpoint_access",
    "cluster_prerequisites",
    "etcd",
    "etcd_name",
    "job_prerequisites",
    "kueue",
    "kustomize_command",
    "manifests_command",
    "monitoring",
    "render_etcd",
    "training_operator",
    "training_operator_kustomize_url",
]

#: etcd 3.5 is the last minor release that still serves the v2 API torch's etcd-v2 rendezvous uses.
ETCD_IMAGE = pin("etcd").image_ref()
#: The Training Operator release installed by ``prereqs install``.
TRAINING_OPERATOR_VERSION = pin("training-operator").version
#: Namespace of the standalone Training Operator overlay.
TRAINING_OPERATOR_NAMESPACE = "kubeflow"
TRAINING_OPERATOR_DEPLOYMENT = "training-operator"
PYTORCHJOB_CRD = "pytorchjobs.kubeflow.org"


def etcd_name(config: Config) -> str:
    """The name of the etcd ``Service`` and ``Deployment``: ``job.rdzv_host`` without its domain.

    :raises ConfigError: ``job.rdzv_host`` names a service in another namespace.
    """
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
    name, namespace, port = etcd_name(config), config.job.namespace, config.job.rdzv_port
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


def kustomize_command(
    url: str,
    *,
    kubeconfig: str | None = None,
    context: str | None = None,
    dry_run: bool = False,
    kubectl: str = "kubectl",
) -> list[str]:
    """The exact ``kubectl apply --server-side -k URL`` command that applies a kustomize overlay.

    :param dry_run: add ``--dry-run=server`` (validate on the server, change nothing).
    """
    command = [kubectl, "apply", "--server-side", "-k", url]
    if dry_run:
        command.append("--dry-run=server")
    if kubeconfig:
        command += ["--kubeconfig", str(kubeconfig)]
    if context:
        command += ["--context", context]
    return command


def manifests_command(
    url: str,
    *,
    kubeconfig: str | None = None,
    context: str | None = None,
    dry_run: bool = False,
    kubectl: str = "kubectl",
) -> list[str]:
    """The exact ``kubectl apply --server-side --force-conflicts -f URL`` command that applies a release's
    manifests (server-side: Kueue's CRDs are too large for the client-side annotation, as its README says;
    ``--force-conflicts``: fsdp-sdk edits Kueue's manager ConfigMap afterwards, and a new apply takes it back)."""
    command = [kubectl, "apply", "--server-side", "--force-conflicts", "-f", url]
    if dry_run:
        command.append("--dry-run=server")
    if kubeconfig:
        command += ["--kubeconfig", str(kubeconfig)]
    if context:
        command += ["--context", context]
    return command


def patch_command(
    namespace: str,
    deployment: str,
    patch: Mapping[str, Any],
    *,
    kubeconfig: str | None = None,
    context: str | None = None,
    dry_run: bool = False,
    kubectl: str = "kubectl",
) -> list[str]:
    """The exact ``kubectl patch deployment --type merge`` command that applies ``patch`` to ``deployment``."""
    import json

    command = [kubectl, "patch", "deployment", deployment, "--namespace", namespace, "--type", "merge"]
    command += ["--patch", json.dumps(patch, separators=(",", ":"))]
    if dry_run:
        command.append("--dry-run=server")
    if kubeconfig:
        command += ["--kubeconfig", str(kubeconfig)]
    if context:
        command += ["--context", context]
    return command


def _on_system_nodes(config: Config) -> dict[str, Any]:
    """The merge patch that puts a Deployment's pods where etcd's go (:func:`system_pod_scheduling`)."""
    return {"spec": {"template": {"spec": system_pod_scheduling(config)}}}


@dataclass(frozen=True)
class Prerequisite:
    """One thing core puts on a cluster, as rendered: what the plan says, and what is applied.

    :param name: a short id (``device-plugins``, ``etcd``, ``training-operator``, ``monitoring``, ``eks-addons``).
    :param what: what it installs, for progress lines and errors (``the Kubeflow Training Operator``).
    :param steps: the plan's sentences for it (empty when the backend's own steps already say it).
    :param objects: Kubernetes objects, server-side applied (in :data:`~fsdp_sdk.k8s.monitoring.APPLY_ORDER`).
    :param kustomize: upstream kustomize overlays applied with ``kubectl apply --server-side -k``, in order,
        after the objects.
    :param manifests: upstream release manifests (URLs) applied with ``kubectl apply --server-side -f``, in
        order, after the kustomize overlays (Kueue's ``manifests.yaml``).
    :param eks_addons: EKS add-ons enabled through the EKS API, last.
    :param wait_for: ``(namespace, deployment)`` the overlays start, waited for until Available before
        :attr:`after` is applied (a controller whose webhook validates those objects).
    :param after: objects applied once the overlays are in and :attr:`wait_for` is ready (they need the
        overlays' CRDs); not part of a plan's ``kubernetes`` objects, which are applied first.
    :param patches: ``(namespace, deployment, merge patch)`` applied with ``kubectl patch`` right after the
        overlays: the upstream overlay is applied as published (pinned by its ``ref``), and its Deployment gets
        fsdp-sdk's placement (the system node group) this way; re-applying the overlay leaves the patch, since
        server-side apply owns no ``nodeSelector`` there.
    """

    name: str
    what: str
    steps: tuple[str, ...] = ()
    objects: tuple[Mapping[str, Any], ...] = ()
    kustomize: tuple[str, ...] = ()
    eks_addons: tuple[EksAddon, ...] = ()
    wait_for: tuple[str, str] | None = None
    after: tuple[Mapping[str, Any], ...] = ()
    patches: tuple[tuple[str, str, Mapping[str, Any]], ...] = ()
    manifests: tuple[str, ...] = ()

    def commands(
        self, *, kubeconfig: str | None = None, context: str | None = None, dry_run: bool = False
    ) -> list[list[str]]:
        """The ``kubectl`` commands that apply its kustomize overlays, then wait for :attr:`wait_for` (what
        ``--dry-run`` prints; a dry run waits for nothing, since nothing would start)."""
        commands = [
            kustomize_command(url, kubeconfig=kubeconfig, context=context, dry_run=dry_run) for url in self.kustomize
        ]
        commands += [
            manifests_command(url, kubeconfig=kubeconfig, context=context, dry_run=dry_run) for url in self.manifests
        ]
        for namespace, deployment, patch in self.patches:
            commands.append(
                patch_command(namespace, deployment, patch, kubeconfig=kubeconfig, context=context, dry_run=dry_run)
            )
        if self.wait_for and not dry_run:
            namespace, deployment = self.wait_for
            target = (["--kubeconfig", kubeconfig] if kubeconfig else []) + (["--context", context] if context else [])
            commands.append(
                [
                    "kubectl",
                    "wait",
                    "--for=condition=Available",
                    "--timeout=300s",
                    "-n",
                    namespace,
                    f"deployment/{deployment}",
                    *target,
                ]
            )
        return commands


def backend_objects(objects: Sequence[Mapping[str, Any]]) -> Prerequisite:
    """The objects a cluster backend returned in its plan (the device plugins of its node groups).

    The backend's own steps describe them, so this adds none.
    """
    return Prerequisite("device-plugins", "the device plugins", objects=tuple(dict(o) for o in objects))


def etcd(config: Config) -> Prerequisite:
    """etcd (v2 API) for the rendezvous of the jobs in ``job.namespace`` (:func:`render_etcd`)."""
    return Prerequisite(
        "etcd",
        "etcd",
        steps=(f"apply etcd (v2 API) for the rendezvous in namespace {config.job.namespace}",),
        objects=tuple(render_etcd(config)),
    )


def training_operator(config: Config, version: str | None = None) -> Prerequisite:
    """The Kubeflow Training Operator (PyTorchJob), from its upstream standalone overlay, on the system nodes.

    :param version: its release tag (default: :data:`TRAINING_OPERATOR_VERSION`).
    """
    version = version or TRAINING_OPERATOR_VERSION
    return Prerequisite(
        "training-operator",
        "the Kubeflow Training Operator",
        steps=(f"install the Kubeflow Training Operator {version}",),
        kustomize=(training_operator_kustomize_url(version),),
        patches=((TRAINING_OPERATOR_NAMESPACE, TRAINING_OPERATOR_DEPLOYMENT, _on_system_nodes(config)),),
    )


def monitoring(components: Sequence[MonitoringComponent]) -> list[Prerequisite]:
    """The monitoring components' objects, then the EKS add-ons some of them are (none without components)."""
    found: list[Prerequisite] = []
    if components:
        found.append(
            Prerequisite(
                "monitoring",
                "monitoring",
                steps=("apply monitoring: " + ", ".join(c.name for c in components),),
                objects=tuple(dict(o) for c in components for o in c.objects),
            )
        )
    addons = tuple(c.eks_addon for c in components if c.eks_addon is not None)
    if addons:
        found.append(
            Prerequisite(
                "eks-addons",
                "the EKS add-ons",
                steps=tuple(f"enable the EKS add-on {a.name}" for a in addons),
                eks_addons=addons,
            )
        )
    return found


def checkpoint_access(config: Config) -> list[Prerequisite]:
    """The ServiceAccount of the jobs' pods in ``job.namespace``, when the cluster has a checkpoint bucket
    (none without one); its Pod Identity association is made through the EKS API, not here."""
    from fsdp_sdk.aws.checkpoint_plan import TRAINER_SERVICE_ACCOUNT

    if not config.cluster.checkpoint_bucket:
        return []
    namespace = config.job.namespace
    account = {
        "apiVersion": "v1",
        "kind": "ServiceAccount",
        "metadata": {
            "name": TRAINER_SERVICE_ACCOUNT,
            "namespace": namespace,
            "labels": {
                "app.kubernetes.io/component": "checkpoint-access",
                "app.kubernetes.io/part-of": "fsdp-sdk",
                "app.kubernetes.io/managed-by": "fsdp-sdk",
            },
        },
    }
    return [
        Prerequisite(
            "checkpoint-access",
            "the ServiceAccount of the training pods",
            steps=(
                f"apply the ServiceAccount {namespace}/{TRAINER_SERVICE_ACCOUNT} the training pods run under "
                f"(EKS Pod Identity gives it the checkpoint bucket's role)",
            ),
            objects=(account,),
        )
    ]


def trainer(config: Config, version: str | None = None) -> Prerequisite:
    """Kubeflow Trainer v2 (TrainJob: its controller, CRDs, webhook and JobSet) from its upstream manager overlay,
    then fsdp-sdk's ``ClusterTrainingRuntime`` once the controller is up.

    :param version: its release tag (default: ``pin("kubeflow-trainer")``).
    """
    from fsdp_sdk.k8s import trainer_v2

    version = version or pin("kubeflow-trainer").version
    return Prerequisite(
        "trainer",
        f"Kubeflow Trainer {version}",
        steps=(
            f"install Kubeflow Trainer {version} (with JobSet {pin('jobset').version})",
            f"apply the ClusterTrainingRuntime {trainer_v2.RUNTIME_NAME}",
        ),
        kustomize=(trainer_v2.trainer_kustomize_url(version),),
        patches=((trainer_v2.TRAINER_NAMESPACE, trainer_v2.TRAINER_DEPLOYMENT, _on_system_nodes(config)),),
        wait_for=(trainer_v2.TRAINER_NAMESPACE, trainer_v2.TRAINER_DEPLOYMENT),
        after=(trainer_v2.render_runtime(),),
    )


def kueue(config: Config, instance: InstanceType, version: str | None = None) -> Prerequisite:
    """Kueue from its release's ``manifests.yaml`` (controller on the system nodes), then fsdp-sdk's
    ResourceFlavor, ClusterQueue and LocalQueue once its webhook is up (:func:`fsdp_sdk.k8s.queue.render_queue`).

    :param instance: the GPU node group's instance type (the flavor's node label, the quota per node).
    :param version: its release tag (default: ``pin("kueue")``).
    """
    from fsdp_sdk.k8s import queue

    version = version or pin("kueue").version
    nodes = config.cluster.nodes
    return Prerequisite(
        "kueue",
        f"Kueue {version}",
        steps=(
            f"install Kueue {version}",
            f"apply the ClusterQueue {queue.CLUSTER_QUEUE} ({nodes} x {instance.name}: "
            f"{instance.gpu_count * nodes} GPUs, {nodes} pods) and the LocalQueue "
            f"{config.job.namespace}/{queue.LOCAL_QUEUE}",
        ),
        manifests=(queue.kueue_manifests_url(version),),
        patches=((queue.KUEUE_NAMESPACE, queue.KUEUE_DEPLOYMENT, _on_system_nodes(config)),),
        wait_for=(queue.KUEUE_NAMESPACE, queue.KUEUE_DEPLOYMENT),
        after=tuple(queue.render_queue(config, instance)),
    )


def job_prerequisites(
    config: Config, *, operator: bool = True, operator_version: str | None = None, api: str | None = None
) -> list[Prerequisite]:
    """What training jobs need on a cluster (``prereqs install``): etcd, then the job controller of ``api``:
    the Training Operator (``pytorchjob``) or Kubeflow Trainer v2 and fsdp-sdk's runtime (``trainjob``).

    :param operator: include the job controller.
    :param operator_version: its release tag (default: the pinned one).
    :param api: the job API (default: ``job.api``).
    """
    if not operator:
        return [etcd(config), *checkpoint_access(config)]
    controller = trainer if (api or config.job.api) == "trainjob" else training_operator
    return [etcd(config), controller(config, operator_version), *checkpoint_access(config)]


def cluster_prerequisites(
    config: Config,
    backend_plan_objects: Sequence[Mapping[str, Any]] = (),
    components: Sequence[MonitoringComponent] = (),
) -> list[Prerequisite]:
    """Everything ``up`` applies once the backend has made the cluster, in order.

    :param config: the configuration the plan was made with.
    :param backend_plan_objects: the Kubernetes objects of the backend's plan (its device plugins).
    :param components: the monitoring components to install (none unless ``observability.enabled``).
    """
    found = [backend_objects(backend_plan_objects)] if backend_plan_objects else []
    return found + job_prerequisites(config) + monitoring(components)
