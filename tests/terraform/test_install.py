"""The package installs on its own: built as a wheel beside core into a fresh virtualenv (no editable
install, no workspace), it brings its Terraform configuration, and ``fsdp-sdk plugins`` lists it."""

from __future__ import annotations

import json
import subprocess
import sys
import sysconfig
import venv
from pathlib import Path

import pytest

from .conftest import PROJECT_ROOT


@pytest.mark.slow
def test_the_package_installs_into_a_fresh_virtualenv_and_shows_in_fsdp_sdk_plugins(tmp_path: Path) -> None:
    target = tmp_path / "venv"
    venv.EnvBuilder(with_pip=False).create(target)  # pip comes from this environment (pip --python)
    python = target / "bin" / "python"
    site = subprocess.run(
        [str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    # Third-party dependencies (boto3, kubernetes, python-terraform...) come from this environment's site-packages,
    # seen through a directory of links that leaves out this repository's own distributions and every .pth file.
    deps = tmp_path / "deps"
    deps.mkdir()
    for entry in Path(sysconfig.get_paths()["purelib"]).iterdir():
        if not entry.name.lower().startswith(("fsdp", "__editable__")) and entry.suffix != ".pth":
            (deps / entry.name).symlink_to(entry)
    Path(site, "deps.pth").write_text(f"{deps}\n")
    install = subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "--python",
            str(python),
            "install",
            "--no-deps",
            "--no-build-isolation",
            "--no-index",
            "--disable-pip-version-check",
            "-q",
            str(PROJECT_ROOT / "packages" / "core"),
            str(PROJECT_ROOT / "packages" / "backend-terraform"),
        ],
        capture_output=True,
        text=True,
        check=False,
    )
    assert install.returncode == 0, install.stderr
    check = subprocess.run(
        [sys.executable, "-m", "pip", "--python", str(python), "check"], capture_output=True, text=True, check=False
    )
    assert check.returncode == 0, check.stdout + check.stderr  # every declared dependency is there
    code = (
        "import fsdp_sdk_terraform, pathlib; d = fsdp_sdk_terraform.CONFIGURATION_DIR; "
        "print(d.parent.parent.name, sorted(p.name for p in d.glob('*.tf')))"
    )
    shown = subprocess.run([str(python), "-c", code], capture_output=True, text=True, check=True).stdout
    assert shown.startswith("site-packages ") and "'nodes.tf'" in shown and "'variables.tf'" in shown
    listed = subprocess.run(
        [str(target / "bin" / "fsdp-sdk"), "plugins", "--json"],
        capture_output=True,
        text=True,
        check=False,
        cwd=tmp_path,
        env={"PATH": f"{target / 'bin'}:/usr/bin:/bin", "HOME": str(tmp_path)},
    )
    assert listed.returncode == 0, listed.stderr
    data = json.loads(listed.stdout)
    assert [b["name"] for b in data["backends"]] == ["local", "terraform"]
