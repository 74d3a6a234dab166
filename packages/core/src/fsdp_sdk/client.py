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
"""

from __future__ import annotations

import dataclasses
import functools
import os
import uuid
from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from fsdp_sdk.backends.base import ClusterBackend, ClusterStatus, Plan, ProgressCallback, no_progress
from fsdp_sdk.config import Config, Setting, load_config
from fsdp_sdk.errors import BackendError, ConfigError, RunError
from fsdp_sdk.plugins import PluginInfo, Plugins, get_plugins
from fsdp_sdk.preflight import PreflightResult, raise_for_failures
from fsdp_sdk.runs import JobRef, RunEvent, RunResult

if TYPE_CHECKING:
    from fsdp_sdk.instance_types import InstanceType
    from fsdp_sdk.k8s.image import ImageBuild, ImagePush
    from fsdp_sdk.k8s.jobs import JobClient
    from fsdp_sdk.k8s.prereqs import Prereqs, PrereqStatus
    from fsdp_sdk.monitoring import MonitoringComponent

__all__ = ["Client", "JobLayer", "parse_trainer_args"]


class JobLayer(Protocol):
    """What :meth:`Client.run` needs from the Kubernetes job layer (:mod:`fsdp_sdk.k8s.jobs`).

    The job layer renders the job (calling the ``fsdp_sdk_render_job`` hook), applies
    it, follows the leader's log and reads the trainer's summary.
    """

    def submit(self, config: Config, *, run_id: str, dry_run: bool = False) -> JobRef:
        """Render and apply the job objects; return what identifies the job."""
        ...

    def wait(self, job: JobRef, *, on_output: Callable[[str], None] | None = None) -> dict[str, Any]:
        """Follow the job to its end, streaming the leader's log; return the trainer's summary.

        Raises :class:`~fsdp_sdk.errors.RunError` when the job fails.
        """
        ...

    def stop(self, job: JobRef) -> Any:
        """Delete the job and its pods."""
        ...


def parse_trainer_args(args: Sequence[str]) -> list[Setting]:
    """Turn trailing trainer arguments (``--train.steps 20``, ``--model.preset=tiny``, ``--auto``) into settings.

    :param args: arguments as given after ``--`` on the command line; ``--auto`` is the trainer's
        shorthand for ``--auto.enabled true``.
    :raises ConfigError: an argument is not ``--section.field VALUE``.
    """
    settings: list[Setting] = []
    i = 0
    while i < len(args):
        arg = args[i]
        if arg == "--auto":
            settings.append(Setting("trainer.auto.enabled", "true", "--auto", "trainer arguments"))
            i += 1
            continue
        key = arg[2:] if arg.startswith("--") else ""
        if "=" in key:
            key, value = key.split("=", 1)
            i += 1
        elif key and i + 1 < len(args):
            value = args[i + 1]
            i += 2
        else:
            raise ConfigError(arg, "is not a trainer option", "pass trainer options as --section.field VALUE after --")
        if key.count(".") < 1 or not all(key.split(".")):
            raise ConfigError(arg, "is not a trainer option", "trainer options look like --train.steps 20")
        settings.append(Setting(f"trainer.{key}", value, f"--{key}", "trainer arguments"))
    return settings


class Client:
    """A resolved configuration bound to its backend and plugins.

    :param config: the configuration; it is :meth:`~fsdp_sdk.config.Config.resolved` here.
    :param plugins: the plugin set; defaults to the process-wide :func:`~fsdp_sdk.plugins.get_plugins`.
    :param progress: receives one line per step of long operations (the CLI prints them on stderr).
    :param kubeconfig: the kubeconfig of the cluster jobs go to; defaults to the backend's, then
        ``$KUBECONFIG``, then ``~/.kube/config``.
    :param kube_context: the kubeconfig context (default: its current one).
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
    ) -> None:
        self.loaded_plugins = plugins or get_plugins()
        self.config = config.resolved(self.loaded_plugins)
        self.progress: ProgressCallback = progress or no_progress
        self.kube_context = kube_context
        self._kubeconfig = Path(kubeconfig) if kubeconfig else None

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
        plugins = plugins or get_plugins()
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

    @functools.cached_property
    def backend(self) -> ClusterBackend:
        """The backend named by ``cluster.backend``."""
        return self.loaded_plugins.backends.get(self.config.cluster.backend)()

    def preflight(self) -> list[PreflightResult]:
        """Run every plugin's preflight checks for this configuration (they read, never change)."""
        return self.loaded_plugins.hooks.preflight(self.config)

    def _checked(self) -> list[PreflightResult]:
        results = self.preflight()
        for result in results:
            if not result.ok and not result.blocking:
                self.progress(result.line())
        raise_for_failures(results)
        return results

    def _filled(self, results: Sequence[PreflightResult]) -> dict[str, Any]:
        """The values preflight checks suggest for fields the user left unset."""
        filled: dict[str, Any] = {}
        for result in results:
            for path, value in result.suggested.items():
                if path not in self.config.origins and path not in filled:
                    filled[path] = value
        return filled

    def _config_with(self, filled: Mapping[str, Any]) -> Config:
        if not filled:
            return self.config
        settings = [Setting(path, value, path, "preflight") for path, value in filled.items()]
        return self.config.with_overrides(settings).resolved(self.loaded_plugins, validate_trainer=False)

    def plan(self, *, preflight: bool = True) -> Plan:
        """What :meth:`up` will do; changes nothing.

        Runs the preflight checks first (reads only; a failed check raises), fills in the values
        they suggest for settings left unset (the plan's ``filled``), then asks the backend for
        its plan and adds what core does once the cluster is up: the kubeconfig, etcd and the
        Training Operator, and the monitoring components when ``observability.enabled``.

        :param preflight: run the preflight checks (off: plan from the configuration alone).
        :raises PreflightError: a check failed.
        """
        results = self._checked() if preflight else []
        filled = self._filled(results)
        config = self._config_with(filled)
        plan = self.backend.plan(config)
        if plan.backend != self.backend.name or plan.cluster != config.cluster.name:
            raise BackendError(f"backend {self.backend.name!r} returned a plan for {plan.backend}/{plan.cluster}")
        steps, objects = list(plan.steps), list(plan.kubernetes)
        if not self.backend.runs_jobs:
            from fsdp_sdk.k8s.prereqs import TRAINING_OPERATOR_VERSION, render_etcd

            objects += render_etcd(config)
            steps += [
                f"write the cluster's kubeconfig under {config.cluster.state_dir}",
                f"apply etcd (v2 API) for the rendezvous in namespace {config.job.namespace}",
                f"install the Kubeflow Training Operator {TRAINING_OPERATOR_VERSION}",
            ]
            components = self.monitoring_components(config)
            for component in components:
                objects += [dict(o) for o in component.objects]
            if components:
                steps.append("apply monitoring: " + ", ".join(c.name for c in components))
        return dataclasses.replace(plan, steps=steps, kubernetes=objects, filled=filled, preflight=results)

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
        plan = plan or self.plan()
        config = self._config_with(plan.filled)
        if dry_run:
            return self.backend.status(config)
        if plan.backend != self.backend.name or plan.cluster != config.cluster.name:
            raise ConfigError(
                "plan", f"was made for {plan.backend}/{plan.cluster}", "make the plan with this client's plan()"
            )
        status = self.backend.apply(config, plan, progress=self.progress)
        if not self.backend.runs_jobs:
            self._prepare(config, plan)
        self.loaded_plugins.hooks.cluster_created(config, status)
        return status

    def _prepare(self, config: Config, plan: Plan) -> None:
        """Make a new Kubernetes cluster ready for jobs: the plan's objects, then the Training Operator."""
        from fsdp_sdk.k8s.kube import Kube
        from fsdp_sdk.k8s.prereqs import Prereqs

        path = self._kubeconfig or config.cluster.kubeconfig or self.backend.kubeconfig(config)
        if path is None:
            return
        kube = Kube.from_kubeconfig(path, context=self.kube_context)
        prereqs = Prereqs(config, kube, kubeconfig=str(path), context=self.kube_context)
        prereqs.apply(plan.kubernetes, progress=self.progress)
        prereqs.install_operator(progress=self.progress)

    def down(self, *, dry_run: bool = False) -> ClusterStatus:
        """Delete the cluster and the state kept for it; deleting an absent cluster is not an error.

        :param dry_run: change nothing.
        """
        current = self.backend.status(self.config)
        if not dry_run and current.state != "absent":
            self.loaded_plugins.hooks.before_cluster_delete(self.config, current)
        return self.backend.down(self.config, dry_run=dry_run, progress=self.progress)

    def scale(self, nodes: int, *, dry_run: bool = False) -> ClusterStatus:
        """Change the number of nodes.

        :param nodes: the wanted number of nodes, within ``cluster.min_nodes..cluster.max_nodes``.
        :param dry_run: validate only.
        :raises ConfigError: ``nodes`` is negative.
        """
        if nodes < 0:
            raise ConfigError("nodes", f"{nodes} is negative", "pass a number of nodes of 0 or more")
        return self.backend.scale(self.config, nodes, dry_run=dry_run, progress=self.progress)

    def status(self) -> ClusterStatus:
        """The cluster's current state."""
        return self.backend.status(self.config)

    def kubeconfig(self) -> Path | None:
        """The kubeconfig jobs use: the one given to the client, else ``cluster.kubeconfig``, else the backend's (when
        it exists), else ``$KUBECONFIG``; ``None`` leaves the choice to the Kubernetes client (``~/.kube/config``)."""
        if self._kubeconfig is not None:
            return self._kubeconfig
        if self.config.cluster.kubeconfig is not None:
            return Path(self.config.cluster.kubeconfig)
        path = self.backend.kubeconfig(self.config)
        if path is not None and Path(path).exists():
            return Path(path)
        environ = os.environ.get("KUBECONFIG", "").split(os.pathsep)[0]
        return Path(environ) if environ else None

    def merge_kubeconfig(self, target: str | os.PathLike[str] | None = None) -> Path:
        """Add the cluster's kubeconfig to ``target`` (default ``~/.kube/config``) and make it the current context.

        :raises BackendError: the backend has no kubeconfig for this cluster (not up, or no Kubernetes).
        """
        from fsdp_sdk.aws.kubeconfig import merge_kubeconfig

        path = self.backend.kubeconfig(self.config)
        if path is None or not Path(path).exists():
            raise BackendError(
                f"backend {self.backend.name!r} has no kubeconfig for cluster {self.config.cluster.name!r}; "
                "run 'fsdp-sdk up' first"
            )
        return merge_kubeconfig(Path(path), Path(target).expanduser() if target else None)

    # ------------------------------------------------------------------ preparing a cluster

    def prereqs(self, *, connect: bool = True) -> Prereqs:
        """The cluster prerequisites (etcd, the Training Operator) of this configuration.

        :param connect: connect to the cluster (off: rendering and dry runs only).
        """
        from fsdp_sdk.k8s.kube import Kube
        from fsdp_sdk.k8s.prereqs import Prereqs

        path = self.kubeconfig()
        kube = Kube.from_kubeconfig(path, context=self.kube_context) if connect else None
        return Prereqs(self.config, kube, kubeconfig=str(path) if path else None, context=self.kube_context)

    def install_prereqs(self, *, operator: bool = True, operator_version: str | None = None) -> list[dict[str, Any]]:
        """Apply etcd and install the Training Operator on the cluster (idempotent).

        :param operator: install the Training Operator too.
        :param operator_version: its release tag (default: the pinned one).
        """
        return self.prereqs().install(operator=operator, operator_version=operator_version, progress=self.progress)

    def prereq_status(self) -> PrereqStatus:
        """What is installed on the cluster, and what is missing."""
        return self.prereqs().status()

    def monitoring_components(self, config: Config | None = None) -> list[MonitoringComponent]:
        """The monitoring components plugins render for this configuration (pure), filtered by
        ``observability.components``; none when ``observability.enabled`` is off."""
        config = config or self.config
        if not config.observability.enabled:
            return []
        components = self.loaded_plugins.hooks.monitoring_components(config)
        wanted = set(config.observability.components)
        unknown = wanted - {c.name for c in components}
        if unknown:
            known = ", ".join(sorted(c.name for c in components)) or "none (is fsdp-sdk-observability installed?)"
            raise ConfigError(
                "observability.components", f"unknown component {sorted(unknown)[0]!r}", f"choose from: {known}"
            )
        return [c for c in components if not wanted or c.name in wanted]

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
        from fsdp_sdk.k8s.image import build_image

        return build_image(
            self.config,
            context=context,
            trainer_src=trainer_src,
            tool=tool,
            build_args=build_args,
            dry_run=dry_run,
            progress=self.progress,
        )

    def push_image(self, *, tool: str | None = None, dry_run: bool = False) -> ImagePush:
        """Push the image to Amazon ECR (see :func:`fsdp_sdk.k8s.image.push_image`)."""
        from fsdp_sdk.k8s.image import push_image

        return push_image(self.config, tool=tool, dry_run=dry_run, progress=self.progress)

    # ------------------------------------------------------------------ jobs

    def render_job(
        self, *, rdzv_id: str | None = None, create_secret: bool | None = None, api: str | None = None
    ) -> list[dict[str, Any]]:
        """The job's Kubernetes objects, exactly as ``job submit`` would apply them (pure; any backend).

        :param rdzv_id: the rendezvous id (default: a fresh one).
        :param create_secret: include the Hugging Face token Secret (without its data).
        :param api: ``pytorchjob`` or ``trainjob`` (default: ``job.api``).
        """
        from fsdp_sdk.k8s.render import render_job

        return render_job(
            self.config, rdzv_id=rdzv_id, create_secret=create_secret, api=api, plugins=self.loaded_plugins
        )

    @functools.cached_property
    def jobs(self) -> JobClient:
        """The Kubernetes job layer for this cluster (imported on first use).

        :raises BackendError: the backend runs jobs itself (``local``) and no kubeconfig was given.
        """
        if self.backend.runs_jobs and self.kubeconfig() is None:
            raise BackendError(
                f"backend {self.backend.name!r} runs jobs itself, without Kubernetes; use Client.run(), "
                "or give the client a kubeconfig (--kubeconfig) to reach a cluster"
            )
        from fsdp_sdk.k8s.jobs import JobClient

        path = self.kubeconfig()
        return JobClient(self.config, kubeconfig=path, context=self.kube_context, plugins=self.loaded_plugins)

    def run(
        self,
        *,
        trainer_overrides: Mapping[str, Any] | None = None,
        trainer_args: Sequence[str] = (),
        run_id: str | None = None,
        dry_run: bool = False,
        on_output: Callable[[str], None] | None = None,
        on_event: Callable[[RunEvent], None] | None = None,
        on_started: Callable[[JobRef], None] | None = None,
        resume: str | None = None,
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
        :param on_event: receives :class:`~fsdp_sdk.runs.RunEvent` s (phases, steps, restarts; backends that run
            jobs themselves).
        :param on_started: called with the job once its processes are started (before the hooks hear of it).
        :param resume: continue the local run of that id with its recorded settings; settings given here win.
        :raises ConfigError: a trainer setting is invalid, or ``resume`` names no run.
        :raises RunError: the run failed.
        """
        settings = [
            Setting(key if key.startswith("trainer.") else f"trainer.{key}", value, key, "run()")
            for key, value in (trainer_overrides or {}).items()
        ]
        settings += parse_trainer_args(trainer_args)
        config = self.config.with_overrides(settings).resolved(self.loaded_plugins) if settings else self.config
        if resume is not None and not self.backend.runs_jobs:
            raise ConfigError(
                "--resume", f"backend {self.backend.name!r} does not keep run records", "re-submit the job instead"
            )
        if self.backend.runs_jobs:
            from fsdp_sdk.backends.local.backend import new_run_id

            run_id = resume if resume is not None else run_id if run_id is not None else new_run_id(config.job.name)
        else:
            run_id = run_id or uuid.uuid4().hex[:12]
        hooks = self.loaded_plugins.hooks
        if not dry_run:
            self._checked()

        if self.backend.runs_jobs:
            job_ref: list[JobRef] = []

            def started(job: JobRef) -> None:
                job_ref.append(job)
                if on_started is not None:
                    on_started(job)
                hooks.job_submitted(config, job)

            try:
                result = self.backend.run_job(
                    config,
                    run_id=run_id,
                    dry_run=dry_run,
                    on_output=on_output,
                    on_started=started,
                    progress=self.progress,
                    on_event=on_event,
                    resume=resume is not None,
                )
            except BaseException:
                if job_ref:
                    hooks.job_finished(config, job_ref[0], False, None)
                raise
            if not dry_run:
                hooks.job_finished(config, result.job, True, result.summary)
            return result

        jobs = self.jobs
        job = jobs.submit(config, run_id=run_id, dry_run=dry_run)
        if dry_run:
            return RunResult(job, {}, dry_run=True)
        if on_started is not None:
            on_started(job)
        hooks.job_submitted(config, job)
        try:
            summary = jobs.wait(job, on_output=on_output)
        except BaseException:
            hooks.job_finished(config, job, False, None)
            raise
        if not isinstance(summary, dict):
            raise RunError(f"job {job.name}: finished without a trainer summary")
        hooks.job_finished(config, job, True, summary)
        return RunResult(job, summary)

    def runs(self) -> list[Any]:
        """The runs of this cluster's backend that it keeps records of, oldest first (the local backend's).

        :raises ConfigError: the backend keeps no run records (Kubernetes jobs: ``jobs.list()``).
        """
        if not self.backend.runs_jobs:
            raise ConfigError(
                "cluster.backend",
                f"backend {self.backend.name!r} keeps no run records",
                "list its jobs with 'fsdp-sdk job list'",
            )
        return self.backend.runs(self.config)

    # ------------------------------------------------------------------ catalogue

    def instance_types(self) -> list[InstanceType]:
        """Every registered instance type, sorted by name."""
        return list(self.loaded_plugins.instance_types)

    def plugins(self) -> list[PluginInfo]:
        """Every plugin, the built-in ones first, then the broken ones."""
        return self.loaded_plugins.infos()
