"""Fixtures of the eksctl backend tests: moto for AWS, a recording eksctl that acts on it, Stubber answers for
what moto lacks, the loopback Kubernetes API server, and a CLI with the eksctl plugin loaded."""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from k8s.fake_apiserver import FakeApiServer, schema_validators
from k8s.tools import install_fake_tools

from . import fake_eksctl
from .helpers import EKSCTL_SCHEMA, SHARED_SCHEMAS, AwsAnswers, Tools, schema_validator

PYTORCHJOB_CRD = SHARED_SCHEMAS / "kubeflow.org_pytorchjobs.yaml"
TRAINJOB_CRD = SHARED_SCHEMAS / "trainer.kubeflow.org_trainjobs.yaml"


@pytest.fixture(scope="session")
def validate_cluster_config(eksctl_schema: Path) -> Callable[[dict[str, Any]], list[str]]:
    """``validate(document) -> error lines`` against the real eksctl ClusterConfig schema (../shared/schemas)."""
    return schema_validator(eksctl_schema)


@pytest.fixture
def eksctl_env(aws: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """An empty working directory, no FSDP_SDK_* from outside, a state directory under tmp_path (returned), and
    the process-wide plugins: the built-in ones, the eksctl plugin and the example B200 plugin (no autoload)."""
    import fsdp_sdk_plugin_b200
    from fsdp_sdk.plugins import get_plugins, reset_plugins
    from fsdp_sdk_eksctl import plugin

    work = tmp_path / "work"
    work.mkdir(exist_ok=True)  # tests/reliability makes it too
    monkeypatch.chdir(work)
    for name in list(os.environ):
        if name.startswith("FSDP_SDK_") or name == "KUBECONFIG":
            monkeypatch.delenv(name)
    state = tmp_path / "state"
    monkeypatch.setenv("FSDP_SDK_STATE_DIR", str(state))
    monkeypatch.setenv("FSDP_SDK_DISABLE_PLUGIN_AUTOLOAD", "1")
    reset_plugins()
    get_plugins().register(plugin, name="eksctl")
    get_plugins().register(fsdp_sdk_plugin_b200, name="b200")
    yield state
    reset_plugins()


@pytest.fixture
def tools(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Tools:
    """Recording ``eksctl`` (acting on moto), ``kubectl`` and ``aws`` first on PATH."""
    log = tmp_path / "tools.jsonl"
    bin_dir = install_fake_tools(tmp_path / "bin", log, "kubectl", "aws")
    fake_eksctl.install(bin_dir, log, EKSCTL_SCHEMA)
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    monkeypatch.delenv("FAKE_EKSCTL_FAULT", raising=False)
    return Tools(bin_dir, log)


@pytest.fixture
def answers(aws: str, monkeypatch: pytest.MonkeyPatch, stubbed: Callable[..., tuple[Any, Any]]) -> AwsAnswers:
    """Stubber-checked answers for Service Quotas, capacity reservations and EKS add-ons (moto lacks them)."""
    found = AwsAnswers()
    found.install(monkeypatch, stubbed)
    return found


@pytest.fixture
def apiserver() -> Iterator[FakeApiServer]:
    """The loopback Kubernetes API server, validating every body against the real schemas (the Kubeflow CRDs when
    ../shared/schemas has them: tests that submit jobs check for them)."""
    crds = [path if path.exists() else None for path in (PYTORCHJOB_CRD, TRAINJOB_CRD)]
    with FakeApiServer(schema_validators(*crds)) as server:
        yield server
