"""Rendering a training job: configuration in, Kubernetes objects (plain dicts) out.

Pure: no network, no files. What :func:`render_job` returns is exactly what
``fsdp-sdk job render`` prints and what ``fsdp-sdk job submit`` applies, so a
dry run and the tests see the real thing.

The default is a Kubeflow Training Operator ``PyTorchJob`` (``kubeflow.org/v1``)
with an elastic policy: the operator turns ``elasticPolicy`` into torchrun's
``PET_RDZV_BACKEND``/``PET_RDZV_ENDPOINT``/``PET_RDZV_ID``/``PET_NNODES``/
``PET_MAX_RESTARTS`` and ``spec.nprocPerNode`` into ``PET_NPROC_PER_NODE``, so the
container only runs ``torchrun -m fsdp_trainer <trainer args>``. With
``job.api=trainjob`` the same job is a Kubeflow Trainer v2.3 ``TrainJob``
(``trainer.kubeflow.org/v1alpha1``) on fsdp-sdk's runtime (:mod:`fsdp_sdk.k8s.trainer_v2`), its pod
settings in ``spec.runtimePatches``.

The Hugging Face token is only ever referenced (``secretKeyRef``); the optional
``Secret`` object is rendered without data, and :mod:`fsdp_sdk.k8s.jobs` fills its
``stringData`` from the configuration at apply time.

The trainer's outputs and checkpoints go to a volume that outlives the container
(:func:`output_dir`), one directory per namespace and job name: the shared filesystem
of ``job.shared_storage_claim`` (mounted at ``/shared``) when set, else the node's disk
(``/local``). On a cluster with a checkpoint bucket (``cluster.checkpoint_bucket``, which
``up`` fills on EKS backends) and no shared claim, the checkpoints go to
``s3://<bucket>/<namespace>/<job>/checkpoints`` instead (:func:`checkpoint_dir`), so they
outlive the nodes too: the pods run under the ServiceAccount EKS Pod Identity gives the
bucket's role (no credential in the objects) and get ``AWS_REGION``. A pod that restarts,
or a job submitted again under the same name (``job submit --replace``), resumes from the
newest complete checkpoint there.

Problems that do not stop the rendering (a registry placeholder in a preview, checkpoints
that cannot be resumed) are issued as :class:`RenderWarning` through :mod:`warnings`.
"""

from __future__ import annotations

import dataclasses
import json
import re
import shlex
import uuid
import warnings
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from fsdp_sdk.aws.checkpoint_plan import TRAINER_SERVICE_ACCOUNT, checkpoint_url
from fsdp_sdk.config import SECRET_ENV_NAME, trainer_arguments
from fsdp_sdk.errors import ConfigError
from fsdp_sdk.k8s.trainer_v2 import NODE_JOB, PATCH_MANAGER, RUNTIME_NAME

if TYPE_CHECKING:
    from fsdp_sdk.config import Config
    from fsdp_sdk.instance_types import InstanceType
    from fsdp_sdk.k8s.validate import CrdSchema
    from fsdp_sdk.plugins import Plugins
    from fsdp_sdk.resolved import Resolved

__all__ = [
    "HF_TOKEN_KEY",
    "JOB_NAME_LABEL",
    "OUTPUT_DIR_ENV",
    "PLACEHOLDER_REGISTRY",
    "RUN_ID_LABEL",
    "SHARED_MOUNT_PATH",
    "TRAINJOB_RUNTIME",
    "RenderWarning",
    "WorkerPod",
    "check_credentials_not_inline",
    "check_env",
    "check_node_count",
    "check_token_not_inline",
    "checkpoint_dir",
    "job_labels",
    "new_rdzv_id",
    "output_dir",
    "render_job",
    "render_pytorchjob",
    "render_trainjob",
    "stable_rdzv_id",
    "worker_environment",
    "worker_pod_specs",
    "worker_pods",
]

#: Key of the token in the Hugging Face Secret.
HF_TOKEN_KEY = "token"
#: Label the Training Operator puts on a PyTorchJob's pods.
JOB_NAME_LABEL = "training.kubeflow.org/job-name"
#: Label of the SDK's objects holding the submission's rendezvous (run) id.
RUN_ID_LABEL = "fsdp-sdk.io/run-id"
#: The ClusterTrainingRuntime of Kubeflow Trainer v2 that TrainJobs run on (fsdp-sdk's, see k8s/trainer_v2.py).
TRAINJOB_RUNTIME = RUNTIME_NAME
#: Where the node's local NVMe RAID is mounted on EKS GPU nodes (the seed's hostPath).
LOCAL_NVME_HOST_PATH = "/mnt/k8s-disks/0"
#: Mount path of the local NVMe volume inside the workers.
LOCAL_MOUNT_PATH = "/local"
#: Mount path of the shared filesystem (``job.shared_storage_claim``) inside the workers.
SHARED_MOUNT_PATH = "/shared"
#: The workers' environment variable holding the trainer's output directory (``$(FSDP_SDK_OUTPUT_DIR)`` in a command).
OUTPUT_DIR_ENV = "FSDP_SDK_OUTPUT_DIR"
#: The workers' environment variable telling your own code (``--script``) where its checkpoints go.
CHECKPOINT_DIR_ENV = "FSDP_SDK_CHECKPOINT_DIR"
#: The registry a preview (``job render`` without ``job.registry``) puts in the image reference.
PLACEHOLDER_REGISTRY = "set-job-registry.invalid"
CONTAINER_NAME = "pytorch"  # the Training Operator requires this container name


