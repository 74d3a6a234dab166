"""``s3://`` locations of a run are checked before anything starts (``fsdp_sdk.aws.checkpoints``), against moto.

Each bad input is one line naming the setting, what is wrong and what to do, exit 2: a URI without a bucket,
an endpoint nothing answers on, a bucket in another region than the trainer signs for, no credentials.
"""

from __future__ import annotations

import socket
import subprocess
import sys
from pathlib import Path

import boto3
import pytest

from fsdp_sdk.aws.checkpoints import check_s3_location, check_s3_locations, s3_locations
from fsdp_sdk.errors import ConfigError

FSDP_SDK = str(Path(sys.executable).with_name("fsdp-sdk"))


@pytest.fixture
def buckets(aws):
    s3 = boto3.client("s3", region_name="us-west-2")
    s3.create_bucket(Bucket="ckpt-west", CreateBucketConfiguration={"LocationConstraint": "us-west-2"})
    boto3.client("s3", region_name="eu-west-1").create_bucket(
        Bucket="ckpt-eu", CreateBucketConfiguration={"LocationConstraint": "eu-west-1"}
    )
    return s3


def test_locations_of_a_trainer_section():
    trainer = {
        "checkpoint": {"dir": "s3://a-b/c", "export_hf": "/local"},
        "model": {"name_or_path": "s3://w-x/llama", "tokenizer": None},
    }
    assert s3_locations(trainer) == [
        ("trainer.checkpoint.dir", "s3://a-b/c"),
        ("trainer.model.name_or_path", "s3://w-x/llama"),
    ]


def test_a_reachable_bucket_in_the_signing_region_passes(buckets):
    check_s3_location("trainer.checkpoint.dir", "s3://ckpt-west/run/checkpoints")
    check_s3_locations({"checkpoint": {"dir": "s3://ckpt-west/x", "export_hf": "s3://ckpt-west/y"}})


def _message(error: pytest.ExceptionInfo[ConfigError]) -> str:
    text = str(error.value)
    assert "\n" not in text and error.value.exit_code == 2
    return text


def test_bad_s3_locations_are_one_line_each(buckets, monkeypatch):
    field = "trainer.checkpoint.dir"
    with pytest.raises(ConfigError) as e:
        check_s3_location(field, "s3:///checkpoints")
    assert "names no valid bucket" in _message(e) and "s3://BUCKET/PREFIX" in _message(e)

    with pytest.raises(ConfigError) as e:
        check_s3_location(field, "s3://no-such-bucket/x")
    assert "bucket no-such-bucket does not exist" in _message(e)

    with pytest.raises(ConfigError) as e:
        check_s3_location(field, "s3://ckpt-eu/x")
    assert "bucket ckpt-eu is in eu-west-1, but the trainer signs for us-west-2" in _message(e)
    assert "AWS_REGION=eu-west-1" in _message(e)

    with socket.socket() as sock:  # a loopback port nothing listens on
        sock.bind(("127.0.0.1", 0))
        closed = sock.getsockname()[1]
    monkeypatch.setenv("AWS_ENDPOINT_URL", f"http://127.0.0.1:{closed}")
    with pytest.raises(ConfigError) as e:
        check_s3_location(field, "s3://ckpt-west/x")
    assert f"cannot reach the S3 endpoint http://127.0.0.1:{closed}" in _message(e)


