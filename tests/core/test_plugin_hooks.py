"""Every hook call names the plugin and the hook when an implementation fails or returns the wrong type."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest

from fsdp_sdk import Client, PreflightResult, hookimpl
from fsdp_sdk.backends.base import ClusterStatus
from fsdp_sdk.config import Config
from fsdp_sdk.config.resolution import resolve
from fsdp_sdk.errors import BackendError, PluginDeprecationWarning, PluginError
from fsdp_sdk.k8s.render import render_job
from fsdp_sdk.plugins import Plugins, build_plugins
from fsdp_sdk.resolved import Resolved
from fsdp_sdk.runs import JobRef

from .conftest import install_distribution, run_cli

REGISTRY = {"job": {"registry": "registry.example.com/team"}}


def _plugins(plugin: object, name: str = "faulty") -> Plugins:
    plugins = build_plugins(autoload=False)
    plugins.register(plugin, name=name)
    return plugins


def _config(plugins: Plugins) -> Config:
    return resolve(Config.from_dict(REGISTRY), plugins, validate_trainer=False)


def _raise_key_error(**_: Any) -> None:
    raise KeyError("Launcher")


def _call(hook: str, plugins: Plugins) -> None:
    """Make the SDK call ``hook`` the way it does in production."""
    config = _config(plugins)
    status = ClusterStatus(backend="local", cluster="fsdp-sdk", state="ready")
    job = JobRef(name="fsdp", backend="local", run_id="r1")
    hooks = plugins.hooks
    calls = {
        "fsdp_sdk_render_job": lambda: render_job(config, plugins=plugins),
        "fsdp_sdk_job_image": lambda: render_job(config, plugins=plugins),
        "fsdp_sdk_preflight": lambda: hooks.preflight(config, "submit"),
        "fsdp_sdk_monitoring_components": lambda: hooks.monitoring_components(config),
        "fsdp_sdk_cluster_created": lambda: hooks.cluster_created(config, status),
        "fsdp_sdk_before_cluster_delete": lambda: hooks.before_cluster_delete(config, status),
        "fsdp_sdk_job_submitted": lambda: hooks.job_submitted(config, job),
        "fsdp_sdk_job_finished": lambda: hooks.job_finished(config, job, True, {}),
    }
    calls[hook]()


HOOKS = [
    ("fsdp_sdk_render_job", lambda config, objects: _raise_key_error()),
    ("fsdp_sdk_job_image", lambda config: _raise_key_error()),
    ("fsdp_sdk_preflight", lambda config, action: _raise_key_error()),
    ("fsdp_sdk_monitoring_components", lambda config: _raise_key_error()),
    ("fsdp_sdk_cluster_created", lambda config, status: _raise_key_error()),
    ("fsdp_sdk_before_cluster_delete", lambda config, status: _raise_key_error()),
    ("fsdp_sdk_job_submitted", lambda config, job: _raise_key_error()),
    ("fsdp_sdk_job_finished", lambda config, job, succeeded, summary: _raise_key_error()),
]


@pytest.mark.parametrize("hook, body", HOOKS, ids=[h for h, _ in HOOKS])
def test_an_exception_in_any_hook_names_the_plugin_and_the_hook(hook: str, body: Any) -> None:
    plugins = _plugins(_Plugin(hook, body))
    with pytest.raises(PluginError) as caught:
        _call(hook, plugins)
    assert str(caught.value).startswith(f"plugin 'faulty': {hook} failed: KeyError: 'Launcher' (a bug in the plugin")
    assert isinstance(caught.value.__cause__, KeyError)


class _Plugin:
    """A plugin implementing one hook with the exact parameters of its specification."""

    def __init__(self, hook: str, body: Any) -> None:
        setattr(self, hook, hookimpl(specname=hook)(body))


WRONG_RESULTS = [
    (
        "fsdp_sdk_preflight",
        lambda config, action: PreflightResult("quota", True, "fine"),
        "returned one PreflightResult, not a list; return [result]",
    ),
    (
        "fsdp_sdk_preflight",
        lambda config, action: "quota ok",
        "returned a str ('quota ok'); it must return a list of PreflightResult",
    ),
    (
        "fsdp_sdk_preflight",
        lambda config, action: [{"ok": True}],
        "returned a list holding a dict; every item must be a PreflightResult",
    ),
    (
        "fsdp_sdk_monitoring_components",
        lambda config: {"name": "dcgm"},
        "returned a dict; it must return a list of MonitoringComponent",
    ),
    ("fsdp_sdk_job_image", lambda config: 42, "returned a int (42); it must return an image reference string or None"),
    (
        "fsdp_sdk_job_image",
        lambda config: "my image:v1",
        "returned a str ('my image:v1'); it must return an image reference string or None",
    ),
    (
        "fsdp_sdk_render_job",
        lambda config, objects: objects,
        "returned a list; it must change 'objects' in place and return None",
    ),
]


@pytest.mark.parametrize(
    "hook, body, message", WRONG_RESULTS, ids=[f"{h}-{i}" for i, (h, _, _) in enumerate(WRONG_RESULTS)]
)
def test_a_result_of_the_wrong_type_names_the_plugin_and_the_hook(hook: str, body: Any, message: str) -> None:
    plugins = _plugins(_Plugin(hook, body))
    with pytest.raises(PluginError, match="^" + re.escape(f"plugin 'faulty': {hook} {message}") + "$"):
        _call(hook, plugins)


def test_a_render_hook_that_breaks_an_object_is_named() -> None:
    def damage(objects: list[dict[str, Any]]) -> None:
        objects.append({"kind": "ConfigMap", "apiVersion": "v1", "metadata": {}})

    plugins = _plugins(_Plugin("fsdp_sdk_render_job", damage))
    with pytest.raises(
        PluginError,
        match=r"^plugin 'faulty': fsdp_sdk_render_job left objects\[1\] \(a ConfigMap\) without metadata\.name$",
    ):
        render_job(_config(plugins), plugins=plugins)


def test_errors_a_plugin_raises_on_purpose_pass_through() -> None:
    def refuse(config: Config) -> None:
        raise BackendError(f"cluster {config.cluster.name} is protected")

    plugins = _plugins(_Plugin("fsdp_sdk_before_cluster_delete", refuse))
    with pytest.raises(BackendError, match=r"^cluster fsdp-sdk is protected$"):
        plugins.hooks.before_cluster_delete(_config(plugins), ClusterStatus("local", "fsdp-sdk", "ready"))


def test_preflight_results_arrive_in_registration_order_and_none_means_none() -> None:
    plugins = build_plugins(autoload=False)
    plugins.register(_Plugin("fsdp_sdk_preflight", lambda config: [PreflightResult("a", True, "first")]), name="a")
    plugins.register(_Plugin("fsdp_sdk_preflight", lambda: None), name="b")
    plugins.register(_Plugin("fsdp_sdk_preflight", lambda action: (PreflightResult("c", True, action),)), name="c")
    config = resolve(Config.from_dict({"cluster": {"backend": "local"}}), plugins, validate_trainer=False)
    assert [(r.check, r.message) for r in plugins.hooks.preflight(config, "submit")] == [
        ("a", "first"),
        ("c", "submit"),
    ]


def test_hook_wrappers_are_refused_with_a_reason() -> None:
    class Wrapper:
        @hookimpl(wrapper=True)
        def fsdp_sdk_render_job(self, config, objects):
            return (yield)

    plugins = build_plugins(autoload=False)
    with pytest.raises(PluginError, match="fsdp_sdk_render_job is implemented as a hook wrapper"):
        plugins.register(Wrapper(), name="wrapper")
    assert not plugins.pm.has_plugin("wrapper")


def test_the_cli_names_the_distribution_of_a_failing_render_hook(tmp_path: Path) -> None:
    site = tmp_path / "site"
    install_distribution(
        site,
        "launcher_plugin",
        "launcher_plugin",
        """
        from fsdp_sdk import hookimpl

        @hookimpl
        def fsdp_sdk_render_job(objects):
            objects[0]["spec"]["pytorchReplicaSpecs"]["Launcher"]["replicas"] = 1
        """,
        "launcher",
    )
    result = run_cli("job", "render", "--set", "job.registry=r.example.com/t", env={"PYTHONPATH": str(site)})
    assert (result.returncode, result.stdout) == (2, "")  # PluginError: fix what is installed
    assert result.stderr.strip() == (
        "Error: plugin 'launcher' (from launcher_plugin 1.0): fsdp_sdk_render_job failed: KeyError: 'Launcher' "
        "(a bug in the plugin: report it to its author, or uninstall the plugin)"
    )


def test_a_plugins_preflight_check_fires_for_job_submit(tmp_path: Path) -> None:
    site = tmp_path / "site"
    install_distribution(
        site,
        "quota_plugin",
        "quota_plugin",
        """
        from fsdp_sdk import PreflightResult, hookimpl

        @hookimpl
        def fsdp_sdk_preflight(config, action):
            gpus = config.job.num_workers * config.job.gpu_per_worker
            return [PreflightResult("team-quota", gpus <= 8, f"{action}: {gpus} GPUs of the team's 8",
                                    "ask for fewer workers")]
        """,
        "quota",
    )
    kubeconfig = tmp_path / "kubeconfig"  # never read: the check stops the submit first
    kubeconfig.write_text("apiVersion: v1\nkind: Config\n")
    result = run_cli(
        "job", "submit", "--kubeconfig", str(kubeconfig), "--set", "job.registry=r.example.com/t",
        env={"PYTHONPATH": str(site)},
    )  # fmt: skip
    assert (result.returncode, result.stdout) == (2, "")
    assert result.stderr.strip() == (
        "Error: preflight failed: [error] team-quota: submit: 16 GPUs of the team's 8; ask for fewer workers"
    )


def test_client_submit_job_checks_first(tmp_path: Path) -> None:
    seen: list[str] = []

    def check(config: Config, action: str) -> list[PreflightResult]:
        seen.append(action)
        return [PreflightResult("quota", False, "no quota left", "wait")]

    plugins = _plugins(_Plugin("fsdp_sdk_preflight", check))
    client = Client.from_dict({**REGISTRY, "cluster": {"kubeconfig": str(tmp_path / "none")}}, plugins=plugins)
    with pytest.raises(BackendError, match=r"preflight failed: \[error\] quota: no quota left; wait"):
        client.submit_job()
    assert seen == ["submit"]


def test_a_plugin_whose_commands_hook_fails_loses_its_commands_only(tmp_path: Path) -> None:
    site = tmp_path / "site"
    install_distribution(
        site,
        "cmds_plugin",
        "cmds_plugin",
        """
        from fsdp_sdk import hookimpl

        @hookimpl
        def fsdp_sdk_register_commands(cli):
            raise RuntimeError("no click today")
        """,
        "cmds",
    )
    result = run_cli("--help", env={"PYTHONPATH": str(site)})
    assert result.returncode == 0 and "instance-types" in result.stdout
    assert result.stderr == (
        "fsdp-sdk: warning: plugin 'cmds' (from cmds_plugin 1.0): fsdp_sdk_register_commands failed: RuntimeError: "
        "no click today (a bug in the plugin: report it to its author, or uninstall the plugin); its commands are left out\n"
    )


def test_a_hook_implementation_asking_for_the_retired_config_argument_is_warned_and_still_called() -> None:
    """``config`` is ``resolved.config`` in the hooks that get both: pluggy's ``warn_on_impl_args`` warns at
    registration, naming the implementation; the implementation keeps receiving it meanwhile."""
    seen: list[str] = []

    class Old:
        @hookimpl
        def fsdp_sdk_preflight(self, config, action):
            seen.append(f"{config.cluster.backend} {action}")
            return []

    plugins = build_plugins(autoload=False)
    with pytest.warns(PluginDeprecationWarning, match="ask for 'resolved' instead") as caught:
        plugins.register(Old(), name="old")
    assert caught[0].filename == __file__
    resolved = Resolved.of(Config.from_dict({"cluster": {"backend": "local"}}), plugins, validate_trainer=False)
    plugins.hooks.preflight(resolved, "submit")
    assert seen == ["local submit"]


def test_the_shipped_plugins_ask_for_resolved_not_the_retired_config() -> None:
    """Registering the built-in and installed plugins warns of nothing (they read ``resolved.config``)."""
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("error", PluginDeprecationWarning)
        plugins = build_plugins()
    assert {"eksctl", "terraform", "observability"} <= {info.name for info in plugins.infos()}
