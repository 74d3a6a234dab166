"""The ``monitoring`` settings section: what only this plugin reads.

Core's ``observability`` section holds what core itself acts on: whether monitoring is on
(``enabled``), where it goes (``namespace``), which components (``components``), and whether the
cluster runs the Prometheus Operator (``prometheus_operator``: core fills it from discovery, like
the preflight checks' suggested values, so rendering stays pure). Everything else, images,
retention, scrape interval, Grafana's admin account, how to reach an existing Prometheus, is this
plugin's business and lives here::

    monitoring:
      scrape_interval: 15s
      retention: 15d
      grafana_admin_user: admin
      operator_selector_labels: {release: kube-prometheus-stack}

(``FSDP_SDK_MONITORING__SCRAPE_INTERVAL=30s``, ``--set monitoring.retention=30d``.)
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from fsdp_sdk.errors import ConfigError
from fsdp_sdk.pins import pin

if TYPE_CHECKING:
    from fsdp_sdk.config import Config

__all__ = ["SECTION", "MonitoringSettings", "parse_duration", "service_address", "settings_of"]

#: The name of the settings section.
SECTION = "monitoring"

_DURATION = re.compile(r"^(\d+)(ms|s|m|h|d|w|y)$")
_SECONDS = {"ms": 0.001, "s": 1, "m": 60, "h": 3600, "d": 86400, "w": 604800, "y": 31536000}
_SERVICE = re.compile(r"^([a-z0-9][-a-z0-9]*)/([a-z0-9][-a-z0-9.]*):(\d{1,5})$")


def parse_duration(text: str) -> float:
    """Seconds in a Prometheus duration with one unit (``15s``, ``2m``, ``15d``).

    :raises ValueError: not such a duration.
    """
    match = _DURATION.match(text.strip())
    if not match:
        raise ValueError(text)
    return int(match.group(1)) * _SECONDS[match.group(2)]


def service_address(text: str) -> tuple[str, str, int]:
    """``(namespace, service, port)`` of ``namespace/service:port``.

    :raises ValueError: not of that form.
    """
    match = _SERVICE.match(text.strip())
    if not match:
        raise ValueError(text)
    return match.group(1), match.group(2), int(match.group(3))


def _duration(example: str) -> dict[str, Any]:
    def valid(value: str) -> bool:
        try:
            return parse_duration(value) > 0
        except ValueError:
            return False

    return {"check": (valid, "is not a Prometheus duration", f"use a number and one unit, like {example}")}


def _service_check() -> dict[str, Any]:
    def valid(value: str) -> bool:
        try:
            service_address(value)
        except ValueError:
            return False
        return True

    return {"check": (valid, "is not namespace/service:port", "use e.g. monitoring/prometheus-operated:9090")}


@dataclass
class MonitoringSettings:
    """Images, retention, scrape interval and accounts of the monitoring components."""

    dcgm_exporter_image: str = field(default_factory=lambda: pin("dcgm-exporter").image_ref())
    """NVIDIA DCGM exporter image (the pinned release, ``fsdp-sdk versions``)."""
    prometheus_image: str = field(default_factory=lambda: pin("prometheus").image_ref())
    """Prometheus server image."""
    grafana_image: str = field(default_factory=lambda: pin("grafana").image_ref())
    """Grafana image (12.4: the long-supported 12.x minor, whose file provisioning reads the generated dashboard)."""
    node_tools_image: str = field(default_factory=lambda: pin("node-tools").image_ref())
    """Image of the htop and nvtop pods (Ubuntu 24.04: htop 3.3, nvtop 3.0 from its archive)."""
    node_tools_install: bool = True
    """Install htop and nvtop with apt-get when the pods start (the nodes need to reach the Ubuntu archive);
    set false with a node_tools_image that already has them."""
    scrape_interval: str = field(default="15s", metadata=_duration("15s"))
    """How often Prometheus scrapes the exporters and the trainer."""
    retention: str = field(default="15d", metadata=_duration("15d"))
    """How long Prometheus keeps samples (its data lives on the pod: a restart starts empty)."""
    trainer_metrics_port: int = field(
        default=9464,
        metadata={"check": (lambda v: 1024 <= v <= 65535, "is not a usable port", "use a port like 9464")},
    )
    """Port of the trainer's Prometheus endpoint in the training pods."""
    grafana_admin_user: str = "admin"
    """Grafana's admin user name (its password is generated into the grafana-admin Secret on first install)."""
    grafana_admin_secret: str | None = None
    """An existing Secret (keys admin-user and admin-password) in the monitoring namespace to take Grafana's
    admin account from, instead of the generated one."""
    operator_selector_labels: dict[str, str] = field(default_factory=dict)
    """Labels the ServiceMonitor/PodMonitor objects carry so the existing Prometheus selects them
    (kube-prometheus-stack selects release: <its release name>)."""
    operator_prometheus: str = field(default="monitoring/prometheus-operated:9090", metadata=_service_check())
    """The Prometheus Operator's Prometheus as namespace/service:port (Grafana's data source, monitor open,
    job report), when the cluster runs the operator."""
    cloudwatch_addon_version: str | None = None
    """Version of the amazon-cloudwatch-observability EKS add-on (default: the one EKS picks for the cluster)."""

    def validate(self, config: Config) -> None:
        """Refuse a scrape interval longer than the retention and a trainer port that clashes with the exporter's."""
        if parse_duration(self.scrape_interval) >= parse_duration(self.retention):
            raise ConfigError(
                "monitoring.scrape_interval",
                f"{self.scrape_interval} is not shorter than monitoring.retention ({self.retention})",
                "scrape more often than samples are kept, e.g. 15s with 15d",
            )
        if self.trainer_metrics_port == 9400:
            raise ConfigError(
                "monitoring.trainer_metrics_port", "9400 is the DCGM exporter's port", "use another port, like 9464"
            )


def settings_of(config: Config) -> MonitoringSettings:
    """The ``monitoring`` section of ``config`` (its defaults when the section was not registered)."""
    section = config.sections.get(SECTION)
    return section if isinstance(section, MonitoringSettings) else MonitoringSettings()
