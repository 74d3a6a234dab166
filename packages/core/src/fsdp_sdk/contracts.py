"""Declared contracts between core and plugins, each a :class:`~typing.Protocol`: what core gives a backend and a hook
(:class:`ResolvedConfig`), and what core reads of a plugin's settings section, with the functions that read them
(:func:`gpu_nodegroup_settings`, :func:`gpu_ami_settings`).

* :class:`ResolvedConfig`: what :meth:`ClusterBackend.plan <fsdp_sdk.backends.base.ClusterBackend.plan>` and the
  other backend methods, ``fsdp_sdk_render_job`` and ``fsdp_sdk_preflight`` are given: the resolved configuration
  and the instance type it names. Core passes a :class:`fsdp_sdk.resolved.Resolved`, which also keeps the plugin
  set it was resolved in; that plugin set is core's to act with, not a backend's or a hook's.

Core never reads a plugin's settings by attribute name where it happens to need one: a backend whose section
offers a setting core uses says so by having it, as the protocol here declares it (type and meaning), and
those functions hand core the section only when it meets the contract (``isinstance`` against the
protocol). A backend without the setting gets core's default behaviour, said in each protocol.

* :class:`GpuNodegroupSettings`: the name of the cluster's GPU node group (the idle scale-to-zero controller and
  a Capacity Block's schedule scale it); without it, ``gpu``. The eksctl backend's ``eksctl.gpu_nodegroup``.
* :class:`GpuAmiSettings`: the GPU nodes' AMI family (where their local NVMe array is mounted); without it, no
  local NVMe volume. The eksctl and terraform backends.

What the CLI says of a monitoring component's endpoint (Grafana's login) is the component's own
(:attr:`fsdp_sdk.monitoring.ServiceEndpoint.login`), never read from its plugin's settings.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Protocol, runtime_checkable

if TYPE_CHECKING:
    from fsdp_sdk.config import Config
    from fsdp_sdk.instance_types import InstanceType

__all__ = ["GpuAmiSettings", "GpuNodegroupSettings", "ResolvedConfig", "gpu_ami_settings", "gpu_nodegroup_settings"]


class ResolvedConfig(Protocol):
    """A resolved configuration as a backend or a hook receives it (:class:`fsdp_sdk.resolved.Resolved` is one).

    Read the instance type here, never look it up again: an application embedding the SDK may resolve with a plugin
    set of its own, holding instance types the process-wide set does not know.
    """

    @property
    def config(self) -> Config:
        """The configuration, resolved: derived values filled in, cross-field rules checked."""
        ...

    @property
    def instance(self) -> InstanceType:
        """The instance type ``config.cluster.instance_type`` names, as the plugin set it was resolved in has it."""
        ...


@runtime_checkable
class GpuNodegroupSettings(Protocol):
    """A backend section naming the cluster's GPU node group."""

    @property
    def gpu_nodegroup(self) -> str:
        """The EKS managed node group of the GPU nodes."""
        ...


@runtime_checkable
class GpuAmiSettings(Protocol):
    """A backend section naming the GPU nodes' AMI family (``AmazonLinux2023``, ``AmazonLinux2``,
    ``Bottlerocket``)."""

    @property
    def gpu_ami_family(self) -> str:
        """The AMI family of the GPU node group."""
        ...


def _backend_section(config: Config) -> object:
    return config.sections.get(config.cluster.backend)


def gpu_nodegroup_settings(config: Config) -> GpuNodegroupSettings | None:
    """The configured backend's settings section when it meets :class:`GpuNodegroupSettings`, else None (no
    section, or not that setting: core's default applies)."""
    section = _backend_section(config)
    return section if isinstance(section, GpuNodegroupSettings) else None


def gpu_ami_settings(config: Config) -> GpuAmiSettings | None:
    """The configured backend's settings section when it meets :class:`GpuAmiSettings`, else None."""
    section = _backend_section(config)
    return section if isinstance(section, GpuAmiSettings) else None
