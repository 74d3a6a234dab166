"""docs/design.md lists every setting of the ``eksctl`` section with its default, and nothing else."""

from __future__ import annotations

import dataclasses

from fsdp_sdk_eksctl.settings import EksctlSettings

from .helpers import PROJECT_ROOT


def _design_table() -> dict[str, str]:
    """``setting -> default`` from the ``eksctl.* setting`` table of docs/design.md."""
    lines = (PROJECT_ROOT / "docs" / "design.md").read_text().splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("| eksctl.* setting |"))
    rows: dict[str, str] = {}
    for line in lines[start + 2 :]:
        if not line.startswith("|"):
            break
        names, defaults = (cell.strip().split(" / ") for cell in line.split("|")[1:3])
        rows.update(zip(names, defaults * len(names) if len(defaults) == 1 else defaults, strict=True))
    return rows


def test_the_design_table_lists_every_eksctl_setting_with_its_default() -> None:
    rows = _design_table()
    settings = EksctlSettings()
    assert sorted(rows) == sorted(f.name for f in dataclasses.fields(EksctlSettings))
    for name, default in rows.items():
        assert default == str(getattr(settings, name)), name
