"""Monitoring components contributed by plugins (``fsdp_sdk_monitoring_components``).

A component is a named set of plain Kubernetes objects (no Helm) that the
Kubernetes layer applies when ``observability.enabled`` is true.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from fsdp_sdk.errors import PluginError

__all__ = ["MonitoringComponent"]


@dataclass(frozen=True)
class MonitoringComponent:
    """One monitoring component and the objects that install it.

    :param name: unique name, e.g. ``dcgm-exporter``; ``observability.components`` selects by it.
    :param description: one line for listings.
    :param objects: Kubernetes objects to apply, each a dict with ``apiVersion``, ``kind`` and ``metadata.name``.
    :param namespace: namespace for namespaced objects that do not set one.
    """

    name: str
    description: str
    objects: Sequence[Mapping[str, Any]]
    namespace: str | None = None

    def __post_init__(self) -> None:
        for obj in self.objects:
            if not isinstance(obj, Mapping) or not {"apiVersion", "kind", "metadata"} <= obj.keys():
                raise PluginError(
                    f"monitoring component {self.name!r}: every object needs apiVersion, kind and metadata"
                )
            if not obj["metadata"].get("name"):
                raise PluginError(f"monitoring component {self.name!r}: a {obj['kind']} has no metadata.name")
