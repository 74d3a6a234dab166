"""The reliability report (docs/RELIABILITY.md) lists exactly the suite's tests, described as they are now."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from .conftest import ROOT, parse_report, render_report

HERE = Path(__file__).parent
REPORT = ROOT / "docs" / "RELIABILITY.md"
REGENERATE = ".venv/bin/python -m pytest tests/reliability --reliability-report docs/RELIABILITY.md"


def _documented(text: str) -> dict[str, str]:
    return {f"{row['file']}::{row['id']}": row["fault"] for row in parse_report(text)}


def test_the_committed_report_lists_every_test_with_its_description(tmp_path: Path) -> None:
    catalogue = tmp_path / "catalogue.json"
    collected = subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "--collect-only",
            "-q",
            "-p",
            "no:cacheprovider",
            "-m",
            "",
            str(HERE),
            "--reliability-catalogue",
            str(catalogue),
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert collected.returncode == 0, collected.stdout[-3000:] + collected.stderr[-3000:]
    expected = {f"{row['file']}::{row['id']}": row["fault"] for row in json.loads(catalogue.read_text())}
    assert expected, "no reliability test was collected"
    documented = _documented(REPORT.read_text())
    missing = sorted(set(expected) - set(documented))
    stale = sorted(set(documented) - set(expected))
    changed = sorted(i for i in set(expected) & set(documented) if expected[i] != documented[i])
    assert not (missing or stale or changed), (
        f"docs/RELIABILITY.md is out of date (missing: {missing}, no longer tests: {stale}, described differently: "
        f"{changed}); regenerate it with: {REGENERATE}"
    )


def test_the_report_renders_one_row_per_test_grouped_by_area() -> None:
    rows = [
        {
            "id": "test_a[x]",
            "file": "test_f.py",
            "area": "Faults",
            "fault": "a | b [x]",
            "result": "passed",
            "seconds": 3.2,
            "happened": "`Error: one line`; detected in 1.0 s",
        },
        {
            "id": "test_b",
            "file": "test_f.py",
            "area": "Faults",
            "fault": "b",
            "result": "skipped",
            "seconds": 0.0,
            "happened": "skipped: no etcd",
        },
    ]
    text = render_report(rows)
    assert "## Faults (`test_f.py`)" in text
    assert _documented(text) == {"test_f.py::test_a[x]": "a | b [x]", "test_f.py::test_b": "b"}
    assert "| `Error: one line`; detected in 1.0 s | passed | 3 |" in text
    assert text.rstrip().endswith("2 tests, 0.1 minutes of test time on the machines that wrote these rows.")
    parsed = parse_report(text)
    assert [(r["happened"], r["result"], r["seconds"]) for r in parsed] == [
        ("`Error: one line`; detected in 1.0 s", "passed", 3.0),
        ("skipped: no etcd", "skipped", 0.0),
    ]
    assert render_report(parsed) == text, "a report read back renders the same"
