"""Names and labels every component shares."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from fsdp_sdk.config import Config

__all__ = [
    "DASHBOARD_LABEL",
    "TRAINER_PORT_NAME",
    "labels",
    "namespace_object",
    "selector",
]

#: Label of the ConfigMaps that hold Grafana dashboards (``fsdp-sdk monitor dashboard export`` reads them).
DASHBOARD_LABEL = "fsdp-sdk.io/grafana-dashboard"
#: Name of the trainer's metrics port in the training pods (the scrape configuration selects on it).
TRAINER_PORT_NAME = "fsdp-metrics"
_INSTANCE = "fsdp-sdk-monitoring"


def selector(name: str) -> dict[str, str]:
    """The labels that select the pods of component part ``name``."""
    return {"app.kubernetes.io/name": name, "app.kubernetes.io/instance": _INSTANCE}


def labels(name: str, version: str | None = None) -> dict[str, str]:
    """The standard ``app.kubernetes.io/*`` labels of component part ``name``."""
    out = {
        **selector(name),
        "app.kubernetes.io/component": "monitoring",
        "app.kubernetes.io/part-of": "fsdp-sdk",
        "app.kubernetes.io/managed-by": "fsdp-sdk",
    }
    if version:
        out["app.kubernetes.io/version"] = version[:63]
    return out


def image_version(image: str) -> str:
    """The tag of an image reference (``v3.14.0`` of ``quay.io/prometheus/prometheus:v3.14.0``)."""
    last = image.rsplit("/", 1)[-1]
    return last.split("@", 1)[0].split(":", 1)[1] if ":" in last else "latest"


def namespace_object(config: Config) -> list[dict[str, Any]]:
    """The monitoring ``Namespace`` (none for ``default``), applied with only its name and labels."""
    name = config.observability.namespace
    if name == "default":
        return []
    return [
        {
            "apiVersion": "v1",
            "kind": "Namespace",
            "metadata": {"name": name, "labels": {"app.kubernetes.io/part-of": "fsdp-sdk"}},
        }
    ]
