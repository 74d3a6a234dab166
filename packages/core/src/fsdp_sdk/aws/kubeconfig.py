"""The kubeconfig of an EKS cluster: built from ``eks:DescribeCluster``, written atomically, kept private.

The file reaches the API server at the cluster's endpoint, trusts its certificate
authority, and authenticates with an ``exec`` entry that runs
``aws eks get-token --cluster-name NAME --region REGION`` (what ``aws eks
update-kubeconfig`` writes), so no token is ever stored. It lives under the state
directory (``<cluster.state_dir>/<backend>/<cluster>/kubeconfig``, mode 0600) and
never touches ``~/.kube/config`` unless :func:`merge_kubeconfig` is called (``fsdp-sdk
up --update-kubeconfig``).
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from fsdp_sdk.aws.session import aws_client, aws_errors
from fsdp_sdk.errors import BackendError

if TYPE_CHECKING:
    from fsdp_sdk.config import Config

__all__ = ["eks_kubeconfig", "kubeconfig_path", "merge_kubeconfig", "render_kubeconfig", "write_private"]

#: The client authentication API the ``aws eks get-token`` exec entry speaks.
EXEC_API_VERSION = "client.authentication.k8s.io/v1beta1"


def kubeconfig_path(config: Config, backend: str) -> Path:
    """Where ``backend`` keeps the kubeconfig of ``cluster.name``: ``<state_dir>/<backend>/<cluster>/kubeconfig``."""
    return Path(config.cluster.state_dir) / backend / config.cluster.name / "kubeconfig"


def render_kubeconfig(
    cluster: str, region: str, endpoint: str, ca_data: str, *, arn: str | None = None, profile: str | None = None
) -> dict[str, Any]:
    """The kubeconfig document (pure) for one EKS cluster.

    :param cluster: the EKS cluster name.
    :param region: its region.
    :param endpoint: the API server URL (``describe_cluster``'s ``endpoint``).
    :param ca_data: base64 of the cluster's CA certificate (``certificateAuthority.data``).
    :param arn: the cluster's ARN, used as the entries' names (as ``aws eks update-kubeconfig`` does).
    :param profile: an ``AWS_PROFILE`` the exec entry runs with.
    """
    name = arn or f"{cluster}.{region}.eksctl.io"
    user: dict[str, Any] = {
        "exec": {
            "apiVersion": EXEC_API_VERSION,
            "command": "aws",
            "args": ["--region", region, "eks", "get-token", "--cluster-name", cluster, "--output", "json"],
            "interactiveMode": "Never",
            "provideClusterInfo": False,
        }
    }
    if profile:
        user["exec"]["env"] = [{"name": "AWS_PROFILE", "value": profile}]
    return {
        "apiVersion": "v1",
        "kind": "Config",
        "preferences": {},
        "clusters": [{"name": name, "cluster": {"server": endpoint, "certificate-authority-data": ca_data}}],
        "users": [{"name": name, "user": user}],
        "contexts": [{"name": name, "context": {"cluster": name, "user": name}}],
        "current-context": name,
    }


def write_private(path: Path, text: str) -> Path:
    """Write ``text`` to ``path`` atomically (:func:`fsdp_sdk.files.write_atomic`), readable by its owner only."""
    from fsdp_sdk.files import write_atomic

    return write_atomic(path, text, mode=0o600)


def eks_kubeconfig(config: Config, path: Path, *, eks: Any = None) -> Path:
    """Describe ``cluster.name`` in ``cluster.region`` and write its kubeconfig to ``path``.

    :param config: the resolved configuration.
    :param path: where to write it (see :func:`kubeconfig_path`).
    :param eks: a boto3 EKS client (default: the cached one for the region).
    :raises BackendError: the cluster does not exist or is not active yet.
    """
    name, region = config.cluster.name, config.cluster.region
    eks = eks or aws_client("eks", region)
    with aws_errors("eks", f"describe the EKS cluster {name}"):
        try:
            cluster = eks.describe_cluster(name=name)["cluster"]
        except Exception as error:
            if type(error).__name__ == "ResourceNotFoundException":
                raise BackendError(
                    f"EKS cluster {name} does not exist in {region}; create it with 'fsdp-sdk up'"
                ) from None
            raise
    status = cluster.get("status")
    endpoint = cluster.get("endpoint")
    ca_data = (cluster.get("certificateAuthority") or {}).get("data")
    if status != "ACTIVE" or not endpoint or not ca_data:
        raise BackendError(f"EKS cluster {name} is {status or 'not ready'}: no endpoint yet; wait for it to be ACTIVE")
    document = render_kubeconfig(
        name, region, endpoint, ca_data, arn=cluster.get("arn"), profile=os.environ.get("AWS_PROFILE") or None
    )
    return write_private(path, json.dumps(document, indent=2) + "\n")


def merge_kubeconfig(source: Path, target: Path | None = None) -> Path:
    """Add (or replace) the clusters, users and contexts of ``source`` in ``target`` and make its context current.

    :param source: a kubeconfig written by :func:`eks_kubeconfig`.
    :param target: the user's kubeconfig (default: ``~/.kube/config``); created when missing.
    """
    import yaml  # imported here: the CLI starts without it

    target = target or Path("~/.kube/config").expanduser()
    new = yaml.safe_load(source.read_text())
    current: dict[str, Any] = {}
    if target.exists():
        current = yaml.safe_load(target.read_text()) or {}
    merged = dict(current) or {"apiVersion": "v1", "kind": "Config", "preferences": {}}
    for key in ("clusters", "users", "contexts"):
        names = {entry["name"] for entry in new.get(key, [])}
        kept = [
            entry for entry in merged.get(key) or [] if isinstance(entry, Mapping) and entry.get("name") not in names
        ]
        merged[key] = kept + list(new.get(key, []))
    merged["current-context"] = new["current-context"]
    return write_private(target, yaml.safe_dump(merged, sort_keys=False))
