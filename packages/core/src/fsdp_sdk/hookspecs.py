"""Hook specifications: everything a plugin can do to fsdp-sdk.

A plugin is a module (or any object) with functions named after these hooks and
decorated with :data:`hookimpl`. Third-party plugins are found through the
``fsdp_sdk`` entry-point group of their distribution::

    # pyproject.toml
    [project.entry-points.fsdp_sdk]
    my_plugin = "my_package.plugin"

    # my_package/plugin.py
    from fsdp_sdk import hookimpl

    @hookimpl
    def fsdp_sdk_register_backends(registry):
        registry.add(MyBackend)

A hook implementation may accept any subset of the parameters documented here, so a
parameter added to a hook later (``resolved``, say) leaves existing implementations working.
Built-in behaviour is provided by default plugins registered the same way
(see :data:`fsdp_sdk.plugins.DEFAULT_PLUGINS`).

Hooks are called in LIFO registration order: third-party plugins before the
built-in ones. Hooks marked "Stops at first non-None result" are look-ups; all
others call every implementation.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

# the markers live in fsdp_sdk.markers (below every layer), and here for the plugins that import them from here
from fsdp_sdk.errors import PluginDeprecationWarning
from fsdp_sdk.markers import PROJECT_NAME, hookimpl, hookspec

if TYPE_CHECKING:
    import click

    from fsdp_sdk.backends.base import BackendRegistry, ClusterStatus
    from fsdp_sdk.config import Config, SettingsRegistry
    from fsdp_sdk.contracts import ResolvedConfig
    from fsdp_sdk.instance_types import InstanceTypeRegistry
    from fsdp_sdk.monitoring import MonitoringComponent
    from fsdp_sdk.preflight import PreflightResult
    from fsdp_sdk.runs import JobRef

__all__ = ["PROJECT_NAME", "RETIRED_CONFIG", "hookimpl", "hookspec"]

#: The ``config`` argument of the hooks that also receive ``resolved`` (it is ``resolved.config``): an
#: implementation that asks for it is warned when registered (pluggy's ``warn_on_impl_args``), and keeps working
#: until it goes.
RETIRED_CONFIG = {
    "config": PluginDeprecationWarning(
        "the 'config' argument of this hook is resolved.config: ask for 'resolved' instead "
        "('config' goes in a later release)"
    )
}


# -------------------------------------------------------------------------
# Registration hooks: called once per process, when the registry is first needed.
# -------------------------------------------------------------------------


@hookspec
def fsdp_sdk_register_backends(registry: BackendRegistry) -> None:
    """Register cluster backends.

    Call ``registry.add(cls)`` with each :class:`~fsdp_sdk.backends.base.ClusterBackend`
    subclass the plugin provides, or ``registry.add_lazy(name, "package.module:Class")``
    to defer importing a heavy module until the backend is used. The class's ``name``
    is what users pass to ``--backend`` and ``cluster.backend``.

    :param registry: the backend registry; ``add`` raises
        :class:`~fsdp_sdk.errors.PluginError` when the name is already taken.
    """


@hookspec
def fsdp_sdk_register_instance_types(registry: InstanceTypeRegistry) -> None:
    """Register instance types that ``cluster.instance_type`` may name.

    Call ``registry.add(InstanceType(...))`` for each type.

    :param registry: the instance type registry; ``add`` raises
        :class:`~fsdp_sdk.errors.PluginError` when the name is already taken.
    """


@hookspec
def fsdp_sdk_register_settings(registry: SettingsRegistry) -> None:
    """Add a configuration section that belongs to the plugin.

    Call ``registry.add("mysection", MySettings)`` with a dataclass whose fields all have defaults
    (and a docstring each). Its values then come from every configuration source, like the core's:
    ``mysection:`` in YAML, ``FSDP_SDK_MYSECTION__<FIELD>`` in ``.env`` or the environment,
    ``--set mysection.<field>=VALUE``; they are converted to the fields' types with the same one-line
    errors, shown by ``fsdp-sdk config show`` and read with ``config.section("mysection")``.
    A ``validate(self, config)`` method, when the dataclass has one, runs when the configuration is resolved
    (:func:`fsdp_sdk.config.resolution.resolve`).

    :param registry: the settings registry; ``add`` raises :class:`~fsdp_sdk.errors.PluginError`
        when the name is a core section or already taken.
    """


@hookspec
def fsdp_sdk_register_commands(cli: click.Group) -> None:
    """Add commands to the ``fsdp-sdk`` command line.

    Decorate functions with ``@cli.command()`` or call ``cli.add_command(cmd)``.
    Keep heavy imports inside the command bodies: this hook runs on every
    ``fsdp-sdk`` start-up, including ``--help``. A command whose name is
    already taken by a built-in command is ignored with a warning; a name that
    two plugins register is refused for both, with a warning naming them.

    :param cli: a click group whose commands are merged into the root group.
    """


# -------------------------------------------------------------------------
# Rendering and look-up hooks: pure, no network.
# -------------------------------------------------------------------------


@hookspec(warn_on_impl_args=RETIRED_CONFIG)
def fsdp_sdk_render_job(config: Config, objects: list[dict[str, Any]], resolved: ResolvedConfig) -> None:
    """Adjust the Kubernetes objects rendered for a training job, before they are applied.

    Implementations append objects to ``objects`` or modify its dicts in place
    (add a sidecar, a toleration, a label...) and return ``None``. Rendering must
    stay pure: no network calls, no files written. Every object left in ``objects``
    must be a dict with ``apiVersion``, ``kind`` and ``metadata.name``.

    The job is a ``PyTorchJob`` (pod templates under ``spec.pytorchReplicaSpecs``) or,
    with ``job.api=trainjob``, a Kubeflow Trainer v2.3 ``TrainJob`` (pod settings under ``spec.runtimePatches``).
    :func:`fsdp_sdk.k8s.render.worker_pods` walks both shapes, so a hook that changes
    every worker pod reads the same either way::

        from fsdp_sdk.k8s.render import worker_pods

        @hookimpl
        def fsdp_sdk_render_job(objects, resolved):
            for pod in worker_pods(objects):
                pod.spec.setdefault("tolerations", []).append(
                    {"key": "example.com/dedicated", "operator": "Exists", "effect": "NoSchedule"}
                )
                pod.labels["example.com/team"] = "research"

    (:func:`~fsdp_sdk.k8s.render.worker_pod_specs` yields just the pod specs.)

    A hook that writes the job itself, not through :func:`~fsdp_sdk.k8s.render.worker_pods`, handles both shapes:

    * ``PyTorchJob`` (``kubeflow.org/v1``): each replica's pod template is
      ``spec.pytorchReplicaSpecs.<Worker|Master>.template`` (a full pod template: any pod field);
    * ``TrainJob`` (``trainer.kubeflow.org/v1alpha1``, Trainer v2.3): pod settings go in fsdp-sdk's entry of
      ``spec.runtimePatches`` (``manager: fsdp-sdk.io/render``), under
      ``trainingRuntimeSpec.template.spec.replicatedJobs[name=node].template.spec.template``; there the pod
      spec keeps only ``containers``/``initContainers`` (``name``, ``env``, ``volumeMounts``,
      ``securityContext``), ``volumes``, ``nodeSelector``, ``affinity``, ``tolerations``, ``schedulingGates``,
      ``serviceAccountName``, ``imagePullSecrets``, ``securityContext`` and ``terminationGracePeriodSeconds``;
      the image, command and resources are ``spec.trainer`` fields. The Trainer v2.0 field
      ``spec.podSpecOverrides`` no longer exists (v2.2 replaced it with ``runtimePatches``).

    Branch on ``obj["kind"]`` and ``obj["apiVersion"]``. An API server silently drops a field a CRD does not
    declare, so after the hooks ``job submit`` checks every object against the cluster's CRDs (and
    ``job render --crd FILE|URL`` against the CRDs given) and warns, naming the plugin and the field, for
    each field that would be dropped.

    :param config: the resolved configuration of the job: ``resolved.config`` (retired: an implementation that
        asks for it gets a :class:`~fsdp_sdk.errors.PluginDeprecationWarning`).
    :param objects: the rendered objects (``PyTorchJob``/``TrainJob``, ``Secret``,
        ``Service``...), each a dict as it would be sent to the API server.
    :param resolved: the same configuration with its instance type (``resolved.instance``), a
        :class:`~fsdp_sdk.contracts.ResolvedConfig` (core passes a :class:`~fsdp_sdk.resolved.Resolved`):
        read the instance type there, never look it up.
    """


@hookspec(firstresult=True)
def fsdp_sdk_job_image(config: Config) -> str | None:
    """Look up the container image reference a job runs.

    Stops at first non-None result. When no plugin answers, the job uses
    :attr:`fsdp_sdk.config.Config.image_ref` (``registry/image:tag``).

    :param config: the resolved configuration of the job.
    :return: a full image reference such as ``123456789012.dkr.ecr.us-west-2.amazonaws.com/trainer:v1``,
        or ``None`` to let another plugin answer.
    """


@hookspec
def fsdp_sdk_monitoring_components(config: Config) -> list[MonitoringComponent] | None:
    """Describe monitoring components to install on a cluster.

    Each :class:`~fsdp_sdk.monitoring.MonitoringComponent` carries the plain
    Kubernetes objects (no Helm) to apply, e.g. a DCGM exporter ``DaemonSet``.
    Components are applied when ``observability.enabled`` is true.

    :param config: the resolved configuration.
    :return: the components this plugin contributes (an empty list, or ``None``, for none).
    """


@hookspec(warn_on_impl_args=RETIRED_CONFIG)
def fsdp_sdk_preflight(config: Config, action: str, resolved: ResolvedConfig) -> list[PreflightResult] | None:
    """Check that what an action needs is in place before it starts.

    Called before ``up`` (and ``up --dry-run``, ``Client.plan()``), ``run`` and
    ``job submit``. Return a list with one :class:`~fsdp_sdk.preflight.PreflightResult`
    per check (an empty list, or ``None``, for none); a failed check with severity
    ``error`` stops the action, a ``warning`` is shown. Checks read, never change.

    :param config: the resolved configuration: ``resolved.config`` (retired: an implementation that asks for it
        gets a :class:`~fsdp_sdk.errors.PluginDeprecationWarning`).
    :param action: what is about to happen: ``up`` (create or change the cluster: capacity and
        cloud quota checks belong here), ``run`` (``fsdp-sdk run`` / ``Client.run()``: a local run, or a
        job on the cluster) or ``submit`` (``fsdp-sdk job submit`` / ``Client.submit_job()``: a job sent to a
        cluster that is already up, e.g. a team's GPU quota). Return ``[]`` for actions a check does not concern.
    :param resolved: the same configuration with its instance type (``resolved.instance``), a
        :class:`~fsdp_sdk.contracts.ResolvedConfig` (core passes a :class:`~fsdp_sdk.resolved.Resolved`):
        read the instance type there, never look it up.
    :return: results of the checks this plugin performs (an empty list for none).
    """


# -------------------------------------------------------------------------
# Lifecycle events: notifications; return values are ignored.
# -------------------------------------------------------------------------


@hookspec
def fsdp_sdk_cluster_created(config: Config, status: ClusterStatus) -> None:
    """Called after ``up`` created or confirmed a cluster (not on ``--dry-run``).

    :param config: the resolved configuration.
    :param status: the status of the cluster just brought up.
    """


@hookspec
def fsdp_sdk_before_cluster_delete(config: Config, status: ClusterStatus) -> None:
    """Called before ``down`` deletes a cluster (not on ``--dry-run``).

    Raise :class:`~fsdp_sdk.errors.FsdpSdkError` to refuse the deletion.

    :param config: the resolved configuration.
    :param status: the status of the cluster about to be deleted.
    """


@hookspec
def fsdp_sdk_job_submitted(config: Config, job: JobRef) -> None:
    """Called after a training job was submitted or, on the local backend, started.

    :param config: the resolved configuration of the job.
    :param job: what identifies the job (name, namespace, run id, backend).
    """


@hookspec
def fsdp_sdk_job_finished(config: Config, job: JobRef, succeeded: bool, summary: dict[str, Any] | None) -> None:
    """Called when a job the SDK waited on has ended, successfully or not.

    :param config: the resolved configuration of the job.
    :param job: what identifies the job.
    :param succeeded: whether every worker exited successfully.
    :param summary: the trainer's ``summary.json`` when it was written, else ``None``.
    """
