"""The SDK and the trainer read ``s3://`` locations by the same rules.

Each checks them where it runs: the SDK on the machine that launches (``fsdp_sdk.aws.checkpoints``, where the
trainer need not be installed: a laptop that only submits to EKS) and the trainer in every pod (``fsdp_trainer.storage``,
in an image that holds no SDK). So the rules are written in both packages, and held to one another here: the same
settings, the same bucket names accepted and refused, the same prefix, the same signing region."""

from __future__ import annotations

import pytest

from fsdp_sdk.aws import checkpoints as sdk
from fsdp_sdk.errors import ConfigError as SdkError

storage = pytest.importorskip("fsdp_trainer.storage", reason="the trainer is not installed")
from fsdp_trainer.errors import ConfigError as TrainerError  # noqa: E402

URIS = [
    "s3://ckpt/run",
    "s3://ckpt/run/",
    "s3://ckpt//deep/run//",
    "s3://ckpt",
    "s3://my.bucket-1/a/b",
    "s3://ab/run",  # two characters: too short
    "s3://Upper/run",
    "s3://-dash/run",
    "s3://dash-/run",
    "s3://" + "a" * 63 + "/run",
    "s3://" + "a" * 64 + "/run",
    "s3:///run",
    "s3://bucket_with_underscore/run",
]


@pytest.mark.parametrize("uri", URIS)
def test_a_location_is_read_alike(uri: str) -> None:
    try:
        theirs: tuple[str, str] | None = storage.parse_s3(uri)
    except TrainerError:
        theirs = None
    try:
        ours: tuple[str, str] | None = sdk.parse_s3_uri("trainer.checkpoint.dir", uri)
    except SdkError:
        ours = None
    assert ours == theirs


@pytest.mark.parametrize(
    ("env", "region"),
    [
        ({}, "us-east-1"),
        ({"AWS_DEFAULT_REGION": "eu-west-1"}, "eu-west-1"),
        ({"AWS_REGION": "us-west-2", "AWS_DEFAULT_REGION": "eu-west-1"}, "us-west-2"),
        ({"AWS_REGION": "", "AWS_DEFAULT_REGION": "ap-south-1"}, "ap-south-1"),
    ],
)
def test_both_sign_for_the_same_region(env: dict[str, str], region: str, monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("AWS_REGION", "AWS_DEFAULT_REGION"):
        monkeypatch.delenv(name, raising=False)
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    assert sdk.trainer_region() == storage.s3_region() == region


def test_the_same_settings_are_checked() -> None:
    assert sdk.S3_SETTINGS == storage.S3_SETTINGS
    from fsdp_trainer.config import known_flags

    flags = set(known_flags())
    assert {f"--{section}.{name}" for section, name in storage.S3_SETTINGS} <= flags
