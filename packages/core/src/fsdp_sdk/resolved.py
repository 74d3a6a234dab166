"""A configuration resolved once, with what resolving found: its instance type and the plugin set it used.

:meth:`Config.resolved() <fsdp_sdk.config.Config.resolved>` fills the derived values and checks the
cross-field rules; it finds the :class:`~fsdp_sdk.instance_types.InstanceType` on the way. A
:class:`Resolved` keeps that instance type and the :class:`~fsdp_sdk.plugins.Plugins` it was found in,
so what comes after (a backend's :meth:`~fsdp_sdk.backends.base.ClusterBackend.plan`, the preflight
hooks, the job renderer, the estimate) reads them instead of looking them up again, perhaps in
another plugin set. An application embedding the SDK with its own plugin set
(``Client.from_dict(..., plugins=...)``) therefore never reaches the process-wide one::

    from fsdp_sdk.resolved import Resolved

    resolved = Resolved.of(config, plugins)
    resolved.instance.gpu_count          # the type cluster.instance_type names, from `plugins`
    backend.plan(resolved)
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from fsdp_sdk.config import ClusterConfig, Config, JobConfig, Setting
    from fsdp_sdk.instance_types import InstanceType
    from fsdp_sdk.plugins import Plugins

__all__ = ["Resolved"]


@dataclass(frozen=True, eq=False)
class Resolved:
    """A resolved configuration, its instance type, and the plugin set both come from.

    Build one with :meth:`of`; never change ``config`` in place (make another with :meth:`with_overrides`).

    :param config: the resolved configuration (:meth:`~fsdp_sdk.config.Config.resolved`).
    :param instance: the instance type ``config.cluster.instance_type`` names, as ``plugins`` registers it.
    :param plugins: the plugin set the configuration was resolved with.
    """

    config: Config
    instance: InstanceType
    plugins: Plugins

    @classmethod
    def of(cls, config: Config, plugins: Plugins, *, validate_trainer: bool = True) -> Resolved:
        """Resolve ``config`` with ``plugins`` (:meth:`Config.resolved`) and keep what it found.

        :param config: the configuration, resolved or not (resolving again changes nothing).
        :param plugins: the plugin set providing backends, instance types and settings sections.
        :param validate_trainer: also validate the trainer settings (see :meth:`Config.resolved`).
        :raises ConfigError: a value contradicts another or names something unknown.
        """
        done = config.resolved(plugins, validate_trainer=validate_trainer)
        return cls(done, done.instance(plugins), plugins)

    def with_overrides(
        self, overrides: Mapping[str, Any] | Iterable[Setting], *, validate_trainer: bool = True
    ) -> Resolved:
        """Another resolved value, with more settings applied on top, resolved in the same plugin set.

        :param overrides: dotted paths and values, or :class:`~fsdp_sdk.config.Setting` records.
        :param validate_trainer: also validate the trainer settings.
        :raises ConfigError: a key is unknown, a value has the wrong type, or the result does not resolve.
        """
        return Resolved.of(self.config.with_overrides(overrides), self.plugins, validate_trainer=validate_trainer)

    @property
    def cluster(self) -> ClusterConfig:
        """``config.cluster``."""
        return self.config.cluster

    @property
    def job(self) -> JobConfig:
        """``config.job``."""
        return self.config.job

    def __repr__(self) -> str:
        return f"<Resolved cluster={self.config.cluster.name!r} instance={self.instance.name!r}>"
