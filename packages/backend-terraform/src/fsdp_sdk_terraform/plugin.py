"""The plugin module (entry point ``terraform`` in group ``fsdp_sdk``): the backend, its settings, its checks.

It imports the backend only when a command needs it, so ``fsdp-sdk --help`` and ``config show`` stay fast.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from fsdp_sdk.hookspecs import hookimpl

if TYPE_CHECKING:
    from fsdp_sdk.backends.base import BackendRegistry
    from fsdp_sdk.config import SettingsRegistry
    from fsdp_sdk.preflight import PreflightResult
    from fsdp_sdk.resolved import Resolved


@hookimpl
def fsdp_sdk_register_backends(registry: BackendRegistry) -> None:
    """Register the ``terraform`` backend (imported on first use)."""
    registry.add_lazy("terraform", "fsdp_sdk_terraform.backend:TerraformBackend")


@hookimpl
def fsdp_sdk_register_settings(registry: SettingsRegistry) -> None:
    """Register the ``terraform`` settings section."""
    from fsdp_sdk_terraform.settings import SECTION, TerraformSettings

    registry.add(SECTION, TerraformSettings)


@hookimpl
def fsdp_sdk_preflight(action: str, resolved: Resolved) -> list[PreflightResult]:
    """The terraform binary, AWS and state backend checks before ``up``, when ``terraform`` is the configured backend."""
    config = resolved.config
    if config.cluster.backend != "terraform" or action != "up":
        return []  # quotas, zones and reservations concern creating or changing the cluster, not its jobs
    from fsdp_sdk_terraform.preflight import terraform_preflight

    return terraform_preflight(config, resolved.instance)
