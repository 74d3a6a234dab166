"""fsdp-sdk: provision GPU clusters, prepare them, and run PyTorch FSDP training on them or locally.

The public API is loaded lazily so that ``import fsdp_sdk`` (and ``fsdp-sdk --help``)
stays fast::

    from fsdp_sdk import Client

    client = Client.from_sources(config_file="cluster.yaml", overrides={"job.num_workers": 2})
    client.up()
    result = client.run(trainer_overrides={"model.preset": "tiny", "train.steps": 20})
    print(result.summary)
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

__version__ = "0.1.0"

# public name -> module that defines it
_LAZY: dict[str, str] = {
    "Client": "fsdp_sdk.client",
    "Config": "fsdp_sdk.config",
    "Secret": "fsdp_sdk.config",
    "load_config": "fsdp_sdk.config",
    "ClusterBackend": "fsdp_sdk.backends.base",
    "ClusterStatus": "fsdp_sdk.backends.base",
    "Plan": "fsdp_sdk.backends.base",
    "InstanceType": "fsdp_sdk.instance_types",
    "Resolved": "fsdp_sdk.resolved",
    "JobRef": "fsdp_sdk.runs",
    "RunResult": "fsdp_sdk.runs",
    "PreflightResult": "fsdp_sdk.preflight",
    "MonitoringComponent": "fsdp_sdk.monitoring",
    "hookimpl": "fsdp_sdk.hookspecs",
    "FsdpSdkError": "fsdp_sdk.errors",
    "ConfigError": "fsdp_sdk.errors",
    "PluginError": "fsdp_sdk.errors",
    "BackendError": "fsdp_sdk.errors",
    "KubernetesError": "fsdp_sdk.errors",
    "RunError": "fsdp_sdk.errors",
    "report": "fsdp_sdk.step_report",
}

__all__ = [
    "BackendError",
    "Client",
    "ClusterBackend",
    "ClusterStatus",
    "Config",
    "ConfigError",
    "FsdpSdkError",
    "InstanceType",
    "JobRef",
    "KubernetesError",
    "MonitoringComponent",
    "Plan",
    "PluginError",
    "PreflightResult",
    "Resolved",
    "RunError",
    "RunResult",
    "Secret",
    "__version__",
    "hookimpl",
    "load_config",
    "report",
]

if TYPE_CHECKING:
    from fsdp_sdk.backends.base import ClusterBackend, ClusterStatus, Plan
    from fsdp_sdk.client import Client
    from fsdp_sdk.config import Config, Secret, load_config
    from fsdp_sdk.errors import BackendError, ConfigError, FsdpSdkError, KubernetesError, PluginError, RunError
    from fsdp_sdk.hookspecs import hookimpl
    from fsdp_sdk.instance_types import InstanceType
    from fsdp_sdk.monitoring import MonitoringComponent
    from fsdp_sdk.preflight import PreflightResult
    from fsdp_sdk.resolved import Resolved
    from fsdp_sdk.runs import JobRef, RunResult
    from fsdp_sdk.step_report import report


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'fsdp_sdk' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_LAZY))
