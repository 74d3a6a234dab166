"""Fixtures of the Kubernetes job layer tests: shared schemas, the loopback API server, a real etcd."""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

from .fake_apiserver import FakeApiServer, schema_validators

PROJECT_ROOT = Path(__file__).resolve().parents[2]
#: The CRDs in ../shared/schemas (the fixtures pytorchjob_crd and trainjob_crd of tests/conftest.py skip without them).
SCHEMAS = PROJECT_ROOT.parent / "shared" / "schemas"
PYTORCHJOB_CRD = SCHEMAS / "kubeflow.org_pytorchjobs.yaml"
TRAINJOB_CRD = SCHEMAS / "trainer-v2.3.0.trainer.kubeflow.org_trainjobs.yaml"


@pytest.fixture
def apiserver(pytorchjob_crd: Path, trainjob_crd: Path) -> Iterator[FakeApiServer]:
    """A fresh loopback API server validating every body against the real schemas."""
    with FakeApiServer(schema_validators(pytorchjob_crd, trainjob_crd)) as server:
        yield server


@pytest.fixture
def kubeconfig(apiserver: FakeApiServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A kubeconfig file for :func:`apiserver`, also exported as ``KUBECONFIG``."""
    path = apiserver.write_kubeconfig(tmp_path / "kubeconfig")
    monkeypatch.setenv("KUBECONFIG", str(path))
    return path


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@pytest.fixture(scope="session")
def etcd_endpoint(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A real etcd with the v2 API on free loopback ports (skipped when no etcd binary is installed)."""
    binary = shutil.which("etcd") or ("/usr/bin/etcd" if os.path.exists("/usr/bin/etcd") else None)
    if binary is None:
        pytest.skip("etcd is not installed (apt-get install etcd-server)")
    client, peer = free_port(), free_port()
    endpoint = f"http://127.0.0.1:{client}"
    data = tmp_path_factory.mktemp("etcd")
    process = subprocess.Popen(
        [
            binary,
            "--enable-v2=true",
            "--name",
            "test",
            "--data-dir",
            str(data / "data"),
            "--listen-client-urls",
            endpoint,
            "--advertise-client-urls",
            endpoint,
            "--listen-peer-urls",
            f"http://127.0.0.1:{peer}",
            "--initial-advertise-peer-urls",
            f"http://127.0.0.1:{peer}",
            "--initial-cluster",
            f"test=http://127.0.0.1:{peer}",
        ],
        stdout=subprocess.DEVNULL,
        stderr=open(data / "etcd.log", "wb"),  # noqa: SIM115 - etcd writes to it while it runs
    )
    try:
        deadline = time.monotonic() + 20
        while True:
            try:
                with urllib.request.urlopen(f"{endpoint}/health", timeout=1) as response:
                    if b"true" in response.read():
                        break
            except OSError:
                pass
            if process.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"etcd did not start: {(data / 'etcd.log').read_text()[-2000:]}")
            time.sleep(0.1)
        yield endpoint
    finally:
        process.terminate()
        process.wait(timeout=10)


@pytest.fixture(autouse=True)
def retry_waits(monkeypatch: pytest.MonkeyPatch) -> list[float]:
    """Retries of the job layer without waiting: the delays it asks for are recorded here instead of slept.

    Requests get 5 seconds before they count as unanswered; the leader is looked for again every second.
    """
    from fsdp_sdk.k8s import retry
    from fsdp_sdk.k8s.jobs import JobClient

    waits: list[float] = []
    monkeypatch.setattr(retry, "DEFAULT_POLICY", retry.RetryPolicy(sleep=waits.append, request_timeout=5.0))
    monkeypatch.setattr(JobClient, "leader_recheck_s", 1.0)
    return waits


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers", "cluster: runs against the real Kubernetes cluster named by KUBECONFIG (skipped without one)"
    )
    # Most jobs here have several workers and no shared storage: the rendering says so each time. The tests
    # that are about these warnings record them themselves.
    config.addinivalue_line("filterwarnings", "ignore::fsdp_sdk.k8s.render.RenderWarning")


@pytest.fixture
def isolated_cli(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """Run in an empty directory (no ./.env), with no FSDP_SDK_* / AWS_* from outside and no third-party plugins."""
    from fsdp_sdk.plugins import reset_plugins

    monkeypatch.chdir(tmp_path)
    for name in list(os.environ):
        if name.startswith(("FSDP_SDK_", "AWS_")):
            monkeypatch.delenv(name)
    monkeypatch.setenv("FSDP_SDK_DISABLE_PLUGIN_AUTOLOAD", "1")
    reset_plugins()
    yield
    reset_plugins()
