"""The eksctl backend passes core's backend conformance suite, its whole lifecycle included, against moto."""

from __future__ import annotations

from typing import Any, ClassVar

import pytest

from fsdp_sdk.testing import BackendConformance
from fsdp_sdk_eksctl import plugin
from fsdp_sdk_eksctl.backend import EksctlBackend

from .helpers import AwsAnswers, Tools


class TestEksctlBackend(BackendConformance):
    backend_class = EksctlBackend
    plugin = plugin
    config_overrides: ClassVar[dict[str, Any]] = {"cluster.instance_type": "p4de.24xlarge", "cluster.nodes": 2}
    lifecycle = True
    scale_to = 1

    @pytest.fixture(autouse=True)
    def _aws(self, aws: str, tools: Tools, answers: AwsAnswers) -> None:
        """moto, the recording eksctl and the Stubber answers for every test of the suite."""
