"""The plugin passes fsdp-sdk's instance-type conformance suite, and its entry point loads."""

from fsdp_sdk.testing import InstanceTypePluginConformance
from fsdp_sdk_plugin_trainium import plugin


class TestTrainiumTypes(InstanceTypePluginConformance):
    plugin = plugin
    expected_names = ("trn1.32xlarge", "trn1n.32xlarge", "trn2.48xlarge")
    entry_point_name = "trainium"
