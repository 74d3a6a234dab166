"""Plugin-owned configuration sections (``fsdp_sdk_register_settings``): read from every source like the core's,
with the same one-line errors, shown by ``config show``, validated by ``Config.resolved``."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

import pytest

from fsdp_sdk import Client, hookimpl
from fsdp_sdk.config import Config, Secret, SettingsRegistry
from fsdp_sdk.config.resolution import resolve
from fsdp_sdk.errors import ConfigError, PluginError
from fsdp_sdk.plugins import build_plugins, get_plugins


@dataclass
class DemoSettings:
    """Settings of the demo plugin."""

    size: int = field(default=1, metadata={"dotenv": "DEMO_SIZE"})
    """Nodes of the demo."""
    mode: Literal["fast", "safe"] = "safe"
    """How it runs."""
    zones: list[str] = field(default_factory=list)
    """Zones."""
    token: Secret | None = None
    """A secret of the demo."""
    ratio: float = field(
        default=0.5, metadata={"check": (lambda v: 0 < v <= 1, "is not in (0, 1]", "set {name} to 0.5")}
    )
    """A share."""

    def validate(self, config: Config) -> None:
        if self.mode == "fast" and self.size > config.cluster.nodes:
            raise ConfigError("demo.size", f"{self.size} is more than cluster.nodes ({config.cluster.nodes})")


class DemoPlugin:
    @hookimpl
    def fsdp_sdk_register_settings(self, registry: SettingsRegistry) -> None:
        registry.add("demo", DemoSettings)


@pytest.fixture
def demo() -> DemoPlugin:
    plugin = DemoPlugin()
    get_plugins().register(plugin, name="demo")
    return plugin


def test_every_source_sets_a_plugin_section(demo: DemoPlugin, work_dir: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (work_dir / "c.yaml").write_text("demo:\n  size: 2\n  zones: [us-west-2a]\n")
    client = Client.from_sources(plugins=get_plugins(), config_file=work_dir / "c.yaml")
    assert client.config.section("demo") == DemoSettings(size=2, zones=["us-west-2a"])
    (work_dir / ".env").write_text("DEMO_SIZE=3\nFSDP_SDK_DEMO__MODE=fast\nFSDP_SDK_DEMO__TOKEN=hunter2-canary\n")
    monkeypatch.setenv("FSDP_SDK_DEMO__RATIO", "0.25")
    client = Client.from_sources(plugins=get_plugins(), config_file=work_dir / "c.yaml", overrides={"cluster.nodes": 4})
    demo_settings = client.config.section("demo")
    assert (demo_settings.size, demo_settings.mode, demo_settings.ratio) == (3, "fast", 0.25)
    assert demo_settings.token.get_secret_value() == "hunter2-canary"
    assert client.config.origins["demo.size"].name == "DEMO_SIZE"


def test_config_show_and_set_reach_the_section(demo: DemoPlugin, invoke, work_dir: Path) -> None:
    (work_dir / ".env").write_text("FSDP_SDK_DEMO__TOKEN=hunter2-canary\n")
    result = invoke("config", "show", "--json", "--set", "demo.size=2", "--set", "cluster.nodes=3")
    assert result.exit_code == 0, result.output
    shown = json.loads(result.stdout)
    assert shown["demo"]["size"] == 2 and shown["demo"]["token"] == "**********"
    assert "hunter2-canary" not in result.output
    text = invoke("config", "show")
    assert "demo:\n  size: 1\n" in text.stdout


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (
            ("--set", "demo.size=two"),
            "demo.size (from --set): 'two' is not an integer; set demo.size to a whole number like 2",
        ),
        (("--set", "demo.mode=quick"), "demo.mode (from --set): 'quick' is not one of fast, safe"),
        (("--set", "demo.sise=2"), "demo.sise (from --set): unknown setting; did you mean demo.size?"),
        (("--set", "demo.ratio=2"), "demo.ratio (from --set): 2.0 is not in (0, 1]; set demo.ratio to 0.5"),
        (("--set", "demo.mode=fast", "--set", "demo.size=9"), "demo.size: 9 is more than cluster.nodes (2)"),
    ],
)
def test_bad_values_are_one_line_exit_2(demo: DemoPlugin, invoke, args: tuple[str, ...], message: str) -> None:
    result = invoke("config", "show", *args)
    assert result.exit_code == 2, result.output
    assert result.stderr.strip().startswith(f"Error: {message}") and len(result.stderr.strip().splitlines()) == 1


def test_a_section_of_a_plugin_not_installed_names_the_package(invoke, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("FSDP_SDK_DISABLE_PLUGIN_AUTOLOAD", "1")  # fsdp-sdk-eksctl is installed in the workspace
    monkeypatch.setenv("FSDP_SDK_EKSCTL__NODE_AMI", "x")
    result = invoke("config", "show")
    assert result.exit_code == 2
    assert result.stderr.strip() == (
        "Error: eksctl.node_ami (from environment): is a setting of the fsdp-sdk-eksctl plugin, which is not "
        "installed; pip install fsdp-sdk-eksctl"
    )


def test_the_registry_refuses_what_it_cannot_serve() -> None:
    registry = SettingsRegistry()
    registry.current_plugin = "p"
    registry.add("demo", DemoSettings)
    for name, cls, problem in [
        ("demo", DemoSettings, "already registered by plugin p"),
        ("cluster", DemoSettings, "must be a lower-case word other than cluster"),
        ("Bad-Name", DemoSettings, "must be a lower-case word"),
        ("other", dict, "must be a dataclass"),
    ]:
        with pytest.raises(PluginError, match=problem):
            registry.add(name, cls)

    @dataclass
    class NoDefault:
        size: int

    with pytest.raises(PluginError, match="needs a default"):
        registry.add("nodefault", NoDefault)


def test_a_config_built_directly_gets_the_sections_when_resolved(demo: DemoPlugin) -> None:
    plugins = build_plugins(autoload=False)
    plugins.register(DemoPlugin(), name="demo")
    resolved = resolve(Config(), plugins, validate_trainer=False)
    assert resolved.section("demo") == DemoSettings()
    with pytest.raises(
        ConfigError, match="nope: is not a settings section of an installed plugin; sections here: code, demo, local"
    ):
        resolved.section("nope")
