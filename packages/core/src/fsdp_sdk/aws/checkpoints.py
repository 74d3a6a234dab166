"""S3 locations of a run (checkpoints, export, pretrained weights), checked before anything starts.

The trainer reads and writes ``s3://`` locations itself (``fsdp_trainer.storage``, through
s3torchconnector); this module makes sure, from the machine that launches, that each one
can work before a process is started or a pod is scheduled::

    from fsdp_sdk.aws.checkpoints import check_s3_locations

    check_s3_locations(config.trainer)   # raises ConfigError (exit 2): one line per problem

The checks (boto3 ``head_bucket`` then ``get_bucket_location``, one attempt, short timeouts):
the URI names a bucket; the endpoint answers (``AWS_ENDPOINT_URL_S3`` / ``AWS_ENDPOINT_URL``);
credentials exist and are accepted; the bucket exists; it is in the region the trainer signs
for (``AWS_REGION`` / ``AWS_DEFAULT_REGION``, else us-east-1, as ``fsdp_trainer.storage``).
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from typing import Any

from fsdp_sdk.errors import ConfigError

__all__ = ["S3_SETTINGS", "check_s3_location", "check_s3_locations", "parse_s3_uri", "s3_locations", "trainer_region"]

#: The trainer settings that may hold an ``s3://`` location.
S3_SETTINGS = (
    ("checkpoint", "dir"),
    ("checkpoint", "resume"),
    ("checkpoint", "export_hf"),
    ("model", "name_or_path"),
    ("model", "tokenizer"),
)
_BUCKET = re.compile(r"[a-z0-9][a-z0-9.\-]{1,61}[a-z0-9]")
_CREDENTIALS_FIX = "set AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY, AWS_PROFILE, or run where an IAM role applies"
#: S3's codes for credentials it does not accept (as opposed to a policy that denies them), in the trainer's words
#: (``fsdp_trainer.storage.REJECTED_CREDENTIALS``).
_REJECTED = {
    "InvalidAccessKeyId": "the access key id is not known to S3",
    "SignatureDoesNotMatch": "the secret access key does not match the access key id",
    "ExpiredToken": "the session token has expired",
    "InvalidToken": "the session token is not valid",
}
#: botocore's credential provider names, in words (as ``fsdp_trainer.storage.CREDENTIAL_SOURCES``).
_SOURCES = {
    "env": "the environment (AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY, AWS_SESSION_TOKEN)",
    "shared-credentials-file": "the shared credentials file (AWS_SHARED_CREDENTIALS_FILE, ~/.aws/credentials)",
    "config-file": "the AWS config file (AWS_CONFIG_FILE, ~/.aws/config)",
    "assume-role": "a role assumed through the AWS profile",
    "assume-role-with-web-identity": "a web identity role (IRSA: AWS_ROLE_ARN, AWS_WEB_IDENTITY_TOKEN_FILE)",
    "container-role": "the container credentials endpoint (EKS Pod Identity or ECS)",
    "iam-role": "the instance role (instance metadata)",
    "sso": "AWS SSO (the profile's sso settings)",
    "custom-process": "the profile's credential_process",
}
_PROFILE_SOURCES = ("shared-credentials-file", "config-file", "assume-role", "sso", "custom-process")


def parse_s3_uri(field: str, uri: str) -> tuple[str, str]:
    """(bucket, prefix) of ``s3://bucket/prefix``.

    :raises ConfigError: the URI names no valid bucket.
    """
    bucket, _, prefix = uri.removeprefix("s3://").partition("/")
    if not _BUCKET.fullmatch(bucket):
        raise ConfigError(
            field,
            f"{uri!r} names no valid bucket",
            "write s3://BUCKET/PREFIX (a bucket name is 3-63 lower-case letters, digits, '.' or '-')",
        )
    return bucket, prefix.strip("/")


def trainer_region() -> str:
    """The region the trainer's S3 client signs for."""
    return os.environ.get("AWS_REGION") or os.environ.get("AWS_DEFAULT_REGION") or "us-east-1"


def s3_locations(trainer: Mapping[str, Any]) -> list[tuple[str, str]]:
    """(setting, URI) of every ``s3://`` location in a trainer section (``{"checkpoint": {"dir": ...}}``)."""
    found = []
    for section, name in S3_SETTINGS:
        value = (trainer.get(section) or {}).get(name)
        if isinstance(value, str) and value.startswith("s3://"):
            found.append((f"trainer.{section}.{name}", value))
    return found


def _session(region: str) -> Any:
    import boto3

    return boto3.session.Session(region_name=region, profile_name=os.environ.get("AWS_PROFILE") or None)


def _client(region: str, session: Any = None) -> Any:
    from botocore.config import Config

    config = Config(connect_timeout=3, read_timeout=10, retries={"max_attempts": 1, "mode": "standard"})
    return (session or _session(region)).client("s3", config=config)


