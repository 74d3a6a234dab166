"""The plugin system: hook documentation, default and entry-point plugins, duplicates, broken plugins."""

from __future__ import annotations

import importlib.metadata
import inspect
import json
import os
import re
import shutil
import textwrap
import time
from pathlib import Path

import pytest

import fsdp_sdk.instance_types
from fsdp_sdk import hookimpl, hookspecs
from fsdp_sdk.backends.local import LocalBackend
from fsdp_sdk.config.resolution import resolve
from fsdp_sdk.entry_points import entry_points
from fsdp_sdk.errors import PluginError
from fsdp_sdk.instance_types import InstanceType
from fsdp_sdk.plugins import DEFAULT_PLUGINS, build_plugins, get_plugins
from fsdp_sdk.testing import InstanceTypePluginConformance

from .conftest import install_distribution, run_cli

LOOKUP_HOOKS = {"fsdp_sdk_job_image"}


def _hookspecs() -> list[tuple[str, object]]:
    return [(n, f) for n, f in inspect.getmembers(hookspecs, inspect.isfunction) if n.startswith("fsdp_sdk_")]


@pytest.mark.parametrize("name, spec", _hookspecs(), ids=[n for n, _ in _hookspecs()])
def test_every_hook_is_documented(name: str, spec: object) -> None:
    doc = inspect.getdoc(spec)
    assert doc, f"{name} has no docstring"
    for parameter in inspect.signature(spec).parameters:
        assert f":param {parameter}:" in doc, f"{name} does not document {parameter}"
    firstresult = spec.fsdp_sdk_spec.get("firstresult", False)
    assert firstresult == (name in LOOKUP_HOOKS), "firstresult only for look-ups"
    assert ("Stops at first non-None result" in doc) == firstresult


def test_the_hook_groups_the_issue_asks_for_exist() -> None:
    names = {n for n, _ in _hookspecs()}
    assert {
        "fsdp_sdk_register_backends",
        "fsdp_sdk_register_instance_types",
        "fsdp_sdk_register_commands",
        "fsdp_sdk_render_job",
        "fsdp_sdk_monitoring_components",
        "fsdp_sdk_preflight",
        "fsdp_sdk_cluster_created",
        "fsdp_sdk_before_cluster_delete",
        "fsdp_sdk_job_submitted",
        "fsdp_sdk_job_finished",
    } <= names


def test_default_plugins_are_registered_like_any_plugin() -> None:
    plugins = build_plugins(autoload=False)
    infos = plugins.infos()
    assert [i.name for i in infos] == list(DEFAULT_PLUGINS)
    assert all(i.builtin and not i.broken for i in infos)
    assert plugins.backends.get("local") is LocalBackend
    assert "p5.48xlarge" in plugins.instance_types


def test_the_plugin_manager_is_built_on_first_use_and_cached() -> None:
    import fsdp_sdk.plugins as module

    assert not any(isinstance(v, module.Plugins) for v in vars(module).values()), "built at import time"
    assert get_plugins() is get_plugins()


class TestBuiltinInstanceTypes(InstanceTypePluginConformance):
    plugin = fsdp_sdk.instance_types
    expected_names = (
        "p4d.24xlarge",
        "p4de.24xlarge",
        "p5.48xlarge",
        "p5e.48xlarge",
        "p5en.48xlarge",
        "g5.48xlarge",
        "g6e.48xlarge",
    )


# name, gpus, model, GB per GPU, EFA, vCPUs, GiB, dense BF16 TFLOP/s per GPU
PUBLIC_SPECS = [
    ("p4d.24xlarge", 8, "A100", 40, 4, 96, 1152, 312),
    ("p4de.24xlarge", 8, "A100", 80, 4, 96, 1152, 312),
    ("p5.48xlarge", 8, "H100", 80, 32, 192, 2048, 989),
    ("p5e.48xlarge", 8, "H200", 141, 32, 192, 2048, 989),
    ("p5en.48xlarge", 8, "H200", 141, 16, 192, 2048, 989),
    ("g5.48xlarge", 8, "A10G", 24, 1, 192, 768, 125),
    ("g6e.48xlarge", 8, "L40S", 48, 4, 192, 1536, 362),
]


