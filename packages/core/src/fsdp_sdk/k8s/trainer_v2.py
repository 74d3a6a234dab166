"""Kubeflow Trainer v2 (``--api trainjob``): the runtime fsdp-sdk's TrainJobs run on, and installing the Trainer.

``prereqs install --api trainjob`` installs the Trainer release of the pins table
(``pin("kubeflow-trainer")``, v2.3.0; ``--operator-version v2.4.0`` takes the newer release, whose one change
to runtimes, replicatedJob names of at most 20 characters, :func:`check_runtime` holds fsdp-sdk's runtime to)
from its upstream kustomize overlay, which brings the
JobSet release that release needs (``pin("jobset")``), with the tool the project documents::

    kubectl apply --server-side -k "github.com/kubeflow/trainer.git/manifests/overlays/manager?ref=v2.3.0"

then waits for the controller (its webhook validates training runtimes) and applies the
``ClusterTrainingRuntime`` of fsdp-sdk (:func:`render_runtime`) with server-side apply: Kubeflow's
``torch-distributed`` runtime with the trainer's metrics port declared on the ``node`` container,
which a TrainJob's ``runtimePatches`` cannot add. Everything is idempotent.

:func:`render_runtime` is pure; :func:`fsdp_sdk.k8s.cluster_objects.trainer` makes the installation a
prerequisite (the overlay, the wait, then the runtime) that :func:`fsdp_sdk.k8s.prereqs.install_prerequisites`
applies; :func:`check_trainer_installed` reads a cluster.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from fsdp_sdk.errors import ConfigError
from fsdp_sdk.pins import pin

if TYPE_CHECKING:
    from fsdp_sdk.k8s.kube import Kube

__all__ = [
    "JOBSET_DEPLOYMENT",
    "JOBSET_NAMESPACES",
    "METRICS_PORT",
    "METRICS_PORT_NAME",
    "NODE_JOB",
    "PATCH_MANAGER",
    "RUNTIME_CRD",
    "RUNTIME_NAME",
    "TRAINER_DEPLOYMENT",
    "TRAINER_NAMESPACE",
    "TRAINJOB_CRD",
    "check_runtime",
    "check_trainer_installed",
    "render_runtime",
    "runtime_metrics_port",
    "trainer_kustomize_url",
]

#: The ClusterTrainingRuntime fsdp-sdk installs and its TrainJobs reference.
RUNTIME_NAME = "fsdp-sdk-torch-distributed"
#: The runtime's replicated job (and container) that runs torchrun, as in Kubeflow's ``torch-distributed``.
NODE_JOB = "node"
#: The ``manager`` of the TrainJob's runtime patch that carries fsdp-sdk's pod settings.
PATCH_MANAGER = "fsdp-sdk.io/render"
#: Name and number of the trainer's Prometheus port, declared by the runtime (a runtime patch cannot add ports).
METRICS_PORT_NAME = "fsdp-metrics"
METRICS_PORT = 9464
#: The longest replicatedJob name a runtime may have from Kubeflow Trainer v2.4.0 on (its webhook, kubeflow/trainer#4394).
MAX_REPLICATED_JOB_NAME = 20
#: Where the Trainer's controller runs (its manager overlay).
TRAINER_NAMESPACE = "kubeflow-system"
TRAINER_DEPLOYMENT = "kubeflow-trainer-controller-manager"
TRAINJOB_CRD = "trainjobs.trainer.kubeflow.org"
RUNTIME_CRD = "clustertrainingruntimes.trainer.kubeflow.org"
#: JobSet's controller: in the Trainer's namespace when its manager overlay installed it (the overlay's
#: ``third-party/jobset``), in ``jobset-system`` when JobSet's own release manifests did.
JOBSET_DEPLOYMENT = "jobset-controller-manager"
JOBSET_NAMESPACES = (TRAINER_NAMESPACE, "jobset-system")


def trainer_kustomize_url(version: str | None = None) -> str:
    """The upstream overlay of the Trainer's controller, CRDs, webhook and JobSet at ``version`` (the pin)."""
    version = version or pin("kubeflow-trainer").version
    return f"github.com/kubeflow/trainer.git/manifests/overlays/manager?ref={version}"


def _runtime_image() -> str:
    """The PyTorch image the runtime names (every fsdp-sdk TrainJob sets its own ``trainer.image``)."""
    cuda = ".".join(pin("cuda-base").version.split(".")[:2])
    return f"docker.io/pytorch/pytorch:{pin('torch').version}-cuda{cuda}-cudnn9-runtime"


