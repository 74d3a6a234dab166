"""botocore errors become one-line ConfigError / AwsError messages that say what to do."""

from __future__ import annotations

import pytest

from fsdp_sdk.aws.session import AwsError, aws_client, aws_errors
from fsdp_sdk.errors import ConfigError


def test_sessions_and_clients_are_shared_and_talk_to_the_endpoint(aws: str) -> None:
    sts = aws_client("sts", "us-west-2")
    assert aws_client("sts", "us-west-2") is sts and aws_client("sts", "eu-west-1") is not sts
    with aws_errors("sts", "check the AWS credentials"):
        assert sts.get_caller_identity()["Account"].isdigit()


@pytest.mark.parametrize(
    ("code", "kind", "expected"),
    [
        ("ExpiredToken", ConfigError, "AWS credentials: the AWS session token has expired; refresh it"),
        (
            "InvalidClientTokenId",
            ConfigError,
            "AWS credentials: AWS rejected them (InvalidClientTokenId); run 'aws configure'",
        ),
        (
            "AccessDenied",
            AwsError,
            "sts: access denied to sts:GetCallerIdentity (needed to check the AWS credentials); ask your AWS "
            "administrator to allow sts:GetCallerIdentity",
        ),
        ("Throttling", AwsError, "sts: AWS throttled the requests to check the AWS credentials (Throttling)"),
        ("SomethingElse", AwsError, "sts: failed to check the AWS credentials: SomethingElse: it broke"),
    ],
)
def test_client_errors_say_what_to_do(stubbed, code: str, kind: type, expected: str) -> None:
    sts, stubber = stubbed("sts")
    stubber.add_client_error("get_caller_identity", service_error_code=code, service_message="it broke")
    with pytest.raises(kind) as info, aws_errors("sts", "check the AWS credentials"):
        sts.get_caller_identity()
    assert str(info.value).startswith(expected) and "\n" not in str(info.value)
    assert info.value.exit_code == (2 if kind is ConfigError else 1)


def test_access_denied_names_the_service_quotas_action(stubbed) -> None:
    quotas, stubber = stubbed("service-quotas")
    stubber.add_client_error("get_service_quota", service_error_code="AccessDeniedException")
    with (
        pytest.raises(AwsError, match=r"access denied to servicequotas:GetServiceQuota"),
        aws_errors("service-quotas", "read the quota"),
    ):
        quotas.get_service_quota(ServiceCode="ec2", QuotaCode="L-417A185B")


def test_no_credentials_at_all(aws: str, monkeypatch: pytest.MonkeyPatch) -> None:
    from fsdp_sdk.aws.session import reset_sessions

    monkeypatch.delenv("AWS_ACCESS_KEY_ID")
    monkeypatch.delenv("AWS_SECRET_ACCESS_KEY")
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")
    reset_sessions()
    with (
        pytest.raises(ConfigError, match=r"^AWS credentials: none were found to check them; run 'aws configure'"),
        aws_errors("sts", "check them"),
    ):
        aws_client("sts", "us-west-2").get_caller_identity()


def test_an_unreachable_endpoint(aws: str, monkeypatch: pytest.MonkeyPatch) -> None:
    import socket

    from fsdp_sdk.aws.session import reset_sessions

    with socket.socket() as sock:  # a port nobody listens on
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    monkeypatch.setenv("AWS_ENDPOINT_URL", f"http://127.0.0.1:{port}")
    monkeypatch.setenv("AWS_MAX_ATTEMPTS", "1")
    reset_sessions()
    with (
        pytest.raises(AwsError, match=rf"^eks: cannot reach http://127.0.0.1:{port}/clusters/x to describe it"),
        aws_errors("eks", "describe it"),
    ):
        aws_client("eks", "us-west-2").describe_cluster(name="x")


def test_a_missing_profile(monkeypatch: pytest.MonkeyPatch, tmp_path) -> None:
    from fsdp_sdk.aws.session import aws_session, reset_sessions

    monkeypatch.setenv("AWS_CONFIG_FILE", str(tmp_path / "config"))
    monkeypatch.setenv("AWS_PROFILE", "nope")
    reset_sessions()
    with pytest.raises(ConfigError, match=r"^AWS_PROFILE: profile 'nope' does not exist"):
        aws_session("us-west-2")
    reset_sessions()
