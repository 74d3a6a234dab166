"""The whole tree passes ruff's linter and formatter with the settings in the root pyproject.toml ([tool.ruff])."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def _ruff(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "ruff", *args, str(ROOT)], capture_output=True, text=True, cwd=ROOT)


@pytest.mark.timeout(120)
def test_ruff_finds_nothing():
    proc = _ruff("check", "--no-cache", "--output-format", "concise")
    assert proc.returncode == 0, proc.stdout + proc.stderr


@pytest.mark.timeout(120)
def test_ruff_format_changes_nothing():
    proc = _ruff("format", "--check", "--no-cache")
    assert proc.returncode == 0, "run 'ruff format .' at the repository root:\n" + proc.stdout + proc.stderr
