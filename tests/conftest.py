"""Fixtures shared by every test directory: the shared schemas, AWS APIs served by moto over HTTP, stubbed clients.

* ``pytorchjob_crd``, ``trainjob_crd``, ``eksctl_schema``, ``terraform_aws_schema``: files of ``../shared/schemas``
  (skipped with a reason when a checkout has none);

* ``moto_endpoint``: a moto server (``ThreadedMotoServer``) on a free loopback port, once per session;
* ``aws``: that server as the AWS endpoint of one test (``AWS_ENDPOINT_URL``), with fake credentials,
  a clean moto state, and the SDK's cached boto3 sessions forgotten before and after; EKS Pod Identity
  associations, which moto lacks, answered through the Stubber (``pod_identity``) for the checkpoint
  bucket's access (``fsdp_sdk.aws.checkpoint_bucket``);
* ``stubbed``: a boto3 client with botocore's ``Stubber`` active, for the APIs moto lacks (Service
  Quotas, capacity reservation details, EKS add-ons): each stubbed request is checked against the
  real service model, and the test fails if an expected request was not made;
* ``routed``: a client that sends some operations to a stubbed client and the rest to moto;
* ``moto_auth``: ``enforce()`` makes moto check every later request's signature and policies;
* ``role_credentials``: a role's credentials (assumed through moto's STS) handed out on loopback by a stand-in EKS
  Pod Identity Agent and instance metadata service (``tests/aws/credential_endpoints.py``);
* ``expired_token_s3``: an S3 endpoint answering every request as S3 does one signed with an expired session token.

Every test runs under the leak guard (``tests/leakguard.py``, registered here): a process, port or file it leaves
behind fails the run, naming the test; the end of the run lists what skipped tests lacked and how to get it.
"""

from __future__ import annotations

import contextlib
import json
import os
import socket
import threading
import urllib.request
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import Any

import pytest

AWS_TEST_REGION = "us-west-2"
#: The third-party schemas every developer and CI share, beside the project root (never copied into it).
SHARED_SCHEMAS = Path(__file__).resolve().parents[1].parent / "shared" / "schemas"


def pytest_configure(config: pytest.Config) -> None:
    """The leak guard (``tests/leakguard.py``): a test that leaves a process, port or file behind fails the run;
    the end of the run says which tests were skipped for lack of what."""
    from leakguard import LeakGuard

    if not config.pluginmanager.has_plugin("leak-guard"):
        config.pluginmanager.register(LeakGuard(config), "leak-guard")


def shared_schema(name: str) -> Path:
    """A file of ``../shared/schemas``, or skip the test saying where it was looked for."""
    path = SHARED_SCHEMAS / name
    if not path.exists():
        pytest.skip(f"{name} not found at ../shared/schemas/ (the shared schemas sit beside the project root)")
    return path


@pytest.fixture(scope="session")
def pytorchjob_crd() -> Path:
    """The Training Operator's PyTorchJob CRD (release-1.9) from ../shared/schemas."""
    return shared_schema("kubeflow.org_pytorchjobs.yaml")


@pytest.fixture(scope="session")
def trainjob_crd() -> Path:
    """Kubeflow Trainer v2.3.0's TrainJob CRD (the release ``--api trainjob`` renders for) from ../shared/schemas."""
    return shared_schema("trainer-v2.3.0.trainer.kubeflow.org_trainjobs.yaml")


@pytest.fixture(scope="session")
def trainjob_v2_0_crd() -> Path:
    """Kubeflow Trainer v2.0's TrainJob CRD (``spec.labels``, ``spec.podSpecOverrides``) from ../shared/schemas."""
    return shared_schema("trainer.kubeflow.org_trainjobs.yaml")


@pytest.fixture(scope="session")
def clustertrainingruntime_crd() -> Path:
    """Kubeflow Trainer v2.3.0's ClusterTrainingRuntime CRD from ../shared/schemas."""
    return shared_schema("trainer-v2.3.0.trainer.kubeflow.org_clustertrainingruntimes.yaml")