def test_no_credentials_through_the_cli_exits_2_before_anything_starts(buckets, monkeypatch, tmp_path):
    """``fsdp-sdk run`` refuses before launching: exit 2, one line, no run directory made."""
    for name in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY"):
        monkeypatch.delenv(name)
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")
    monkeypatch.setenv("FSDP_SDK_STATE_DIR", str(tmp_path / "state"))
    done = subprocess.run(
        [
            FSDP_SDK,
            "run",
            "--backend",
            "local",
            "--preset",
            "tiny",
            "--steps",
            "2",
            "--",
            "--checkpoint.dir",
            "s3://ckpt-west/run",
        ],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=tmp_path,
    )
    assert done.returncode == 2, done.stderr
    lines = [line for line in done.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and "trainer.checkpoint.dir" in lines[0] and "no AWS credentials" in lines[0], lines
    assert not list((tmp_path / "state").rglob("runs/*")), "nothing started"


def test_trainer_validation_refuses_a_uri_without_a_bucket():
    from fsdp_trainer.config import TrainerConfig
    from fsdp_trainer.errors import ConfigError as TrainerConfigError

    for flag, section, name in (
        ("--checkpoint.dir", "checkpoint", "dir"),
        ("--checkpoint.export_hf", "checkpoint", "export_hf"),
        ("--model.name_or_path", "model", "name_or_path"),
    ):
        with pytest.raises(TrainerConfigError, match=rf"^{flag}: 's3://' names no valid bucket"):
            TrainerConfig.from_dict({"data": {"source": "synthetic"}, section: {name: "s3://"}})


@pytest.fixture
def authenticated(buckets, moto_auth):
    """moto checking every request's signature from here on; an IAM user with a key and no policy."""
    iam = boto3.client("iam")
    iam.create_user(UserName="launcher")
    key = iam.create_access_key(UserName="launcher")["AccessKey"]
    moto_auth()
    return key


ENVIRONMENT = "the environment (AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY, AWS_SESSION_TOKEN)"
PROFILE = "the shared credentials file (AWS_SHARED_CREDENTIALS_FILE, ~/.aws/credentials), profile launcher"


@pytest.mark.parametrize(
    "key_id, secret, from_profile, said",
    [
        ("AKIAWRONGWRONGWRONG0", None, False, "InvalidAccessKeyId: the access key id is not known to S3"),
        (
            None,
            "not-the-secret",
            False,
            "SignatureDoesNotMatch: the secret access key does not match the access key id",
        ),
        ("AKIAWRONGWRONGWRONG0", None, True, "InvalidAccessKeyId: the access key id is not known to S3"),
    ],
    ids=["wrong-key-id", "wrong-secret", "wrong-key-id-in-a-profile"],
)
def test_rejected_credentials_are_said_with_where_they_came_from(
    authenticated, monkeypatch, tmp_path, key_id, secret, from_profile, said
):
    """What the launching machine checks first (``fsdp-sdk run`` stops there): credentials S3 rejects, said as
    such with their source (the environment, a profile), not as a denial (a HEAD's bare 403 says neither apart)."""
    key_id = key_id or authenticated["AccessKeyId"]
    secret = secret or authenticated["SecretAccessKey"]
    source = ENVIRONMENT
    if from_profile:
        for name in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY"):
            monkeypatch.delenv(name)
        credentials = tmp_path / "credentials"
        credentials.write_text(f"[launcher]\naws_access_key_id = {key_id}\naws_secret_access_key = {secret}\n")
        monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(credentials))
        monkeypatch.setenv("AWS_PROFILE", "launcher")
        source = PROFILE
    else:
        monkeypatch.setenv("AWS_ACCESS_KEY_ID", key_id)
        monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", secret)
    with pytest.raises(ConfigError) as e:
        check_s3_location("trainer.checkpoint.dir", "s3://ckpt-west/run")
    assert _message(e) == (
        f"trainer.checkpoint.dir: S3 rejected the credentials for s3://ckpt-west/run ({said}); they came from "
        f"{source}; access key id {key_id[:4]}...{key_id[-4:]}; fix or replace them (or unset them to use another "
        "source)"
    )


def test_a_key_that_no_policy_allows_is_said_as_a_denial(authenticated, monkeypatch):
    key_id = authenticated["AccessKeyId"]
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", key_id)
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", authenticated["SecretAccessKey"])
    with pytest.raises(ConfigError) as e:
        check_s3_location("trainer.checkpoint.dir", "s3://ckpt-west/run")
    assert _message(e) == (
        f"trainer.checkpoint.dir: S3 accepted the credentials (from {ENVIRONMENT}; access key id "
        f"{key_id[:4]}...{key_id[-4:]}) but a policy denies access to bucket ckpt-west; allow s3:ListBucket, "
        "s3:GetObject, s3:PutObject and s3:DeleteObject on it for this identity"
    )


POD_IDENTITY = "the container credentials endpoint (EKS Pod Identity or ECS)"
INSTANCE_ROLE = "the instance role (instance metadata)"


def _from_a_role(monkeypatch, endpoints, source: str) -> None:
    """The credentials come from ``source`` (Pod Identity or the instance role) alone: none in the environment."""
    for name in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN"):
        monkeypatch.delenv(name, raising=False)
    environment = (
        endpoints.pod_identity_environment() if source == POD_IDENTITY else endpoints.instance_metadata_environment()
    )
    for name, value in environment.items():
        monkeypatch.setenv(name, value)


