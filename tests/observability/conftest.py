"""Fixtures of the observability tests: the plugin registered, configurations, the loopback API server."""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from fsdp_sdk.config.resolution import resolve
from k8s.conftest import PYTORCHJOB_CRD, TRAINJOB_CRD
from k8s.fake_apiserver import BUILTIN_RESOURCES, FakeApiServer, Resource, schema_validators

#: The Prometheus Operator's kinds, served by the fake API server when a test says the cluster runs the operator.
OPERATOR_RESOURCES = (
    Resource("monitoring.coreos.com", "v1", "ServiceMonitor", "servicemonitors"),
    Resource("monitoring.coreos.com", "v1", "PodMonitor", "podmonitors"),
)


@pytest.fixture
def plugins() -> Iterator[Any]:
    """The process-wide plugin set with only the built-in plugins and this package's plugin."""
    import fsdp_sdk_observability.plugin as plugin
    from fsdp_sdk.plugins import get_plugins, reset_plugins

    previous = os.environ.get("FSDP_SDK_DISABLE_PLUGIN_AUTOLOAD")
    os.environ["FSDP_SDK_DISABLE_PLUGIN_AUTOLOAD"] = "1"
    reset_plugins()
    loaded = get_plugins()
    loaded.register(plugin, name="observability")
    yield loaded
    reset_plugins()
    if previous is None:
        os.environ.pop("FSDP_SDK_DISABLE_PLUGIN_AUTOLOAD", None)
    else:
        os.environ["FSDP_SDK_DISABLE_PLUGIN_AUTOLOAD"] = previous


@pytest.fixture
def make_config(plugins: Any, tmp_path: Path) -> Callable[..., Any]:
    """``make_config({"observability.enabled": True, ...})``: a resolved configuration with the plugin's section."""
    from fsdp_sdk.config import load_config

    def make(overrides: dict[str, Any] | None = None) -> Any:
        settings = {
            "cluster.state_dir": str(tmp_path / "state"),
            "observability.enabled": True,
            "job.registry": "123456789012.dkr.ecr.us-west-2.amazonaws.com",
            **(overrides or {}),
        }
        config = load_config(None, None, settings, environ={}, read_default_env_file=False, sections=plugins.settings)
        return resolve(config, plugins, validate_trainer=False)

    return make


@pytest.fixture
def isolated(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, plugins: Any) -> Path:
    """An empty working directory, no FSDP_SDK_* / AWS_* / KUBECONFIG from outside, state under tmp_path."""
    monkeypatch.chdir(tmp_path)
    for name in list(os.environ):
        if name.startswith(("FSDP_SDK_", "AWS_")) or name == "KUBECONFIG":
            monkeypatch.delenv(name)
    monkeypatch.setenv("FSDP_SDK_DISABLE_PLUGIN_AUTOLOAD", "1")
    monkeypatch.setenv("FSDP_SDK_STATE_DIR", str(tmp_path / "state"))
    return tmp_path


def _validators(operator: bool) -> dict:
    from .schemas import operator_validators

    crds = [p if p.exists() else None for p in (PYTORCHJOB_CRD, TRAINJOB_CRD)]
    validators = schema_validators(*crds)
    if operator:
        validators.update(operator_validators())
    return validators


@pytest.fixture
def apiserver() -> Iterator[FakeApiServer]:
    """A loopback API server (no Prometheus Operator) validating every body against the real schemas."""
    with FakeApiServer(_validators(False)) as server:
        yield server


@pytest.fixture
def operator_apiserver() -> Iterator[FakeApiServer]:
    """A loopback API server that also serves the Prometheus Operator's ServiceMonitor and PodMonitor."""
    with FakeApiServer(_validators(True), resources=[*BUILTIN_RESOURCES, *OPERATOR_RESOURCES]) as server:
        yield server


@pytest.fixture(scope="session")
def pytorchjob_crd() -> Path:
    """The Training Operator's PyTorchJob CRD from ../shared/schemas (skipped without it)."""
    if not PYTORCHJOB_CRD.exists():
        pytest.skip(
            f"{PYTORCHJOB_CRD.name} not found at ../shared/schemas/ (the shared schemas sit beside the project root)"
        )
    return PYTORCHJOB_CRD