@pytest.fixture(scope="session")
def eksctl_schema() -> Path:
    """eksctl's ClusterConfig (eksctl.io/v1alpha5) JSON schema from ../shared/schemas."""
    return shared_schema("eksctl-clusterconfig-v1alpha5.schema.json")


@pytest.fixture(scope="session")
def terraform_aws_schema() -> Path:
    """The Terraform AWS provider 6.62.0's resources and data sources from ../shared/schemas."""
    return shared_schema("terraform-aws-provider-6.62.0.json")


@pytest.fixture(scope="session")
def moto_endpoint() -> Iterator[str]:
    """A moto server on 127.0.0.1 (a free port), serving every AWS API moto implements."""
    from moto.server import ThreadedMotoServer

    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    host, port = server.get_host_and_port()
    try:
        yield f"http://{host}:{port}"
    finally:
        server.stop()


@pytest.fixture
def pod_identity(stubbed: Callable[..., tuple[Any, Any]]) -> Any:
    """EKS Pod Identity associations in us-west-2 (``aws.pod_identity.PodIdentity``): every call answered by the
    Stubber from its state (checked against the EKS model), the clusters moto's; the ``aws`` fixture routes the
    checkpoint bucket's EKS calls to it."""
    from aws.pod_identity import PodIdentity

    return PodIdentity(stubbed, AWS_TEST_REGION)


@pytest.fixture
def aws(
    moto_endpoint: str, monkeypatch: pytest.MonkeyPatch, tmp_path_factory: pytest.TempPathFactory, pod_identity: Any
) -> Iterator[str]:
    """The moto server as this test's AWS (fake credentials, region us-west-2, state reset); yields its URL."""
    import fsdp_sdk.aws.checkpoint_bucket
    from fsdp_sdk.aws.session import aws_client, reset_sessions

    empty = tmp_path_factory.mktemp("aws-config")
    for name in list(os.environ):
        if name.startswith("AWS_"):
            monkeypatch.delenv(name)
    monkeypatch.setenv("AWS_ENDPOINT_URL", moto_endpoint)
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "testing")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "testing")
    monkeypatch.setenv("AWS_DEFAULT_REGION", AWS_TEST_REGION)
    monkeypatch.setenv("AWS_CONFIG_FILE", str(empty / "config"))
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(empty / "credentials"))
    # moto's EC2 loads thousands of default AMIs on its first call after a reset (seconds); no test reads them
    monkeypatch.setenv("MOTO_EC2_LOAD_DEFAULT_AMIS", "false")
    request = urllib.request.Request(f"{moto_endpoint}/moto-api/reset", method="POST")
    with urllib.request.urlopen(request, timeout=10):
        pass
    reset_sessions()
    monkeypatch.setattr(
        fsdp_sdk.aws.checkpoint_bucket,
        "aws_client",
        lambda service, region: (
            pod_identity if (service, region) == ("eks", AWS_TEST_REGION) else aws_client(service, region)
        ),
    )
    yield moto_endpoint
    reset_sessions()


@pytest.fixture
def stubbed() -> Iterator[Callable[..., tuple[Any, Any]]]:
    """``stubbed("service-quotas")`` -> ``(client, stubber)``: a client whose every call is answered by the stubber.

    Every stubber made here must have been used up when the test ends (``assert_no_pending_responses``).
    """
    import boto3
    from botocore.stub import Stubber

    made: list[Any] = []

    def make(service: str, region: str = AWS_TEST_REGION) -> tuple[Any, Any]:
        client = boto3.session.Session(
            aws_access_key_id="testing", aws_secret_access_key="testing", region_name=region
        ).client(service)
        stubber = Stubber(client)
        stubber.activate()
        made.append(stubber)
        return client, stubber

    yield make
    for stubber in made:
        stubber.assert_no_pending_responses()
        stubber.deactivate()


class _Routed:
    def __init__(self, default: Any, stubbed: Any, operations: frozenset[str]) -> None:
        self._default, self._stubbed, self._operations = default, stubbed, operations

    def __getattr__(self, name: str) -> Any:
        return getattr(self._stubbed if name in self._operations else self._default, name)


