"""Faults of the terraform backend, run for real on the local-only configuration against moto:
a failed ``up``, ``up`` interrupted by SIGINT, a state lock held by another terraform; each leaves no stray resource
and a state from which ``up`` or ``down`` continues."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from fsdp_sdk.config import Config
from fsdp_sdk.tools import ToolError
from fsdp_sdk_terraform.backend import TerraformBackend
from fsdp_sdk_terraform.tool import StateLockedError
from fsdp_sdk_terraform.workdir import Workdir
from terraform.conftest import eks_clusters, resolve

pytestmark = pytest.mark.usefixtures("terraform_env")


def _up(backend: TerraformBackend, config: Config):
    return backend.apply(config, backend.plan(resolve(config)), progress=lambda line: None)


def test_a_failed_up_is_one_line_with_terraforms_error_and_down_deletes_what_it_created(
    local_config: Config, monkeypatch: pytest.MonkeyPatch
) -> None:
    backend = TerraformBackend()
    monkeypatch.setenv("FSDP_TF_TEST_FAIL", "gpu")
    with pytest.raises(ToolError) as failure:
        _up(backend, local_config)
    message = str(failure.value)
    assert "\n" not in message
    assert message.startswith("terraform exited with status 1 while it tried to apply the saved plan: ")
    assert "Error: local-exec provisioner error" in message and "simulated failure: node group gpu" in message
    status = backend.status(local_config)
    assert status.state == "degraded" and status.details["node_groups"]["gpu"] == {"status": "MISSING"}
    assert eks_clusters() == ["fsdp-sdk"]

    monkeypatch.delenv("FSDP_TF_TEST_FAIL")
    assert backend.down(local_config).state == "absent"
    assert eks_clusters() == [] and not Workdir.of(local_config).exists()


_INTERRUPTED_UP = textwrap.dedent(
    """
    import sys
    from fsdp_sdk.config import Config
    from fsdp_sdk.config.resolution import resolve
    from fsdp_sdk.plugins import build_plugins
    from fsdp_sdk.resolved import Resolved
    from fsdp_sdk_terraform import plugin
    from fsdp_sdk_terraform.backend import TerraformBackend

    plugins = build_plugins(autoload=False)
    plugins.register(plugin, name="terraform")
    config = resolve(Config.from_dict({}, sections=plugins.settings).with_overrides({
        "cluster.backend": "terraform", "cluster.state_dir": sys.argv[1], "cluster.availability_zones": "us-west-2a,us-west-2b",
        "terraform.configuration": sys.argv[2],
    }), plugins, validate_trainer=False)
    backend = TerraformBackend()
    try:
        backend.apply(config, backend.plan(Resolved.of(config, plugins)), progress=lambda line: print(line, flush=True))
    except KeyboardInterrupt:
        print("KeyboardInterrupt", flush=True)
        sys.exit(130)
    """
)


def _interrupt_up(config: Config, configuration: Path, tmp_path: Path) -> str:
    """Start ``up`` in another process, SIGINT it while terraform creates the GPU node group; its output."""
    env = {**os.environ, "FSDP_TF_TEST_SLEEP": "gpu:60"}
    log = tmp_path / "interrupted.log"
    with log.open("w") as out:
        process = subprocess.Popen(
            [sys.executable, "-c", _INTERRUPTED_UP, str(config.cluster.state_dir), str(configuration)],
            stdout=out,
            stderr=subprocess.STDOUT,
            env=env,
        )
        deadline = time.monotonic() + 60
        # the GPU node group's provisioner sleeps a minute: the interrupt comes while terraform waits for it
        while "terraform_data.gpu_nodes: Provisioning with 'local-exec'" not in log.read_text():
            assert process.poll() is None and time.monotonic() < deadline, log.read_text()
            time.sleep(0.1)
        process.send_signal(signal.SIGINT)
        interrupted = time.monotonic()
        assert process.wait(timeout=120) == 130, log.read_text()
        assert time.monotonic() - interrupted < 30, "terraform stopped without waiting for the provisioner"
    return log.read_text()


@pytest.mark.slow
def test_up_interrupted_by_sigint_then_up_then_down(
    local_config: Config, local_configuration: Path, tmp_path: Path
) -> None:
    output = _interrupt_up(local_config, local_configuration, tmp_path)
    assert "interrupted: terraform stopped and recorded what it had done" in output
    workdir = Workdir.of(local_config).path
    assert not (workdir / ".terraform.tfstate.lock.info").exists(), "terraform released its lock"
    state = json.loads((workdir / "terraform.tfstate").read_text())
    recorded = {r["name"]: r["instances"][0].get("status", "created") for r in state["resources"]}
    assert recorded == {"cluster": "created", "system_nodes": "created", "gpu_nodes": "tainted"}, recorded
    backend = TerraformBackend()
    assert backend.status(local_config).state == "degraded"

    status = _up(backend, local_config)
    assert status.state == "ready" and status.nodes == 2
    assert backend.down(local_config).state == "absent" and eks_clusters() == []


@pytest.mark.slow
def test_up_interrupted_by_sigint_then_down(local_config: Config, local_configuration: Path, tmp_path: Path) -> None:
    _interrupt_up(local_config, local_configuration, tmp_path)
    backend = TerraformBackend()
    assert backend.down(local_config).state == "absent"
    assert eks_clusters() == [] and not Workdir.of(local_config).exists()


def test_a_held_state_lock_is_reported_with_its_holder_and_not_waited_on(local_config: Config) -> None:
    backend = TerraformBackend()
    _up(backend, local_config)
    workdir = Workdir.of(local_config).path
    # a second terraform holds the state lock: 'terraform console' keeps it while its input is open
    console = subprocess.Popen(
        ["terraform", "console"],
        cwd=workdir,
        stdin=subprocess.PIPE,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        deadline = time.monotonic() + 20
        while not (workdir / ".terraform.tfstate.lock.info").exists():
            assert console.poll() is None and time.monotonic() < deadline
            time.sleep(0.05)
        holder = json.loads((workdir / ".terraform.tfstate.lock.info").read_text())
        started = time.monotonic()
        with pytest.raises(StateLockedError) as locked:
            backend.scale(local_config, 1)
        assert time.monotonic() - started < 30, "the lock is waited on for terraform.lock_timeout_s only"
        message = str(locked.value)
        assert message == (
            f"terraform: cannot plan the changes: the state is locked by {holder['Who']} "
            f"(OperationTypeInvalid since {message.split(' since ')[1].split(',')[0]}, lock ID {holder['ID']}); "
            "waited 2s (terraform.lock_timeout_s): wait for that run to end and try again; if that run died, run "
            f"'terraform -chdir={workdir} force-unlock {holder['ID']}'"
        )
    finally:
        assert console.stdin is not None
        console.stdin.close()
        console.wait(timeout=30)
    assert backend.scale(local_config, 1).nodes == 1, "once the lock is released, the same command works"
    backend.down(local_config)
