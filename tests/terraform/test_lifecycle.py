"""The orchestration, for real: the terraform binary applies the local-only configuration (terraform_data
resources whose provisioners create the EKS cluster and node groups in moto) through the backend's own
code path: init, plan -out, the plan's summary, apply of the saved plan, output, scale, destroy, the
working directory and state after each step, a held lock, error mapping, interrupts."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import boto3
import pytest

from fsdp_sdk.config import Config
from fsdp_sdk.errors import BackendError, ConfigError
from fsdp_sdk.tools import ToolError, ToolNotFoundError
from fsdp_sdk_terraform.backend import TerraformBackend
from fsdp_sdk_terraform.runner import StateLockedError
from fsdp_sdk_terraform.workdir import Workdir

from .conftest import eks_clusters, make_config

pytestmark = pytest.mark.usefixtures("terraform_env")


def _state_resources(workdir: Path) -> list[str]:
    state = json.loads((workdir / "terraform.tfstate").read_text())
    return sorted(
        f"{r['type']}.{r['name']}" + (f"[{i['index_key']}]" if "index_key" in i else "")
        for r in state["resources"]
        for i in r["instances"]
    )


def _nodegroup(name: str, cluster: str = "fsdp-sdk") -> dict:
    return boto3.client("eks", region_name="us-west-2").describe_nodegroup(clusterName=cluster, nodegroupName=name)[
        "nodegroup"
    ]


def _up(backend: TerraformBackend, config: Config, lines: list[str] | None = None):
    lines = [] if lines is None else lines
    return backend.apply(config, backend.plan(config), progress=lines.append)


def test_up_plans_shows_the_summary_applies_the_saved_plan_then_scales_and_deletes(local_config: Config) -> None:
    backend = TerraformBackend()
    workdir = Workdir.of(local_config).path
    lines: list[str] = []
    status = _up(backend, local_config, lines)

    assert status.state == "ready" and status.nodes == 2, status
    assert "terraform plan: 3 to add, 0 to change, 0 to destroy" in lines
    assert "  + terraform_data.cluster" in lines and "  + terraform_data.gpu_nodes" in lines
    streamed = [line for line in lines if line.startswith("[terraform ")]
    assert any("Apply complete! Resources: 3 added, 0 changed, 0 destroyed." in line for line in streamed)
    assert all(line[11:16].count(":") == 1 for line in streamed)  # [terraform mm:ss]
    # the working directory: configuration copy, inputs, backend block, local state; no saved plan left over
    assert {"main.tf", "variables.tf", "outputs.tf", "fake_eks.py", "terraform.tfvars.json", "backend.tf.json"} <= {
        p.name for p in workdir.iterdir()
    }
    assert not list(workdir.glob("*.tfplan"))
    inputs = json.loads((workdir / "terraform.tfvars.json").read_text())
    assert inputs["gpu_nodes"] == 2 and inputs["availability_zones"] == ["us-west-2a", "us-west-2b"]
    assert json.loads((workdir / "backend.tf.json").read_text()) == {
        "terraform": {"backend": {"local": {"path": "terraform.tfstate"}}}
    }
    assert _state_resources(workdir) == [
        "terraform_data.cluster",
        "terraform_data.gpu_nodes",
        "terraform_data.system_nodes",
    ]
    # the kubeconfig comes from EKS (moto) through core's eks_kubeconfig
    kubeconfig = json.loads(backend.kubeconfig(local_config).read_text())
    assert kubeconfig["clusters"][0]["cluster"]["server"] == status.endpoint
    assert status.details["node_groups"]["gpu"]["desired"] == 2

    again: list[str] = []
    assert _up(backend, local_config, again).state == "ready"
    assert "terraform plan: 0 to add, 0 to change, 0 to destroy" in again
    assert not any("Apply complete" in line for line in again), "an up-to-date cluster is not applied again"

    scaled: list[str] = []
    status = backend.scale(local_config, 1, progress=scaled.append)
    assert status.nodes == 1 and _nodegroup("gpu")["scalingConfig"]["desiredSize"] == 1
    assert "terraform plan: 1 to add, 0 to change, 1 to destroy" in scaled
    assert json.loads((workdir / "terraform.tfvars.json").read_text())["gpu_nodes"] == 1

    down: list[str] = []
    gone = backend.down(local_config, progress=down.append)
    assert gone.state == "absent" and "terraform plan: 0 to add, 0 to change, 3 to destroy" in down
    assert not workdir.exists() and eks_clusters() == []
    assert backend.down(local_config).state == "absent", "down twice is not an error"
    assert backend.status(local_config).state == "absent"


def test_scale_refuses_out_of_range_counts_and_a_missing_cluster_before_terraform_runs(local_config: Config) -> None:
    backend = TerraformBackend()
    with pytest.raises(ConfigError, match=r"^nodes: 3 is outside cluster.min_nodes..cluster.max_nodes \(0..2\)"):
        backend.scale(local_config, 3)
    with pytest.raises(BackendError, match=r"has no Terraform working directory .*'fsdp-sdk up --backend terraform'$"):
        backend.scale(local_config, 1)
    assert not Path(local_config.cluster.state_dir).exists()


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
    from fsdp_sdk.plugins import build_plugins
    from fsdp_sdk_terraform import plugin
    from fsdp_sdk_terraform.backend import TerraformBackend

    plugins = build_plugins(autoload=False)
    plugins.register(plugin, name="terraform")
    config = Config.from_dict({}, sections=plugins.settings).with_overrides({
        "cluster.backend": "terraform", "cluster.state_dir": sys.argv[1], "cluster.availability_zones": "us-west-2a,us-west-2b",
        "terraform.configuration": sys.argv[2],
    }).resolved(plugins, validate_trainer=False)
    backend = TerraformBackend()
    try:
        backend.apply(config, backend.plan(config), progress=lambda line: print(line, flush=True))
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


def test_a_missing_terraform_binary_is_one_line_saying_how_to_install_it(
    plugins, local_configuration: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PATH", str(tmp_path / "empty"))
    monkeypatch.delenv("TF_PLUGIN_CACHE_DIR")
    config = make_config(plugins, tmp_path / "state", **{"terraform.configuration": str(local_configuration)})
    backend = TerraformBackend()
    with pytest.raises(ToolNotFoundError) as missing:
        backend.apply(config, backend.plan(config))
    assert str(missing.value) == (
        "terraform: is not installed (not found on PATH); install Terraform 1.5 or newer: "
        "https://developer.hashicorp.com/terraform/install"
    )
    assert missing.value.exit_code == 2
    assert not (tmp_path / "state").exists(), "nothing was written"


def test_an_old_or_unexpected_terraform_is_refused_before_anything_is_written(
    plugins, local_configuration: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("TF_PLUGIN_CACHE_DIR")
    fake = tmp_path / "bin" / "terraform"
    fake.parent.mkdir()
    fake.write_text("#!/bin/sh\necho 'Terraform v1.4.7'\necho 'on linux_amd64'\n")
    fake.chmod(0o755)
    config = make_config(
        plugins,
        tmp_path / "state",
        **{"terraform.configuration": str(local_configuration), "terraform.binary": str(fake)},
    )
    backend = TerraformBackend()
    with pytest.raises(
        ConfigError, match=rf"^terraform.binary: {fake} is Terraform 1.4.7; install Terraform 1.5.0 or newer$"
    ):
        backend.apply(config, backend.plan(config))
    pinned = make_config(
        plugins,
        tmp_path / "state",
        **{"terraform.configuration": str(local_configuration), "terraform.version": "1.9.8"},
    )
    with pytest.raises(
        ConfigError, match=r"^terraform.version: is 1.9.8 but .* is Terraform \d+\.\d+\.\d+; install that"
    ):
        backend.apply(pinned, backend.plan(pinned))
    assert not (tmp_path / "state").exists()
