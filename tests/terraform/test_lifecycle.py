"""The orchestration, for real: the terraform binary applies the local-only configuration (terraform_data
resources whose provisioners create the EKS cluster and node groups in moto) through the backend's own
code path: init, plan -out, the plan's summary, apply of the saved plan, output, scale, destroy, the
working directory and state after each step, a held lock, error mapping, interrupts."""

from __future__ import annotations

import json
from pathlib import Path

import boto3
import pytest

from fsdp_sdk.config import Config
from fsdp_sdk.errors import BackendError, ConfigError
from fsdp_sdk.tools import ToolNotFoundError
from fsdp_sdk_terraform.backend import TerraformBackend
from fsdp_sdk_terraform.workdir import Workdir

from .conftest import eks_clusters, make_config, resolve

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
    return backend.apply(config, backend.plan(resolve(config)), progress=lines.append)


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


def test_a_missing_terraform_binary_is_one_line_saying_how_to_install_it(
    plugins, local_configuration: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PATH", str(tmp_path / "empty"))
    monkeypatch.delenv("TF_PLUGIN_CACHE_DIR")
    config = make_config(plugins, tmp_path / "state", **{"terraform.configuration": str(local_configuration)})
    backend = TerraformBackend()
    with pytest.raises(ToolNotFoundError) as missing:
        backend.apply(config, backend.plan(resolve(config)))
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
        backend.apply(config, backend.plan(resolve(config)))
    pinned = make_config(
        plugins,
        tmp_path / "state",
        **{"terraform.configuration": str(local_configuration), "terraform.version": "1.9.8"},
    )
    with pytest.raises(
        ConfigError, match=r"^terraform.version: is 1.9.8 but .* is Terraform \d+\.\d+\.\d+; install that"
    ):
        backend.apply(pinned, backend.plan(resolve(pinned)))
    assert not (tmp_path / "state").exists()