def render_runtime() -> dict[str, Any]:
    """fsdp-sdk's ``ClusterTrainingRuntime`` (pure): ``torch-distributed`` plus the trainer's metrics port."""
    return {
        "apiVersion": "trainer.kubeflow.org/v1alpha1",
        "kind": "ClusterTrainingRuntime",
        "metadata": {
            "name": RUNTIME_NAME,
            "labels": {"trainer.kubeflow.org/framework": "torch", "app.kubernetes.io/managed-by": "fsdp-sdk"},
        },
        "spec": {
            "mlPolicy": {"numNodes": 1, "torch": {}},
            "template": {
                "spec": {
                    "replicatedJobs": [
                        {
                            "name": NODE_JOB,
                            "template": {
                                "metadata": {"labels": {"trainer.kubeflow.org/trainjob-ancestor-step": "trainer"}},
                                "spec": {
                                    "template": {
                                        "spec": {
                                            "containers": [
                                                {
                                                    "name": NODE_JOB,
                                                    "image": _runtime_image(),
                                                    "ports": [
                                                        {
                                                            "name": METRICS_PORT_NAME,
                                                            "containerPort": METRICS_PORT,
                                                            "protocol": "TCP",
                                                        }
                                                    ],
                                                }
                                            ]
                                        }
                                    }
                                },
                            },
                        }
                    ]
                }
            },
        },
    }


def check_runtime(runtime: dict[str, Any]) -> list[str]:
    """What Kubeflow Trainer v2.3 or v2.4 would refuse in a training runtime, one line each (none: both accept it).

    v2.4.0 limits a runtime's replicatedJob names to :data:`MAX_REPLICATED_JOB_NAME` characters (kubeflow/trainer#4394,
    a breaking change of that release); v2.3.0 accepted longer ones.
    """
    jobs = ((runtime.get("spec") or {}).get("template") or {}).get("spec", {}).get("replicatedJobs") or []
    return [
        f"replicatedJob {job.get('name')!r} is longer than {MAX_REPLICATED_JOB_NAME} characters "
        "(Kubeflow Trainer v2.4 refuses it)"
        for job in jobs
        if len(str(job.get("name", ""))) > MAX_REPLICATED_JOB_NAME
    ]


def runtime_metrics_port(runtime: dict[str, Any]) -> int | None:
    """The port a ``ClusterTrainingRuntime`` declares as :data:`METRICS_PORT_NAME` on its ``node`` container, if any."""
    jobs = ((runtime.get("spec") or {}).get("template") or {}).get("spec", {}).get("replicatedJobs") or []
    for job in jobs:
        if job.get("name") != NODE_JOB:
            continue
        pod = (((job.get("template") or {}).get("spec") or {}).get("template") or {}).get("spec") or {}
        for container in pod.get("containers") or []:
            for port in container.get("ports") or []:
                if port.get("name") == METRICS_PORT_NAME:
                    return int(port["containerPort"])
    return None


def _install_hint() -> str:
    return f"run 'fsdp-sdk prereqs install --api trainjob' (Kubeflow Trainer {pin('kubeflow-trainer').version})"


def check_trainer_installed(kube: Kube) -> None:
    """Refuse ``--api trainjob`` on a cluster without the Trainer: its CRD, its controller, JobSet's controller (which
    runs a TrainJob's pods), fsdp-sdk's runtime.

    :raises ConfigError: one of them is missing; the message names the install command.
    """
    crd = kube.get("apiextensions.k8s.io/v1", "CustomResourceDefinition", TRAINJOB_CRD)
    missing = None
    if crd is None:
        missing = f"no TrainJob CRD ({TRAINJOB_CRD})"
    elif kube.get("apps/v1", "Deployment", TRAINER_DEPLOYMENT, TRAINER_NAMESPACE) is None:
        missing = f"no Kubeflow Trainer controller (deployment {TRAINER_NAMESPACE}/{TRAINER_DEPLOYMENT})"
    elif all(kube.get("apps/v1", "Deployment", JOBSET_DEPLOYMENT, ns) is None for ns in JOBSET_NAMESPACES):
        missing = f"no JobSet controller (deployment {JOBSET_DEPLOYMENT} in {' or '.join(JOBSET_NAMESPACES)})"
    elif kube.get("trainer.kubeflow.org/v1alpha1", "ClusterTrainingRuntime", RUNTIME_NAME) is None:
        missing = f"no ClusterTrainingRuntime {RUNTIME_NAME}"
    if missing:
        raise ConfigError(
            "--api", f"trainjob needs Kubeflow Trainer v2 on the cluster, which has {missing}", _install_hint()
        )
