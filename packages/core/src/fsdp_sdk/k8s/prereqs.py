"""Putting the prerequisites on a cluster, and reading them back.

:mod:`fsdp_sdk.k8s.cluster_objects` renders what ``up`` and ``prereqs install`` apply (pure);
this module acts on those lists:

* :func:`install_prerequisites` server-side applies their objects (through
  :class:`~fsdp_sdk.k8s.kube.Kube`, generated Secret keys filled on the way), runs
  ``kubectl apply --server-side -k`` for their kustomize overlays (through the tool runner,
  its output streamed as progress) and enables their EKS add-ons;
* :class:`Prereqs` is ``prereqs install`` / ``prereqs status`` on one cluster: etcd and the
  job controller of the job API: the Training Operator (``pytorchjob``), or Kubeflow Trainer v2
  with JobSet and fsdp-sdk's ``ClusterTrainingRuntime`` (``trainjob``).

Both steps are idempotent: applying again changes nothing.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from fsdp_sdk.errors import ConfigError, KubernetesError
from fsdp_sdk.k8s.cluster_objects import (
    ETCD_IMAGE,
    PYTORCHJOB_CRD,
    TRAINING_OPERATOR_DEPLOYMENT,
    TRAINING_OPERATOR_NAMESPACE,
    TRAINING_OPERATOR_VERSION,
    Prerequisite,
    etcd_name,
    job_prerequisites,
    render_etcd,
    training_operator_kustomize_url,
)
from fsdp_sdk.tools import run_tool

if TYPE_CHECKING:
    from fsdp_sdk.config import Config
    from fsdp_sdk.instance_types import InstanceType
    from fsdp_sdk.k8s.kube import Kube

__all__ = [
    "ETCD_IMAGE",
    "TRAINING_OPERATOR_NAMESPACE",
    "TRAINING_OPERATOR_VERSION",
    "PrereqStatus",
    "Prereqs",
    "install_prerequisites",
    "render_etcd",
    "training_operator_kustomize_url",
]

Progress = Callable[[str], None]


def _no_progress(line: str) -> None:
    pass


def install_prerequisites(
    prerequisites: Sequence[Prerequisite],
    kube: Kube | None,
    *,
    objects: Sequence[Mapping[str, Any]] | None = None,
    kubeconfig: str | None = None,
    context: str | None = None,
    eks_cluster: tuple[str, str] | None = None,
    aws_clients: Mapping[str, Any] | None = None,
    progress: Progress = _no_progress,
) -> list[dict[str, Any]]:
    """Apply ``prerequisites``: every object first (server-side, in apply order), then each kustomize overlay
    with ``kubectl``, then the EKS add-ons.

    :param objects: the objects to apply instead of the prerequisites' own (``up`` applies those its plan showed).
    :param kubeconfig: passed on to ``kubectl``.
    :param context: passed on to ``kubectl``.
    :param eks_cluster: ``(cluster name, region)`` of the EKS cluster the add-ons are enabled on.
    :param aws_clients: boto3 clients by service (``eks``, ``iam``) instead of the cached ones.
    :returns: the objects as the server returned them.
    :raises KubernetesError: no connection, or the API server refused an object.
    :raises ToolError: ``kubectl`` failed (the message holds its last lines).
    :raises AwsError: enabling an EKS add-on failed.
    """
    from fsdp_sdk.k8s.monitoring import apply_objects

    wanted = [o for p in prerequisites for o in p.objects] if objects is None else list(objects)
    applied: list[dict[str, Any]] = []
    if wanted:
        if kube is None:
            raise KubernetesError("prereqs: no cluster connection; pass --kubeconfig or set KUBECONFIG")
        applied = apply_objects(kube, wanted, progress=progress)  # generated Secret keys filled on the way
    for prerequisite in prerequisites:
        for command in prerequisite.commands(kubeconfig=kubeconfig, context=context):
            progress(f"installing {prerequisite.what}: " + " ".join(command))
            run_tool(command, step=f"install {prerequisite.what}", progress=progress)
        if prerequisite.after:
            if kube is None:
                raise KubernetesError("prereqs: no cluster connection; pass --kubeconfig or set KUBECONFIG")
            applied += apply_objects(kube, prerequisite.after, progress=progress)
    addons = [a for p in prerequisites for a in p.eks_addons]
    if addons:
        from fsdp_sdk.aws.addons import enable_addon

        if eks_cluster is None:
            raise KubernetesError("prereqs: EKS add-ons need the cluster's name and region")
        for addon in addons:
            enable_addon(*eks_cluster, addon, clients=aws_clients, progress=progress)
    return applied


@dataclass
class PrereqStatus:
    """What ``prereqs status`` reports: etcd, and the job controller of :attr:`api` with what it needs.

    ``pytorchjob``: the Training Operator's deployment and the PyTorchJob CRD. ``trainjob``: Kubeflow Trainer's
    controller, the TrainJob and ClusterTrainingRuntime CRDs, JobSet's controller, and fsdp-sdk's runtime with the
    metrics port it declares.
    """

    api: str = "pytorchjob"
    etcd_deployment: bool = False
    etcd_ready_replicas: int = 0
    etcd_service: bool = False
    operator_deployment: bool = False
    operator_ready_replicas: int = 0
    operator_image: str | None = None
    pytorchjob_crd: bool = False
    trainer_deployment: bool = False
    trainer_ready_replicas: int = 0
    trainer_image: str | None = None
    jobset_deployment: bool = False
    jobset_ready_replicas: int = 0
    jobset_namespace: str | None = None
    trainjob_crd: bool = False
    runtime_crd: bool = False
    runtime: bool = False
    runtime_metrics_port: int | None = None
    queue: dict[str, Any] | None = None
    """Kueue, when the cluster serves its kinds (:func:`fsdp_sdk.k8s.queue.queue_status`); ``None`` without."""
    problems: list[str] = field(default_factory=list)

    @property
    def healthy(self) -> bool:
        """Everything the job API needs is installed and ready."""
        etcd = self.etcd_deployment and self.etcd_ready_replicas > 0 and self.etcd_service
        if self.api == "trainjob":
            from fsdp_sdk.k8s.trainer_v2 import METRICS_PORT

            return (
                etcd
                and self.trainer_deployment
                and self.trainer_ready_replicas > 0
                and self.jobset_deployment
                and self.jobset_ready_replicas > 0
                and self.trainjob_crd
                and self.runtime_crd
                and self.runtime
                and self.runtime_metrics_port == METRICS_PORT
            )
        return etcd and self.operator_deployment and self.operator_ready_replicas > 0 and self.pytorchjob_crd

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready form (``prereqs status --json``): the keys of :attr:`api`'s controller only."""
        data: dict[str, Any] = {
            "healthy": self.healthy,
            "api": self.api,
            "etcd": {
                "deployment": self.etcd_deployment,
                "ready_replicas": self.etcd_ready_replicas,
                "service": self.etcd_service,
            },
        }
        if self.api == "trainjob":
            from fsdp_sdk.k8s import trainer_v2

            data["kubeflow_trainer"] = {
                "deployment": self.trainer_deployment,
                "ready_replicas": self.trainer_ready_replicas,
                "image": self.trainer_image,
                "namespace": trainer_v2.TRAINER_NAMESPACE,
            }
            data["jobset"] = {
                "deployment": self.jobset_deployment,
                "ready_replicas": self.jobset_ready_replicas,
                "namespace": self.jobset_namespace,
            }
            data["crds"] = {trainer_v2.TRAINJOB_CRD: self.trainjob_crd, trainer_v2.RUNTIME_CRD: self.runtime_crd}
            data["runtime"] = {
                "name": trainer_v2.RUNTIME_NAME,
                "installed": self.runtime,
                "metrics_port": self.runtime_metrics_port,
            }
        else:
            data["training_operator"] = {
                "deployment": self.operator_deployment,
                "ready_replicas": self.operator_ready_replicas,
                "image": self.operator_image,
                "namespace": TRAINING_OPERATOR_NAMESPACE,
            }
            data["pytorchjob_crd"] = self.pytorchjob_crd
        if self.queue is not None:
            data["queue"] = dict(self.queue)
        data["problems"] = list(self.problems)
        return data


