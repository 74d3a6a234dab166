"""The partition of an ARN from its region, one function for every ARN core and the plugins write."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from fsdp_sdk.aws.arn import partition

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize(
    ("region", "expected"),
    [("us-east-1", "aws"), ("eu-west-2", "aws"), ("cn-north-1", "aws-cn"), ("us-gov-west-1", "aws-us-gov")],
)
def test_partition_of_region(region: str, expected: str) -> None:
    assert partition(region) == expected


def test_partition_is_written_once() -> None:
    """No other module of the packages defines its own partition function."""
    defining = sorted(
        str(path.relative_to(ROOT))
        for path in ROOT.glob("packages/*/src/**/*.py")
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8")))
        if isinstance(node, ast.FunctionDef) and node.name.lstrip("_") == "partition"
    )
    assert defining == ["packages/core/src/fsdp_sdk/aws/arn.py"]
