"""The package is a plugin: its entry point loads, ``fsdp-sdk plugins`` lists the backend, and its settings
section is known to ``config show``."""

from __future__ import annotations

import json
from importlib.metadata import entry_points

import pytest

from fsdp_sdk.plugins import ENTRY_POINT_GROUP, reset_plugins
from fsdp_sdk_terraform import plugin


@pytest.fixture
def cli_env(tmp_path, monkeypatch: pytest.MonkeyPatch):
    import os

    monkeypatch.chdir(tmp_path)
    for name in list(os.environ):
        if name.startswith(("FSDP_SDK_", "AWS_")):
            monkeypatch.delenv(name)
    monkeypatch.setenv("FSDP_SDK_STATE_DIR", str(tmp_path / "state"))
    reset_plugins()
    yield
    reset_plugins()


def _cli(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    from fsdp_sdk.cli import main

    with pytest.raises(SystemExit) as exit_info:
        main(list(args))
    out, err = capsys.readouterr()
    return int(exit_info.value.code or 0), out, err


def test_the_entry_point_loads_the_plugin_module() -> None:
    (found,) = [ep for ep in entry_points(group=ENTRY_POINT_GROUP) if ep.name == "terraform"]
    assert found.value == "fsdp_sdk_terraform.plugin" and found.load() is plugin


def test_fsdp_sdk_plugins_lists_the_backend(cli_env, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = _cli(capsys, "plugins", "--json")
    assert code == 0, err
    listed = json.loads(out)
    (backend,) = [b for b in listed["backends"] if b["name"] == "terraform"]
    assert backend["plugin"] == "terraform" and backend["description"].startswith("EKS GPU clusters")
    (entry,) = [p for p in listed["plugins"] if p["name"] == "terraform"]
    assert entry["distribution"].replace("_", "-") == "fsdp-sdk-terraform" and entry["status"] == "ok"


def test_config_show_has_the_terraform_section(cli_env, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = _cli(capsys, "config", "show", "--json", "--set", "terraform.lock_timeout_s=30")
    assert code == 0, err
    section = json.loads(out)["terraform"]
    assert section["lock_timeout_s"] == 30 and section["binary"] == "terraform" and section["state_bucket"] is None


def test_a_bad_setting_is_one_line_exit_2(cli_env, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = _cli(capsys, "config", "show", "--set", "terraform.lock_timeout_s=soon")
    assert code == 2 and out == ""
    assert err.strip().splitlines() == [err.strip()] and err.startswith("Error: terraform.lock_timeout_s")