def credential_source(session: Any) -> str:
    """Where ``session`` found its credentials, in words, with the access key id shortened (``AKIA...RNG0``)."""
    try:
        credentials = session.get_credentials()
    except Exception:
        return "the standard AWS chain"
    if credentials is None:
        return "nowhere (no credentials found)"
    method = getattr(credentials, "method", "") or ""
    where = _SOURCES.get(method, method or "the standard AWS chain")
    profile = session.profile_name if os.environ.get("AWS_PROFILE") else None
    if method in _PROFILE_SOURCES and profile:
        where += f", profile {profile}"
    key = getattr(credentials, "access_key", "") or ""
    return f"{where}; access key id {key[:4]}...{key[-4:]}" if len(key) > 8 else where


def check_s3_location(field: str, uri: str, region: str | None = None) -> None:
    """Check that ``uri`` names a bucket that exists, is reachable with the current credentials, and is in ``region``.

    :param field: the setting, for the message (``trainer.checkpoint.dir``).
    :param region: the region the trainer signs for (default: :func:`trainer_region`).
    :raises ConfigError: one line saying what is wrong and how to fix it.
    """
    bucket, _ = parse_s3_uri(field, uri)
    region = region or trainer_region()
    session = _session(region)
    s3 = _client(region, session)
    endpoint = s3.meta.endpoint_url
    try:
        try:
            s3.head_bucket(Bucket=bucket)
        except Exception as error:
            # HEAD's answer has no body: a 400 or 403 says neither rejected credentials nor a denying policy apart;
            # a listing's error says which
            if _code(error) not in ("400", "403"):
                raise
            s3.list_objects_v2(Bucket=bucket, MaxKeys=1)
            raise
        location = s3.get_bucket_location(Bucket=bucket).get("LocationConstraint") or "us-east-1"
    except Exception as error:
        raise _explain(error, field, uri, bucket, region, endpoint, lambda: credential_source(session)) from None
    if location == "EU":  # the legacy name of eu-west-1
        location = "eu-west-1"
    if location != region:
        raise ConfigError(
            field,
            f"bucket {bucket} is in {location}, but the trainer signs for {region}",
            f"set AWS_REGION={location}, or use a bucket in {region}",
        )


def _code(error: Exception) -> str:
    response = getattr(error, "response", None) or {}
    return str((response.get("Error") or {}).get("Code") or "")


def _explain(
    error: Exception, field: str, uri: str, bucket: str, region: str, endpoint: str, source: Any = None
) -> ConfigError:
    """The one line for ``error``; ``source()``: where the credentials came from, in words."""
    kind = type(error).__name__
    if kind in ("NoCredentialsError", "PartialCredentialsError", "CredentialRetrievalError"):
        return ConfigError(field, f"no AWS credentials were found to reach {uri}", _CREDENTIALS_FIX)
    if kind in ("EndpointConnectionError", "ConnectTimeoutError", "ConnectionClosedError", "ReadTimeoutError"):
        return ConfigError(
            field,
            f"cannot reach the S3 endpoint {endpoint}",
            "check AWS_ENDPOINT_URL_S3 / AWS_ENDPOINT_URL, AWS_REGION and the network",
        )
    response = getattr(error, "response", None) or {}
    code = str((response.get("Error") or {}).get("Code") or "")
    headers = (response.get("ResponseMetadata") or {}).get("HTTPHeaders") or {}
    actual = headers.get("x-amz-bucket-region")
    if code in ("404", "NoSuchBucket", "NotFound"):
        return ConfigError(field, f"bucket {bucket} does not exist", f"create it in {region} or fix the URI")
    if code in ("301", "PermanentRedirect", "AuthorizationHeaderMalformed", "IllegalLocationConstraintException"):
        where = f"in {actual}" if actual else "in another region"
        return ConfigError(
            field, f"bucket {bucket} is {where}, not {region}", f"set AWS_REGION={actual or 'its region'}"
        )
    where = source() if source is not None else "the standard AWS chain"
    if code in _REJECTED:
        return ConfigError(
            field,
            f"S3 rejected the credentials for {uri} ({code}: {_REJECTED[code]}); they came from {where}",
            "fix or replace them (or unset them to use another source)",
        )
    if code in ("403", "AccessDenied", "Forbidden"):
        return ConfigError(
            field,
            f"S3 accepted the credentials (from {where}) but a policy denies access to bucket {bucket}",
            "allow s3:ListBucket, s3:GetObject, s3:PutObject and s3:DeleteObject on it for this identity",
        )
    detail = code or " ".join(str(error).split())[:200]
    return ConfigError(field, f"cannot use {uri}: {detail}", "check the bucket, AWS_REGION and the credentials")


def check_s3_locations(trainer: Mapping[str, Any], region: str | None = None) -> None:
    """Check every ``s3://`` location of a trainer section (:func:`check_s3_location`); each bucket once."""
    seen: set[str] = set()
    for field, uri in s3_locations(trainer):
        bucket, _ = parse_s3_uri(field, uri)
        if bucket not in seen:
            seen.add(bucket)
            check_s3_location(field, uri, region)