@pytest.mark.parametrize("spec", PUBLIC_SPECS, ids=[s[0] for s in PUBLIC_SPECS])
def test_builtin_instance_types_have_the_public_specs(spec: tuple) -> None:
    name, gpus, model, memory, efa, vcpus, host_memory, tflops = spec
    t = build_plugins(autoload=False).instance_types[name]
    assert (
        t.gpu_count,
        t.gpu_model,
        t.gpu_memory_gib,
        t.efa_interfaces,
        t.vcpus,
        t.memory_gib,
        t.bf16_tflops_per_gpu,
    ) == (gpus, model, memory, efa, vcpus, host_memory, tflops)
    assert t.price_date == fsdp_sdk.instance_types.PRICE_DATE


# ---------------------------------------------------------------------- entry points


def test_entry_point_scan_agrees_with_importlib_metadata(example_plugin: Path) -> None:
    for group in ("console_scripts", "fsdp_sdk"):
        ours = {(ep.name, ep.value) for ep in entry_points(group)}
        reference = {(ep.name, ep.value) for ep in importlib.metadata.entry_points(group=group)}
        assert ours == reference, group


def _settle(directory: Path, age_s: float) -> None:
    """Date the directory back (each call to a new time), as if its last change were ``age_s`` seconds ago."""
    then = time.time_ns() - int(age_s * 1e9)
    os.utime(directory, ns=(then, then))


