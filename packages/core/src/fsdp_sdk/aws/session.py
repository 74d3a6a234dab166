"""boto3 sessions and clients, and what botocore errors mean for the user.

One session per region (and ``AWS_PROFILE``) is created on first use and cached;
clients come from it. Credentials, the profile and ``AWS_ENDPOINT_URL`` (tests
point it at a moto server) are read by boto3 itself, from its usual sources.

Every AWS call of the SDK runs inside :func:`aws_errors`, which turns botocore's
exceptions into one line saying what to do::

    from fsdp_sdk.aws.session import aws_client, aws_errors

    eks = aws_client("eks", "us-west-2")
    with aws_errors("eks", "describe the cluster"):
        eks.describe_cluster(name="demo")
"""

from __future__ import annotations

import contextlib
import functools
import os
import threading
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

from fsdp_sdk.errors import BackendError, ConfigError, FsdpSdkError

if TYPE_CHECKING:
    from boto3.session import Session

__all__ = ["AwsError", "aws_client", "aws_errors", "aws_session", "error_code", "reset_sessions", "translate"]

_LOCK = threading.Lock()

# botocore error codes, by what the user must do about them.
_EXPIRED = {"ExpiredToken", "ExpiredTokenException", "RequestExpired", "TokenRefreshRequired"}
_BAD_CREDENTIALS = {
    "InvalidClientTokenId",
    "UnrecognizedClientException",
    "SignatureDoesNotMatch",
    "AuthFailure",
    "InvalidAccessKeyId",
    "IncompleteSignature",
}
_DENIED = {
    "AccessDenied",
    "AccessDeniedException",
    "UnauthorizedOperation",
    "UnauthorizedException",
    "Client.UnauthorizedOperation",
}
_THROTTLED = {"Throttling", "ThrottlingException", "RequestLimitExceeded", "TooManyRequestsException"}
_NOT_ENABLED = {"OptInRequired", "InvalidRegion", "UnrecognizedRegion"}
# IAM's service prefix where it differs from the client's name.
_IAM_PREFIX = {"service-quotas": "servicequotas"}

_CREDENTIALS_FIX = (
    "run 'aws configure' (or 'aws sso login --profile NAME' and set AWS_PROFILE=NAME), "
    "or set AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY"
)


class AwsError(BackendError):
    """An AWS API call failed for a reason other than the user's credentials or input.

    :param code: the error code AWS returned (``ResourceInUseException``), or ``""``.
    """

    def __init__(self, message: str, code: str = "") -> None:
        super().__init__(message)
        self.code = code


@functools.cache
def _session(region: str, profile: str | None) -> Session:
    import boto3  # imported on first use: the CLI starts without it

    return boto3.session.Session(region_name=region, profile_name=profile)


def aws_session(region: str) -> Session:
    """The boto3 session for ``region`` (and ``$AWS_PROFILE``), created on first use.

    :raises ConfigError: the profile named by ``AWS_PROFILE`` does not exist.
    """
    profile = os.environ.get("AWS_PROFILE") or None
    with _LOCK:
        try:
            return _session(region, profile)
        except Exception as error:  # botocore's ProfileNotFound, imported lazily
            if type(error).__name__ == "ProfileNotFound":
                raise ConfigError(
                    "AWS_PROFILE", f"profile {profile!r} does not exist", "run 'aws configure --profile NAME'"
                ) from None
            raise


@functools.cache
def _client(service: str, region: str, profile: str | None) -> Any:
    from botocore.config import Config

    config = Config(retries={"max_attempts": 6, "mode": "adaptive"}, user_agent_extra="fsdp-sdk")
    # boto3-stubs types client() per literal service name (client classes we do not install); here it is a string
    session: Any = _session(region, profile)
    return session.client(service, config=config)


def aws_client(service: str, region: str) -> Any:
    """A boto3 client of ``service`` in ``region`` (cached; thread-safe to share).

    :param service: the boto3 service name (``ec2``, ``eks``, ``sts``, ``iam``, ``service-quotas``...).
    :param region: the AWS region.
    """
    aws_session(region)
    with _LOCK:
        return _client(service, region, os.environ.get("AWS_PROFILE") or None)


