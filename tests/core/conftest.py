"""Fixtures of the core tests: an isolated state directory and working directory per test, the CLI in
process (click's CliRunner) and as the installed console script, and the example plugin installed."""

from __future__ import annotations

import importlib
import os
import shutil
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from click.testing import CliRunner, Result

from fsdp_sdk.cli import cli
from fsdp_sdk.plugins import reset_plugins

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE_PLUGIN = ROOT / "examples" / "fsdp-sdk-plugin-b200"
#: The console script installed next to this interpreter (the virtualenv's bin/).
FSDP_SDK = str(Path(sys.executable).with_name("fsdp-sdk"))


@pytest.fixture(autouse=True)
def isolated(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """Every test gets its own state directory, a working directory without a .env, no FSDP_SDK_* variables
    from the outer environment, and a fresh plugin set."""
    for name in list(os.environ):
        if name.startswith("FSDP_SDK_"):
            monkeypatch.delenv(name)
    monkeypatch.setenv("FSDP_SDK_STATE_DIR", str(tmp_path / "state"))
    work = tmp_path / "work"
    work.mkdir()
    monkeypatch.chdir(work)
    reset_plugins()
    cli._plugin_commands = None
    yield
    reset_plugins()
    cli._plugin_commands = None


@pytest.fixture
def state_dir(tmp_path: Path) -> Path:
    """``cluster.state_dir`` of the test (``$FSDP_SDK_STATE_DIR``); not created until something writes state."""
    return tmp_path / "state"


@pytest.fixture
def work_dir(tmp_path: Path) -> Path:
    """The current directory of the test (where a default ``.env`` would be read)."""
    return tmp_path / "work"


@pytest.fixture
def invoke() -> Callable[..., Result]:
    """Run the CLI in process: ``invoke("up", "--dry-run")`` returns click's Result (exit_code, stdout, stderr)."""
    runner = CliRunner()

    def run(*args: str) -> Result:
        return runner.invoke(cli, list(args), prog_name="fsdp-sdk")

    return run


def run_cli(*args: str, env: dict[str, str] | None = None, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    """Run the installed ``fsdp-sdk`` console script in a subprocess (environment and cwd of the test)."""
    return subprocess.run(
        [FSDP_SDK, *args], capture_output=True, text=True, timeout=timeout, env={**os.environ, **(env or {})}
    )


@pytest.fixture(scope="session")
def example_plugin() -> Path:
    """The example plugin distribution, installed (editable) in this environment.

    ``scripts/setup.sh`` installs it; when a checkout skipped that, it is installed here, once.
    """
    from fsdp_sdk.entry_points import entry_points

    if not any(ep.name == "b200" for ep in entry_points("fsdp_sdk")):
        subprocess.run(
            [
                sys.executable,
                "-m",
                "pip",
                "install",
                "--quiet",
                "--no-deps",
                "--no-build-isolation",
                "-e",
                str(EXAMPLE_PLUGIN),
            ],
            check=True,
        )
        sys.path.append(str(EXAMPLE_PLUGIN / "src"))  # what the editable install's .pth adds at start-up
        importlib.invalidate_caches()
    return EXAMPLE_PLUGIN


def etcd_or_skip() -> str:
    """The etcd binary, or skip the test saying why."""
    binary = shutil.which("etcd")
    if binary is None:
        pytest.skip("etcd is not on PATH (Debian/Ubuntu: apt-get install etcd-server); the local etcd tests need it")
    return binary
