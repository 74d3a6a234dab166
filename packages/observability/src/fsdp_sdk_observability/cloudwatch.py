"""CloudWatch Container Insights through the Amazon CloudWatch Observability EKS add-on.

The add-on (``amazon-cloudwatch-observability``) installs the CloudWatch agent and Fluent Bit
on every node. Its permissions come through EKS Pod Identity, which AWS recommends for add-on
versions 3.1.0 and later: a role only the agent's service account (``cloudwatch-agent`` in
``amazon-cloudwatch``) can assume, with ``CloudWatchAgentServerPolicy``; this needs the
``eks-pod-identity-agent`` add-on, enabled first when missing. See
:mod:`fsdp_sdk.aws.addons` for why not the node role. Container Insights is billed per
observation, so this component is installed only when named
(``fsdp-sdk monitor install cloudwatch``, or ``observability.components``).

One DCGM client per GPU: only one process can hold DCGM's profiling counters (``DCGM_FI_PROF_*``: SM and
tensor activity, DRAM) on a GPU at a time. The observability package's own ``dcgm-exporter`` serves them (to
Prometheus and the training dashboard, at the scrape interval the trainer's MFU plots are read at). When it
is installed beside the add-on, the add-on is configured with ``accelerated_compute_metrics: false``, so its
agent collects no NVIDIA GPU metrics and the add-on runs no DCGM exporter of its own; Container Insights'
cluster, node and pod metrics and the container logs stay on.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from fsdp_sdk.aws.arn import partition
from fsdp_sdk.monitoring import EksAddon, MonitoringComponent

from .settings import settings_of

if TYPE_CHECKING:
    from fsdp_sdk.config import Config

__all__ = ["ADDON", "NAME", "addon_configuration", "cloudwatch_component"]

NAME = "cloudwatch"
#: The EKS add-on's name.
ADDON = "amazon-cloudwatch-observability"


def addon_configuration(*, dcgm_exporter_installed: bool) -> dict[str, Any] | None:
    """The add-on's configuration values: GPU metrics off where the observability package's exporter serves them.

    ``agent.config`` replaces the agent's whole default configuration, so it restates the Container Insights
    part (enhanced observability on) with ``accelerated_compute_metrics`` off; container logs stay on.
    """
    if not dcgm_exporter_installed:
        return None
    kubernetes = {"enhanced_container_insights": True, "accelerated_compute_metrics": False}
    return {
        "agent": {"config": {"logs": {"metrics_collected": {"kubernetes": kubernetes}}}},
        "containerLogs": {"enabled": True},
    }


def cloudwatch_component(config: Config) -> MonitoringComponent:
    """The ``cloudwatch`` component: the EKS add-on with its Pod Identity role (no Kubernetes objects of ours)."""
    cluster = config.cluster.name
    role = f"fsdp-sdk-{cluster}-cloudwatch-agent"
    if len(role) > 64:  # IAM's limit: keep the start and a stable end
        role = f"fsdp-sdk-{cluster[: 64 - len('fsdp-sdk--cw-agent')]}-cw-agent"
    selected = config.observability.components
    dcgm_beside = not selected or "dcgm-exporter" in selected
    configuration = addon_configuration(dcgm_exporter_installed=dcgm_beside)
    return MonitoringComponent(
        name=NAME,
        description="Amazon CloudWatch Observability EKS add-on (Container Insights; billed by AWS)",
        objects=[],
        eks_addon=EksAddon(
            name=ADDON,
            service_account="cloudwatch-agent",
            namespace="amazon-cloudwatch",
            policy_arns=[f"arn:{partition(config.cluster.region)}:iam::aws:policy/CloudWatchAgentServerPolicy"],
            role_name=role,
            version=settings_of(config).cloudwatch_addon_version,
            configuration=configuration,
            needs=["eks-pod-identity-agent"],
        ),
        default=False,
    )
