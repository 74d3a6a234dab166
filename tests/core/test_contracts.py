"""Declared contracts (:mod:`fsdp_sdk.contracts`): core reads a plugin's settings only through them."""

from __future__ import annotations

import ast
from pathlib import Path

from fsdp_sdk.aws.eks import configured_ami_family
from fsdp_sdk.config import Config
from fsdp_sdk.contracts import GpuAmiSettings, GpuNodegroupSettings, gpu_ami_settings, gpu_nodegroup_settings
from fsdp_sdk.k8s.idle import gpu_nodegroup
from fsdp_sdk.plugins import build_plugins

CORE = Path(__file__).resolve().parents[2] / "packages/core/src/fsdp_sdk"


def _config(data: dict) -> Config:
    plugins = build_plugins()
    return Config.from_dict(data, sections=plugins.settings)


def test_the_backends_declare_what_core_reads_of_their_settings() -> None:
    eksctl = _config(
        {"cluster": {"backend": "eksctl"}, "eksctl": {"gpu_nodegroup": "h100", "ami_family": "Bottlerocket"}}
    )
    assert isinstance(eksctl.section("eksctl"), GpuNodegroupSettings)
    assert (gpu_nodegroup(eksctl), configured_ami_family(eksctl)) == ("h100", "Bottlerocket")
    terraform = _config({"cluster": {"backend": "terraform"}})
    assert isinstance(terraform.section("terraform"), GpuAmiSettings)
    assert gpu_nodegroup_settings(terraform) is None  # no such setting: core's default name
    assert gpu_nodegroup(terraform) == "gpu"
    local = _config({"cluster": {"backend": "local"}})
    assert (gpu_nodegroup_settings(local), gpu_ami_settings(local)) == (None, None)
    assert configured_ami_family(local) is None


def test_core_reads_plugin_sections_only_through_the_contracts() -> None:
    """Outside the configuration package, the contracts and the modules of core's own sections (the local
    backend's ``local``, your own code's ``code``), no module of core reaches into ``config.sections``."""
    allowed = {"contracts.py", "user_code.py"}
    reaching = sorted(
        f"{path.relative_to(CORE)}:{node.lineno}"
        for path in CORE.rglob("*.py")
        if path.name not in allowed
        and path.relative_to(CORE).parts[0] not in {"config"}
        and path.relative_to(CORE).parts[:2] != ("backends", "local")
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8")))
        if isinstance(node, ast.Attribute) and node.attr == "sections"
    )
    assert reaching == []
