"""The plugin's hook implementations (entry point ``observability`` in group ``fsdp_sdk``).

Every hook is pure: settings, rendered components, adjusted job objects. fsdp-sdk's core applies
them (``fsdp-sdk monitor install``, ``fsdp-sdk up`` with ``observability.enabled``). The component
modules are imported inside the hooks: loading the plugin (every ``fsdp-sdk`` start, ``--help`` too)
costs nothing.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from fsdp_sdk import hookimpl

if TYPE_CHECKING:
    from fsdp_sdk.config import Config, SettingsRegistry
    from fsdp_sdk.monitoring import MonitoringComponent
    from fsdp_sdk.resolved import Resolved

__all__ = ["components", "fsdp_sdk_monitoring_components", "fsdp_sdk_register_settings", "fsdp_sdk_render_job"]


def components(config: Config) -> list[MonitoringComponent]:
    """Every component for ``config``, in install order (pure)."""
    from .cloudwatch import cloudwatch_component
    from .dcgm import dcgm_component
    from .grafana import grafana_component
    from .node_tools import node_tools_component
    from .prometheus import operator_monitors, prometheus_component

    extra = [operator_monitors(config)[0]] if config.observability.prometheus_operator else []
    return [
        dcgm_component(config, extra),
        prometheus_component(config),
        grafana_component(config),
        node_tools_component(config),
        cloudwatch_component(config),
    ]


@hookimpl
def fsdp_sdk_register_settings(registry: SettingsRegistry) -> None:
    """Register the ``monitoring`` settings section."""
    from .settings import SECTION, MonitoringSettings

    registry.add(SECTION, MonitoringSettings)


@hookimpl
def fsdp_sdk_monitoring_components(config: Config) -> list[MonitoringComponent]:
    """The DCGM exporter, Prometheus (or the operator's monitors), Grafana, node tools and CloudWatch."""
    return components(config)


@hookimpl
def fsdp_sdk_render_job(objects: list[dict[str, Any]], resolved: Resolved) -> None:
    """Turn the trainer's Prometheus endpoint on in jobs rendered with observability enabled."""
    from .training import add_trainer_endpoint

    add_trainer_endpoint(resolved.config, objects)