class RenderWarning(UserWarning):
    """Something in the rendered job works, but not as the user likely expects (the CLI prints it as a warning)."""


def new_rdzv_id(job_name: str) -> str:
    """A fresh rendezvous id for one submission: ``<job name>-<8 hex>``."""
    return f"{job_name}-{uuid.uuid4().hex[:8]}"


def stable_rdzv_id(config: Config, *, api: str | None = None, create_secret: bool | None = None) -> str:
    """The rendezvous id ``job render`` shows: ``<job name>-<8 hex>``, the hex a digest of the configuration (its
    secrets redacted) and the render options, so the same input renders the same objects on every call."""
    import hashlib

    data = {"config": config.to_dict(redact=True), "api": api, "create_secret": create_secret}
    digest = hashlib.sha256(json.dumps(data, sort_keys=True, default=str).encode()).hexdigest()
    return f"{config.job.name}-{digest[:8]}"


def job_labels(config: Config, component: str) -> dict[str, str]:
    """The standard ``app.kubernetes.io/*`` labels of the job's objects."""
    return {
        "app.kubernetes.io/name": "fsdp-trainer",
        "app.kubernetes.io/instance": config.job.name,
        "app.kubernetes.io/component": component,
        "app.kubernetes.io/part-of": "fsdp-sdk",
        "app.kubernetes.io/managed-by": "fsdp-sdk",
    }


def check_env(config: Config) -> None:
    """Refuse ``job.env`` entries that would put a secret in plain text into the job object.

    :raises ConfigError: a variable is named like a secret (``*TOKEN*``, ``*SECRET*``,
        ``*PASSWORD*``...), is ``HF_TOKEN``, or has the Hugging Face token as its value.
    """
    token = config.job.hf_token.get_secret_value() if config.job.hf_token else None
    for name, value in config.job.env.items():
        if name == "HF_TOKEN" or SECRET_ENV_NAME.search(name):
            raise ConfigError(
                f"job.env.{name}",
                "looks like a secret and would be stored in plain text in the job object",
                "put the token in job.hf_token (HF_TOKEN in .env), which goes to a Kubernetes Secret, "
                "or create a Secret yourself and reference it from a plugin",
            )
        if token and value == token:
            raise ConfigError(
                f"job.env.{name}",
                "has the Hugging Face token as its value and would store it in plain text",
                "remove it; the workers get HF_TOKEN from the Secret named by job.hf_token_secret",
            )


def check_token_not_inline(config: Config, objects: list[dict[str, Any]]) -> None:
    """Refuse rendered objects that carry the Hugging Face token's value in plain text.

    Every object but the ``Secret`` (which gets the token at apply time) is
    serialised and searched, so the token is caught wherever it came from:
    ``job.command``, a trainer setting, ``job.env`` or a plugin's render hook.

    :param config: the configuration (``job.hf_token``).
    :param objects: the rendered objects, after the plugins' ``fsdp_sdk_render_job``.
    :raises ConfigError: the token's value appears in an object other than a Secret.
    """
    token = config.job.hf_token.get_secret_value() if config.job.hf_token else ""
    if not token:
        return
    forms = {token, json.dumps(token)[1:-1], json.dumps(token, ensure_ascii=False)[1:-1]}  # as json.dumps escapes it
    for obj in objects:
        if obj.get("kind") == "Secret":
            continue
        text = json.dumps(obj, ensure_ascii=False, default=str)
        if any(form in text for form in forms):
            where = f"{obj.get('kind', 'object')} {(obj.get('metadata') or {}).get('name', '?')}"
            raise ConfigError(
                "job.hf_token",
                f"the token's value would appear in plain text in the rendered {where}",
                "pass it only through HF_TOKEN / job.hf_token (it is mounted from the Kubernetes Secret)",
            )


#: AWS access key ids (long-term ``AKIA``, temporary ``ASIA``): never part of a rendered object.
_AWS_ACCESS_KEY_ID = re.compile(r"\b(?:AKIA|ASIA)[A-Z0-9]{16}\b")


def check_credentials_not_inline(objects: list[dict[str, Any]]) -> None:
    """Refuse rendered objects that carry an AWS access key id: the pods get AWS credentials from EKS Pod Identity.

    :raises ConfigError: an access key id appears in an object other than a Secret.
    """
    for obj in objects:
        if obj.get("kind") == "Secret":
            continue
        if _AWS_ACCESS_KEY_ID.search(json.dumps(obj, default=str)):
            where = f"{obj.get('kind', 'object')} {(obj.get('metadata') or {}).get('name', '?')}"
            raise ConfigError(
                "job.env",
                f"an AWS access key id would appear in plain text in the rendered {where}",
                "remove it: on EKS the pods get the checkpoint bucket's credentials from EKS Pod Identity",
            )


