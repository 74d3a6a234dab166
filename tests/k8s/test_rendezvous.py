"""The rendezvous cleanup of ``job stop`` against a real etcd, with keys written by torch itself."""

from __future__ import annotations

import base64
import json
import urllib.error
import urllib.parse
import urllib.request
import uuid

import pytest

from fsdp_sdk.k8s.kube import Kube
from fsdp_sdk.k8s.rendezvous import etcd_via_service_proxy
from fsdp_sdk.rendezvous import EtcdV2, clear_rendezvous, rendezvous_keys

from .fake_apiserver import FakeApiServer


def _put(endpoint: str, key: str, value: str) -> None:
    data = urllib.parse.urlencode({"value": value}).encode()
    request = urllib.request.Request(f"{endpoint}/v2/keys{key}", data=data, method="PUT")
    urllib.request.urlopen(request, timeout=5).close()


def _exists(endpoint: str, key: str) -> bool:
    try:
        with urllib.request.urlopen(f"{endpoint}/v2/keys{urllib.parse.quote(key)}", timeout=5) as response:
            return json.loads(response.read())["node"]["key"] == key
    except urllib.error.HTTPError as error:
        assert error.code == 404
        return False


def _torch_writes_rendezvous(endpoint: str, run_id: str) -> None:
    """Write state and store keys exactly as torch's etcd-v2 rendezvous backend does."""
    pytest.importorskip("etcd", reason="python-etcd is needed to drive torch's etcd-v2 backend")
    from torch.distributed.elastic.rendezvous import RendezvousParameters
    from torch.distributed.elastic.rendezvous.etcd_rendezvous_backend import create_backend

    params = RendezvousParameters(
        backend="etcd-v2", endpoint=endpoint.removeprefix("http://"), run_id=run_id, min_nodes=1, max_nodes=2
    )
    backend, store = create_backend(params)
    backend.set_state(b"state-of-" + run_id.encode())
    # the dynamic rendezvous wraps the store in PrefixStore("torch.rendezvous.<run_id>.<round>")
    store.set(f"torch.rendezvous.{run_id}.0/MASTER_ADDR", "10.0.0.1")
    store.set(f"torch.rendezvous.{run_id}.1/rank/0", "x" * 40)


def test_etcd_v2_backend_keys_are_where_torch_puts_them(etcd_endpoint: str) -> None:
    run_id = f"fsdp-{uuid.uuid4().hex[:8]}"
    _torch_writes_rendezvous(etcd_endpoint, run_id)
    keys = rendezvous_keys("etcd-v2", run_id)
    assert _exists(etcd_endpoint, keys.trees[0])
    store_keys = EtcdV2.direct(etcd_endpoint).leaves(keys.store_dir)
    assert len([k for k in store_keys if run_id in base64.b64decode(k[len(keys.store_dir) + 1 :]).decode()]) == 2


def test_clear_removes_only_the_stopped_runs_keys(etcd_endpoint: str) -> None:
    stopped, other = f"stop-{uuid.uuid4().hex[:8]}", f"keep-{uuid.uuid4().hex[:8]}"
    for run_id in (stopped, other):
        _torch_writes_rendezvous(etcd_endpoint, run_id)
    # legacy 'etcd' backend layout for the same two ids
    _put(etcd_endpoint, f"/torchelastic/p2p/run_{stopped}/rdzv/active_version", "1")
    _put(etcd_endpoint, f"/torchelastic/p2p/run_{other}/rdzv/active_version", "1")

    etcd = EtcdV2.direct(etcd_endpoint)
    deleted = clear_rendezvous(etcd, "etcd-v2", stopped)
    deleted += clear_rendezvous(etcd, "etcd", stopped)

    assert f"/torch/elastic/rendezvous/{stopped}" in deleted
    assert f"/torchelastic/p2p/run_{stopped}" in deleted
    assert len(deleted) == 4  # state key, two store keys, legacy directory
    assert not _exists(etcd_endpoint, f"/torch/elastic/rendezvous/{stopped}")
    assert not _exists(etcd_endpoint, f"/torchelastic/p2p/run_{stopped}")
    assert _exists(etcd_endpoint, f"/torch/elastic/rendezvous/{other}")
    assert _exists(etcd_endpoint, f"/torchelastic/p2p/run_{other}/rdzv/active_version")
    remaining = etcd.leaves("/torch/elastic/store")
    assert not [k for k in deleted if k in remaining]
    assert len([k for k in remaining if other.encode() in base64.b64decode(k.split("/store/", 1)[1])]) == 2
    # a second stop finds nothing and does not fail
    assert clear_rendezvous(etcd, "etcd-v2", stopped) == []


def test_c10d_has_nothing_in_etcd() -> None:
    assert rendezvous_keys("c10d", "x").trees == ()


def test_clear_through_the_api_server_service_proxy(etcd_endpoint: str, apiserver: FakeApiServer, kubeconfig) -> None:
    run_id = f"proxy-{uuid.uuid4().hex[:8]}"
    _torch_writes_rendezvous(etcd_endpoint, run_id)
    apiserver.proxy_service("default", "etcd", "2379", etcd_endpoint)
    etcd = etcd_via_service_proxy(Kube.from_kubeconfig(kubeconfig), namespace="default")
    deleted = clear_rendezvous(etcd, "etcd-v2", run_id)
    assert f"/torch/elastic/rendezvous/{run_id}" in deleted and len(deleted) == 3
    assert not _exists(etcd_endpoint, f"/torch/elastic/rendezvous/{run_id}")
    proxied = [r for r in apiserver.requests if "/services/etcd:2379/proxy/v2/keys" in r.path]
    assert any(r.method == "DELETE" and r.query.get("recursive") == ["true"] for r in proxied)
