"""``launch``'s pure parts: the image's content tag, and the plan on the local backend (which costs nothing)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from click.testing import CliRunner

from fsdp_sdk.k8s.image import content_tag


def _trainer(tmp_path: Path) -> Path:
    import fsdp_trainer

    source = Path(fsdp_trainer.__file__).resolve().parents[2]
    target = tmp_path / "trainer"
    shutil.copytree(source / "src", target / "src", ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copy2(source / "pyproject.toml", target / "pyproject.toml")
    return target


def test_the_content_tag_follows_the_build_context_only(tmp_path: Path) -> None:
    trainer = _trainer(tmp_path)
    tag = content_tag(trainer)
    assert tag.startswith("src-") and len(tag) == 20 and content_tag(trainer) == tag
    cache = trainer / "src" / "fsdp_trainer" / "__pycache__"
    cache.mkdir(exist_ok=True)
    (cache / "x.cpython-311.pyc").write_bytes(b"\0")  # not copied into the context: same tag
    assert content_tag(trainer) == tag
    assert content_tag(trainer, {"EFA_INSTALLER_VERSION": "1.38.0"}) != tag  # the Dockerfile changed
    module = trainer / "src" / "fsdp_trainer" / "__init__.py"
    module.write_text(module.read_text() + "\n# changed\n")
    assert content_tag(trainer) != tag


def test_local_launch_plan_costs_nothing_and_changes_nothing(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from fsdp_sdk.cli import cli

    monkeypatch.setenv("FSDP_SDK_STATE_DIR", str(tmp_path / "state"))
    monkeypatch.chdir(tmp_path)
    result = CliRunner().invoke(
        cli, ["launch", "--backend", "local", "--preset", "tiny", "--steps", "5", "--dry-run", "--json", "--down"]
    )
    assert result.exit_code == 0, result.output
    plan = json.loads(result.output)
    assert plan["local"] is True and plan["hourly_cost_usd"] == 0.0 and plan["train_steps"] == 5
    assert plan["steps"][-1] == "stop etcd and remove the cluster's state (down)"
    assert plan["image"] is None and plan["build"] is False
    assert not (tmp_path / "state" / "local").exists()  # nothing started, nothing written
    text = CliRunner().invoke(cli, ["launch", "--backend", "local", "--preset", "tiny", "--dry-run"])
    assert "Cost: local (this machine; nothing billed)" in text.output and "(dry run: nothing changed)" in text.output