def _check_nproc(config: Config, instance: InstanceType) -> None:
    """Refuse more trainer processes per worker than the worker has GPUs (one process per GPU on Kubernetes)."""
    nproc, gpus = config.job.nproc_per_node, config.job.gpu_per_worker or 0
    if nproc is None or gpus == 0 or nproc <= gpus:
        return
    origin = config.origins.get("job.nproc_per_node")
    have = f"{instance.name} has {instance.gpu_count} GPUs"
    if gpus != instance.gpu_count:
        have = f"each worker gets {gpus} GPUs (job.gpu_per_worker; {have})"
    raise ConfigError(
        origin.name if origin else "job.nproc_per_node",
        f"{nproc} processes per worker but {have}",
        f"set it to {gpus} or less, or leave it unset (one process per GPU)",
        source=origin.source if origin else None,
    )


def check_node_count(config: Config) -> None:
    """Refuse a job that needs more nodes than its cluster can ever have (``cluster.max_nodes``, the GPU node
    group's maximum): one worker per node, so the workers beyond it would stay Pending for ever.

    :raises ConfigError: ``job.num_workers`` is above ``cluster.max_nodes``.
    """
    workers, most, name = config.job.num_workers, config.cluster.max_nodes, config.cluster.name
    if most is None or workers <= most:
        return
    origin = config.origins.get("job.num_workers")
    more = f"give the cluster {workers} nodes (--nodes {workers}; a running one: 'fsdp-sdk scale {workers}')"
    raise ConfigError(
        origin.name if origin else "job.num_workers",
        f"the job needs {workers} nodes but cluster {name} can have at most {most} (cluster.max_nodes)",
        f"{more} or run fewer workers (--workers {most})" if most else more,
        source=origin.source if origin else None,
    )


def _check_image(image: str, *, preview: bool = False) -> str:
    repository = image.rsplit("@", 1)[0]
    repository = repository.rsplit(":", 1)[0] if ":" in repository.rsplit("/", 1)[-1] else repository
    if not repository:
        raise ConfigError("job.image", "is empty", "set job.image (IMAGE in .env) to the image repository name")
    if "/" not in repository.rstrip("/") and preview:
        warnings.warn(
            RenderWarning(
                f"job.registry is not set: this preview pulls {PLACEHOLDER_REGISTRY}/{image}; set job.registry "
                "(REGISTRY in .env), e.g. 123456789012.dkr.ecr.us-west-2.amazonaws.com, before 'job submit'"
            ),
            stacklevel=4,
        )
        return f"{PLACEHOLDER_REGISTRY}/{image}"
    if "/" not in repository.rstrip("/"):  # a bare name would be pulled from docker.io/library/
        raise ConfigError(
            "job.registry",
            f"no container registry is set, so the workers cannot pull {image!r}",
            "set job.registry (REGISTRY in .env), e.g. 123456789012.dkr.ecr.us-west-2.amazonaws.com, "
            "and push the image there with 'fsdp-sdk image push'",
        )
    return image


def worker_environment(config: Config, instance: InstanceType) -> list[dict[str, Any]]:
    """The workers' environment: the seed's NCCL/EFA/torch debug settings, ``job.env``, and HF_TOKEN by reference."""
    job = config.job
    env: dict[str, str] = {"LOGLEVEL": "INFO"}
    if (job.efa_per_worker or 0) > 0:
        env.update({"FI_PROVIDER": job.fi_provider, "FI_EFA_USE_HUGE_PAGE": "0", "FI_EFA_FORK_SAFE": "1"})
        if instance.gpudirect_rdma:
            env["FI_EFA_USE_DEVICE_RDMA"] = "1"
    env.update(
        {
            "NCCL_DEBUG": job.nccl_debug,
            "NCCL_SOCKET_IFNAME": "^lo,docker",
            "TORCH_NCCL_ASYNC_ERROR_HANDLING": "1",
            "TORCH_NCCL_ENABLE_MONITORING": "1",
            "TORCH_NCCL_TRACE_BUFFER_SIZE": "20000",
            "TORCH_NCCL_DUMP_ON_TIMEOUT": "1",
            "TORCH_NCCL_DEBUG_INFO_TEMP_FILE": f"{LOCAL_MOUNT_PATH}/nccl_trace_rank_",
            "TORCH_DISTRIBUTED_DEBUG": "INFO",
            "PYTORCH_CUDA_ALLOC_CONF": "expandable_segments:True",
            # A worker pod replaced mid-run must be able to rejoin. By default torchrun's rendezvous hands the
            # workers the TCPStore of the first round's rank-0 agent and publishes its address in that round only
            # (pytorch/pytorch@cf30153c, v2.13.0, torch/distributed/elastic/rendezvous/dynamic_rendezvous.py,
            # next_rendezvous: the cached _bootstrap_store_info): a new pod's agent then waits in the next round for
            # a MASTER_ADDR no one writes, the survivors wait for it (the store's 300 s timeout), and the survivors
            # of a replaced rank 0 are handed the dead pod's store. Opting out, every round publishes its own.
            "TORCH_DISABLE_SHARE_RDZV_TCP_STORE": "1",
        }
    )
    env[OUTPUT_DIR_ENV] = output_dir(config)
    if _code(config):  # where your code saves and resumes (fsdp_sdk.code_entry)
        env[CHECKPOINT_DIR_ENV] = checkpoint_dir(config) or f"{output_dir(config)}/checkpoints"
    # the trainer's run identity (fsdp_trainer/ownership.py): a pod back on a fresh disk is the same run, and owns the
    # checkpoint prefix its job wrote
    env["FSDP_RUN_ID"], env["FSDP_RUN_NAME"] = f"{job.namespace}/{job.name}", job.name
    given = str((config.trainer.get("checkpoint") or {}).get("dir") or "")
    if _on_bucket(config) or given.startswith("s3://"):
        # the trainer's S3 client signs for the bucket's region; Pod Identity (or the user's own setup) gives credentials
        env["AWS_REGION"] = config.cluster.region
    env.update(job.env)  # the user's settings win over the defaults
    items: list[dict[str, Any]] = [{"name": k, "value": v} for k, v in env.items()]
    items.append(
        {
            "name": "HF_TOKEN",
            "valueFrom": {
                "secretKeyRef": {"name": job.hf_token_secret, "key": HF_TOKEN_KEY, "optional": not job.hf_token}
            },
        }
    )
    return items