@pytest.fixture
def routed() -> Callable[[Any, Any, Iterable[str]], Any]:
    """``routed(default, stubbed, operations)``: a client that calls ``operations`` (snake_case names) on the
    stubbed client and everything else on ``default`` (a moto client)."""

    def make(default: Any, stubbed: Any, operations: Iterable[str]) -> Any:
        return _Routed(default, stubbed, frozenset(operations))

    return make


@pytest.fixture
def moto_auth(aws: str) -> Iterator[Callable[[], None]]:
    """``enforce()``: moto checks every request after it (signatures, then IAM policies), through its
    ``/moto-api/reset-auth`` switch; checking stops when the test ends."""

    def after(count: bytes) -> None:  # requests after the first ``count`` are authenticated
        headers = {"Content-Type": "application/octet-stream"}
        request = urllib.request.Request(f"{aws}/moto-api/reset-auth", data=count, method="POST", headers=headers)
        urllib.request.urlopen(request, timeout=10).close()

    enforced = []

    def enforce() -> None:
        after(b"0")
        enforced.append(True)

    yield enforce
    if enforced:
        after(b"inf")


@pytest.fixture
def role_credentials(aws: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    """A role with no policy, assumed through moto's STS (``ASIA...`` keys and a session token), its keys set on a
    :class:`~aws.credential_endpoints.CredentialEndpoints` (the Pod Identity Agent and IMDSv2 on loopback)."""
    import boto3

    from aws.credential_endpoints import CredentialEndpoints

    iam = boto3.client("iam")
    # the trust policy a Pod Identity role has (https://docs.aws.amazon.com/eks/latest/userguide/pod-id-role.html)
    trust = {
        "Version": "2012-10-17",
        "Statement": [
            {
                "Effect": "Allow",
                "Principal": {"Service": "pods.eks.amazonaws.com"},
                "Action": ["sts:AssumeRole", "sts:TagSession"],
            }
        ],
    }
    role = iam.create_role(RoleName="fsdp-sdk-checkpoints", AssumeRolePolicyDocument=json.dumps(trust))["Role"]
    keys = boto3.client("sts").assume_role(RoleArn=role["Arn"], RoleSessionName="trainer")["Credentials"]
    endpoints = CredentialEndpoints(tmp_path_factory.mktemp("pod-identity"))
    endpoints.credentials = {
        "AccessKeyId": keys["AccessKeyId"],
        "SecretAccessKey": keys["SecretAccessKey"],
        "Token": keys["SessionToken"],
    }
    try:
        yield endpoints
    finally:
        endpoints.close()


#: S3's answer to a request signed with an expired session token (moto does not check tokens' expiry): the error of
#: https://docs.aws.amazon.com/AmazonS3/latest/API/ErrorResponses.html (code ExpiredToken, HTTP 400); a HEAD's
#: answer has the status and no body.
EXPIRED_TOKEN_BODY = (
    b'<?xml version="1.0" encoding="UTF-8"?>\n<Error><Code>ExpiredToken</Code><Message>The provided token has '
    b"expired.</Message><RequestId>4442587FB7D0A2F9</RequestId></Error>"
)


@pytest.fixture
def expired_token_s3() -> Iterator[str]:
    """The URL of a loopback endpoint answering every request with S3's ExpiredToken error."""
    server = socket.create_server(("127.0.0.1", 0))

    def answer() -> None:
        while True:
            try:
                conn, _ = server.accept()
            except OSError:
                return
            with conn:
                head = conn.recv(65536).startswith(b"HEAD ")
                body = b"" if head else EXPIRED_TOKEN_BODY
                status = b"HTTP/1.1 400 Bad Request\r\nContent-Type: application/xml\r\n"
                length = len(EXPIRED_TOKEN_BODY)
                conn.sendall(status + b"Content-Length: %d\r\nConnection: close\r\n\r\n" % length + body)

    thread = threading.Thread(target=answer, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.getsockname()[1]}"
    finally:
        with contextlib.suppress(OSError):
            server.shutdown(socket.SHUT_RDWR)  # wakes the accept() (a close alone does not)
        server.close()
        thread.join(timeout=10)
