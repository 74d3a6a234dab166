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


_LOADED = """
import sys
from fsdp_sdk.cli import main
try:
    main(sys.argv[2:])
except SystemExit:
    pass
with open(sys.argv[1], "w") as out:
    out.write("\\n".join(sorted(sys.modules)))
"""


def loaded_modules(*args: str, env: dict[str, str] | None = None) -> set[str]:
    """Every module in ``sys.modules`` once the CLI has run ``args`` (in a fresh interpreter, as the console script
    runs it). Unlike ``-X importtime``, this sees the modules imported through ``importlib.import_module`` too: the
    commands and the plugins."""
    import os
    import tempfile

    with tempfile.TemporaryDirectory() as where:
        path = os.path.join(where, "modules")
        subprocess.run(
            [sys.executable, "-c", _LOADED, path, *args], capture_output=True, text=True, env=env, check=False
        )
        with open(path) as handle:
            return set(handle.read().split())


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


#: Modules ``--help`` used to import and need not: the configuration (the ``--set`` option's callback imported it
#: on every command line), each command's module (their one-line help is a table), difflib, importlib.resources.
NOT_FOR_HELP = {
    "fsdp_sdk.config",
    "fsdp_sdk.grammar",
    "fsdp_sdk.client",
    "pathlib",
    "difflib",
    "importlib.resources",
    "zipfile",
    *(f"fsdp_sdk.cli.{name}" for name in ("run", "runs", "up", "job", "estimate", "bench", "completion", "config")),
}


def test_help_imports_neither_the_configuration_nor_the_commands() -> None:
    modules = loaded_modules("--help")
    assert "fsdp_sdk.plugins" in modules, "the importtime output was not parsed"
    assert not modules & NOT_FOR_HELP, sorted(modules & NOT_FOR_HELP)


def test_config_show_imports_no_command_but_its_own_and_no_difflib_or_resources() -> None:
    modules = loaded_modules("config", "show")
    assert "fsdp_sdk.cli.config" in modules, "the module list was not read"
    unneeded = {"difflib", "importlib.resources", "zipfile", "tempfile", "fsdp_sdk.cli.run", "fsdp_sdk.cli.job"}
    assert not modules & unneeded, sorted(modules & unneeded)


def test_the_short_help_table_is_each_command_s_own() -> None:
    """``--help`` lists the built-in commands from :data:`fsdp_sdk.cli.SHORT_HELP` without importing them."""
    import importlib

    from fsdp_sdk.cli import COMMANDS, SHORT_HELP

    assert set(SHORT_HELP) == set(COMMANDS), "a built-in command without its line in SHORT_HELP"
    for name, target in COMMANDS.items():
        module, _, attribute = target.partition(":")
        assert getattr(importlib.import_module(module), attribute).short_help == SHORT_HELP[name], name


def test_a_cold_entry_point_cache_is_written_once(tmp_path) -> None:
    """A fresh HOME: the first command scans the distributions and writes the cache, the next one reads it."""
    import json
    import os

    env = {**os.environ, "XDG_CACHE_HOME": str(tmp_path / "cache")}
    env.pop("FSDP_SDK_NO_CACHE", None)
    for _ in range(2):
        result = subprocess.run([FSDP_SDK, "--help"], capture_output=True, text=True, env=env, check=False)
        assert result.returncode == 0 and "Commands:" in result.stdout, result.stderr[-2000:]
    cache = json.loads((tmp_path / "cache" / "fsdp-sdk" / "entry-points.json").read_text())
    assert cache["version"] == 1 and cache["dirs"]
