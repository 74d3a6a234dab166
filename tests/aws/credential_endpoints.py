"""The two role credential sources a pod meets, on loopback: the EKS Pod Identity Agent's container credentials
endpoint and the instance metadata service (IMDSv2) of the node's instance role.

Each answers as the real one does, as botocore 1.44.18 reads them (``botocore/credentials.py``, ``ContainerProvider``
and ``InstanceMetadataProvider``; ``botocore/utils.py``, ``ContainerMetadataFetcher`` and
``InstanceMetadataFetcher``):

- Pod Identity: EKS sets ``AWS_CONTAINER_CREDENTIALS_FULL_URI`` (``http://169.254.170.23/v1/credentials``) and
  ``AWS_CONTAINER_AUTHORIZATION_TOKEN_FILE`` in the pod (the AWS SDKs and Tools guide, "Container credential
  provider"); the SDK sends the file's token as the ``Authorization`` header and gets ``AccessKeyId``,
  ``SecretAccessKey``, ``Token``, ``AccountId`` and ``Expiration`` as JSON. A request without the token is refused.
- IMDSv2: ``PUT /latest/api/token`` (with ``X-aws-ec2-metadata-token-ttl-seconds``) gives a session token; with it
  as ``X-aws-ec2-metadata-token``, ``GET /latest/meta-data/iam/security-credentials/`` names the role and
  ``GET .../ROLE`` gives ``Code: Success`` and the keys. ``AWS_EC2_METADATA_SERVICE_ENDPOINT`` points the SDK here.
"""

from __future__ import annotations

import json
import threading
from datetime import UTC, datetime, timedelta
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

POD_IDENTITY_PATH = "/v1/credentials"
IMDS_ROLE = "fsdp-sdk-node-role"


class CredentialEndpoints:
    """A loopback server answering as the Pod Identity Agent and as IMDSv2, handing out ``credentials``.

    :param credentials: ``AccessKeyId``, ``SecretAccessKey`` and ``Token`` (as STS gives them); set before use.
    """

    def __init__(self, directory: Path) -> None:
        self.credentials: dict[str, str] = {}
        self.requests: list[tuple[str, str]] = []
        self.token_file = directory / "eks-pod-identity-token"
        self.token_file.write_text("pod-identity-service-account-token")
        self._imds_tokens: set[str] = set()
        endpoints = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, format: str, *args: Any) -> None:
                pass

            def _answer(self, status: int, body: str, content_type: str = "text/plain") -> None:
                data = body.encode()
                self.send_response(status)
                self.send_header("Content-Type", content_type)
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def do_PUT(self) -> None:
                endpoints.requests.append(("PUT", self.path))
                if self.path != "/latest/api/token" or not self.headers.get("X-aws-ec2-metadata-token-ttl-seconds"):
                    self._answer(400, "")
                    return
                token = f"imds-session-{len(endpoints._imds_tokens)}"
                endpoints._imds_tokens.add(token)
                self._answer(200, token)

            def do_GET(self) -> None:
                endpoints.requests.append(("GET", self.path))
                keys = endpoints.credentials
                expiration = (datetime.now(UTC) + timedelta(hours=6)).strftime("%Y-%m-%dT%H:%M:%SZ")
                if self.path == POD_IDENTITY_PATH:
                    if self.headers.get("Authorization") != endpoints.token_file.read_text():
                        self._answer(401, json.dumps({"message": "Service account token cannot be empty"}))
                        return
                    body = {**keys, "AccountId": "123456789012", "Expiration": expiration}
                    self._answer(200, json.dumps(body), "application/json")
                    return
                if self.headers.get("X-aws-ec2-metadata-token") not in endpoints._imds_tokens:
                    self._answer(401, "")
                    return
                prefix = "/latest/meta-data/iam/security-credentials/"
                if self.path == prefix:
                    self._answer(200, IMDS_ROLE)
                elif self.path == prefix + IMDS_ROLE:
                    body = {
                        "Code": "Success",
                        "LastUpdated": datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
                        "Type": "AWS-HMAC",
                        **keys,
                        "Expiration": expiration,
                    }
                    self._answer(200, json.dumps(body), "application/json")
                else:
                    self._answer(404, "")

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self._server.server_address[1]}"
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)
        self._thread.start()

    def pod_identity_environment(self) -> dict[str, str]:
        """What EKS sets in a pod whose service account has a Pod Identity association (here, on loopback)."""
        return {
            "AWS_CONTAINER_CREDENTIALS_FULL_URI": self.url + POD_IDENTITY_PATH,
            "AWS_CONTAINER_AUTHORIZATION_TOKEN_FILE": str(self.token_file),
        }

    def instance_metadata_environment(self) -> dict[str, str]:
        """What points the SDK at this instance metadata service instead of 169.254.169.254."""
        return {"AWS_EC2_METADATA_SERVICE_ENDPOINT": self.url + "/"}

    def close(self) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(timeout=10)
