"""The library API: everything the CLI does, as Python calls.

::

    from fsdp_sdk import Client

    client = Client.from_sources(config_file="cluster.yaml", env_file=".env",
                                 overrides={"cluster.backend": "local"})
    plan = client.plan()            # preflight checks, then what up() will do (no change)
    print(plan.steps)
    client.up(plan)                 # acts on exactly that plan
    result = client.run(trainer_overrides={"model.preset": "tiny", "train.steps": 20})
    print(result.summary["final_loss"])
    client.down()

The CLI is a thin layer over this class: it builds one :class:`Client` per
command from its flags (the configuration is read and resolved once) and
prints what the methods return. Data flows one way: configuration -> plan ->
rendered objects -> actions.

``Client`` is a face: what it does is in :mod:`fsdp_sdk.workflows`, one shared
context (:attr:`Client.context`) and the cluster and job workflows over it
(:attr:`Client.cluster_workflow`, :attr:`Client.job_workflow`).

A platform embedding the SDK builds a hermetic client from its own data,
``Client.from_dict({...}, plugins=...)``: no file, no environment variable, no
plugin it was not given (``docs/embedding.md`` is the guide).
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from fsdp_sdk.backends.base import ClusterBackend, ClusterStatus, Plan, ProgressCallback, no_progress
from fsdp_sdk.config import Config, Setting, load_config, parse_trainer_args
from fsdp_sdk.plugins import PluginInfo, Plugins, build_plugins
from fsdp_sdk.preflight import PreflightResult
from fsdp_sdk.resolved import Resolved
from fsdp_sdk.workflows.cluster import ClusterWorkflow
from fsdp_sdk.workflows.context import Context
from fsdp_sdk.workflows.jobs import JobWorkflow

if TYPE_CHECKING:
    import datetime as dt

    from fsdp_sdk.aws.checkpoint_bucket import BucketUsage
    from fsdp_sdk.aws.checkpoint_plan import CheckpointBucket
    from fsdp_sdk.aws.pricing import Price
    from fsdp_sdk.costs import ClusterCost, JobCost
    from fsdp_sdk.estimate import Estimate
    from fsdp_sdk.instance_types import InstanceType
    from fsdp_sdk.k8s.image import ImageBuild, ImagePush
    from fsdp_sdk.k8s.jobs import JobClient, JobStatus
    from fsdp_sdk.k8s.monitoring import Monitoring
    from fsdp_sdk.k8s.prereqs import Prereqs, PrereqStatus
    from fsdp_sdk.k8s.validate import CrdSchema
    from fsdp_sdk.launch import LaunchPlan, LaunchResult
    from fsdp_sdk.monitoring import MonitoringComponent
    from fsdp_sdk.runner import DryRun, JobRunner, RunStatus
    from fsdp_sdk.runs import JobRef, RecordedRun, RunEvent, RunResult
    from fsdp_sdk.user_code import TrainHandle

__all__ = ["Client", "parse_trainer_args"]


class Client:
    """A resolved configuration bound to its backend and plugins.

    Build one with :meth:`from_sources` (files, ``.env``, ``FSDP_SDK_*`` variables, like the CLI) or,
    for a platform embedding the SDK, :meth:`from_dict` (hermetic: nothing but the given data and plugins).

    :param config: the configuration; it is resolved here, once (:attr:`resolved`: the configuration, its
        instance type and the plugin set, what the backend, the preflight hooks, the renderers and the estimate
        receive).
    :param plugins: the plugin set; defaults to the installed plugins (:func:`~fsdp_sdk.plugins.build_plugins`,
        a set of this client's own; the CLI passes its process-wide one).
    :param progress: receives one line per step of long operations (the CLI prints them on stderr).
    :param kubeconfig: the kubeconfig of the cluster jobs go to; defaults to ``cluster.kubeconfig``, the
        backend's, then ``$KUBECONFIG``, then ``~/.kube/config``.
    :param kube_context: the kubeconfig context (default: its current one).
    :param hermetic: never fall back to ``$KUBECONFIG`` or ``~/.kube/config`` (see :meth:`from_dict`).
    :raises ConfigError: the configuration is invalid.
    """

    def __init__(
        self,
        config: Config,
        *,
        plugins: Plugins | None = None,
        progress: ProgressCallback | None = None,
        kubeconfig: str | os.PathLike[str] | None = None,
        kube_context: str | None = None,
        hermetic: bool = False,
    ) -> None:
        plugins = plugins if plugins is not None else build_plugins()
        #: What the workflows share (:class:`~fsdp_sdk.workflows.context.Context`): the configuration resolved
        #: once with its plugin set, the backend, the progress callback and the kubeconfig.
        self.context = Context(
            Resolved.of(config, plugins),
            progress=progress or no_progress,
            kubeconfig=kubeconfig,
            kube_context=kube_context,
            hermetic=hermetic,
        )
        #: The cluster's workflow (:class:`~fsdp_sdk.workflows.cluster.ClusterWorkflow`).
        self.cluster_workflow = ClusterWorkflow(self.context)
        #: The job workflow (:class:`~fsdp_sdk.workflows.jobs.JobWorkflow`), over the same cluster.
        self.job_workflow = JobWorkflow(self.context, self.cluster_workflow)

    @property
    def resolved(self) -> Resolved:
        """The configuration resolved once, with its instance type and the plugin set."""
        return self.context.resolved

    @property
    def config(self) -> Config:
        """The configuration (:attr:`resolved`'s)."""
        return self.context.config

    @property
    def loaded_plugins(self) -> Plugins:
        """The plugin set the configuration was resolved with."""
        return self.context.plugins

    @property
    def progress(self) -> ProgressCallback:
        """Receives one line per step of long operations."""
        return self.context.progress

    @progress.setter
    def progress(self, progress: ProgressCallback) -> None:
        self.context.progress = progress

    @property
    def kube_context(self) -> str | None:
        """The kubeconfig context (``None``: its current one)."""
        return self.context.kube_context

    @property
    def hermetic(self) -> bool:
        """Whether the client never falls back to ``$KUBECONFIG`` or ``~/.kube/config``."""
        return self.context.hermetic

    @classmethod
    def from_dict(
        cls,
        data: Mapping[str, Any],
        *,
        plugins: Plugins | None = None,
        progress: ProgressCallback | None = None,
        kubeconfig: str | os.PathLike[str] | None = None,
        kube_context: str | None = None,
    ) -> Client:
        """A hermetic client: its configuration is ``data`` and nothing else.

        Unlike :meth:`from_sources`, it reads no file (no YAML, no ``./.env``), no environment variable
        (no ``FSDP_SDK_*``, not even ``$FSDP_SDK_STATE_DIR``: ``cluster.state_dir`` is ``data``'s or
        ``~/.local/state/fsdp-sdk``), loads no third-party plugin unless given one in ``plugins``, and never
        falls back to ``$KUBECONFIG`` or ``~/.kube/config``: jobs go to the cluster of ``kubeconfig``,
        ``cluster.kubeconfig`` or the backend's kubeconfig. What runs underneath keeps its own environment:
        boto3 finds AWS credentials as it always does, and local runs' processes inherit this process's.

        :param data: the configuration as nested dicts, like the YAML file:
            ``{"cluster": {...}, "job": {...}, "trainer": {"model": {"preset": "tiny"}}}``, plus plugin sections.
        :param plugins: the plugin set; defaults to the built-in plugins alone
            (``build_plugins(autoload=False)``), never the process-wide set.
        :param progress: progress callback (default: none; the client prints nothing).
        :param kubeconfig: see :class:`Client`.
        :param kube_context: see :class:`Client`.
        :raises ConfigError: a key is unknown or a value invalid (the message names it as ``data`` spells it).
        """
        from fsdp_sdk.config import DEFAULT_STATE_DIR
        from fsdp_sdk.plugins import build_plugins

        plugins = plugins if plugins is not None else build_plugins(autoload=False)
        config = Config.from_dict(data, source="Client.from_dict", sections=plugins.settings)
        if "cluster.state_dir" not in config.origins:
            config.cluster.state_dir = Path(DEFAULT_STATE_DIR).expanduser()
        return cls(
            config, plugins=plugins, progress=progress, kubeconfig=kubeconfig, kube_context=kube_context, hermetic=True
        )

    @classmethod
    def from_sources(
        cls,
        config_file: str | os.PathLike[str] | None = None,
        env_file: str | os.PathLike[str] | None = None,
        overrides: Mapping[str, Any] | Iterable[Setting] | None = None,
        *,
        environ: Mapping[str, str] | None = None,
        read_default_env_file: bool = True,
        plugins: Plugins | None = None,
        progress: ProgressCallback | None = None,
        kubeconfig: str | os.PathLike[str] | None = None,
        kube_context: str | None = None,
    ) -> Client:
        """Read the configuration from every source (see :mod:`fsdp_sdk.config`) and build a client.

        :param config_file: a YAML file.
        :param env_file: a ``.env`` file; without one, ``./.env`` is read when present.
        :param overrides: highest-priority settings, e.g. ``{"cluster.backend": "local"}``.
        :param environ: where ``FSDP_SDK_*`` variables are read; defaults to ``os.environ``.
        :param read_default_env_file: read ``./.env`` when ``env_file`` is not given.
        :param plugins: the plugin set (its settings sections are read from the sources too).
        :param progress: progress callback.
        :param kubeconfig: see :class:`Client`.
        :param kube_context: see :class:`Client`.
        """
        plugins = plugins if plugins is not None else build_plugins()
        config = load_config(
            config_file,
            env_file,
            overrides,
            environ=environ,
            read_default_env_file=read_default_env_file,
            sections=plugins.settings,
        )
        return cls(config, plugins=plugins, progress=progress, kubeconfig=kubeconfig, kube_context=kube_context)

    def __repr__(self) -> str:
        return f"<Client backend={self.config.cluster.backend!r} cluster={self.config.cluster.name!r}>"

    # ------------------------------------------------------------------ cluster

    @property
    def backend(self) -> ClusterBackend:
        """The backend named by ``cluster.backend``."""
        return self.context.backend

    @backend.setter
    def backend(self, backend: ClusterBackend) -> None:
        self.context.backend = backend

    def preflight(self, action: str = "up") -> list[PreflightResult]:
        """Run every plugin's preflight checks for this configuration (they read, never change).

        :param action: what the checks are for: ``up``, ``run`` or ``submit`` (see ``fsdp_sdk_preflight``).
        """
        return self.context.preflight(action)

    def plan(self, *, preflight: bool = True, preview: bool = False, collect: bool = False) -> Plan:
        """What :meth:`up` will do; changes nothing.

        Runs the preflight checks first (reads only; a failed check raises), fills in the values
        they suggest for settings left unset (the plan's ``filled``), then asks the backend for
        its plan and adds what core does once the cluster is up: the kubeconfig, etcd and the
        Training Operator, and the monitoring components when ``observability.enabled``.

        :param preflight: run the preflight checks (off: plan from the configuration alone).
        :param preview: also ask the backend's tool what the plan would change, reading only
            (:meth:`~fsdp_sdk.backends.base.ClusterBackend.preview`: ``terraform plan``); ``up --dry-run`` does.
        :param collect: keep failed checks in the plan's ``preflight`` instead of raising, and plan anyway
            (``up --dry-run``: the whole plan shows even without the backend's tool or credentials); the
            backend's read-only preview is skipped when a check blocks.
        :raises PreflightError: a check failed (unless ``collect``).
        """
        return self.cluster_workflow.plan(preflight=preflight, preview=preview, collect=collect)

    def up(self, plan: Plan | None = None, *, dry_run: bool = False) -> ClusterStatus:
        """Bring the cluster up as ``plan`` says (by default :meth:`plan`), ready for jobs.

        The backend applies its part of the plan; then, for clusters with Kubernetes, core
        applies the plan's Kubernetes objects (etcd, monitoring) and installs the Training
        Operator, and plugins hear ``fsdp_sdk_cluster_created``.

        :param plan: a plan from :meth:`plan` (what ``up --dry-run`` showed).
        :param dry_run: plan only; return the current status.
        :raises PreflightError: a preflight check failed (nothing was created).
        :raises BackendError: the backend could not create the cluster.
        """
        return self.cluster_workflow.up(plan, dry_run=dry_run)

    # ------------------------------------------------------------------ checkpoint bucket

    def checkpoint_usage(self) -> tuple[CheckpointBucket, list[BucketUsage] | None] | None:
        """The checkpoint bucket (as found: absent, ours, adopted) and what ``down(delete_checkpoints=True)`` would
        delete from it, by job prefix (``None`` when the bucket does not exist); ``None`` for backends without one."""
        return self.cluster_workflow.checkpoint_usage()

    def down(self, *, dry_run: bool = False, delete_checkpoints: bool = False) -> ClusterStatus:
        """Delete the cluster and the state kept for it; deleting an absent cluster is not an error.

        On EKS backends the pods' checkpoint role goes with the cluster (its Pod Identity associations with the
        EKS cluster); the checkpoint bucket stays, unless ``delete_checkpoints``.

        :param dry_run: change nothing.
        :param delete_checkpoints: also empty and delete the checkpoint bucket (of an adopted bucket, only the
            objects under the job namespace's prefix: the bucket stays). :meth:`checkpoint_usage` says what that is.
        """
        return self.cluster_workflow.down(dry_run=dry_run, delete_checkpoints=delete_checkpoints)

    def scale(self, nodes: int, *, dry_run: bool = False) -> ClusterStatus:
        """Change the number of nodes.

        :param nodes: the wanted number of nodes, within ``cluster.min_nodes..cluster.max_nodes``.
        :param dry_run: validate only.
        :raises ConfigError: ``nodes`` is negative.
        """
        return self.cluster_workflow.scale(nodes, dry_run=dry_run)

    def status(self) -> ClusterStatus:
        """The cluster's current state; for an EKS cluster, also when its Kubernetes version leaves standard
        support (``details["kubernetes_support"]``, from the pins table's calendar), and its checkpoint bucket
        (``details["checkpoint_bucket"]``)."""
        return self.cluster_workflow.status()

    def cost(self, *, now: dt.datetime | None = None, nodes_now: int | None = None) -> ClusterCost:
        """What the cluster has cost since ``up`` (GPU node-hours x the plan's price, plus the control plane and
        system nodes), and per hour now; see :mod:`fsdp_sdk.costs`.

        :param now: the time to count to (default: now).
        :param nodes_now: the GPU nodes observed now (``status().nodes``), for the hourly rate: the idle controller
            may have scaled them to 0 since the ledger's last entry.
        """
        return self.cluster_workflow.cost(now=now, nodes_now=nodes_now)

    def job_cost(
        self, job: JobStatus | RunStatus, *, now: dt.datetime | None = None, usd_per_node_hour: float | None = None
    ) -> JobCost:
        """What a job has cost: its nodes x its hours (creation to end, or now) x the price of a node-hour
        (:meth:`hourly_price`, the plan's source); a local run costs nothing.

        :param job: the job's status (``client.jobs.status(name)``, or the runner's ``status(name)``).
        :param now: the time to count to for a job still running (default: now).
        :param usd_per_node_hour: the price to use (default: :meth:`hourly_price`'s; pass it to price many jobs).
        """
        return self.job_workflow.job_cost(job, now=now, usd_per_node_hour=usd_per_node_hour)

    def kubeconfig(self) -> Path | None:
        """The kubeconfig jobs use: the one given to the client, else ``cluster.kubeconfig``, else the backend's (when
        it exists), else ``$KUBECONFIG``; ``None`` leaves the choice to the Kubernetes client (``~/.kube/config``)."""
        return self.context.kubeconfig()

    def hourly_price(self, resolved: Resolved | None = None) -> Price:
        """The on-demand price of ``cluster.instance_type`` in ``cluster.region``: the AWS Price List's when
        credentials allow it (cached for a day under the state directory), else the instance type's dated table.

        :param resolved: another resolved value than the client's (a plan's, with the values preflight filled).
        """
        return self.context.hourly_price(resolved)

    def merge_kubeconfig(self, target: str | os.PathLike[str] | None = None) -> Path:
        """Add the cluster's kubeconfig to ``target`` (default ``~/.kube/config``) and make it the current context.

        :raises BackendError: the backend has no kubeconfig for this cluster (not up, or no Kubernetes).
        """
        return self.cluster_workflow.merge_kubeconfig(target)

    # ------------------------------------------------------------------ preparing a cluster

    def prereqs(self, *, connect: bool = True) -> Prereqs:
        """The cluster prerequisites (etcd, the Training Operator) of this configuration.

        :param connect: connect to the cluster (off: rendering and dry runs only).
        """
        return self.cluster_workflow.prereqs(connect=connect)

    def install_prereqs(
        self, *, operator: bool = True, operator_version: str | None = None, api: str | None = None, queue: bool = False
    ) -> list[dict[str, Any]]:
        """Apply etcd and install the job controller on the cluster (idempotent).

        :param operator: install the job controller too.
        :param operator_version: its release tag (default: the pinned one).
        :param api: ``pytorchjob`` (the Training Operator) or ``trainjob`` (Kubeflow Trainer v2); default ``job.api``.
        :param queue: also Kueue and fsdp-sdk's queues sized to the GPU node group (:mod:`fsdp_sdk.k8s.queue`).
        """
        return self.cluster_workflow.install_prereqs(
            operator=operator, operator_version=operator_version, api=api, queue=queue
        )

    def prereq_status(self, *, api: str | None = None) -> PrereqStatus:
        """What is installed on the cluster for the job API ``api`` (default ``job.api``), and what is missing."""
        return self.cluster_workflow.prereq_status(api=api)

    def monitoring_components(self, config: Config | None = None) -> list[MonitoringComponent]:
        """The monitoring components plugins render for this configuration (pure), filtered by
        ``observability.components``; none when ``observability.enabled`` is off."""
        return self.context.monitoring_components(config)

    def monitoring(self, *, connect: bool = True, aws_clients: Mapping[str, Any] | None = None) -> Monitoring:
        """The monitoring components of this configuration on its cluster (:mod:`fsdp_sdk.k8s.monitoring`).

        Components are rendered as if ``observability.enabled`` were on (the commands that ask for them mean
        it). When connected and ``observability.prometheus_operator`` is unset, the cluster is asked whether it
        runs the Prometheus Operator first, and the components are rendered with the answer.

        :param connect: connect to the cluster (off: rendering and dry runs only).
        :param aws_clients: boto3 clients by service (``eks``, ``iam``) for EKS add-ons, instead of the cached ones.
        """
        return self.cluster_workflow.monitoring(connect=connect, aws_clients=aws_clients)

    # ------------------------------------------------------------------ images

    def build_image(
        self,
        *,
        context: Path,
        trainer_src: str | os.PathLike[str] | None = None,
        tool: str | None = None,
        build_args: Mapping[str, str] | None = None,
        dry_run: bool = False,
    ) -> ImageBuild:
        """Write the build context and build ``<job.image>:<job.tag>`` (see :func:`fsdp_sdk.k8s.image.build_image`)."""
        return self.job_workflow.build_image(
            context=context, trainer_src=trainer_src, tool=tool, build_args=build_args, dry_run=dry_run
        )

    def push_image(self, *, tool: str | None = None, dry_run: bool = False) -> ImagePush:
        """Push the image to Amazon ECR (see :func:`fsdp_sdk.k8s.image.push_image`)."""
        return self.job_workflow.push_image(tool=tool, dry_run=dry_run)

    # ------------------------------------------------------------------ jobs

    def render_job(
        self,
        *,
        rdzv_id: str | None = None,
        create_secret: bool | None = None,
        api: str | None = None,
        preview: bool = False,
        fresh_id: bool = False,
        crds: Sequence[CrdSchema] = (),
    ) -> list[dict[str, Any]]:
        """The job's Kubernetes objects, exactly as ``job submit`` would apply them (pure; any backend).

        :param rdzv_id: the rendezvous id (default: one derived from the configuration,
            :func:`~fsdp_sdk.k8s.render.stable_rdzv_id`: the same input renders the same objects).
        :param create_secret: include the Hugging Face token Secret (without its data).
        :param api: ``pytorchjob`` or ``trainjob`` (default: ``job.api``).
        :param preview: for reading only: a missing ``job.registry`` becomes a placeholder and a
            :class:`~fsdp_sdk.k8s.render.RenderWarning` instead of an error.
        :param fresh_id: without ``rdzv_id``, a fresh random one (as each submission gets) instead.
        :param crds: CRDs (:func:`~fsdp_sdk.k8s.validate.load_crd_schema`) to check what the plugins' render hooks
            set against: a :class:`~fsdp_sdk.k8s.render.RenderWarning` names the plugin and each field pruned.
        """
        return self.job_workflow.render_job(
            rdzv_id=rdzv_id, create_secret=create_secret, api=api, preview=preview, fresh_id=fresh_id, crds=crds
        )

    @property
    def jobs(self) -> JobClient:
        """The Kubernetes job layer for this cluster (imported on first use).

        :raises BackendError: the backend runs jobs itself (``local``) and no kubeconfig was given.
        """
        return self.job_workflow.jobs

    def submit_job(
        self,
        *,
        run_id: str | None = None,
        create_secret: bool | None = None,
        api: str | None = None,
        dry_run: bool = False,
        force: bool = False,
        replace: bool = False,
        unique: bool = False,
    ) -> JobRef:
        """Check, render and submit the job to the cluster (what ``fsdp-sdk job submit`` does); returns at once.

        The preflight checks run first (action ``submit``: a plugin's quota check can refuse the job
        before anything is sent); then the job is rendered (:meth:`render_job`) and applied with
        server-side apply, and plugins hear ``fsdp_sdk_job_submitted``. Follow it with
        ``client.jobs.wait(job, on_output=...)``, ``client.jobs.logs(job, ...)``, ``client.jobs.status(job)``.

        :param run_id: the rendezvous id (default: a fresh one).
        :param create_secret: also apply the Hugging Face token Secret (default: when ``job.hf_token`` is set).
        :param api: ``pytorchjob`` or ``trainjob`` (default: ``job.api``).
        :param dry_run: the API server validates the objects and stores nothing (``dryRun=All``); no hook hears it.
        :param force: submit even when the estimate says the job will not fit in its GPUs' memory.
        :param replace: a job of the same name is deleted first (with its pods); the new one resumes
            from the checkpoints it left (see :meth:`fsdp_sdk.k8s.jobs.JobClient.submit`).
        :param unique: submit under ``job.name`` plus a fresh suffix, next to the jobs already there.
        :raises PreflightError: a check failed (nothing was sent).
        :raises ConfigError: the configuration cannot make a valid job, or will not fit (nothing was sent).
        :raises KubernetesError: the job exists already, or the server refused an object.
        """
        return self.job_workflow.submit_job(
            run_id=run_id,
            create_secret=create_secret,
            api=api,
            dry_run=dry_run,
            force=force,
            replace=replace,
            unique=unique,
        )

    def run(
        self,
        *,
        trainer_overrides: Mapping[str, Any] | None = None,
        trainer_args: Sequence[str] = (),
        run_id: str | None = None,
        dry_run: bool = False,
        on_output: Callable[[str], None] | None = None,
        force: bool = False,
        on_event: Callable[[RunEvent], None] | None = None,
        on_started: Callable[[JobRef], None] | None = None,
        resume: str | None = None,
        scale: bool = False,
    ) -> RunResult:
        """Run the trainer to completion on this cluster and return its summary.

        On the ``local`` backend this starts torchrun agents on this machine
        (and etcd, if ``up`` was not run); on other backends the job goes through
        the Kubernetes job layer (:attr:`jobs`).

        :param trainer_overrides: trainer settings by dotted name, e.g. ``{"model.preset": "tiny", "train.steps": 20}``.
        :param trainer_args: trainer options as on its command line, e.g. ``["--train.steps", "20"]``.
        :param run_id: the run's id (a name); a fresh one by default. Locally, an id used before continues that
            run from its latest checkpoint (its directory is reused; each launch gets a fresh rendezvous id).
        :param dry_run: return the commands or objects that would run; start nothing.
        :param on_output: receives each line of the leader's output.
        :param force: run even when the estimate says the job will not fit in the GPUs' memory.
        :param on_event: receives :class:`~fsdp_sdk.runs.RunEvent` s: phases, steps and restarts from backends
            that run jobs themselves; the leader's steps and lines from a Kubernetes job (unless ``on_output``).
        :param on_started: called with the job once its processes are started (before the hooks hear of it).
        :param resume: continue the local run of that id with its recorded settings (settings given here win); on a
            Kubernetes cluster, submit the job of that name again, replacing the one there: it resumes from the
            newest complete checkpoint it left (the checkpoint bucket, the shared claim, or the node's disk).
        :param scale: on a cluster with fewer nodes now than the job's workers, scale it to that many first
            (without: refused). Backends that run jobs themselves start their simulated nodes as they need.
        :raises ConfigError: a trainer setting is invalid, ``resume`` names no run, the job will not fit (see
            :meth:`check_fits`), or it needs more nodes than the cluster has and ``scale`` is off.
        :raises RunError: the run failed.
        """
        return self.job_workflow.run(
            trainer_overrides=trainer_overrides,
            trainer_args=trainer_args,
            run_id=run_id,
            dry_run=dry_run,
            on_output=on_output,
            force=force,
            on_event=on_event,
            on_started=on_started,
            resume=resume,
            scale=scale,
        )

    def dryrun(
        self,
        *,
        trainer_overrides: Mapping[str, Any] | None = None,
        trainer_args: Sequence[str] = (),
        run_id: str | None = None,
        resume: str | None = None,
        scale: bool = False,
        force: bool = False,
    ) -> DryRun:
        """What :meth:`run` would start (changes nothing): a local run's commands and plan, or a cluster job's
        objects; what ``fsdp-sdk run --dry-run`` prints and, given to the runner's ``schedule``, exactly what
        :meth:`run` starts. Arguments as :meth:`run`; the same checks refuse the same runs."""
        return self.job_workflow.dryrun(
            trainer_overrides=trainer_overrides,
            trainer_args=trainer_args,
            run_id=run_id,
            resume=resume,
            scale=scale,
            force=force,
        )

    def train(
        self,
        func: Callable[..., Any],
        *,
        nodes: int | None = None,
        nproc_per_node: int | None = None,
        kwargs: Mapping[str, Any] | None = None,
        run_id: str | None = None,
        on_event: Callable[[RunEvent], None] | None = None,
        on_output: Callable[[str], None] | None = None,
    ) -> TrainHandle:
        """Run ``func`` on every rank of a job, as the Kubeflow SDK's ``CustomTrainer`` does: only its source
        travels, so it imports what it uses inside itself (see :mod:`fsdp_sdk.user_code`); it gets what a
        ``--script`` gets (rendezvous, ``FSDP_SDK_CHECKPOINT_DIR``, :func:`fsdp_sdk.report`).

        On a backend that runs jobs itself (``local``) the run goes to its end here; on a cluster (or with the
        client's ``kubeconfig``) the job is submitted (the code layer built and pushed when new) and the handle
        follows it (:meth:`~fsdp_sdk.user_code.TrainHandle.wait`).

        :param func: a function defined with ``def`` at a module's top level.
        :param nodes: workers (``job.num_workers``; locally, simulated nodes).
        :param nproc_per_node: processes per worker (``job.nproc_per_node``).
        :param kwargs: its keyword arguments (JSON values).
        :returns: the job's handle; ``handle.result()`` is rank 0's return value.
        :raises ConfigError: ``func`` cannot travel (a lambda, a closure, a global it reads), or ``kwargs`` are not JSON.
        :raises RunError: the run failed.
        """
        from fsdp_sdk.user_code import train

        return train(
            self,
            func,
            nodes=nodes,
            nproc_per_node=nproc_per_node,
            kwargs=kwargs,
            run_id=run_id,
            on_event=on_event,
            on_output=on_output,
        )

    @property
    def runner(self) -> JobRunner:
        """The job runner (:mod:`fsdp_sdk.runner`): the local one for a backend that runs jobs itself, else the
        Kubernetes job layer's."""
        return self.job_workflow.runner

    def launch_plan(
        self,
        *,
        trainer_args: Sequence[str] = (),
        down: bool = False,
        force: bool = False,
        tokens: float | None = None,
        trainer_src: str | os.PathLike[str] | None = None,
        build_args: Mapping[str, str] | None = None,
        collect: bool = False,
    ) -> LaunchPlan:
        """What :meth:`launch` will do, and at what cost (see :func:`fsdp_sdk.launch.plan_launch`); changes nothing.

        :param collect: plan what cannot be read too (``launch --dry-run`` without credentials or tools): failed
            checks in the plan's ``blocked``, what could not be read in its ``unknown``.
        """
        from fsdp_sdk.launch import plan_launch

        return plan_launch(
            self.job_workflow,
            trainer_args=trainer_args,
            down=down,
            force=force,
            tokens=tokens,
            trainer_src=Path(trainer_src) if trainer_src else None,
            build_args=build_args,
            collect=collect,
        )

    def launch(
        self,
        plan: LaunchPlan | None = None,
        *,
        trainer_src: str | os.PathLike[str] | None = None,
        build_args: Mapping[str, str] | None = None,
        tool: str | None = None,
        force: bool = False,
        on_output: Callable[[str], None] | None = None,
        on_event: Callable[[RunEvent], None] | None = None,
        on_submitted: Callable[[JobRef], None] | None = None,
        on_finished: Callable[[RunResult | None, BaseException | None], None] | None = None,
    ) -> LaunchResult:
        """From zero to a finished job: the cluster (``up``, or its GPU nodes scaled back up), the prerequisites,
        the image (built and pushed only when its content changed), the job submitted and followed, and the cluster
        deleted after it when the plan says ``down`` (see :func:`fsdp_sdk.launch.launch`).

        :param plan: from :meth:`launch_plan` (default: a fresh one).
        """
        from fsdp_sdk.launch import launch

        plan = plan or self.launch_plan(force=force, trainer_src=trainer_src, build_args=build_args)
        return launch(
            self.job_workflow,
            plan,
            trainer_src=Path(trainer_src) if trainer_src else None,
            build_args=build_args,
            tool=tool,
            force=force,
            on_output=on_output,
            on_event=on_event,
            on_submitted=on_submitted,
            on_finished=on_finished,
        )

    # ------------------------------------------------------------------ estimates

    def estimate(
        self,
        *,
        model: str | None = None,
        nodes: int | None = None,
        gpus_per_node: int | None = None,
        instance_type: str | None = None,
        trainer_overrides: Mapping[str, Any] | None = None,
        mfu: float | None = None,
        tokens: float | None = None,
        scaling: Iterable[int] | bool = True,
        network_efficiency: float | None = None,
    ) -> Estimate:
        """Memory per GPU, speed, cost and weak scaling of the configured training job (pure: nothing starts).

        :param model: a preset name or a Hugging Face ``config.json`` (file or directory); default: the
            configuration's ``trainer.model``.
        :param nodes: nodes of the job (default ``job.num_workers``).
        :param gpus_per_node: GPUs (trainer processes) per node (default: all of the instance type's).
        :param instance_type: any registered instance type (default ``cluster.instance_type``).
        :param trainer_overrides: trainer settings by dotted name, e.g. ``{"parallel.sharding": "hybrid_shard"}``.
        :param mfu: the MFU compute runs at (default: the trainer's measured one, scaled to the settings).
        :param tokens: tokens the time and cost to train are for (default 1e9).
        :param scaling: node counts of the scaling table (True: 1, 2, 4, ... up to ``nodes``).
        :param network_efficiency: share of the nominal network bandwidth collectives reach (default 0.8).
        :raises ConfigError: an unknown model or instance type, impossible settings, or no trainer installed.
        """
        return self.job_workflow.estimate(
            model=model,
            nodes=nodes,
            gpus_per_node=gpus_per_node,
            instance_type=instance_type,
            trainer_overrides=trainer_overrides,
            mfu=mfu,
            tokens=tokens,
            scaling=scaling,
            network_efficiency=network_efficiency,
        )

    def recommend(
        self,
        *,
        model: str | None = None,
        nodes: int | None = None,
        gpus_per_node: int | None = None,
        instance_type: str | None = None,
        trainer_overrides: Mapping[str, Any] | None = None,
        mfu: float | None = None,
        tokens: float | None = None,
        network_efficiency: float | None = None,
    ) -> list[Estimate]:
        """The sharding / activation checkpointing / micro-batch combinations that fit, fastest first
        (arguments as :meth:`estimate`)."""
        return self.job_workflow.recommend(
            model=model,
            nodes=nodes,
            gpus_per_node=gpus_per_node,
            instance_type=instance_type,
            trainer_overrides=trainer_overrides,
            mfu=mfu,
            tokens=tokens,
            network_efficiency=network_efficiency,
        )

    def check_fits(self, resolved: Resolved | None = None) -> Estimate | None:
        """Refuse a job the estimate says will not fit in its GPUs' memory; the estimate, or None when none can be
        made here (no trainer installed, or a model only on the Hugging Face Hub).

        :raises ConfigError: the estimated peak exceeds the usable memory, or ``--auto`` would find nothing that fits.
        """
        return self.context.check_fits(resolved)

    def runs(self) -> Sequence[RecordedRun]:
        """The runs of this cluster's backend that it keeps records of, oldest first (the local backend's).

        :raises ConfigError: the backend keeps no run records (Kubernetes jobs: ``jobs.list()``).
        """
        return self.job_workflow.runs()

    # ------------------------------------------------------------------ catalogue

    def instance_types(self) -> list[InstanceType]:
        """Every registered instance type, sorted by name."""
        return list(self.loaded_plugins.instance_types)

    def plugins(self) -> list[PluginInfo]:
        """Every plugin, the built-in ones first, then the broken ones."""
        return self.loaded_plugins.infos()
