"""The pieces of an ARN that depend on the region alone (pure: no AWS call)."""

from __future__ import annotations

__all__ = ["partition"]


def partition(region: str) -> str:
    """The AWS partition of ``region`` (``aws``, ``aws-cn``, ``aws-us-gov``): the second field of its ARNs."""
    if region.startswith("cn-"):
        return "aws-cn"
    if region.startswith("us-gov-"):
        return "aws-us-gov"
    return "aws"