def test_entry_points_are_cached_until_a_distribution_comes_or_goes(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    monkeypatch.delenv("FSDP_SDK_NO_CACHE", raising=False)
    site = tmp_path / "site"
    site.mkdir()

    def names() -> set[str]:
        return {ep.name for ep in entry_points("fsdp_sdk", [str(site)])}

    install_distribution(site, "first-plugin", "first_plugin", "", "first")
    _settle(site, 60)
    assert names() == {"first"}
    cache = json.loads((tmp_path / "cache" / "fsdp-sdk" / "entry-points.json").read_text())
    assert [row[1] for row in cache["dirs"][str(site)]["listing"]] == ["first_plugin"]
    # an edit inside a distribution's metadata leaves the directory's time alone: the cache answers
    (site / "first_plugin-1.0.dist-info" / "entry_points.txt").write_text("[fsdp_sdk]\nrenamed = first_plugin\n")
    assert names() == {"first"}
    # an install or a removal changes the directory: it is read again
    install_distribution(site, "second-plugin", "second_plugin", "", "second")
    _settle(site, 50)
    assert names() == {"renamed", "second"}
    shutil.rmtree(site / "second_plugin-1.0.dist-info")
    _settle(site, 40)
    assert names() == {"renamed"}
    # a directory changed a moment ago is read, not cached: it may change again within its clock tick
    install_distribution(site, "third-plugin", "third_plugin", "", "third")
    assert names() == {"renamed", "third"}
    (site / "third_plugin-1.0.dist-info" / "entry_points.txt").write_text("[fsdp_sdk]\nthird-renamed = x\n")
    assert names() == {"renamed", "third-renamed"}


def test_entry_points_without_a_usable_cache(tmp_path: Path, monkeypatch) -> None:
    site = tmp_path / "site"
    site.mkdir()
    install_distribution(site, "first-plugin", "first_plugin", "", "first")
    _settle(site, 60)
    blocked = tmp_path / "not-a-directory"
    blocked.write_text("")
    monkeypatch.setenv("XDG_CACHE_HOME", str(blocked))  # the cache cannot be written: only slower
    assert [ep.name for ep in entry_points("fsdp_sdk", [str(site)])] == ["first"]
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    monkeypatch.setenv("FSDP_SDK_NO_CACHE", "1")
    assert [ep.name for ep in entry_points("fsdp_sdk", [str(site)])] == ["first"]
    assert not (tmp_path / "cache").exists()


def test_example_plugin_is_loaded_through_its_entry_point(example_plugin: Path) -> None:
    plugins = build_plugins()
    assert plugins.instance_types.owner("p6-b200.48xlarge") == "b200"
    info = next(i for i in plugins.infos() if i.name == "b200")
    assert (info.builtin, info.distribution, info.hooks) == (
        False,
        "fsdp_sdk_plugin_b200",
        ("fsdp_sdk_register_instance_types",),
    )


def test_example_plugin_shows_in_the_instance_types_command(example_plugin: Path) -> None:
    result = run_cli("instance-types", "--json")
    assert result.returncode == 0, result.stderr
    b200 = next(t for t in json.loads(result.stdout) if t["name"] == "p6-b200.48xlarge")
    assert (b200["gpu_count"], b200["gpu_model"], b200["plugin"]) == (8, "B200", "b200")
    assert "p6-b200.48xlarge" in run_cli("instance-types").stdout


def test_autoload_can_be_switched_off(example_plugin: Path) -> None:
    result = run_cli("instance-types", "--json", env={"FSDP_SDK_DISABLE_PLUGIN_AUTOLOAD": "1"})
    assert result.returncode == 0, result.stderr
    names = {t["name"] for t in json.loads(result.stdout)}
    assert "p6-b200.48xlarge" not in names and "p5.48xlarge" in names


# ---------------------------------------------------------------------- duplicates


class _Backend(LocalBackend):
    """A second backend that claims the name 'local'."""


def test_a_plugin_cannot_replace_a_builtin_backend(capsys: pytest.CaptureFixture[str]) -> None:
    class Duplicate:
        @hookimpl
        def fsdp_sdk_register_backends(self, registry):
            registry.add(_Backend)

    plugins = build_plugins(autoload=False)
    plugins.register(Duplicate(), name="dup")
    assert plugins.backends.get("local") is LocalBackend  # fsdp-sdk's own is kept
    (conflict,) = plugins.conflicts()
    assert (conflict.kind, conflict.name, conflict.plugins, conflict.kept) == (
        "backend",
        "local",
        ("fsdp_sdk.backends.builtin", "dup"),
        "fsdp_sdk.backends.builtin",
    )
    assert "plugin 'dup' also registers the backend 'local' built into fsdp-sdk" in capsys.readouterr().err


def test_a_plugin_cannot_replace_a_builtin_instance_type() -> None:
    p5 = fsdp_sdk.instance_types.BUILTIN_INSTANCE_TYPES[2]

    class Duplicate:
        @hookimpl
        def fsdp_sdk_register_instance_types(self, registry):
            registry.add(InstanceType(**{**p5.to_dict(), "gpu_count": 4}))

    plugins = build_plugins(autoload=False)
    plugins.register(Duplicate(), name="dup")
    assert plugins.instance_types["p5.48xlarge"] is p5
    assert [c.refused for c in plugins.conflicts()] == [("dup",)]


def test_a_duplicate_plugin_name_or_bad_signature_is_refused() -> None:
    plugins = build_plugins(autoload=False)
    with pytest.raises(PluginError, match=r"fsdp_sdk\.instance_types"):
        plugins.register(object(), name="fsdp_sdk.instance_types")

    class BadSignature:
        @hookimpl
        def fsdp_sdk_preflight(self, config, cluster):  # 'cluster' is no argument of the spec
            return []

    with pytest.raises(PluginError, match="cluster"):
        plugins.register(BadSignature(), name="bad")
    assert not plugins.pm.has_plugin("bad")


def test_a_plugin_that_registers_something_wrong_is_left_out(capsys: pytest.CaptureFixture[str]) -> None:
    class Wrong:
        @hookimpl
        def fsdp_sdk_register_backends(self, registry):
            registry.add_lazy("fine", "fsdp_sdk.backends.local:LocalBackend")
            registry.add(dict)

    plugins = build_plugins(autoload=False)
    plugins.register(Wrong(), name="wrong")
    assert plugins.backends.names() == ["local"]  # nothing of 'wrong', not even what it added before failing
    expected = (
        "fsdp_sdk_register_backends failed, so what it registers is left out: "
        "registry.add() takes a ClusterBackend subclass, got <class 'dict'>"
    )
    assert f"fsdp-sdk: warning: plugin 'wrong': {expected}" in capsys.readouterr().err
    info = next(i for i in plugins.infos() if i.name == "wrong")
    assert info.broken and info.error == expected


def test_a_builtin_plugin_that_fails_to_register_is_a_bug_that_stops_everything() -> None:
    class Wrong:
        @hookimpl
        def fsdp_sdk_register_instance_types(self, registry):
            raise KeyError("gpu")

    plugins = build_plugins(autoload=False, default_plugins=())
    plugins.register(Wrong(), name="wrong")
    plugins.default_plugins = frozenset({"wrong"})
    with pytest.raises(
        PluginError,
        match=r"^plugin 'wrong' \(built into fsdp-sdk\): fsdp_sdk_register_instance_types failed: KeyError: 'gpu'",
    ):
        _ = plugins.instance_types


# ---------------------------------------------------------------------- broken third-party plugins


@pytest.fixture
def fake_site(tmp_path: Path) -> Path:
    """A directory with three installed-looking distributions declaring fsdp_sdk entry points:
    one whose module raises on import, one with a misspelled hook, one adding a CLI command."""
    site = tmp_path / "site"
    modules = {
        "broken_plugin": "raise ImportError('needs nvidia-magic, which is not installed')\n",
        "typo_plugin": """
            from fsdp_sdk import hookimpl

            @hookimpl
            def fsdp_sdk_register_backend(registry):  # missing 's'
                pass
        """,
        "hello_plugin": """
            import click
            from fsdp_sdk import hookimpl

            @hookimpl
            def fsdp_sdk_register_commands(cli):
                @cli.command()
                def hello():
                    '''Say hello from a plugin.'''
                    click.echo("hello from a plugin")
        """,
    }
    for module, source in modules.items():
        _install(site, module, source)
    return site


def _install(site: Path, module: str, source: str, entry_point: str | None = None) -> None:
    """Write ``module`` and a ``<module>-1.0.dist-info`` declaring it in the fsdp_sdk group (named
    ``entry_point``, by default the module name without ``_plugin``)."""
    (site / module).mkdir(parents=True)
    (site / module / "__init__.py").write_text(textwrap.dedent(source))
    dist = site / f"{module}-1.0.dist-info"
    dist.mkdir()
    (dist / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {module}\nVersion: 1.0\n")
    (dist / "entry_points.txt").write_text(f"[fsdp_sdk]\n{entry_point or module.removesuffix('_plugin')} = {module}\n")


def test_broken_plugins_are_reported_by_name_and_disabled(
    fake_site: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.syspath_prepend(str(fake_site))
    plugins = build_plugins()
    err = capsys.readouterr().err
    assert "plugin 'broken' (from broken_plugin 1.0) failed to load" in err and "nvidia-magic" in err
    assert "plugin 'typo'" in err and "fsdp_sdk_register_backend" in err
    broken = {i.name: i for i in plugins.infos() if i.broken}
    assert set(broken) == {"broken", "typo"}
    assert not plugins.pm.has_plugin("typo")
    assert plugins.backends.get("local") is LocalBackend  # everything else still works


def test_the_cli_survives_broken_plugins(fake_site: Path) -> None:
    env = {"PYTHONPATH": str(fake_site)}
    listing = run_cli("plugins", env=env)
    assert listing.returncode == 1  # something is broken: say so in the status
    rows = {line.split()[0]: line for line in listing.stdout.splitlines() if line.strip()}
    assert "broken" in rows["broken"] and "nvidia-magic" in rows["broken"]
    assert "broken" in rows["typo"]
    assert "ok" in rows["hello"]

    types = run_cli("instance-types", env=env)
    assert types.returncode == 0 and "p5.48xlarge" in types.stdout
    assert "plugin 'broken'" in types.stderr


def test_plugins_add_cli_commands(fake_site: Path) -> None:
    env = {"PYTHONPATH": str(fake_site)}
    assert "Say hello from a plugin." in run_cli("--help", env=env).stdout
    hello = run_cli("hello", env=env)
    assert (hello.returncode, hello.stdout) == (0, "hello from a plugin\n")


# ---------------------------------------------------------------------- duplicate names across distributions


@pytest.fixture
def duplicate_site(fake_site: Path) -> Path:
    """:func:`fake_site` plus three distributions whose names collide: ``other_hello`` declares the entry point
    ``hello`` again, ``shadow`` declares one named like a built-in plugin, and ``greet`` adds a second command
    named ``hello``."""
    _install(fake_site, "other_hello", "from fsdp_sdk import hookimpl\n", entry_point="hello")
    _install(fake_site, "shadow", "from fsdp_sdk import hookimpl\n", entry_point="fsdp_sdk.instance_types")
    _install(
        fake_site,
        "greet_plugin",
        """
        import click
        from fsdp_sdk import hookimpl

        @hookimpl
        def fsdp_sdk_register_commands(cli):
            @cli.command()
            def hello():
                '''Say hello from another plugin.'''
                click.echo("hello from greet")
    """,
    )
    return fake_site


def test_a_duplicate_entry_point_name_is_reported_not_dropped(
    duplicate_site: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.syspath_prepend(str(duplicate_site))
    plugins = build_plugins()
    err = capsys.readouterr().err
    broken = {(i.name, i.distribution): i for i in plugins.infos() if i.broken}
    assert ("hello", "other_hello") in broken and ("fsdp_sdk.instance_types", "shadow") in broken
    # the first distribution on the path keeps the name; the second is listed as broken, naming both
    assert plugins.describe("hello") == "'hello' (from hello_plugin 1.0)"
    assert "hello_plugin 1.0" in broken["hello", "other_hello"].error
    assert (
        "plugin 'hello' (from other_hello 1.0) is not loaded: the name 'hello' is already taken by hello_plugin 1.0"
    ) in err
    shadow = broken["fsdp_sdk.instance_types", "shadow"].error
    assert "built-in plugin of fsdp-sdk" in shadow and "shadow" in shadow
    assert "plugin 'fsdp_sdk.instance_types' (from shadow 1.0) is not loaded" in err
    assert plugins.pm.get_plugin("fsdp_sdk.instance_types") is fsdp_sdk.instance_types
    assert "p5.48xlarge" in plugins.instance_types  # the built-in plugin still works


def test_two_plugins_with_the_same_command_name_are_refused(duplicate_site: Path) -> None:
    env = {"PYTHONPATH": str(duplicate_site)}
    expected = (
        "plugins 'greet' (from greet_plugin 1.0) and 'hello' (from hello_plugin 1.0) both register a "
        "command named 'hello'"
    )
    helped = run_cli("--help", env=env)
    assert helped.returncode == 0 and "Say hello" not in helped.stdout
    assert expected in helped.stderr
    hello = run_cli("hello", env=env)
    assert hello.returncode == 2 and hello.stdout == ""
    assert f"Error: command 'hello' is not available here ({expected}" in hello.stderr
    listing = run_cli("plugins", env=env)
    assert listing.returncode == 1 and "other_hello 1.0" in listing.stdout and "shadow 1.0" in listing.stdout


def test_lazily_registered_backend_is_imported_on_first_use_and_checked() -> None:
    from fsdp_sdk.backends.base import BackendRegistry
    from fsdp_sdk.errors import PluginError

    registry = BackendRegistry()
    registry.current_plugin = "lazy-test"
    registry.add_lazy("local", "fsdp_sdk.backends.local:LocalBackend")
    assert "local" in registry and registry.names() == ["local"] and len(registry) == 1
    assert registry.get("local") is LocalBackend
    with pytest.raises(PluginError, match="already registered by plugin lazy-test"):
        registry.add(LocalBackend)
    registry.add_lazy("wrong-name", "fsdp_sdk.backends.local:LocalBackend")
    with pytest.raises(PluginError, match="is backend 'local', registered as 'wrong-name'"):
        registry.get("wrong-name")
    registry.add_lazy("missing", "fsdp_sdk.backends.nowhere:Backend")
    with pytest.raises(PluginError, match=re.escape("cannot import fsdp_sdk.backends.nowhere:Backend")):
        registry.get("missing")
    with pytest.raises(PluginError, match=re.escape("is not 'package.module:ClassName'")):
        registry.add_lazy("bad", "fsdp_sdk.backends.local.LocalBackend")


# ---------------------------------------------------------------------- the same instance type from two distributions


def _types_plugin(*names: str) -> str:
    """Source of a plugin module registering Neuron-like instance types ``names`` (a made-up family)."""
    types = ", ".join(
        f"InstanceType(name={n!r}, gpu_count=16, gpu_model='Acme', gpu_memory_gib=32, efa_interfaces=8, "
        "vcpus=128, memory_gib=512, bf16_tflops_per_gpu=190.0, on_demand_usd_per_hour=None, "
        "accelerator_resource='aws.amazon.com/neuron')"
        for n in names
    )
    return f"""
        from fsdp_sdk import hookimpl
        from fsdp_sdk.instance_types import InstanceType

        @hookimpl
        def fsdp_sdk_register_instance_types(registry):
            for t in ({types},):
                registry.add(t)
    """


@pytest.fixture
def conflict_site(tmp_path: Path) -> Path:
    """Two distributions that both register ``acme1.32xlarge``, each with a type of its own."""
    site = tmp_path / "site"
    _install(site, "neuron_plugin", _types_plugin("acme1.32xlarge", "acme1n.32xlarge"))
    _install(site, "neuron_fork", _types_plugin("acme1.32xlarge", "acme2.48xlarge"), entry_point="fork")
    return site


def test_two_distributions_registering_one_instance_type_are_reported_and_the_rest_still_works(
    conflict_site: Path,
) -> None:
    env = {"PYTHONPATH": str(conflict_site)}
    both = "'fork' (from neuron_fork 1.0) and 'neuron' (from neuron_plugin 1.0)"

    listing = run_cli("plugins", env=env)
    assert listing.returncode == 1, listing.stderr
    assert f"instance type acme1.32xlarge  {both}  refused for all of them" in listing.stdout
    assert f"plugins {both} both register the instance type 'acme1.32xlarge', so none of them is used" in (
        listing.stderr
    )
    assert "pip uninstall neuron_fork or neuron_plugin" in listing.stderr

    as_json = run_cli("plugins", "--json", env=env)
    assert as_json.returncode == 1
    (conflict,) = json.loads(as_json.stdout)["conflicts"]
    assert (conflict["kind"], conflict["name"], conflict["kept"]) == ("instance type", "acme1.32xlarge", None)
    assert [(p["name"], p["distribution"], p["version"]) for p in conflict["plugins"]] == [
        ("fork", "neuron_fork", "1.0"),
        ("neuron", "neuron_plugin", "1.0"),
    ]
    assert {i["name"]: i["status"] for i in json.loads(as_json.stdout)["plugins"]}["neuron"] == "ok"

    types = run_cli("instance-types", "--json", env=env)
    assert types.returncode == 0, types.stderr
    names = {t["name"] for t in json.loads(types.stdout)}
    assert {"acme1n.32xlarge", "acme2.48xlarge", "p5.48xlarge"} <= names and "acme1.32xlarge" not in names
    assert "both register the instance type 'acme1.32xlarge'" in types.stderr  # every command warns

    unrelated = run_cli(
        "job",
        "render",
        "--set",
        "cluster.instance_type=acme2.48xlarge",
        "--set",
        "job.registry=r.example.com/t",
        env=env,
    )
    assert unrelated.returncode == 0, unrelated.stderr
    assert "aws.amazon.com/neuron: 16" in unrelated.stdout and "nvidia.com/gpu" not in unrelated.stdout

    chosen = run_cli("config", "show", "--set", "cluster.instance_type=acme1.32xlarge", env=env)
    assert (chosen.returncode, chosen.stdout) == (2, "")
    assert chosen.stderr.splitlines()[-1] == (
        f"Error: cluster.instance_type (from --set): plugins {both} both register the instance type "
        "'acme1.32xlarge', so none of them is used; uninstall one of them (pip uninstall neuron_fork or neuron_plugin)"
    )


def test_two_plugins_registering_one_backend_or_section_are_refused_for_both() -> None:
    from dataclasses import dataclass

    from fsdp_sdk.config import Config
    from fsdp_sdk.errors import ConfigError

    @dataclass
    class Settings:
        size: int = 1

    class Cloud(LocalBackend):
        name = "cloud"

    def plugin() -> object:
        class Plugin:
            @hookimpl
            def fsdp_sdk_register_backends(self, registry):
                registry.add(Cloud)

            @hookimpl
            def fsdp_sdk_register_settings(self, registry):
                registry.add("cloud", Settings)

        return Plugin()

    plugins = build_plugins(autoload=False)
    plugins.register(plugin(), name="one")
    plugins.register(plugin(), name="two")
    assert [(c.kind, c.name, c.plugins, c.kept) for c in plugins.conflicts()] == [
        ("backend", "cloud", ("one", "two"), None),
        ("settings section", "cloud", ("one", "two"), None),
    ]
    assert plugins.backends.names() == ["local"] and "cloud" not in plugins.settings
    with pytest.raises(ConfigError, match=r"^cluster\.backend \(from dict\): plugins 'one' and 'two' both register"):
        resolve(Config.from_dict({"cluster": {"backend": "cloud"}}), plugins)
    assert resolve(Config(), plugins, validate_trainer=False).cluster.backend == "local"  # the rest works