@pytest.mark.parametrize("source", [POD_IDENTITY, INSTANCE_ROLE], ids=["pod-identity", "instance-role"])
def test_a_roles_credentials_are_said_with_the_role_they_came_from(
    buckets, role_credentials, moto_auth, monkeypatch, source
):
    """A role's credentials, accepted by S3 but allowed nothing, are said as a denial with their source; the same
    role's credentials with a session token S3 does not take are said as rejected, with the same source."""
    _from_a_role(monkeypatch, role_credentials, source)
    moto_auth()
    key_id = role_credentials.credentials["AccessKeyId"]
    shown = f"{key_id[:4]}...{key_id[-4:]}"
    with pytest.raises(ConfigError) as e:
        check_s3_location("trainer.checkpoint.dir", "s3://ckpt-west/run")
    assert _message(e) == (
        f"trainer.checkpoint.dir: S3 accepted the credentials (from {source}; access key id {shown}) but a policy "
        "denies access to bucket ckpt-west; allow s3:ListBucket, s3:GetObject, s3:PutObject and s3:DeleteObject on "
        "it for this identity"
    )
    asked = (
        "/v1/credentials" if source == POD_IDENTITY else "/latest/meta-data/iam/security-credentials/fsdp-sdk-node-role"
    )
    assert ("GET", asked) in role_credentials.requests, role_credentials.requests

    role_credentials.credentials["Token"] = "not-the-session-token"
    with pytest.raises(ConfigError) as e:
        check_s3_location("trainer.checkpoint.dir", "s3://ckpt-west/run")
    assert _message(e) == (
        "trainer.checkpoint.dir: S3 rejected the credentials for s3://ckpt-west/run (InvalidToken: the session token "
        f"is not valid); they came from {source}; access key id {shown}; fix or replace them (or unset them to use "
        "another source)"
    )


def test_an_expired_session_token_is_said_as_rejected_with_its_source(aws, expired_token_s3, monkeypatch):
    """Temporary credentials in the environment whose session token S3 says has expired: a HEAD's bare 400 is asked
    again by a listing, whose ExpiredToken names it."""
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "ASIAEXPIREDEXPIRED01")
    monkeypatch.setenv("AWS_SESSION_TOKEN", "a-session-token")
    monkeypatch.setenv("AWS_ENDPOINT_URL", expired_token_s3)
    with pytest.raises(ConfigError) as e:
        check_s3_location("trainer.checkpoint.dir", "s3://ckpt-west/run")
    assert _message(e) == (
        "trainer.checkpoint.dir: S3 rejected the credentials for s3://ckpt-west/run (ExpiredToken: the session token "
        f"has expired); they came from {ENVIRONMENT}; access key id ASIA...ED01; fix or replace them (or unset them "
        "to use another source)"
    )


def test_rejected_credentials_through_the_cli_exit_2_naming_their_source(authenticated, monkeypatch, tmp_path):
    """``fsdp-sdk run`` with a wrong key id in the environment: the one line it prints, before anything starts."""
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "AKIAWRONGWRONGWRONG0")
    monkeypatch.setenv("FSDP_SDK_STATE_DIR", str(tmp_path / "state"))
    run = [FSDP_SDK, "run", "--backend", "local", "--preset", "tiny", "--steps", "2"]
    done = subprocess.run(
        [*run, "--", "--checkpoint.dir", "s3://ckpt-west/run"],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=tmp_path,
    )
    assert done.returncode == 2, done.stderr
    lines = [line for line in done.stderr.splitlines() if line.strip()]
    assert lines == [
        "Error: trainer.checkpoint.dir: S3 rejected the credentials for s3://ckpt-west/run (InvalidAccessKeyId: the "
        f"access key id is not known to S3); they came from {ENVIRONMENT}; access key id AKIA...ONG0; fix or replace "
        "them (or unset them to use another source)"
    ], lines
    assert not list((tmp_path / "state").rglob("runs/*")), "nothing started"


def test_the_sdk_and_the_trainer_say_credentials_alike():
    """The launching machine's check and the trainer's (in the pod) name rejected credentials and their sources in
    the same words."""
    storage = pytest.importorskip("fsdp_trainer.storage")
    from fsdp_sdk.aws import checkpoints

    assert {code: said for code, (_, said) in storage.REJECTED_CREDENTIALS.items()} == checkpoints._REJECTED
    assert checkpoints._SOURCES == storage.CREDENTIAL_SOURCES
