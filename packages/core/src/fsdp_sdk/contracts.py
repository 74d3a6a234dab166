"""Declared contracts: what core reads of a plugin's settings section, each a :class:`~typing.Protocol`, and the
functions that read them (:func:`gpu_nodegroup_settings`, :func:`gpu_ami_settings`).

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

__all__ = ["GpuAmiSettings", "GpuNodegroupSettings", "gpu_ami_settings", "gpu_nodegroup_settings"]


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
