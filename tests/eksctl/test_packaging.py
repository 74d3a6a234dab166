"""The package on its own: its entry point loads the plugin, the CLI starts without importing the backend or boto3,
and it installs with nothing but core into a fresh virtualenv (no torch), where ``fsdp-sdk plugins`` lists it."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import venv
from importlib.metadata import entry_points
from pathlib import Path

import pytest

import fsdp_sdk_eksctl.plugin

from .helpers import PROJECT_ROOT


def test_the_entry_point_loads_the_plugin() -> None:
    (found,) = [ep for ep in entry_points(group="fsdp_sdk") if ep.name == "eksctl"]
    assert found.value == "fsdp_sdk_eksctl.plugin" and found.dist is not None and found.dist.name == "fsdp-sdk-eksctl"
    assert found.load() is fsdp_sdk_eksctl.plugin


@pytest.mark.parametrize("args", [["--help"], ["config", "show", "--backend", "eksctl"]])
def test_the_cli_starts_without_the_backend_module(args: list[str], tmp_path: Path) -> None:
    code = (
        "import sys\n"
        "from fsdp_sdk.cli import main\n"
        "try:\n"
        f"    main({args!r})\n"
        "except SystemExit as exit:\n"
        "    assert not exit.code, exit.code\n"
        "loaded = [m for m in ('fsdp_sdk_eksctl.backend', 'boto3', 'botocore') if m in sys.modules]\n"
        "print('LOADED', ','.join(loaded))\n"
    )
    env = {k: v for k, v in os.environ.items() if not k.startswith("FSDP_SDK_")}
    done = subprocess.run(
        [sys.executable, "-c", code], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip().splitlines()[-1] == "LOADED"
    if args[0] == "config":
        assert "eksctl:" in done.stdout and "gpu_nodegroup: gpu" in done.stdout


@pytest.fixture(scope="session")
def fresh_venv(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One virtualenv per session with only packages/core and packages/backend-eksctl installed (no torch)."""
    work = tmp_path_factory.mktemp("eksctl-venv")
    root = work / "venv"
    venv.EnvBuilder(with_pip=True).create(root)
    sources = []
    for member in ("packages/core", "packages/backend-eksctl"):  # built from copies: no build/ in the checkout
        sources.append(work / Path(member).name)
        shutil.copytree(
            PROJECT_ROOT / member, sources[-1], ignore=shutil.ignore_patterns("build", "*.egg-info", "__pycache__")
        )
    python = root / "bin" / "python"
    done = subprocess.run(
        [
            str(python),
            "-m",
            "pip",
            "install",
            "--disable-pip-version-check",
            "-q",
            "--no-compile",  # byte-compiling botocore's thousands of files is most of the install time
            *map(str, sources),
        ],
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return root


@pytest.mark.slow
def test_the_package_installs_on_its_own_and_shows_in_fsdp_sdk_plugins(fresh_venv: Path, tmp_path: Path) -> None:
    python = fresh_venv / "bin" / "python"
    assert subprocess.run([str(python), "-c", "import torch"], capture_output=True).returncode != 0
    env = {k: v for k, v in os.environ.items() if not k.startswith(("FSDP_SDK_", "PYTHON", "VIRTUAL_ENV"))}
    done = subprocess.run(
        [str(fresh_venv / "bin" / "fsdp-sdk"), "plugins"],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    rows = [line.split() for line in done.stdout.splitlines()]
    plugin_row = next(row for row in rows if row[:1] == ["eksctl"] and len(row) > 4 and row[3] == "ok")
    assert plugin_row[4:] == ["preflight,", "register_backends,", "register_settings"], done.stdout
    assert any(row[:3] == ["eksctl", "eksctl", "Amazon"] for row in rows), done.stdout