def output_dir(config: Config) -> str:
    """Where the workers' trainer writes its outputs and checkpoints (a path inside the container).

    ``train.output_dir`` when the user set it; else a directory per namespace and job name on
    a volume that outlives the container: ``/shared/fsdp-sdk/<namespace>/<job name>`` with
    ``job.shared_storage_claim``, ``/local/fsdp-sdk/<namespace>/<job name>`` (the node's disk)
    without. A job submitted again under the same name finds its checkpoints there.
    """
    given = (config.trainer.get("train") or {}).get("output_dir")
    if given:
        return str(given)
    root = SHARED_MOUNT_PATH if config.job.shared_storage_claim else LOCAL_MOUNT_PATH
    return f"{root}/fsdp-sdk/{config.job.namespace}/{config.job.name}"


def checkpoint_dir(config: Config) -> str | None:
    """The job's ``checkpoint.dir`` on the cluster's checkpoint bucket, or ``None`` (the trainer's own default,
    ``<train.output_dir>/checkpoints``).

    ``s3://<cluster.checkpoint_bucket>/<namespace>/<job>/checkpoints`` when the cluster has a checkpoint bucket,
    checkpoints are on, and nothing else says where they go: no ``checkpoint.dir``, no
    ``job.shared_storage_claim`` (the shared filesystem wins), no ``job.command`` (a command of the user's
    own). One worker too: a replaced node takes its disk, and the checkpoints on it, with it.
    """
    bucket = config.cluster.checkpoint_bucket
    given = (config.trainer.get("checkpoint") or {}).get("dir")
    job = config.job
    if not bucket or given or job.shared_storage_claim or job.command or not _checkpoints_enabled(config):
        return None
    return checkpoint_url(bucket, job.namespace, job.name)


def _on_bucket(config: Config) -> bool:
    """Whether the job's checkpoints (or its export) go to the cluster's checkpoint bucket."""
    bucket = config.cluster.checkpoint_bucket
    if not bucket or config.job.command:
        return False
    checkpoint = config.trainer.get("checkpoint") or {}
    places = [checkpoint_dir(config), checkpoint.get("dir"), checkpoint.get("export_hf")]
    return any(str(place).startswith(f"s3://{bucket}/") for place in places if place)


def _check_bucket_prefix(config: Config) -> None:
    """Refuse locations on the checkpoint bucket outside the namespace's prefix: the pods' role may not use them."""
    bucket = config.cluster.checkpoint_bucket
    if not bucket:
        return
    allowed = f"s3://{bucket}/{config.job.namespace}/"
    checkpoint = config.trainer.get("checkpoint") or {}
    for key in ("dir", "export_hf"):
        place = str(checkpoint.get(key) or "")
        if (place == f"s3://{bucket}" or place.startswith(f"s3://{bucket}/")) and not place.startswith(allowed):
            raise ConfigError(
                f"trainer.checkpoint.{key}",
                f"{place} is outside {allowed}, the part of the checkpoint bucket the job's pods may use",
                f"use a location under {allowed}{config.job.name}/, or leave checkpoint.{key} unset",
            )


def _code(config: Config) -> bool:
    """Whether the job runs your own code (``--script``, ``--module``, ``Client.train``)."""
    from fsdp_sdk.user_code import active

    return active(config) is not None


def _resume_set(config: Config) -> bool:
    return "resume" in (config.trainer.get("checkpoint") or {})


def _warn_about_outputs(config: Config) -> None:
    """Say when the trainer's checkpoints would not let a restarted pod resume."""
    job = config.job
    given = (config.trainer.get("train") or {}).get("output_dir")
    checkpoint = str((config.trainer.get("checkpoint") or {}).get("dir") or checkpoint_dir(config) or "")
    if checkpoint.startswith("s3://"):
        return  # the checkpoints outlive the container and the node
    if given and not str(given).startswith((f"{LOCAL_MOUNT_PATH}/", f"{SHARED_MOUNT_PATH}/")):
        warnings.warn(
            RenderWarning(
                f"train.output_dir {given} is inside the container: a restarted pod starts again from step 0; "
                "leave it unset (a directory on the node's disk or on job.shared_storage_claim is used)"
            ),
            stacklevel=4,
        )
    elif _split_checkpoints(config) and _checkpoints_enabled(config):
        warnings.warn(
            RenderWarning(
                f"the checkpoints of the {job.num_workers} workers would be split across their nodes' disks, so "
                "restarted pods start again from step 0; set cluster.checkpoint_bucket (an S3 bucket: 'up' on an "
                "EKS backend fills it) or job.shared_storage_claim (a ReadWriteMany claim: FSx for Lustre, EFS) "
                "to resume them"
            ),
            stacklevel=4,
        )


