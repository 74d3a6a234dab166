"""What the loopback API server enforces like a real one: immutable fields and server-side apply ownership."""

from __future__ import annotations

import json
import urllib.error
import urllib.request

import pytest

from .fake_apiserver import FakeApiServer
from .server_apply import owners

PATH = "/apis/apps/v1/namespaces/kube-system/daemonsets/plugin"


def _daemonset(selector: dict, image: str = "a:1", tolerations: list | None = None) -> dict:
    pod = {"containers": [{"name": "plugin", "image": image}], "tolerations": tolerations or []}
    return {
        "apiVersion": "apps/v1",
        "kind": "DaemonSet",
        "metadata": {"name": "plugin", "namespace": "kube-system"},
        "spec": {"selector": {"matchLabels": selector}, "template": {"metadata": {"labels": selector}, "spec": pod}},
    }


def _send(server: FakeApiServer, method: str, path: str, body: dict, query: str = "", agent: str = "test") -> tuple:
    request = urllib.request.Request(f"{server.url}{path}{query}", data=json.dumps(body).encode(), method=method)
    request.add_header("Authorization", f"Bearer {server.token}")
    request.add_header("User-Agent", f"{agent}/1.0")
    kind = "application/apply-patch+yaml" if method == "PATCH" else "application/json"
    request.add_header("Content-Type", kind)
    try:
        with urllib.request.urlopen(request, timeout=10) as answer:
            return answer.status, json.loads(answer.read())
    except urllib.error.HTTPError as error:
        return error.code, json.loads(error.read())


@pytest.fixture
def server() -> FakeApiServer:
    with FakeApiServer() as running:
        yield running


def test_a_daemonset_selector_is_immutable(server: FakeApiServer) -> None:
    code, _ = _send(server, "POST", PATH.rsplit("/", 1)[0], _daemonset({"name": "plugin"}), agent="eksctl")
    assert code == 201
    code, answer = _send(server, "PATCH", PATH, _daemonset({"app": "plugin"}), "?fieldManager=me&force=true")
    assert code == 422 and "spec.selector" in answer["message"] and "field is immutable" in answer["message"]
    code, answer = _send(server, "PATCH", PATH, _daemonset({"name": "plugin"}, "b:2"), "?fieldManager=me&force=true")
    assert code == 200 and answer["spec"]["template"]["spec"]["containers"][0]["image"] == "b:2"


def test_apply_conflicts_with_another_owner_unless_forced_and_takes_the_field(server: FakeApiServer) -> None:
    assert _send(server, "POST", PATH.rsplit("/", 1)[0], _daemonset({"name": "plugin"}), agent="eksctl")[0] == 201
    changed = _daemonset({"name": "plugin"}, "b:2", [{"key": "nvidia.com/gpu", "operator": "Exists"}])
    code, answer = _send(server, "PATCH", PATH, changed, "?fieldManager=me")
    assert code == 409 and answer["reason"] == "Conflict" and 'conflict with "eksctl"' in answer["message"]
    assert ".spec.template.spec.containers" in answer["message"]
    code, answer = _send(server, "PATCH", PATH, changed, "?fieldManager=me&force=true")
    assert code == 200
    table = owners(answer)
    image = ("f:spec", "f:template", "f:spec", "f:containers", 'k:{"name":"plugin"}', "f:image")
    assert image in table["me"][1] and image not in table["eksctl"][1]
    selector = ("f:spec", "f:selector", "f:matchLabels", "f:name")
    assert selector in table["eksctl"][1] and selector in table["me"][1]  # the same value: shared


def test_a_field_no_longer_applied_is_removed_unless_another_manager_owns_it(server: FakeApiServer) -> None:
    first = _daemonset({"name": "plugin"}, tolerations=[{"key": "x", "operator": "Exists"}])
    first["spec"]["template"]["spec"]["priorityClassName"] = "system-node-critical"
    assert _send(server, "PATCH", PATH, first, "?fieldManager=me&force=true")[0] == 201
    code, answer = _send(server, "PATCH", PATH, _daemonset({"name": "plugin"}), "?fieldManager=me&force=true")
    assert code == 200 and "priorityClassName" not in answer["spec"]["template"]["spec"]
