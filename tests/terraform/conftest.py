"""Fixtures of the Terraform backend tests: the real terraform binary, the local-only configuration, configs.

The orchestration runs for real: the ``terraform`` binary on PATH applies ``local_configuration/`` (the
shipped ``variables.tf`` plus ``terraform_data`` resources whose provisioners create the EKS cluster
and node groups in the tests' moto server), through the same code path as the EKS configuration.
"""

from __future__ import annotations

import json
import os
import shutil
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from fsdp_sdk.config import Config, resolution
from fsdp_sdk.plugins import Plugins, build_plugins
from fsdp_sdk.resolved import Resolved

PROJECT_ROOT = Path(__file__).resolve().parents[2]
LOCAL_CONFIGURATION = Path(__file__).with_name("local_configuration")
ZONES = "us-west-2a,us-west-2b"


def terraform_path() -> str | None:
    """The terraform binary on PATH, if any."""
    return shutil.which("terraform")


needs_terraform = pytest.mark.skipif(
    terraform_path() is None, reason="terraform is not installed (https://developer.hashicorp.com/terraform/install)"
)


@pytest.fixture(scope="session")
def provider_schema(terraform_aws_schema: Path) -> dict[str, Any]:
    """The AWS provider 6.62.0 schema from ../shared/schemas, parsed."""
    return json.loads(terraform_aws_schema.read_text())


@pytest.fixture
def local_configuration(tmp_path: Path) -> Path:
    """The local-only configuration: the shipped variables.tf beside ``local_configuration/``."""
    from fsdp_sdk_terraform import CONFIGURATION_DIR

    target = tmp_path / "configuration"
    shutil.copytree(LOCAL_CONFIGURATION, target, ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copy2(CONFIGURATION_DIR / "variables.tf", target / "variables.tf")
    return target


@pytest.fixture
def terraform_env(aws: str, monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Iterator[str]:
    """moto as AWS, a Python with boto3 for the provisioners, a provider cache under tmp_path; yields moto's URL."""
    if terraform_path() is None:
        pytest.skip("terraform is not installed (https://developer.hashicorp.com/terraform/install)")
    monkeypatch.setenv("FSDP_TF_TEST_PYTHON", sys.executable)
    monkeypatch.setenv("TF_PLUGIN_CACHE_DIR", str(tmp_path / "plugin-cache"))
    (tmp_path / "plugin-cache").mkdir()
    for name in ("FSDP_TF_TEST_FAIL", "FSDP_TF_TEST_SLEEP"):
        monkeypatch.delenv(name, raising=False)
    yield aws


def terraform_plugins() -> Plugins:
    """Core's default plugins and this one, no autoload."""
    from fsdp_sdk_terraform import plugin

    built = build_plugins(autoload=False)
    built.register(plugin, name="terraform")
    return built


@pytest.fixture
def plugins() -> Plugins:
    """Core's default plugins and this one, no autoload."""
    return terraform_plugins()


def resolve(config: Config, plugins: Plugins | None = None) -> Resolved:
    """What ``TerraformBackend.plan`` receives for ``config``: resolved with ``plugins`` (default: core's and this one)."""
    return Resolved.of(config, plugins or terraform_plugins(), validate_trainer=False)


def make_config(plugins: Plugins, state_dir: Path, **overrides: Any) -> Config:
    """A resolved configuration for the terraform backend (zones set, so no preflight is needed)."""
    values = {
        "cluster.backend": "terraform",
        "cluster.state_dir": str(state_dir),
        "cluster.availability_zones": ZONES,
        **overrides,
    }
    return resolution.resolve(
        Config.from_dict({}, sections=plugins.settings).with_overrides(values), plugins, validate_trainer=False
    )


@pytest.fixture
def local_config(plugins: Plugins, local_configuration: Path, tmp_path: Path) -> Config:
    """The terraform backend on the local-only configuration, state under tmp_path/state."""
    return make_config(
        plugins,
        tmp_path / "state",
        **{"terraform.configuration": str(local_configuration), "terraform.lock_timeout_s": 2},
    )


def eks_clusters(region: str = "us-west-2") -> list[str]:
    """Clusters moto knows (what the local configuration created and did not delete)."""
    import boto3

    return list(boto3.client("eks", region_name=region).list_clusters()["clusters"])


def run_env() -> dict[str, str]:
    """This process's environment (what a terraform started by a test inherits)."""
    return dict(os.environ)


@pytest.fixture
def quota(stubbed, monkeypatch: pytest.MonkeyPatch):
    """The APIs moto lacks through botocore Stubbers, every other AWS call to moto: ``quota(checks, prices)`` expects
    ``checks`` more reads of the On-Demand P vCPU quota (Service Quotas: 1536 vCPUs; every preflight run) and
    ``prices`` more reads of the region's price (the Price List API, every plan: no offer listed, so the instance
    type's table price stands)."""
    import fsdp_sdk.aws.preflight as preflight
    import fsdp_sdk.aws.pricing as pricing

    quotas, quota_stubber = stubbed("service-quotas")
    prices, price_stubber = stubbed("pricing", region="us-east-1")
    real = preflight.aws_client
    monkeypatch.setattr(
        preflight,
        "aws_client",
        lambda service, region: quotas if service == "service-quotas" else real(service, region),
    )
    monkeypatch.setattr(
        pricing, "aws_client", lambda service, region: prices if service == "pricing" else real(service, region)
    )

    def expect(checks: int, prices: int) -> None:
        for _ in range(prices):
            price_stubber.add_response("get_products", {"PriceList": [], "FormatVersion": "aws_v1"})
        for _ in range(checks):
            quota_stubber.add_response(
                "get_service_quota",
                {"Quota": {"QuotaCode": "L-417A185B", "QuotaName": "Running On-Demand P instances", "Value": 1536.0}},
                {"ServiceCode": "ec2", "QuotaCode": "L-417A185B"},
            )

    return expect
