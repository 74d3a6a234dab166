"""Cluster backends: the :class:`~fsdp_sdk.backends.base.ClusterBackend` interface and the built-in local backend.

Other backends (eksctl, terraform) are separate distributions that register
themselves through the ``fsdp_sdk_register_backends`` hook.
"""
