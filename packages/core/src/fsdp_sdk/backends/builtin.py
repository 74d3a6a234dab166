"""The default plugin that registers the built-in backends (today: ``local``) and their settings sections.

It imports each backend only when a hook needs it, so building the plugin
manager (which every ``fsdp-sdk`` start does) stays cheap.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from fsdp_sdk.markers import hookimpl

if TYPE_CHECKING:
    from fsdp_sdk.backends.base import BackendRegistry
    from fsdp_sdk.config import SettingsRegistry
    from fsdp_sdk.preflight import PreflightResult
    from fsdp_sdk.resolved import Resolved


@hookimpl
def fsdp_sdk_register_backends(registry: BackendRegistry) -> None:
    """Register the local backend (by import path: ``config show`` and ``--help`` never import it)."""
    registry.add_lazy("local", "fsdp_sdk.backends.local.backend:LocalBackend")


@hookimpl
def fsdp_sdk_preflight(action: str, resolved: Resolved) -> list[PreflightResult]:
    """The local backend's checks, when it is the configured backend and the action runs something here."""
    config = resolved.config
    if config.cluster.backend != "local" or action == "submit":
        return []
    from fsdp_sdk.backends.local import local_preflight

    return local_preflight(config)


@hookimpl
def fsdp_sdk_register_settings(registry: SettingsRegistry) -> None:
    """The ``local`` section (:class:`~fsdp_sdk.backends.local.settings.LocalSettings`) and the ``code`` section
    (:class:`~fsdp_sdk.user_code.CodeSettings`: your own script, module or function, on every backend)."""
    from fsdp_sdk.backends.local.settings import LocalSettings
    from fsdp_sdk.user_code import CodeSettings

    registry.add("local", LocalSettings)
    registry.add("code", CodeSettings)