def _checkpoints_enabled(config: Config) -> bool:
    enabled = (config.trainer.get("checkpoint") or {}).get("enabled", True)
    return str(enabled).lower() not in ("false", "0", "no", "off")


def _split_checkpoints(config: Config) -> bool:
    """Whether the workers' checkpoint shards would land on several nodes' own disks (no resume possible)."""
    job = config.job
    on_s3 = str((config.trainer.get("checkpoint") or {}).get("dir") or "").startswith("s3://")
    if on_s3 or checkpoint_dir(config) is not None:
        return False
    return job.num_workers > 1 and not job.shared_storage_claim and not _resume_set(config) and not job.command


def _trainer_settings(config: Config) -> dict[str, Any]:
    """The trainer's settings as the workers get them: the output directory, and no resume where it cannot work."""
    trainer = {section: dict(values) for section, values in config.trainer.items()}
    trainer.setdefault("train", {}).setdefault("output_dir", output_dir(config))
    bucket_dir = checkpoint_dir(config)
    if bucket_dir is not None:
        trainer.setdefault("checkpoint", {})["dir"] = bucket_dir
    if _split_checkpoints(config):  # no rank could read all the shards of one checkpoint
        trainer.setdefault("checkpoint", {})["resume"] = "never"
    return trainer


#: Shell syntax in ``job.command`` (``&&``, pipes, redirections, ``$VAR``...): such a command runs under bash -c.
_SHELL_SYNTAX = re.compile(r"&&|\|\||[|;<>`$()]|\n")


def _command(config: Config) -> tuple[list[str], list[str]]:
    """``(command, args)`` of the worker container.

    ``job.command`` (``CMD`` in a seed ``.env``) runs as its words, without a shell, unless it uses shell
    syntax (``huggingface-cli login --token ${HF_TOKEN} && torchrun ...``): then it runs as ``bash -c``, so
    the operators work and ``${HF_TOKEN}`` is expanded in the container from the Secret, never written here.
    """
    from fsdp_sdk.user_code import CODE_COMMAND, active, entry_arguments

    code = active(config)
    if code is not None:  # your own code, in the code layer (fsdp_sdk.user_code)
        return list(CODE_COMMAND), entry_arguments(code, in_image=True)
    command = config.job.command
    if command:
        if _SHELL_SYNTAX.search(command):
            return ["/bin/bash", "-c", command], []
        return shlex.split(command), []
    # The operator passes the rendezvous settings as PET_* variables, which torchrun reads.
    return ["torchrun", "-m", "fsdp_trainer"], trainer_arguments(_trainer_settings(config))


def _code_image(config: Config, trainer_image: str) -> str:
    """The code layer's image: the trainer image's repository, the code's content tag (``code.digest``)."""
    from fsdp_sdk.user_code import code_image_ref, settings_of

    digest = settings_of(config).digest
    if not digest:
        raise ConfigError(
            "code.digest",
            "is not computed: the code layer's tag comes from its files",
            "render through Client.render_job() or 'fsdp-sdk job render', which hash the code directory first",
        )
    return code_image_ref(trainer_image, digest)


def _resources(config: Config, instance: InstanceType) -> dict[str, dict[str, int | str]]:
    """Accelerators, EFA interfaces, and cpu and memory: the worker's share of the node's allocatable.

    Requests equal limits, so the pod is Guaranteed: the last the kubelet evicts under memory pressure.
    """
    from fsdp_sdk.aws.eks import worker_cpu_memory

    gpus = config.job.gpu_per_worker or 0
    cpu, memory = worker_cpu_memory(instance, gpus)
    amounts: dict[str, int | str] = {"cpu": cpu, "memory": memory, instance.accelerator_resource: gpus}
    efa = config.job.efa_per_worker or 0
    if efa > 0:
        amounts["vpc.amazonaws.com/efa"] = efa
    return {"limits": dict(amounts), "requests": dict(amounts)}


def _local_volume(config: Config, instance: InstanceType) -> dict[str, Any]:
    """The node's disk the workers write to (``/local``).

    On a cluster an AWS backend made, the node group's local NVMe array where it sets one up (a ``hostPath``
    that outlives the pod: checkpoints survive a restart on the node), else an ``emptyDir`` on the node's volume.
    On a cluster of one's own, the EKS convention ``/mnt/k8s-disks/0`` (created when missing).
    """
    from fsdp_sdk.aws.eks import configured_ami_family, local_storage_host_path

    if configured_ami_family(config) is None:
        return {"name": "local", "hostPath": {"path": LOCAL_NVME_HOST_PATH, "type": "DirectoryOrCreate"}}
    path = local_storage_host_path(config, instance)
    if path is None:
        return {"name": "local", "emptyDir": {}}
    return {"name": "local", "hostPath": {"path": path, "type": "Directory"}}


