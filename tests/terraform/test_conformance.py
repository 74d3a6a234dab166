"""The core's backend conformance suite, with the real lifecycle: terraform applies the local-only
configuration (the EKS cluster and node groups created in moto by its provisioners)."""

from __future__ import annotations

from pathlib import Path
from typing import Any, ClassVar

import pytest

from fsdp_sdk.backends.base import ClusterBackend
from fsdp_sdk.config import Config
from fsdp_sdk.plugins import Plugins
from fsdp_sdk.resolved import Resolved
from fsdp_sdk.testing import BackendConformance
from fsdp_sdk_terraform import plugin
from fsdp_sdk_terraform.backend import TerraformBackend

from .conftest import ZONES


class TestTerraformBackend(BackendConformance):
    backend_class = TerraformBackend
    plugin = plugin
    lifecycle = True
    scale_to = 1
    config_overrides: ClassVar[dict[str, Any]] = {"cluster.availability_zones": ZONES, "terraform.lock_timeout_s": 5}

    @pytest.fixture
    def resolved(self, plugins: Plugins, state_dir: Path, local_configuration: Path) -> Resolved:
        """The suite's configuration on the local-only Terraform configuration."""
        overrides = {
            "cluster.backend": "terraform",
            "cluster.state_dir": str(state_dir),
            "terraform.configuration": str(local_configuration),
            **self.config_overrides,
        }
        base = Config.from_dict({}, sections=plugins.settings)
        return Resolved.of(base.with_overrides(overrides), plugins, validate_trainer=False)

    def test_lifecycle(
        self, backend: ClusterBackend, resolved: Resolved, config: Config, state_dir: Path, terraform_env: str
    ) -> None:
        super().test_lifecycle(backend, resolved, config, state_dir)