def reset_sessions() -> None:
    """Forget every cached session and client (after credentials or ``AWS_ENDPOINT_URL`` changed)."""
    with _LOCK:
        _client.cache_clear()
        _session.cache_clear()


def error_code(error: BaseException) -> str:
    """The AWS error code of a botocore ``ClientError`` (``""`` for other exceptions)."""
    response = getattr(error, "response", None)
    if isinstance(response, dict):
        return str((response.get("Error") or {}).get("Code") or "")
    return ""


def translate(error: BaseException, service: str, doing: str) -> FsdpSdkError | None:
    """The one-line error for a botocore exception, or ``None`` when ``error`` is not one.

    :param error: the exception raised by boto3/botocore.
    :param service: the boto3 service name the call went to.
    :param doing: what the SDK was doing, as a verb phrase (``describe the cluster``).
    """
    kind = type(error).__name__
    module = type(error).__module__
    if not module.startswith("botocore"):
        return None
    if kind in ("NoCredentialsError", "PartialCredentialsError", "CredentialRetrievalError"):
        return ConfigError("AWS credentials", f"none were found to {doing}", _CREDENTIALS_FIX)
    if kind in ("TokenRetrievalError", "SSOTokenLoadError", "UnauthorizedSSOTokenError", "SSOError"):
        return ConfigError("AWS credentials", "the AWS SSO session has expired", "run 'aws sso login' and try again")
    if kind == "NoRegionError":
        return ConfigError("cluster.region", "no AWS region is set", "set cluster.region (AWS_REGION in .env)")
    if kind in ("EndpointConnectionError", "ConnectTimeoutError", "ConnectionClosedError", "ReadTimeoutError"):
        where = getattr(error, "kwargs", {}).get("endpoint_url") or service
        return AwsError(f"{service}: cannot reach {where} to {doing}; check the network and cluster.region")
    if kind == "ParamValidationError":
        return AwsError(f"{service}: invalid request to {doing}: {' '.join(str(error).split())}")
    code = error_code(error)
    if not code:
        return AwsError(f"{service}: failed to {doing}: {' '.join(str(error).split())}")
    message = " ".join(str((getattr(error, "response", {}).get("Error") or {}).get("Message") or "").split())
    operation = getattr(error, "operation_name", "") or ""
    action = f"{_IAM_PREFIX.get(service, service)}:{operation}" if operation else service
    if code in _EXPIRED:
        return ConfigError(
            "AWS credentials",
            "the AWS session token has expired",
            "refresh it ('aws sso login', or new temporary credentials) and try again",
        )
    if code in _BAD_CREDENTIALS:
        return ConfigError("AWS credentials", f"AWS rejected them ({code})", _CREDENTIALS_FIX)
    if code in _DENIED:
        return AwsError(
            f"{service}: access denied to {action} (needed to {doing}); ask your AWS administrator to allow "
            f"{action} for this identity ('aws sts get-caller-identity' shows it)",
            code,
        )
    if code in _THROTTLED:
        return AwsError(f"{service}: AWS throttled the requests to {doing} ({code}); wait a minute and try again", code)
    if code in _NOT_ENABLED:
        return ConfigError(
            "cluster.region",
            f"is not enabled for this account ({code}: {message})",
            "enable it or choose another region",
        )
    return AwsError(f"{service}: failed to {doing}: {code}: {message}", code)


@contextlib.contextmanager
def aws_errors(service: str, doing: str) -> Iterator[None]:
    """Turn botocore exceptions raised inside the block into one-line SDK errors.

    :param service: the boto3 service name the calls go to (for the IAM action in messages).
    :param doing: what the block does, as a verb phrase (``list the node groups``).
    :raises ConfigError: missing, expired or rejected credentials; no region.
    :raises AwsError: access denied (naming the IAM action), throttling, an unreachable endpoint, any other AWS error.
    """
    try:
        yield
    except FsdpSdkError:
        raise
    except Exception as error:
        translated = translate(error, service, doing)
        if translated is None:
            raise
        raise translated from error
