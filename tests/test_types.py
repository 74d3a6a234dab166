"""The tree passes mypy with the settings in the root pyproject.toml ([tool.mypy]): strict on the public API."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import tomllib

ROOT = Path(__file__).resolve().parents[1]


def _mypy_settings() -> dict[str, Any]:
    with (ROOT / "pyproject.toml").open("rb") as f:
        return tomllib.load(f)["tool"]["mypy"]


def _strict_override() -> dict[str, Any]:
    (override,) = [o for o in _mypy_settings()["overrides"] if "fsdp_sdk.client" in o["module"]]
    return override


@pytest.mark.timeout(300)  # under a minute from a cold cache on 2 cores, seconds with .mypy_cache
def test_mypy_finds_nothing():
    proc = subprocess.run(
        [sys.executable, "-m", "mypy", "--config-file", str(ROOT / "pyproject.toml"), "--no-color-output"],
        capture_output=True,
        text=True,
        cwd=ROOT,
    )
    output = proc.stdout + proc.stderr
    assert proc.returncode == 0, output
    # a module named in an override that no longer exists (a rename) would silently lose its settings
    assert "unused section" not in output, output


def test_the_public_api_override_sets_every_per_module_flag_of_strict():
    """The override spells out what ``--strict`` turns on, as mypy itself lists it: a mypy upgrade that adds a
    strict flag fails here until the flag is added to the override."""
    from mypy.main import define_options
    from mypy.options import PER_MODULE_OPTIONS

    _, _, strict_flags = define_options()
    settings, override = _mypy_settings(), _strict_override()
    per_module = {dest: value for dest, value in strict_flags if dest in PER_MODULE_OPTIONS}
    # set in the override, or for every module in [tool.mypy]
    assert {dest: override.get(dest, settings.get(dest)) for dest in per_module} == per_module
    # the rest of --strict can only be set for the whole run
    global_only = {dest: value for dest, value in strict_flags if dest not in PER_MODULE_OPTIONS}
    assert {dest: settings.get(dest) for dest in global_only} == global_only