def _deployment(kube: Kube, name: str, namespace: str) -> tuple[bool, int, str | None]:
    """Whether the deployment exists, its ready replicas and its first container's image."""
    found = kube.get("apps/v1", "Deployment", name, namespace)
    if found is None:
        return False, 0, None
    ready = int((found.get("status") or {}).get("readyReplicas") or 0)
    containers = ((found.get("spec") or {}).get("template") or {}).get("spec", {}).get("containers") or [{}]
    return True, ready, containers[0].get("image")


class Prereqs:
    """Install and inspect the prerequisites on one cluster.

    :param config: the configuration.
    :param kube: the API connection (``None`` is enough for rendering and dry runs).
    :param kubeconfig: passed on to ``kubectl``.
    :param context: passed on to ``kubectl``.
    :param instance: the GPU nodes' instance type, which sizes the queue (``resolved.instance``: a client's
        :meth:`~fsdp_sdk.Client.prereqs` passes its own); needed only to install the queue.
    """

    def __init__(
        self,
        config: Config,
        kube: Kube | None = None,
        *,
        kubeconfig: str | None = None,
        context: str | None = None,
        instance: InstanceType | None = None,
    ) -> None:
        self.config = config
        self.kube = kube
        self.kubeconfig = kubeconfig
        self.context = context
        self.instance = instance

    def prerequisites(
        self,
        *,
        operator: bool = True,
        operator_version: str | None = None,
        api: str | None = None,
        queue: bool = False,
    ) -> list[Prerequisite]:
        """What ``prereqs install`` applies: etcd, then the job controller of ``api`` (default ``job.api``), then
        with ``queue`` Kueue and fsdp-sdk's queues sized to the GPU node group (pure)."""
        found = job_prerequisites(self.config, operator=operator, operator_version=operator_version, api=api)
        if queue:
            from fsdp_sdk.k8s.cluster_objects import kueue

            if self.instance is None:
                raise ConfigError(
                    "queue",
                    "the queue is sized to the GPU nodes, and these prerequisites were given no instance type",
                    "build them with Prereqs(..., instance=resolved.instance), as Client.prereqs() does",
                )
            found.append(kueue(self.config, self.instance))
        return found

    def objects(self) -> list[dict[str, Any]]:
        """The objects the SDK applies itself (etcd)."""
        return render_etcd(self.config)

    def install(
        self,
        *,
        dry_run: bool = False,
        operator: bool = True,
        operator_version: str | None = None,
        api: str | None = None,
        queue: bool = False,
        progress: Callable[[str], None] = lambda line: None,
    ) -> list[dict[str, Any]]:
        """Apply etcd and install the job controller of ``api`` (default ``job.api``): the Training Operator
        (``pytorchjob``), or Kubeflow Trainer v2 and fsdp-sdk's runtime (``trainjob``); with ``dry_run`` change
        nothing.

        :returns: the objects applied (as the server returned them; as rendered on a dry run).
        :raises KubernetesError: the API server refused an object.
        :raises ToolError: ``kubectl`` failed.
        """
        prerequisites = self.prerequisites(operator=operator, operator_version=operator_version, api=api, queue=queue)
        if dry_run:
            return [dict(o) for p in prerequisites for o in (*p.objects, *p.after)]
        applied = install_prerequisites(
            prerequisites, self.kube, kubeconfig=self.kubeconfig, context=self.context, progress=progress
        )
        if queue:
            self._enable_kueue_integrations(progress)
        return applied

    def _enable_kueue_integrations(self, progress: Callable[[str], None]) -> None:
        """Turn on Kueue's PyTorchJob and TrainJob integrations in its manager configuration (the release's
        default leaves PyTorchJob off) and restart its controller to read it; nothing when they are on."""
        from fsdp_sdk.k8s import queue

        assert self.kube is not None  # install_prerequisites refused to go on without one
        where = f"{queue.KUEUE_NAMESPACE}/{queue.KUEUE_CONFIGMAP}"
        found = self.kube.get("v1", "ConfigMap", queue.KUEUE_CONFIGMAP, queue.KUEUE_NAMESPACE)
        text = ((found or {}).get("data") or {}).get(queue.KUEUE_CONFIG_KEY)
        if text is None:
            raise KubernetesError(
                f"Kueue's configuration {where} ({queue.KUEUE_CONFIG_KEY}) is missing after installing Kueue: "
                "run 'fsdp-sdk prereqs install --queue' again"
            )
        try:
            updated = queue.with_frameworks(text)
        except ValueError as error:
            raise KubernetesError(f"Kueue's configuration {where} cannot be read: {error}") from error
        if updated is None:
            return
        progress(f"enabling Kueue's integrations {', '.join(queue.FRAMEWORKS)} in {where}")
        self.kube.apply(
            {
                "apiVersion": "v1",
                "kind": "ConfigMap",
                "metadata": {"name": queue.KUEUE_CONFIGMAP, "namespace": queue.KUEUE_NAMESPACE},
                "data": {queue.KUEUE_CONFIG_KEY: updated},
            }
        )
        target = (["--kubeconfig", self.kubeconfig] if self.kubeconfig else []) + (
            ["--context", self.context] if self.context else []
        )
        deployment = f"deployment/{queue.KUEUE_DEPLOYMENT}"
        for command in (
            ["kubectl", "rollout", "restart", deployment, "-n", queue.KUEUE_NAMESPACE, *target],
            ["kubectl", "rollout", "status", deployment, "-n", queue.KUEUE_NAMESPACE, "--timeout=300s", *target],
        ):
            progress("restarting Kueue: " + " ".join(command))
            run_tool(command, step="restart Kueue with its integrations", progress=progress)

    def status(self, *, api: str | None = None) -> PrereqStatus:
        """Read what is installed for the job API ``api`` (default ``job.api``); changes nothing."""
        if self.kube is None:
            raise KubernetesError("prereqs status: no cluster connection; pass --kubeconfig or set KUBECONFIG")
        status = PrereqStatus(api=api or self.config.job.api)
        name, namespace = etcd_name(self.config), self.config.job.namespace
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
        from fsdp_sdk.k8s.queue import queue_status

        status.queue = queue_status(self.kube, self.config, status.problems)
        if status.api == "trainjob":
            self._trainer_status(self.kube, status)
            return status
        present, ready, image = _deployment(self.kube, TRAINING_OPERATOR_DEPLOYMENT, TRAINING_OPERATOR_NAMESPACE)
        status.operator_deployment, status.operator_ready_replicas, status.operator_image = present, ready, image
        if not present:
            status.problems.append("the Training Operator is not installed: run 'fsdp-sdk prereqs install'")
        elif not ready:
            status.problems.append("the Training Operator deployment has no ready replica")
        status.pytorchjob_crd = (
            self.kube.get("apiextensions.k8s.io/v1", "CustomResourceDefinition", PYTORCHJOB_CRD) is not None
        )
        if not status.pytorchjob_crd:
            status.problems.append(f"the {PYTORCHJOB_CRD} CRD is missing: run 'fsdp-sdk prereqs install'")
        return status

    @staticmethod
    def _trainer_status(kube: Kube, status: PrereqStatus) -> None:
        """Kubeflow Trainer's controller, its CRDs, JobSet's controller and fsdp-sdk's runtime, into ``status``."""
        from fsdp_sdk.k8s import trainer_v2

        install = "run 'fsdp-sdk prereqs install --api trainjob'"
        where = f"{trainer_v2.TRAINER_NAMESPACE}/{trainer_v2.TRAINER_DEPLOYMENT}"
        present, ready, image = _deployment(kube, trainer_v2.TRAINER_DEPLOYMENT, trainer_v2.TRAINER_NAMESPACE)
        status.trainer_deployment, status.trainer_ready_replicas, status.trainer_image = present, ready, image
        if not present:
            status.problems.append(f"Kubeflow Trainer is not installed (no deployment {where}): {install}")
        elif not ready:
            status.problems.append(f"the Kubeflow Trainer deployment {where} has no ready replica")
        for jobset_namespace in trainer_v2.JOBSET_NAMESPACES:
            present, ready, _ = _deployment(kube, trainer_v2.JOBSET_DEPLOYMENT, jobset_namespace)
            if present:
                status.jobset_deployment, status.jobset_ready_replicas = True, ready
                status.jobset_namespace = jobset_namespace
                break
        if not status.jobset_deployment:
            places = " or ".join(trainer_v2.JOBSET_NAMESPACES)
            status.problems.append(
                f"JobSet's controller is not installed (no deployment {trainer_v2.JOBSET_DEPLOYMENT} in {places}): "
                f"{install}"
            )
        elif not status.jobset_ready_replicas:
            status.problems.append(
                f"JobSet's controller {status.jobset_namespace}/{trainer_v2.JOBSET_DEPLOYMENT} has no ready replica"
            )
        crd = "apiextensions.k8s.io/v1", "CustomResourceDefinition"
        status.trainjob_crd = kube.get(*crd, trainer_v2.TRAINJOB_CRD) is not None
        status.runtime_crd = kube.get(*crd, trainer_v2.RUNTIME_CRD) is not None
        for name, there in (
            (trainer_v2.TRAINJOB_CRD, status.trainjob_crd),
            (trainer_v2.RUNTIME_CRD, status.runtime_crd),
        ):
            if not there:
                status.problems.append(f"the {name} CRD is missing: {install}")
        if not status.runtime_crd:
            return  # the runtime's kind is not served without its CRD
        runtime = kube.get("trainer.kubeflow.org/v1alpha1", "ClusterTrainingRuntime", trainer_v2.RUNTIME_NAME)
        if runtime is None:
            status.problems.append(f"the ClusterTrainingRuntime {trainer_v2.RUNTIME_NAME} is missing: {install}")
            return
        status.runtime = True
        status.runtime_metrics_port = trainer_v2.runtime_metrics_port(runtime)
        if status.runtime_metrics_port != trainer_v2.METRICS_PORT:
            declared = status.runtime_metrics_port or "no port"
            status.problems.append(
                f"the ClusterTrainingRuntime {trainer_v2.RUNTIME_NAME} declares {declared} as "
                f"{trainer_v2.METRICS_PORT_NAME}, fsdp-sdk's jobs use {trainer_v2.METRICS_PORT}: {install}"
            )
