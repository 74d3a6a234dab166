"""The benchmark reports hold together: every link resolves, every report the trainer cites exists, every report says
how it was measured, and the trainer's docs say what options do rather than when they were measured."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
BENCH = ROOT / "bench"
TRAINER = ROOT / "packages" / "trainer"
DOCS = [
    BENCH / "README.md",
    *sorted((BENCH / "reports").glob("*.md")),
    TRAINER / "README.md",
    TRAINER / "src" / "fsdp_trainer" / "experimental" / "README.md",
]
LINK = re.compile(r"\]\(([^)#\s]+)(?:#[^)]*)?\)")


@pytest.mark.parametrize("doc", DOCS, ids=lambda p: str(p.relative_to(ROOT)))
def test_relative_links_resolve(doc):
    for target in LINK.findall(doc.read_text()):
        if "://" in target:
            continue
        assert (doc.parent / target).exists(), f"{doc.relative_to(ROOT)} links to {target}, which does not exist"


def test_every_cited_report_exists():
    cited = set()
    sources = [*TRAINER.rglob("*.py"), *TRAINER.rglob("*.md"), *BENCH.glob("*.py"), BENCH / "README.md"]
    for path in sources:
        cited |= set(re.findall(r"bench/reports/([\w.-]+\.md)", path.read_text()))
    assert cited, "the trainer cites its reports"
    missing = sorted(name for name in cited if not (BENCH / "reports" / name).is_file())
    assert not missing


@pytest.mark.parametrize("report", sorted((BENCH / "reports").glob("*.md")), ids=lambda p: p.name)
def test_each_report_names_its_setting_and_command(report):
    assert re.fullmatch(r"\d{4}-\d\d-\d\d-[a-z0-9.-]+\.md", report.name), "reports/<date>-<model>-<hardware>-<claim>.md"
    text = report.read_text()
    assert text.startswith("# ") and "**Claim.**" in text
    for field in ("Hardware", "Date", "Version", "Command"):
        assert re.search(rf"^- .*\b{field}", text, re.MULTILINE), f"no '- {field}...' line"


def test_raw_records_are_named_by_what_they_measure():
    """``results/<date>-<hardware>-<what>.json``, or a folder of one measurement's records
    (``results/<date>-<hardware>-<what>/``, as ``bench/convergence.py run`` writes them)."""
    for record in (BENCH / "results").iterdir():
        suffix = "" if record.is_dir() else r"\.json"
        assert re.fullmatch(rf"\d{{4}}-\d\d-\d\d-(h100|h200|h200x2|cpu)-[a-z0-9.-]+{suffix}", record.name), record.name
        assert not re.search(r"-s\d+-|call[a-e]\b", record.name.lower()), record.name


def test_the_trainer_says_what_options_do_not_when_they_were_measured():
    diary = re.compile(r"\bsession \d+|\bcall [A-E]\b|RESULTS\.md")
    for path in [*TRAINER.rglob("*.py"), *TRAINER.rglob("*.md"), ROOT / "docs" / "design.md"]:
        for i, line in enumerate(path.read_text().splitlines(), 1):
            assert not diary.search(line), f"{path.relative_to(ROOT)}:{i}: {line.strip()}"
