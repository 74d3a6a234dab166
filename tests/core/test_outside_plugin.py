"""A plugin as an outside author ships it: fsdp-sdk and the Trainium example installed with pip (not editable)
into a fresh virtual environment without torch, then the CLI as a user runs it there.

Also installed beside it, on PYTHONPATH only for the tests that want them (``outside_extras``): a plugin that
cannot import and a fork of the Trainium plugin that registers ``trn1.32xlarge`` again.
"""

from __future__ import annotations

import json
import re
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from .conftest import ROOT

pytestmark = pytest.mark.slow

SCHEMAS = ROOT.parent / "shared" / "schemas"
CRDS = {
    "pytorchjob": SCHEMAS / "kubeflow.org_pytorchjobs.yaml",
    "trainjob": SCHEMAS / "trainer-v2.3.0.trainer.kubeflow.org_trainjobs.yaml",
}
REGISTRY = "123456789012.dkr.ecr.us-west-2.amazonaws.com"
TRAINIUM = "'trainium' (from fsdp_sdk_plugin_trainium 0.1.0)"
FORK = "'trainium-fork' (from fsdp_sdk_plugin_trainium_fork 0.1.0)"


def outside(
    bin_dir: Path, tmp_path: Path, *args: str, extra: Path | None = None, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    """Run ``fsdp-sdk args`` of the fresh environment, in an empty directory, with a minimal environment."""
    cwd = tmp_path / "cwd"
    cwd.mkdir(exist_ok=True)
    environment = {
        "PATH": f"{bin_dir}:/usr/local/bin:/usr/bin:/bin",
        "HOME": str(tmp_path / "home"),
        "LANG": "C.UTF-8",
        "FSDP_SDK_STATE_DIR": str(tmp_path / "state"),
        **({"PYTHONPATH": str(extra)} if extra else {}),
        **(env or {}),
    }
    return subprocess.run(
        [str(bin_dir / "fsdp-sdk"), *args], cwd=cwd, env=environment, capture_output=True, text=True, timeout=120
    )


def test_the_plugin_is_loaded_and_its_types_are_listed(outside_venv: Path, tmp_path: Path) -> None:
    no_torch = subprocess.run([str(outside_venv / "python"), "-c", "import torch"], capture_output=True)
    assert no_torch.returncode != 0, "the fresh environment has torch"

    listing = outside(outside_venv, tmp_path, "plugins")
    assert listing.returncode == 0, listing.stderr
    assert listing.stderr == ""
    row = next(line for line in listing.stdout.splitlines() if line.startswith("trainium "))
    assert row.split() == [
        "trainium",
        "fsdp_sdk_plugin_trainium",
        "0.1.0",
        "ok",
        "register_instance_types,",
        "render_job",
    ]
    as_json = json.loads(outside(outside_venv, tmp_path, "plugins", "--json").stdout)
    assert as_json["conflicts"] == []

    types = outside(outside_venv, tmp_path, "instance-types", "--json")
    assert types.returncode == 0, types.stderr
    trainium = {t["name"]: t for t in json.loads(types.stdout) if t["plugin"] == "trainium"}
    assert set(trainium) == {"trn1.32xlarge", "trn1n.32xlarge", "trn2.48xlarge"}
    assert {t["accelerator_resource"] for t in trainium.values()} == {"aws.amazon.com/neuron"}
    assert (trainium["trn2.48xlarge"]["on_demand_usd_per_hour"], trainium["trn2.48xlarge"]["price_date"]) == (
        None,
        None,
    )
    table = outside(outside_venv, tmp_path, "instance-types").stdout
    assert re.search(r"^trn2\.48xlarge +16x Trainium2 +96 GB +16 +192 +2048 GiB +667 +- +- +trainium$", table, re.M)


def _render(
    bin_dir: Path, tmp_path: Path, instance_type: str, api: str, **kwargs: Any
) -> subprocess.CompletedProcess[str]:
    return outside(
        bin_dir, tmp_path, "job", "render", "--api", api,
        "--set", f"cluster.instance_type={instance_type}", "--set", f"job.registry={REGISTRY}", **kwargs,
    )  # fmt: skip


@pytest.mark.parametrize("api", ["pytorchjob", "trainjob"])
def test_job_render_on_trainium_is_valid_against_the_crd(outside_venv: Path, tmp_path: Path, api: str) -> None:
    from fsdp_sdk.k8s.render import worker_pods
    from fsdp_sdk.k8s.validate import validate_objects

    crd = CRDS[api]
    if not crd.exists():
        pytest.skip(f"{crd.name} not found at ../shared/schemas/ (the shared schemas sit beside the project root)")
    rendered = _render(outside_venv, tmp_path, "trn2.48xlarge", api)
    assert rendered.returncode == 0, rendered.stderr
    objects = list(yaml.safe_load_all(rendered.stdout))
    report = validate_objects(objects, crd_paths=[crd])
    assert report.ok, report.errors
    assert f"{objects[0]['kind']}/fsdp" in report.validated

    pods = list(worker_pods(objects))
    assert pods
    for pod in pods:  # the plugin's render hook, through the helper, on either job shape
        assert {
            "key": "trainium.example.com/dedicated",
            "operator": "Equal",
            "value": "true",
            "effect": "NoSchedule",
        } in (pod.spec["tolerations"])
        assert pod.labels["trainium.example.com/generation"] == "2"
    assert "aws.amazon.com/neuron: 16" in rendered.stdout and "nvidia.com/gpu" not in rendered.stdout
    assert "name: FI_EFA_USE_DEVICE_RDMA\n" in rendered.stdout


def test_autoload_can_be_switched_off(outside_venv: Path, tmp_path: Path) -> None:
    off = {"FSDP_SDK_DISABLE_PLUGIN_AUTOLOAD": "1"}
    listing = json.loads(outside(outside_venv, tmp_path, "plugins", "--json", env=off).stdout)
    assert [p["name"] for p in listing["plugins"]] == ["fsdp_sdk.instance_types", "fsdp_sdk.backends.builtin"]
    types = json.loads(outside(outside_venv, tmp_path, "instance-types", "--json", env=off).stdout)
    assert not [t for t in types if t["name"].startswith("trn")] and "p5.48xlarge" in {t["name"] for t in types}
    rendered = _render(outside_venv, tmp_path, "trn2.48xlarge", "pytorchjob", env=off)
    assert (rendered.returncode, rendered.stdout) == (2, "")
    assert "cluster.instance_type (from --set): unknown instance type 'trn2.48xlarge'" in rendered.stderr


def test_a_broken_plugin_and_a_duplicate_one_are_reported_and_the_rest_renders(
    outside_venv: Path, outside_extras: Path, tmp_path: Path
) -> None:
    listing = outside(outside_venv, tmp_path, "plugins", extra=outside_extras)
    assert listing.returncode == 1
    rows = {line.split()[0]: line for line in listing.stdout.splitlines() if line.strip()}
    assert "broken" in rows["neuronx"] and "No module named 'neuronx_distributed'" in rows["neuronx"]
    assert "fsdp_sdk_plugin_neuronx 0.1.0" in rows["neuronx"]
    assert f"instance type trn1.32xlarge  {TRAINIUM} and {FORK}  refused for all of them" in listing.stdout
    error = listing.stderr.splitlines()[-1]
    assert error.startswith("Error: 1 broken plugin (neuronx); ")
    assert "pip uninstall fsdp_sdk_plugin_trainium or fsdp_sdk_plugin_trainium_fork" in error

    types = outside(outside_venv, tmp_path, "instance-types", "--json", extra=outside_extras)
    assert types.returncode == 0, types.stderr
    names = {t["name"] for t in json.loads(types.stdout)}
    assert {"trn1n.32xlarge", "trn2.48xlarge", "trn1.2xlarge", "p5.48xlarge"} <= names
    assert "trn1.32xlarge" not in names

    unrelated = _render(outside_venv, tmp_path, "trn2.48xlarge", "pytorchjob", extra=outside_extras)
    assert unrelated.returncode == 0, unrelated.stderr
    assert "trainium.example.com/generation: '2'" in unrelated.stdout or 'generation: "2"' in unrelated.stdout
    clashing = _render(outside_venv, tmp_path, "trn1.32xlarge", "pytorchjob", extra=outside_extras)
    assert (clashing.returncode, clashing.stdout) == (2, "")
    assert clashing.stderr.splitlines()[-1] == (
        f"Error: cluster.instance_type (from --set): plugins {TRAINIUM} and {FORK} both register the instance type "
        "'trn1.32xlarge', so none of them is used; uninstall one of them "
        "(pip uninstall fsdp_sdk_plugin_trainium or fsdp_sdk_plugin_trainium_fork)"
    )
