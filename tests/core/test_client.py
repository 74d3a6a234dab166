"""The library API: fsdp_sdk.Client does what the CLI does, and announces lifecycle events to plugins."""

from __future__ import annotations

from pathlib import Path

import pytest

import fsdp_sdk
from fsdp_sdk import Client, hookimpl
from fsdp_sdk.errors import BackendError, ConfigError
from fsdp_sdk.plugins import build_plugins


def test_public_names_are_loaded_lazily() -> None:
    from fsdp_sdk.client import Client as Direct
    from fsdp_sdk.errors import ConfigError as DirectError

    assert fsdp_sdk.Client is Direct and fsdp_sdk.ConfigError is DirectError
    assert "Client" in dir(fsdp_sdk)
    with pytest.raises(AttributeError, match="no attribute 'Nope'"):
        fsdp_sdk.Nope  # noqa: B018


def test_from_sources_plan_and_catalogue(work_dir: Path) -> None:
    (work_dir / "c.yaml").write_text("cluster:\n  name: team-a\n  instance_type: g5.48xlarge\n")
    client = Client.from_sources(config_file=work_dir / "c.yaml", overrides={"job.num_workers": 3})
    assert client.config.cluster.name == "team-a" and client.config.job.gpu_per_worker == 8
    plan = client.plan()
    assert plan.backend == "local" and plan.cluster == "team-a" and "3 torchrun agents" in plan.steps[-1]
    assert "g5.48xlarge" in {t.name for t in client.instance_types()}
    assert {p.name for p in client.plugins()} >= {"fsdp_sdk.instance_types", "fsdp_sdk.backends.builtin"}
    assert repr(client) == "<Client backend='local' cluster='team-a'>"


def test_a_client_refuses_an_invalid_configuration() -> None:
    with pytest.raises(ConfigError, match=r"job\.gpu_per_worker"):
        Client(fsdp_sdk.Config().with_overrides({"job.gpu_per_worker": 9}))


def test_the_kubernetes_seam_is_not_for_the_local_backend() -> None:
    with pytest.raises(BackendError, match="runs jobs itself"):
        Client.from_sources().jobs  # noqa: B018


def test_trainer_arguments_must_look_like_trainer_options() -> None:
    client = Client.from_sources()
    with pytest.raises(ConfigError, match=r"^--train\.steps: needs a value; give one: --train\.steps VALUE"):
        client.run(trainer_args=["--train.steps"], dry_run=True)
    with pytest.raises(ConfigError, match=r"^steps: is not a trainer option"):
        client.run(trainer_args=["steps", "3"], dry_run=True)


def test_the_trainers_auto_shorthand_passes_through() -> None:
    from fsdp_sdk.client import parse_trainer_args

    settings = parse_trainer_args(["--auto", "--train.steps", "3"])
    assert [(s.path, s.value) for s in settings] == [("trainer.auto.enabled", "true"), ("trainer.train.steps", "3")]


class Recorder:
    """A plugin that records lifecycle events."""

    def __init__(self) -> None:
        self.events: list[tuple[str, str]] = []

    @hookimpl
    def fsdp_sdk_cluster_created(self, config, status):
        self.events.append(("created", status.state))

    @hookimpl
    def fsdp_sdk_before_cluster_delete(self, status):
        self.events.append(("deleting", status.state))


def test_lifecycle_events_reach_plugins(state_dir: Path) -> None:
    recorder = Recorder()
    plugins = build_plugins(autoload=False)
    plugins.register(recorder, name="recorder")
    client = Client.from_sources(overrides={"job.rdzv_backend": "c10d"}, plugins=plugins)
    client.up(dry_run=True)
    assert recorder.events == []  # a dry run announces nothing
    client.up()
    client.down()
    assert recorder.events == [("created", "ready"), ("deleting", "ready")]


def test_a_plugin_can_refuse_a_deletion(state_dir: Path) -> None:
    class Guard:
        @hookimpl
        def fsdp_sdk_before_cluster_delete(self, config):
            raise BackendError(f"cluster {config.cluster.name} is protected")

    client = Client.from_sources(overrides={"job.rdzv_backend": "c10d"})
    client.up()
    client.loaded_plugins.register(Guard(), name="guard")  # the client's plugin set, changed after it was made
    with pytest.raises(BackendError, match="cluster fsdp-sdk is protected"):
        client.down()
    assert client.status().ready
    client.loaded_plugins.unregister("guard")
    client.down()


def test_blocking_preflight_failures_stop_up(state_dir: Path) -> None:
    class Check:
        @hookimpl
        def fsdp_sdk_preflight(self, config):
            return [fsdp_sdk.PreflightResult("quota", False, "no GPU quota", "ask for a quota raise")]

    plugins = build_plugins(autoload=False)
    plugins.register(Check(), name="check")
    with pytest.raises(BackendError, match=r"preflight failed: \[error\] quota: no GPU quota; ask for a quota raise"):
        Client.from_sources(plugins=plugins).up()
    assert not state_dir.exists()