def _volumes(config: Config, instance: InstanceType) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """Shared memory, the node's disk (``/local``), and the shared filesystem's claim (``/shared``) when set."""
    volumes: list[dict[str, Any]] = [
        {"name": "shm", "emptyDir": {"medium": "Memory"}},
        _local_volume(config, instance),
    ]
    mounts = [{"name": "shm", "mountPath": "/dev/shm"}, {"name": "local", "mountPath": LOCAL_MOUNT_PATH}]
    claim = config.job.shared_storage_claim
    if claim:
        volumes.append({"name": "shared", "persistentVolumeClaim": {"claimName": claim}})
        mounts.append({"name": "shared", "mountPath": SHARED_MOUNT_PATH})
    return volumes, mounts


def _tolerations(instance: InstanceType) -> list[dict[str, str]]:
    """Tolerate the taint accelerator node groups carry, named after the accelerator's resource."""
    return [{"key": instance.accelerator_resource, "operator": "Exists", "effect": "NoSchedule"}]


def _service_account(config: Config) -> dict[str, str]:
    """``serviceAccountName`` of the workers when they use the checkpoint bucket: EKS Pod Identity gives its pods
    the bucket's role."""
    return {"serviceAccountName": TRAINER_SERVICE_ACCOUNT} if _on_bucket(config) else {}


def _elastic_policy(config: Config, rdzv_id: str) -> dict[str, Any]:
    """The PyTorchJob's ``elasticPolicy``.

    etcd-v2 always names its endpoint (``job.rdzv_host``/``job.rdzv_port``, the SDK's
    etcd by default). c10d leaves it out unless the user set it, so the Training
    Operator points torchrun at the job's own worker-0 service; the defaults name etcd,
    which does not speak c10d.
    """
    job = config.job
    policy: dict[str, Any] = {"rdzvBackend": job.rdzv_backend}
    for path, key, value in (
        ("job.rdzv_host", "rdzvHost", job.rdzv_host),
        ("job.rdzv_port", "rdzvPort", job.rdzv_port),
    ):
        if job.rdzv_backend != "c10d" or _explicit(config, path):
            policy[key] = value
    policy.update(
        {
            "rdzvId": rdzv_id,
            "minReplicas": job.num_workers,
            "maxReplicas": job.num_workers,
            "maxRestarts": job.max_restarts,
        }
    )
    return policy


def _explicit(config: Config, path: str) -> bool:
    """Whether the user set ``path`` (a ``job.<field>``): a source recorded it, or it differs from the default."""
    if path in config.origins:
        return True
    name = path.split(".", 1)[1]
    default = next(f.default for f in dataclasses.fields(type(config.job)) if f.name == name)
    return getattr(config.job, name) != default


def render_pytorchjob(config: Config, instance: InstanceType, image: str, rdzv_id: str) -> dict[str, Any]:
    """The ``kubeflow.org/v1`` PyTorchJob of a resolved configuration."""
    job = config.job
    command, args = _command(config)
    volumes, mounts = _volumes(config, instance)
    container: dict[str, Any] = {
        "name": CONTAINER_NAME,
        "image": image,
        "imagePullPolicy": "Always",
        "command": command,
        "env": worker_environment(config, instance),
        "resources": _resources(config, instance),
        "volumeMounts": mounts,
    }
    if args:
        container["args"] = args
    labels = {**job_labels(config, "training-job"), RUN_ID_LABEL: rdzv_id}
    return {
        "apiVersion": "kubeflow.org/v1",
        "kind": "PyTorchJob",
        "metadata": {"name": job.name, "namespace": job.namespace, "labels": labels},
        "spec": {
            "nprocPerNode": str(job.nproc_per_node or job.gpu_per_worker),
            "elasticPolicy": _elastic_policy(config, rdzv_id),
            "runPolicy": {"cleanPodPolicy": "None", "backoffLimit": job.max_restarts},
            "pytorchReplicaSpecs": {
                "Worker": {
                    "replicas": job.num_workers,
                    "restartPolicy": "OnFailure",
                    "template": {
                        "metadata": {"labels": {**job_labels(config, "worker"), RUN_ID_LABEL: rdzv_id}},
                        "spec": {
                            **_service_account(config),
                            "nodeSelector": {"node.kubernetes.io/instance-type": instance.name},
                            "tolerations": _tolerations(instance),
                            "volumes": volumes,
                            "containers": [container],
                        },
                    },
                },
            },
        },
    }


