"""The plugin passes fsdp-sdk's instance-type conformance suite and its entry point loads."""

import fsdp_sdk_plugin_b200
from fsdp_sdk.testing import InstanceTypePluginConformance


class TestB200Plugin(InstanceTypePluginConformance):
    plugin = fsdp_sdk_plugin_b200
    expected_names = ("p6-b200.48xlarge",)
    entry_point_name = "b200"
