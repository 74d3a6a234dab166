"""The context every workflow shares: the configuration resolved once, with its plugins, backend, progress callback
and kubeconfig; and what the cluster and job workflows both use (preflight checks, prices, the fit check)."""

from __future__ import annotations

import functools
import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from fsdp_sdk.config import Config, Setting
from fsdp_sdk.errors import ConfigError
from fsdp_sdk.preflight import PreflightResult, raise_for_failures
from fsdp_sdk.resolved import Resolved

if TYPE_CHECKING:
    from fsdp_sdk.aws.pricing import Price
    from fsdp_sdk.backends.base import ClusterBackend, ProgressCallback
    from fsdp_sdk.estimate import Estimate
    from fsdp_sdk.monitoring import MonitoringComponent
    from fsdp_sdk.plugins import Plugins

__all__ = ["Context"]


class Context:
    """A resolved configuration bound to its plugin set, backend, progress callback and kubeconfig.

    :param resolved: the configuration resolved once (:class:`~fsdp_sdk.resolved.Resolved`).
    :param progress: receives one line per step of long operations.
    :param kubeconfig: the kubeconfig given to the client (``None``: see :meth:`kubeconfig`).
    :param kube_context: the kubeconfig context.
    :param hermetic: never fall back to ``$KUBECONFIG`` or ``~/.kube/config``.
    """

    def __init__(
        self,
        resolved: Resolved,
        *,
        progress: ProgressCallback,
        kubeconfig: str | os.PathLike[str] | None = None,
        kube_context: str | None = None,
        hermetic: bool = False,
    ) -> None:
        self.resolved = resolved
        self.progress = progress
        self.given_kubeconfig = Path(kubeconfig) if kubeconfig else None
        self.kube_context = kube_context
        self.hermetic = hermetic

    @property
    def config(self) -> Config:
        return self.resolved.config

    @property
    def plugins(self) -> Plugins:
        return self.resolved.plugins

    @functools.cached_property
    def backend(self) -> ClusterBackend:
        """The backend named by ``cluster.backend``."""
        return self.plugins.backends.get(self.config.cluster.backend)()

    def derived(self, settings: Sequence[Setting]) -> Context:
        """A context like this one whose configuration has ``settings`` on top (resolved again; same plugins,
        progress and kubeconfig); this one when there are none."""
        if not settings:
            return self
        return Context(
            Resolved.of(self.config.with_overrides(list(settings)), self.plugins),
            progress=self.progress,
            kubeconfig=self.given_kubeconfig,
            kube_context=self.kube_context,
            hermetic=self.hermetic,
        )

    # ------------------------------------------------------------------ kubeconfig

    def kubeconfig(self) -> Path | None:
        """The kubeconfig jobs use: the one given to the client, else ``cluster.kubeconfig``, else the backend's (when
        it exists), else ``$KUBECONFIG``; ``None`` leaves the choice to the Kubernetes client (``~/.kube/config``)."""
        if self.given_kubeconfig is not None:
            return self.given_kubeconfig
        if self.config.cluster.kubeconfig is not None:
            return Path(self.config.cluster.kubeconfig)
        path = self.backend.kubeconfig(self.config)
        if path is not None and Path(path).exists():
            return Path(path)
        if self.hermetic:
            return None
        environ = os.environ.get("KUBECONFIG", "").split(os.pathsep)[0]
        return Path(environ) if environ else None

    def kubeconfig_or_fail(self) -> Path | None:
        """:meth:`kubeconfig`; a hermetic client without one refuses rather than read ``~/.kube/config``."""
        path = self.kubeconfig()
        if path is None and self.hermetic:
            raise ConfigError(
                "kubeconfig",
                "this client is hermetic (Client.from_dict), so it reads neither $KUBECONFIG nor ~/.kube/config",
                "pass kubeconfig= to Client.from_dict(), or set cluster.kubeconfig",
            )
        return path

    def cluster_kubeconfig(self, config: Config) -> Path | None:
        """The cluster's own kubeconfig (given, ``cluster.kubeconfig`` or the backend's), whether or not it exists."""
        path = self.given_kubeconfig or config.cluster.kubeconfig or self.backend.kubeconfig(config)
        return Path(path) if path is not None else None

    # ------------------------------------------------------------------ preflight

    def preflight(self, action: str = "up", resolved: Resolved | None = None) -> list[PreflightResult]:
        """Every plugin's preflight checks for this configuration (or ``resolved``); they read, never change."""
        return self.plugins.hooks.preflight(resolved or self.resolved, action)

    def checked(
        self, action: str = "up", *, collect: bool = False, resolved: Resolved | None = None
    ) -> list[PreflightResult]:
        """Run the checks, show the failed warnings as progress, and raise for the failed errors (unless
        ``collect``: then they stay in the results, for a dry run to show beside the plan)."""
        results = self.preflight(action, resolved)
        for result in results:
            if not result.ok and not result.blocking:
                self.progress(result.line())
        if not collect:
            raise_for_failures(results)
        return results

    def filled(self, results: Sequence[PreflightResult]) -> dict[str, Any]:
        """The values preflight checks suggest for fields the user left unset."""
        filled: dict[str, Any] = {}
        for result in results:
            for path, value in result.suggested.items():
                if path not in self.config.origins and path not in filled:
                    filled[path] = value
        return filled

    def resolved_with(self, filled: Mapping[str, Any]) -> Resolved:
        """The resolved configuration with the values preflight filled in (this one when none)."""
        if not filled:
            return self.resolved
        settings = [Setting(path, value, path, "preflight") for path, value in filled.items()]
        return self.resolved.with_overrides(settings, validate_trainer=False)

    def config_with(self, filled: Mapping[str, Any]) -> Config:
        return self.resolved_with(filled).config

    # ------------------------------------------------------------------ shared by both workflows

    def hourly_price(self, resolved: Resolved | None = None) -> Price:
        """The on-demand price of ``cluster.instance_type`` in ``cluster.region``: the AWS Price List's when
        credentials allow it (cached for a day under the state directory), else the instance type's dated table."""
        from fsdp_sdk.aws.pricing import hourly_price

        resolved = resolved or self.resolved
        config = resolved.config
        return hourly_price(resolved.instance, config.cluster.region, state_dir=Path(config.cluster.state_dir))

    def monitoring_components(self, config: Config | None = None) -> list[MonitoringComponent]:
        """The monitoring components plugins render for this configuration (pure), filtered by
        ``observability.components``; none when ``observability.enabled`` is off."""
        config = config or self.config
        if not config.observability.enabled:
            return []
        components = self.plugins.hooks.monitoring_components(config)
        wanted = set(config.observability.components)
        unknown = wanted - {c.name for c in components}
        if unknown:
            known = ", ".join(sorted(c.name for c in components)) or "none (is fsdp-sdk-observability installed?)"
            raise ConfigError(
                "observability.components", f"unknown component {sorted(unknown)[0]!r}", f"choose from: {known}"
            )
        return [c for c in components if c.name in wanted or (not wanted and c.default)]

    def check_fits(self, resolved: Resolved | None = None) -> Estimate | None:
        """Refuse a job the estimate says will not fit in its GPUs' memory; the estimate, or None when none can be
        made here (no trainer installed, or a model only on the Hugging Face Hub).

        :raises ConfigError: the estimated peak exceeds the usable memory.
        """
        from fsdp_sdk.estimate import EstimateUnavailable, estimate_job, fit_problem
        from fsdp_sdk.user_code import active

        resolved = resolved or self.resolved
        if active(resolved.config) is not None:
            return None  # your own code: no model the estimate knows
        try:
            est = estimate_job(resolved.config, resolved.instance, scaling=False)
        except EstimateUnavailable as exc:
            self.progress(f"fit check skipped: {exc}")
            return None
        problem = fit_problem(est)
        if problem:
            raise ConfigError(
                "estimate",
                problem,
                "use more nodes, a smaller micro batch or activation checkpointing ('fsdp-sdk estimate --recommend' "
                "lists what fits), or run it anyway with --force",
            )
        return est

    def side_estimate(self, resolved: Resolved) -> Estimate | None:
        """The configured job's estimate for ``up --dry-run``: None without a model in the configuration or where
        none can be made here (said on the progress stream)."""
        from fsdp_sdk.estimate import EstimateUnavailable, estimate_job, model_is_given

        if not model_is_given(resolved.config):
            return None
        try:
            return estimate_job(resolved.config, resolved.instance)
        except EstimateUnavailable as exc:
            self.progress(f"estimate skipped: {exc}")
            return None


class OnContext:
    """What a workflow reads of its :class:`Context`: the configuration, its resolution, the backend, the progress."""

    def __init__(self, ctx: Context) -> None:
        self.ctx = ctx

    @property
    def config(self) -> Config:
        return self.ctx.config

    @property
    def resolved(self) -> Resolved:
        return self.ctx.resolved

    @property
    def backend(self) -> ClusterBackend:
        return self.ctx.backend

    @property
    def progress(self) -> ProgressCallback:
        return self.ctx.progress
