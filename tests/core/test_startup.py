"""Start-up stays light: no torch, boto3, kubernetes, yaml, rich or pydantic for --help, and a lazy package."""

from __future__ import annotations

import subprocess
import sys

import pytest

from .conftest import FSDP_SDK

HEAVY = (
    "torch",
    "boto3",
    "botocore",
    "kubernetes",
    "yaml",
    "rich",
    "pydantic",
    "numpy",
    "fsdp_trainer",
    "importlib.metadata",
)


def imported_modules(*args: str) -> set[str]:
    """Modules the console script imports for ``args`` (from ``python -X importtime``)."""
    result = subprocess.run([sys.executable, "-X", "importtime", FSDP_SDK, *args], capture_output=True, text=True)
    assert result.returncode == 0, result.stderr[-2000:]
    return {line.split("|")[-1].strip() for line in result.stderr.splitlines() if line.startswith("import time:")}


@pytest.mark.parametrize("args", [["--help"], ["up", "--help"], ["run", "--help"], ["instance-types"], ["plugins"]])
def test_no_heavy_import_at_start_up(args: list[str]) -> None:
    modules = imported_modules(*args)
    assert "click" in modules, "the importtime output was not parsed"
    heavy = sorted(m for m in modules if m.split(".")[0] in HEAVY or m in HEAVY)
    assert not heavy, f"fsdp-sdk {' '.join(args)} imports {heavy}"


def test_config_show_imports_no_torch_boto3_or_kubernetes() -> None:
    modules = imported_modules("config", "show")
    assert "fsdp_sdk.cli.output" in modules, "the importtime output was not parsed"
    assert "yaml" not in modules  # printed by fsdp_sdk.cli.output.to_yaml; PyYAML is read only for -c files
    assert not {m.split(".")[0] for m in modules} & {"torch", "boto3", "botocore", "kubernetes", "rich", "pydantic"}


def test_importing_the_package_imports_only_the_package() -> None:
    code = (
        "import sys, fsdp_sdk; before = {m for m in sys.modules if m.startswith(('fsdp_sdk', 'click', 'pluggy'))};"
        "client = fsdp_sdk.Client; print(sorted(before), client.__module__)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "['fsdp_sdk'] fsdp_sdk.client"


def test_config_show_does_not_import_the_local_backend_module() -> None:
    """The built-in backend is registered by import path: naming it in the configuration imports nothing."""
    modules = imported_modules("config", "show")
    assert "fsdp_sdk.config" in modules, "the importtime output was not parsed"
    assert "fsdp_sdk.backends.local.backend" not in modules  # only its settings section is imported
