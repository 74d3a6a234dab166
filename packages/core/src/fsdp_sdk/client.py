"""The library API: everything the CLI does, as Python calls.

::

    from fsdp_sdk import Client

    client = Client.from_sources(config_file="cluster.yaml", env_file=".env",
                                 overrides={"cluster.backend": "local"})
    print(client.plan().steps)
    client.up()
    result = client.run(trainer_overrides={"model.preset": "tiny", "train.steps": 20})
    print(result.summary["final_loss"])
    client.down()

The CLI is a thin layer over this class: it builds a :class:`Client` from its
flags and prints what the methods return.
"""

from __future__ import annotations

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
from fsdp_sdk.runs import JobRef, RunResult

if TYPE_CHECKING:
    from fsdp_sdk.instance_types import InstanceType

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

    def stop(self, job: JobRef) -> None:
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
    :raises ConfigError: the configuration is invalid.
    """

    def __init__(
        self, config: Config, *, plugins: Plugins | None = None, progress: ProgressCallback | None = None
    ) -> None:
        self.loaded_plugins = plugins or get_plugins()
        self.config = config.resolved(self.loaded_plugins)
        self.progress: ProgressCallback = progress or no_progress

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
    ) -> Client:
        """Read the configuration from every source (see :mod:`fsdp_sdk.config`) and build a client.

        :param config_file: a YAML file.
        :param env_file: a ``.env`` file; without one, ``./.env`` is read when present.
        :param overrides: highest-priority settings, e.g. ``{"cluster.backend": "local"}``.
        :param environ: where ``FSDP_SDK_*`` variables are read; defaults to ``os.environ``.
        :param read_default_env_file: read ``./.env`` when ``env_file`` is not given.
        :param plugins: the plugin set.
        :param progress: progress callback.
        """
        config = load_config(
            config_file, env_file, overrides, environ=environ, read_default_env_file=read_default_env_file
        )
        return cls(config, plugins=plugins, progress=progress)

    def __repr__(self) -> str:
        return f"<Client backend={self.config.cluster.backend!r} cluster={self.config.cluster.name!r}>"

    # ------------------------------------------------------------------ cluster

    @functools.cached_property
    def backend(self) -> ClusterBackend:
        """The backend named by ``cluster.backend``."""
        return self.loaded_plugins.backends.get(self.config.cluster.backend)()

    def plan(self) -> Plan:
        """What :meth:`up` would do; no side effects."""
        return self.backend.plan(self.config)

    def preflight(self) -> list[PreflightResult]:
        """Run every plugin's preflight checks for this configuration."""
        return self.loaded_plugins.hooks.preflight(self.config)

    def _checked(self) -> None:
        results = self.preflight()
        for result in results:
            if not result.ok and not result.blocking:
                self.progress(result.line())
        raise_for_failures(results)

    def up(self, *, dry_run: bool = False) -> ClusterStatus:
        """Create the cluster (or confirm it is up) after the preflight checks pass.

        :param dry_run: check and plan only; change nothing.
        :raises BackendError: a preflight check failed or the backend could not create the cluster.
        """
        self._checked()
        status = self.backend.up(self.config, dry_run=dry_run, progress=self.progress)
        if not dry_run:
            self.loaded_plugins.hooks.cluster_created(self.config, status)
        return status

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
        """A kubeconfig for the cluster, or ``None`` for backends without Kubernetes."""
        return self.backend.kubeconfig(self.config)

    # ------------------------------------------------------------------ jobs

    @functools.cached_property
    def jobs(self) -> JobLayer:
        """The Kubernetes job layer for this cluster (imported on first use).

        :raises BackendError: the backend has no Kubernetes (``local``) or the job layer is unavailable.
        """
        if self.backend.runs_jobs:
            raise BackendError(f"backend {self.backend.name!r} runs jobs itself, without Kubernetes; use Client.run()")
        try:
            from fsdp_sdk.k8s.jobs import JobClient
        except ImportError as exc:
            raise BackendError(f"the Kubernetes job layer (fsdp_sdk.k8s.jobs) cannot be imported: {exc}") from exc
        return JobClient(self.config, kubeconfig=self.kubeconfig(), plugins=self.loaded_plugins)

    def run(
        self,
        *,
        trainer_overrides: Mapping[str, Any] | None = None,
        trainer_args: Sequence[str] = (),
        run_id: str | None = None,
        dry_run: bool = False,
        on_output: Callable[[str], None] | None = None,
    ) -> RunResult:
        """Run the trainer to completion on this cluster and return its summary.

        On the ``local`` backend this starts torchrun agents on this machine
        (and etcd, if ``up`` was not run); on other backends the job goes through
        the Kubernetes job layer (:attr:`jobs`).

        :param trainer_overrides: trainer settings by dotted name, e.g. ``{"model.preset": "tiny", "train.steps": 20}``.
        :param trainer_args: trainer options as on its command line, e.g. ``["--train.steps", "20"]``.
        :param run_id: the run (rendezvous) id; a fresh one by default. Never reuse one.
        :param dry_run: return the commands or objects that would run; start nothing.
        :param on_output: receives each line of the leader's output.
        :raises ConfigError: a trainer setting is invalid.
        :raises RunError: the run failed.
        """
        settings = [
            Setting(key if key.startswith("trainer.") else f"trainer.{key}", value, key, "run()")
            for key, value in (trainer_overrides or {}).items()
        ]
        settings += parse_trainer_args(trainer_args)
        config = self.config.with_overrides(settings).resolved(self.loaded_plugins) if settings else self.config
        run_id = run_id or uuid.uuid4().hex[:12]
        hooks = self.loaded_plugins.hooks
        if not dry_run:
            self._checked()

        if self.backend.runs_jobs:
            job_ref: list[JobRef] = []

            def started(job: JobRef) -> None:
                job_ref.append(job)
                hooks.job_submitted(config, job)

            try:
                result = self.backend.run_job(
                    config,
                    run_id=run_id,
                    dry_run=dry_run,
                    on_output=on_output,
                    on_started=started,
                    progress=self.progress,
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

    # ------------------------------------------------------------------ catalogue

    def instance_types(self) -> list[InstanceType]:
        """Every registered instance type, sorted by name."""
        return list(self.loaded_plugins.instance_types)

    def plugins(self) -> list[PluginInfo]:
        """Every plugin, the built-in ones first, then the broken ones."""
        return self.loaded_plugins.infos()
