"""The ``eksctl`` plugin: the backend, its settings section and its preflight checks.

Loaded through the entry point ``eksctl = "fsdp_sdk_eksctl.plugin"`` (group ``fsdp_sdk``). It imports
nothing heavy: the backend module is registered by import path and loaded only when a command needs
it, so ``fsdp-sdk --help`` and ``config show`` stay fast.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from fsdp_sdk import hookimpl

if TYPE_CHECKING:
    from fsdp_sdk.backends.base import BackendRegistry
    from fsdp_sdk.config import SettingsRegistry
    from fsdp_sdk.preflight import PreflightResult
    from fsdp_sdk.resolved import Resolved

BACKEND_NAME = "eksctl"


@hookimpl
def fsdp_sdk_register_backends(registry: BackendRegistry) -> None:
    """Register the ``eksctl`` backend (imported on first use)."""
    registry.add_lazy(BACKEND_NAME, "fsdp_sdk_eksctl.backend:EksctlBackend")


@hookimpl
def fsdp_sdk_register_settings(registry: SettingsRegistry) -> None:
    """Add the ``eksctl`` settings section (:class:`~fsdp_sdk_eksctl.settings.EksctlSettings`)."""
    from fsdp_sdk_eksctl.settings import EksctlSettings

    registry.add("eksctl", EksctlSettings)


@hookimpl
def fsdp_sdk_preflight(action: str, resolved: Resolved) -> list[PreflightResult]:
    """The backend's checks (tools, then AWS) before ``up``, when ``cluster.backend`` is ``eksctl``."""
    config = resolved.config
    if config.cluster.backend != BACKEND_NAME or action != "up":
        return []  # quotas, zones and reservations concern creating or changing the cluster, not its jobs
    from fsdp_sdk_eksctl.preflight import eksctl_preflight

    return eksctl_preflight(config, resolved.instance)
