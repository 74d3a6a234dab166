"""Reaching a cluster's etcd from outside, for clearing a stopped job's rendezvous keys.

etcd is reached through the API server's service proxy
(``/api/v1/namespaces/<ns>/services/etcd:2379/proxy/v2/keys/...``): it needs no extra
process or open port, only the ``services/proxy`` RBAC verb that cluster admins have.
What is cleared, and how, is shared with the local backend (:mod:`fsdp_sdk.rendezvous`).
"""

from __future__ import annotations

import urllib.parse
from typing import TYPE_CHECKING, Any

from fsdp_sdk.k8s.kube import ApiStatusError
from fsdp_sdk.rendezvous import EtcdV2

if TYPE_CHECKING:
    from fsdp_sdk.k8s.kube import Kube

__all__ = ["etcd_via_service_proxy"]


def etcd_via_service_proxy(kube: Kube, *, namespace: str, service: str = "etcd", port: int = 2379) -> EtcdV2:
    """An etcd v2 client that talks to ``service:port`` in ``namespace`` through the API server's service proxy."""
    prefix = f"/api/v1/namespaces/{namespace}/services/{service}:{port}/proxy"

    def send(method: str, path: str, query: dict[str, str]) -> tuple[int, Any]:
        try:
            return 200, kube.request(method, prefix + urllib.parse.quote(path), query=query)
        except ApiStatusError as error:
            if error.status == 404 and "Key not found" in str(error):
                return 404, {"errorCode": 100}
            raise

    return EtcdV2(send, where=f"service {namespace}/{service}:{port} via {kube.host}")
