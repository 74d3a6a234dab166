"""An fsdp-sdk plugin for AWS Trainium: the trn1, trn1n and trn2 instance types, and the conventions of our
Trainium node groups applied to every job that runs on them (see :mod:`fsdp_sdk_plugin_trainium.plugin`)."""

from fsdp_sdk_plugin_trainium.instance_types import TRAINIUM_INSTANCE_TYPES

__all__ = ["TRAINIUM_INSTANCE_TYPES"]
