"""``scripts/setup.sh``: a line per stage, test-only system packages only for the test command, how to call the CLI
at the end; the README's test command is the one CI runs. Run with ``--dry-run`` (apt-get is never run here)."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from .conftest import ROOT

SETUP = ROOT / "scripts" / "setup.sh"


def _readme_commands() -> list[str]:
    block = (ROOT / "README.md").read_text().split("```bash\n", 1)[1].split("```", 1)[0]
    return [line.strip() for line in block.splitlines() if line.strip()]


def test_the_readme_test_command_is_what_ci_runs() -> None:
    main_job, tests = _readme_commands()[:2]
    ci = [line.strip() for line in (ROOT / ".ci" / "run").read_text().splitlines() if line.startswith("scripts/")]
    assert ci == [tests]
    assert tests.startswith("scripts/setup.sh --test && ")
    assert main_job.startswith("scripts/setup.sh && .venv/bin/fsdp-sdk run ")  # no test-only packages


@pytest.fixture
def bare_path(tmp_path: Path) -> dict[str, str]:
    """A PATH with the script's own tools, no etcd/promtool/chromium, and an apt-get and sudo that fail if run."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "python3").symlink_to(Path(sys.executable).resolve())  # this virtualenv's, resolved: the base one
    for tool in ("bash", "dirname", "id", "sed"):
        found = shutil.which(tool)
        assert found is not None, tool
        (bin_dir / tool).symlink_to(found)
    for tool in ("apt-get", "sudo"):
        (bin_dir / tool).write_text(f"#!/bin/sh\necho '{tool} was run' >&2\nexit 99\n")
        (bin_dir / tool).chmod(0o755)
    return {"PATH": str(bin_dir), "HOME": str(tmp_path), "VENV": str(tmp_path / "venv")}


def _dry_run(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(SETUP), "--dry-run", *args], capture_output=True, text=True, env=env, cwd=ROOT, timeout=60, check=False
    )


def test_stages_and_test_only_packages(bare_path: dict[str, str]) -> None:
    plain = _dry_run(bare_path)
    assert plain.returncode == 0, plain.stderr
    lines = plain.stderr.splitlines()
    assert "was run" not in plain.stderr and plain.stdout == ""
    assert [re.match(r"setup: \[(\d)/4\]", line)[1] for line in lines[:-1]] == ["1", "1", "2", "2", "3", "3", "4", "4"]  # type: ignore[index]
    assert "would install etcd-server (apt-get)" in plain.stderr
    assert "prometheus" not in lines[1] and "chromium" not in lines[1]  # only the tests need them
    assert "scripts/setup.sh --test" in lines[0]
    venv = bare_path["VENV"]
    assert (
        lines[-1]
        == f"setup: then: run the CLI as {venv}/bin/fsdp-sdk, or put it on PATH for this shell: source {venv}/bin/activate"
    )

    tests = _dry_run(bare_path, "--test")
    assert tests.returncode == 0, tests.stderr
    assert "system packages for etcd, promtool, chromium" in tests.stderr
    assert "would install etcd-server prometheus chromium (apt-get)" in tests.stderr


def test_a_stage_line_says_how_long_it_took(bare_path: dict[str, str]) -> None:
    present = Path(bare_path["PATH"]) / "etcd"
    present.write_text("#!/bin/sh\n")
    present.chmod(0o755)
    result = _dry_run(bare_path)
    assert re.search(r"^setup: \[1/4\] all present in 0:0\d \(total 0:0\d\)$", result.stderr, re.M), result.stderr


def test_unknown_arguments_are_refused(bare_path: dict[str, str]) -> None:
    result = subprocess.run(
        [str(SETUP), "--tests"], capture_output=True, text=True, env={**os.environ, **bare_path}, check=False
    )
    assert result.returncode == 2 and result.stderr.strip() == (
        "setup: unknown argument '--tests'; use --test, --dry-run or --help"
    )
