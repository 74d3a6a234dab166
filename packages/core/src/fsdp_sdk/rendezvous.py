"""Clearing a run's torch elastic rendezvous state from etcd (v2 API).

The seed's workaround for ``RendezvousClosedError`` on the next run was to delete
the etcd pod. Instead, ``fsdp-sdk job stop`` (and every local run, before and
after) deletes exactly the keys that belong to that run's rendezvous id. Where torch keeps them (checked against
``torch/distributed/elastic/rendezvous`` of torch 2.x):

* backend ``etcd-v2`` (``etcd_rendezvous_backend.py``, the one the SDK renders):
  the state is the single key ``/torch/elastic/rendezvous/<run_id>``; the store
  keys live flat under ``/torch/elastic/store/`` with names that are base64 of
  ``torch.rendezvous.<run_id>.<round>/<key>`` (a ``PrefixStore`` per round);
* backend ``etcd`` (``etcd_rendezvous.py``, the legacy one): everything is under
  the directory ``/torchelastic/p2p/run_<run_id>``;
* backend ``c10d`` keeps no state in etcd.

The operator passes the PyTorchJob's ``elasticPolicy.rdzvId`` to torchrun as the
run id (``PET_RDZV_ID``), so the rendezvous id of the job is the run id here.

This module is what both paths share: the keys of a rendezvous id, a minimal etcd v2 client over a
pluggable transport, and the clearing. The local backend talks to its own etcd directly
(:meth:`EtcdV2.direct`); in a cluster, etcd is reached through the API server's service proxy
(:func:`fsdp_sdk.k8s.rendezvous.etcd_via_service_proxy`).
"""

from __future__ import annotations

import base64
import binascii
import json
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from fsdp_sdk.errors import BackendError

__all__ = ["EtcdV2", "RendezvousKeys", "clear_rendezvous", "rendezvous_keys"]

#: The etcd-v2 backend's state key prefix (``etcd_rendezvous_backend.create_backend``).
ETCD_V2_STATE_PREFIX = "/torch/elastic/rendezvous"
#: The etcd-v2 backend's store directory (``EtcdStore`` of ``create_backend``).
ETCD_V2_STORE_DIR = "/torch/elastic/store"
#: The legacy etcd backend's prefix (``etcd_prefix`` default of ``etcd_rendezvous``).
ETCD_LEGACY_PREFIX = "/torchelastic/p2p"

# send(method, path, query) -> (HTTP status, decoded JSON body)
Send = Callable[[str, str, dict[str, str]], "tuple[int, Any]"]


@dataclass(frozen=True)
class RendezvousKeys:
    """The etcd keys of one rendezvous id."""

    trees: tuple[str, ...]
    """Keys (or directories) deleted recursively."""
    store_dir: str | None
    """A directory whose entries are deleted when their base64-decoded name belongs to the run."""
    store_prefix: str
    """The decoded-name prefix of the run's store entries."""


def rendezvous_keys(backend: str, rdzv_id: str) -> RendezvousKeys:
    """Where ``backend`` keeps the state of run ``rdzv_id`` in etcd.

    :param backend: ``etcd-v2``, ``etcd`` or ``c10d``.
    :param rdzv_id: the rendezvous (run) id.
    """
    if not rdzv_id or "/" in rdzv_id:
        raise ValueError(f"invalid rendezvous id {rdzv_id!r}")
    if backend == "etcd-v2":
        return RendezvousKeys((f"{ETCD_V2_STATE_PREFIX}/{rdzv_id}",), ETCD_V2_STORE_DIR, f"torch.rendezvous.{rdzv_id}.")
    if backend == "etcd":
        return RendezvousKeys((f"{ETCD_LEGACY_PREFIX}/run_{rdzv_id}",), None, "")
    return RendezvousKeys((), None, "")


class EtcdV2:
    """A minimal etcd v2 keys API client (``/v2/keys``) over a pluggable transport.

    :param send: ``send(method, path, query) -> (status, json_body)`` with ``path``
        starting ``/v2/keys``.
    :param where: how etcd is reached, for error messages.
    """

    def __init__(self, send: Send, *, where: str) -> None:
        self._send = send
        self.where = where

    @classmethod
    def direct(cls, endpoint: str, *, timeout: float = 10) -> EtcdV2:
        """Talk to etcd at ``endpoint`` (``http://host:2379``)."""
        base = endpoint.rstrip("/")

        def send(method: str, path: str, query: dict[str, str]) -> tuple[int, Any]:
            url = base + urllib.parse.quote(path) + ("?" + urllib.parse.urlencode(query) if query else "")
            request = urllib.request.Request(url, method=method)
            try:
                with urllib.request.urlopen(request, timeout=timeout) as response:
                    return response.status, json.loads(response.read() or b"null")
            except urllib.error.HTTPError as error:
                return error.code, _json_or_none(error.read())
            except OSError as error:
                raise BackendError(
                    f"etcd at {base}: cannot connect ({error}); check that etcd is running there"
                ) from error

        return cls(send, where=base)

    def leaves(self, key: str) -> list[str]:
        """Every non-directory key under directory ``key`` (recursively); empty when it does not exist."""
        status, body = self._send("GET", f"/v2/keys{key}", {"recursive": "true"})
        if status == 404:
            return []
        self._check(status, body, "GET", key)
        found: list[str] = []
        stack = list((body.get("node") or {}).get("nodes") or [])
        while stack:
            node = stack.pop()
            if node.get("dir"):
                stack.extend(node.get("nodes") or [])
            else:
                found.append(node["key"])
        return sorted(found)

    def delete_tree(self, key: str) -> bool:
        """Delete ``key`` and everything under it; ``False`` when it did not exist."""
        status, body = self._send("DELETE", f"/v2/keys{key}", {"recursive": "true"})
        if status == 404:
            return False
        self._check(status, body, "DELETE", key)
        return True

    def _check(self, status: int, body: Any, method: str, key: str) -> None:
        if not 200 <= status <= 299:
            message = body.get("message") if isinstance(body, dict) else body
            raise BackendError(
                f"etcd {method} {key} at {self.where}: {status} {message}; "
                "check that etcd runs with --enable-v2=true ('fsdp-sdk prereqs status' in a cluster)"
            )


def _json_or_none(data: bytes) -> Any:
    try:
        return json.loads(data)
    except ValueError:
        return data.decode(errors="replace")


def _decoded(name: str) -> str:
    try:
        return base64.b64decode(name, validate=True).decode()
    except (binascii.Error, UnicodeDecodeError):
        return ""


def clear_rendezvous(etcd: EtcdV2, backend: str, rdzv_id: str) -> list[str]:
    """Delete the etcd keys of rendezvous ``rdzv_id`` and return the keys deleted.

    Keys of other rendezvous ids are left alone.

    :param etcd: the etcd client.
    :param backend: the job's ``rdzvBackend``.
    :param rdzv_id: the job's ``rdzvId``.
    """
    keys = rendezvous_keys(backend, rdzv_id)
    deleted = [key for key in keys.trees if etcd.delete_tree(key)]
    if keys.store_dir:
        # base64 names may contain '/', which etcd turns into sub-directories: decode the whole relative path.
        for key in etcd.leaves(keys.store_dir):
            name = key[len(keys.store_dir) + 1 :]
            if _decoded(name).startswith(keys.store_prefix) and etcd.delete_tree(key):
                deleted.append(key)
    return deleted