def render_trainjob(config: Config, instance: InstanceType, image: str, rdzv_id: str) -> dict[str, Any]:
    """The same job as a Kubeflow Trainer v2.3 ``TrainJob`` on fsdp-sdk's runtime.

    The pods' settings go in ``spec.runtimePatches`` (one patch, ``manager: fsdp-sdk.io/render``),
    the only place Trainer v2.2+ accepts them: volumes, node selector, tolerations and the
    container's mounts on the runtime's ``node`` job, labels and annotations on the JobSet and the pods.
    The runtime (:func:`fsdp_sdk.k8s.trainer_v2.render_runtime`) declares the metrics port.
    """
    job = config.job
    command, args = _command(config)
    volumes, mounts = _volumes(config, instance)
    trainer: dict[str, Any] = {
        "image": image,
        "command": command,
        "numNodes": job.num_workers,
        "numProcPerNode": job.nproc_per_node or job.gpu_per_worker,
        "resourcesPerNode": _resources(config, instance),
        "env": worker_environment(config, instance),
    }
    if args:
        trainer["args"] = args
    labels = {**job_labels(config, "training-job"), RUN_ID_LABEL: rdzv_id}
    pod = {
        "metadata": {"labels": {**job_labels(config, "worker"), RUN_ID_LABEL: rdzv_id}},
        "spec": {
            **_service_account(config),
            "nodeSelector": {"node.kubernetes.io/instance-type": instance.name},
            "tolerations": _tolerations(instance),
            "volumes": volumes,
            "containers": [{"name": NODE_JOB, "volumeMounts": mounts}],
        },
    }
    return {
        "apiVersion": "trainer.kubeflow.org/v1alpha1",
        "kind": "TrainJob",
        "metadata": {"name": job.name, "namespace": job.namespace, "labels": labels},
        "spec": {
            "runtimeRef": {"apiGroup": "trainer.kubeflow.org", "kind": "ClusterTrainingRuntime", "name": RUNTIME_NAME},
            "trainer": trainer,
            "runtimePatches": [
                {
                    "manager": PATCH_MANAGER,
                    "trainingRuntimeSpec": {
                        "template": {
                            "metadata": {"labels": dict(labels)},
                            "spec": {"replicatedJobs": [{"name": NODE_JOB, "template": {"spec": {"template": pod}}}]},
                        }
                    },
                }
            ],
        },
    }


@dataclass(frozen=True)
class WorkerPod:
    """The pod template of one kind of worker in a rendered job, for render hooks to change in place.

    :param job: the ``PyTorchJob`` or ``TrainJob`` it belongs to.
    :param replica: a PyTorchJob's replica type (``Worker``, ``Master``); for a TrainJob, the
        runtime's replicated job the patch targets (``node``).
    :param spec: the pod spec: a PyTorchJob replica's ``template.spec``; for a TrainJob the pod spec of
        fsdp-sdk's runtime patch (``spec.runtimePatches[].trainingRuntimeSpec.template.spec.replicatedJobs[]
        .template.spec.template.spec``), which Trainer v2.3 limits to ``containers`` and ``initContainers``
        (``name``, ``env``, ``volumeMounts``, ``securityContext``), ``volumes``, ``nodeSelector``, ``affinity``,
        ``tolerations``, ``schedulingGates``, ``serviceAccountName``, ``imagePullSecrets``, ``securityContext``
        and ``terminationGracePeriodSeconds``: the API server drops any other field.
    :param labels: the pods' labels (the pod template's ``metadata.labels``).
    :param annotations: the pods' annotations (the pod template's ``metadata.annotations``).
    """

    job: dict[str, Any]
    replica: str
    spec: dict[str, Any]
    labels: dict[str, str]
    annotations: dict[str, str] = dataclasses.field(default_factory=dict)


def worker_pods(objects: Iterable[dict[str, Any]]) -> Iterator[WorkerPod]:
    """The worker pod templates of every training job in ``objects``, whichever Kubeflow API it uses.

    For use in ``fsdp_sdk_render_job`` hooks: change ``pod.spec``, ``pod.labels`` and ``pod.annotations``
    in place and the job changes with them. Missing levels are created empty (a replica without
    ``template.spec``; a TrainJob without fsdp-sdk's runtime patch gets one targeting ``node``); objects
    other than ``PyTorchJob`` (``kubeflow.org``) and ``TrainJob`` (``trainer.kubeflow.org``) are skipped.

    :param objects: rendered objects, as the render hook receives them.
    """
    for obj in objects:
        if not isinstance(obj, dict):
            continue
        group = str(obj.get("apiVersion", "")).split("/", 1)[0]
        kind = obj.get("kind")
        if kind == "PyTorchJob" and group == "kubeflow.org":
            replicas = obj.setdefault("spec", {}).setdefault("pytorchReplicaSpecs", {})
            for replica, replica_spec in replicas.items():
                template = replica_spec.setdefault("template", {})
                meta = template.setdefault("metadata", {})
                labels = meta.setdefault("labels", {})
                yield WorkerPod(
                    obj, replica, template.setdefault("spec", {}), labels, meta.setdefault("annotations", {})
                )
        elif kind == "TrainJob" and group == "trainer.kubeflow.org":
            yield from _trainjob_pods(obj)


def _trainjob_pods(obj: dict[str, Any]) -> Iterator[WorkerPod]:
    patches = obj.setdefault("spec", {}).setdefault("runtimePatches", [])
    ours = next((p for p in patches if p.get("manager") == PATCH_MANAGER), None)
    if ours is None:
        ours = {"manager": PATCH_MANAGER}
        patches.append(ours)
    template = ours.setdefault("trainingRuntimeSpec", {}).setdefault("template", {})
    jobs = template.setdefault("spec", {}).setdefault("replicatedJobs", [])
    if not jobs:
        jobs.append({"name": NODE_JOB})
    for replicated in jobs:
        pod = replicated.setdefault("template", {}).setdefault("spec", {}).setdefault("template", {})
        meta = pod.setdefault("metadata", {})
        labels = meta.setdefault("labels", {})
        annotations = meta.setdefault("annotations", {})
        yield WorkerPod(obj, str(replicated.get("name") or NODE_JOB), pod.setdefault("spec", {}), labels, annotations)


def worker_pod_specs(objects: Iterable[dict[str, Any]]) -> Iterator[dict[str, Any]]:
    """The pod spec of every worker pod template in ``objects`` (see :func:`worker_pods`), to change in place.

    :param objects: rendered objects, as the ``fsdp_sdk_render_job`` hook receives them.
    """
    for pod in worker_pods(objects):
        yield pod.spec


def render_hf_secret(config: Config) -> dict[str, Any]:
    """The Hugging Face token Secret, without its data (filled in when applied)."""
    return {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": {
            "name": config.job.hf_token_secret,
            "namespace": config.job.namespace,
            "labels": job_labels(config, "credentials"),
        },
        "type": "Opaque",
    }


def render_job(
    config: Config | Resolved,
    *,
    rdzv_id: str | None = None,
    create_secret: bool | None = None,
    api: str | None = None,
    plugins: Plugins | None = None,
    preview: bool = False,
    crds: Sequence[CrdSchema] = (),
) -> list[dict[str, Any]]:
    """Render the Kubernetes objects of a training job, then let plugins adjust them.

    :param config: the resolved value (:class:`~fsdp_sdk.resolved.Resolved`), or a configuration,
        resolved here with ``plugins`` (:meth:`Resolved.of <fsdp_sdk.resolved.Resolved.of>` fills the GPU/EFA counts and refuses an
        unknown instance type or more GPUs than the instance type has).
    :param rdzv_id: the submission's rendezvous id; a fresh one when ``None``.
    :param create_secret: also render the Hugging Face token ``Secret`` (without its
        data); defaults to whether ``job.hf_token`` is set.
    :param api: ``pytorchjob`` or ``trainjob``; defaults to ``job.api``.
    :param plugins: the plugin set a configuration is resolved with (default: the installed plugins,
        :func:`~fsdp_sdk.plugins.build_plugins`); with a ``Resolved``, its own.
    :param preview: render for reading, not for applying: without ``job.registry`` the image gets
        the :data:`PLACEHOLDER_REGISTRY` and a :class:`RenderWarning` instead of an error.
    :param crds: CRDs to check the custom resources against after the plugins' hooks (``job render --crd``, the
        cluster's own on ``job submit``): each field the API server would prune is a :class:`RenderWarning` that
        names the plugin whose hook set it (:func:`fsdp_sdk.k8s.validate.pruned_by_hooks`).
    :returns: the objects, the job first, then what plugins appended.
    :raises ConfigError: the configuration cannot make a valid job, or the Hugging Face
        token's value would appear in plain text in an object (:func:`check_token_not_inline`).
    """
    from fsdp_sdk.resolved import Resolved

    if isinstance(config, Resolved):
        resolved = config if plugins is None or plugins is config.plugins else Resolved.of(config.config, plugins)
    else:
        if plugins is None:
            from fsdp_sdk.plugins import build_plugins

            plugins = build_plugins()
        resolved = Resolved.of(config, plugins)
    config, instance, plugins = resolved.config, resolved.instance, resolved.plugins
    api = api or config.job.api
    if api not in ("pytorchjob", "trainjob"):
        raise ConfigError("--api", f"unknown job API {api!r}", "use pytorchjob or trainjob")
    check_env(config)
    _check_nproc(config, instance)
    check_node_count(config)
    _check_bucket_prefix(config)
    if not config.job.image.strip() or not config.job.tag.strip():
        field = "job.image" if not config.job.image.strip() else "job.tag"
        raise ConfigError(field, "is empty", f"set {field} (IMAGE / TAG in .env), e.g. fsdp-sdk-trainer:latest")
    image = _check_image(plugins.hooks.job_image(config), preview=preview)
    if _code(config):
        image = _code_image(config, image)
    rdzv_id = rdzv_id or new_rdzv_id(config.job.name)
    if not re.fullmatch(r"[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?", rdzv_id):
        raise ConfigError(
            "--rdzv-id", f"{rdzv_id!r} is not usable as a label value", "use up to 63 letters, digits, '-', '_' or '.'"
        )
    render = render_trainjob if api == "trainjob" else render_pytorchjob
    objects = [render(config, instance, image, rdzv_id)]
    if config.job.queue:  # unset: JobClient.apply adds fsdp-sdk's LocalQueue when the cluster has Kueue
        from fsdp_sdk.k8s.queue import queue_labels

        objects[0]["metadata"]["labels"].update(queue_labels(config.job.queue))
    if create_secret if create_secret is not None else bool(config.job.hf_token):
        objects.append(render_hf_secret(config))
    changes: list[tuple[str, int, str]] | None = [] if crds else None
    plugins.hooks.render_job(resolved, objects, changes=changes)
    if crds:
        from fsdp_sdk.k8s.validate import pruned_by_hooks

        for line in pruned_by_hooks(objects, changes or [], crds):
            warnings.warn(RenderWarning(line), stacklevel=2)
    check_token_not_inline(config, objects)
    check_credentials_not_inline(objects)
    _warn_about_outputs(config)
    return objects
