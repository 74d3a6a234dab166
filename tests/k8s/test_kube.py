"""The API connection: discovery and verbs through the kubernetes client's public API, errors, retries, log cursors."""

from __future__ import annotations

import json
import tempfile
import urllib.request
from pathlib import Path

import pytest

from fsdp_sdk.config import Config
from fsdp_sdk.errors import ConfigError, KubernetesError
from fsdp_sdk.k8s.follow import LogCursor, split_timestamp
from fsdp_sdk.k8s.jobs import JobClient
from fsdp_sdk.k8s.kube import ApiStatusError, Kube, contains
from fsdp_sdk.k8s.retry import FailureStreak, RetryPolicy, TransientError

from .fake_apiserver import AGGREGATED_DISCOVERY, BUILTIN_RESOURCES, FakeApiServer

CONFIG_MAP = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "x", "namespace": "default"}, "data": {}}


def connect(kubeconfig: Path) -> Kube:
    return Kube.from_kubeconfig(kubeconfig, retry=RetryPolicy(sleep=lambda s: None))


def test_discovery_asks_only_for_the_groups_it_needs(apiserver: FakeApiServer, kubeconfig: Path) -> None:
    kube = connect(kubeconfig)
    assert kube.resource("kubeflow.org/v1", "PyTorchJob").plural == "pytorchjobs"
    assert kube.resource("v1", "PersistentVolumeClaim").namespaced
    assert not kube.resource("v1", "Namespace").namespaced
    kube.resource("kubeflow.org/v1", "PyTorchJob")  # cached: no request
    assert [r.path for r in apiserver.requests] == ["/version", "/apis", "/apis/kubeflow.org/v1", "/api/v1"]


def test_discovery_stays_in_memory(
    apiserver: FakeApiServer, kubeconfig: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    scratch = tmp_path / "tmp"
    scratch.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(scratch))
    kube = connect(kubeconfig)
    kube.apply(CONFIG_MAP)
    assert kube.get("v1", "ConfigMap", "x", "default") is not None
    assert list(scratch.iterdir()) == []  # the client's default would write osrcp-<hash>.json here


def test_a_kind_the_server_does_not_serve(tmp_path: Path) -> None:
    without_operator = [r for r in BUILTIN_RESOURCES if r.group != "kubeflow.org"]
    with FakeApiServer(resources=without_operator) as server:
        kube = connect(server.write_kubeconfig(tmp_path / "kubeconfig"))
        with pytest.raises(KubernetesError, match="does not serve this kind; install the Kubeflow Training Operator"):
            kube.resource("kubeflow.org/v1", "PyTorchJob")


def test_a_discovery_failure_is_not_taken_for_a_missing_kind(apiserver: FakeApiServer, kubeconfig: Path) -> None:
    # The dynamic client reads a 503 on a group's discovery as "no resources"; the connection checks before concluding.
    apiserver.fail("GET", "^/apis/kubeflow.org/v1$", 503, times=3)
    kube = connect(kubeconfig)
    assert kube.resource("kubeflow.org/v1", "PyTorchJob").kind == "PyTorchJob"
    assert not apiserver.faults_pending()


@pytest.mark.parametrize("path", ["/apis", "/api"])
def test_the_fake_serves_aggregated_and_legacy_discovery(apiserver: FakeApiServer, path: str) -> None:
    def get(accept: str) -> tuple[str, dict]:
        request = urllib.request.Request(
            apiserver.url + path, headers={"Authorization": f"Bearer {apiserver.token}", "Accept": accept}
        )
        with urllib.request.urlopen(request, timeout=5) as response:
            return response.headers["Content-Type"], json.loads(response.read())

    content_type, body = get(f"{AGGREGATED_DISCOVERY},application/json")  # what kubectl asks for
    assert content_type == AGGREGATED_DISCOVERY and body["kind"] == "APIGroupDiscoveryList"
    groups = {item["metadata"].get("name", ""): item for item in body["items"]}
    if path == "/apis":
        version = groups["kubeflow.org"]["versions"][0]
        job = next(r for r in version["resources"] if r["resource"] == "pytorchjobs")
        assert job["responseKind"] == {"group": "kubeflow.org", "version": "v1", "kind": "PyTorchJob"}
        assert job["scope"] == "Namespaced" and "watch" in job["verbs"]
    else:
        pods = next(r for r in groups[""]["versions"][0]["resources"] if r["resource"] == "pods")
        assert {s["subresource"] for s in pods["subresources"]} == {"log", "status"}
    _, legacy = get("application/json")  # what the Python client asks for
    assert legacy["kind"] == ("APIGroupList" if path == "/apis" else "APIVersions")


def test_errors_are_one_line_from_the_status(apiserver: FakeApiServer, kubeconfig: Path) -> None:
    kube = connect(kubeconfig)
    apiserver.fail("PATCH", "/configmaps/x$", 403, reason="Forbidden", message='configmaps "x" is forbidden: User "u"')
    with pytest.raises(ApiStatusError) as refused:
        kube.apply(CONFIG_MAP)
    message = str(refused.value)
    assert refused.value.status == 403 and "\n" not in message
    assert message == (
        'PATCH /api/v1/namespaces/default/configmaps/x: 403 Forbidden: configmaps "x" is forbidden: User "u"; '
        "ask for RBAC permissions on this resource, or use another kubeconfig context"
    )
    bad = {**CONFIG_MAP, "data": {"a": 1}}
    with pytest.raises(ApiStatusError, match="422 Invalid") as invalid:
        kube.apply(bad)
    assert not isinstance(invalid.value, TransientError)
    assert len([r for r in apiserver.requests if r.method == "PATCH"]) == 2  # neither was retried


def test_no_kubeconfig_says_how_to_get_one(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("KUBECONFIG", raising=False)
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    monkeypatch.setenv("HOME", str(tmp_path))
    with pytest.raises(ConfigError) as missing:
        JobClient(Config()).status()
    message = str(missing.value)
    assert message.startswith("--kubeconfig: no cluster to talk to") and "this is not a pod in a cluster" in message
    assert "aws eks update-kubeconfig" in message and "Service host/port" not in message  # not the in-cluster loader's


def test_in_cluster_without_a_service_account(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("KUBECONFIG", raising=False)
    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.setenv("KUBERNETES_SERVICE_HOST", "10.0.0.1")
    monkeypatch.setenv("KUBERNETES_SERVICE_PORT", "443")
    with pytest.raises(ConfigError, match="cannot use the in-cluster service account"):
        Kube.from_kubeconfig(None)


# ---------------------------------------------------------------------------------------------- retry policy


class Fails:
    """A request that fails transiently ``times`` times, then answers."""

    def __init__(self, times: int, retry_after: float | None = None) -> None:
        self.left, self.calls, self.retry_after = times, 0, retry_after

    def __call__(self) -> str:
        self.calls += 1
        if self.left:
            self.left -= 1
            raise TransientError("GET /x: 503 ServiceUnavailable: busy; try again", retry_after=self.retry_after)
        return "ok"


def test_retry_backoff_grows_to_its_cap_and_honours_retry_after() -> None:
    waits: list[float] = []
    policy = RetryPolicy(attempts=10, first_delay=1, factor=2, max_delay=5, jitter=0, sleep=waits.append)
    assert policy.call(Fails(6)) == "ok"
    assert waits == [1, 2, 4, 5, 5, 5]
    waits.clear()
    policy.call(Fails(1, retry_after=12))
    assert waits == [12]


def test_retry_gives_up_after_its_attempts_with_one_line() -> None:
    lines: list[str] = []
    policy = RetryPolicy(attempts=3, sleep=lambda s: None)
    failing = Fails(100)
    with pytest.raises(TransientError) as gave_up:
        policy.call(failing, on_retry=lines.append)
    assert failing.calls == 3 and len(lines) == 2
    assert "gave up after 3 tries" in str(gave_up.value) and "\n" not in str(gave_up.value)
    assert lines[0].startswith("GET /x: 503 ServiceUnavailable: busy; retrying in")


def test_a_lost_answer_found_applied_is_not_sent_again() -> None:
    failing = Fails(100)
    assert RetryPolicy(sleep=lambda s: None).call(failing, before_retry=lambda: "applied") == "applied"
    assert failing.calls == 1


def test_a_failure_streak_ends_at_the_policy_patience() -> None:
    clock = [0.0]
    policy = RetryPolicy(first_delay=10, factor=1, jitter=0, patience=35, clock=lambda: clock[0])
    streak = FailureStreak(policy)
    error = TransientError("watch: no answer; check")
    assert streak.failed(error) == 10
    clock[0] = 20
    assert streak.failed(error, deadline=25) is None  # the caller's deadline comes first
    streak.reset()
    assert streak.failed(error) == 10  # a success started a new streak
    clock[0] = 50
    with pytest.raises(TransientError, match=r"still failing after 30s: check"):
        streak.failed(error)


def test_contains_allows_what_the_server_adds() -> None:
    applied = {"spec": {"replicas": 2, "containers": [{"name": "a", "resources": {"limits": {"gpu": 8}}}]}}
    stored = {
        "metadata": {"uid": "1"},
        "spec": {"replicas": 2, "containers": [{"name": "a", "resources": {"limits": {"gpu": "8"}}, "tty": False}]},
    }
    assert contains(stored, applied)
    assert not contains(stored, {"spec": {"replicas": 3}})
    assert not contains(stored, {"spec": {"containers": [{"name": "a"}, {"name": "b"}]}})
    assert not contains({"flag": "true"}, {"flag": True})


def test_a_resumed_log_skips_what_was_written_even_with_equal_timestamps() -> None:
    cursor = LogCursor()
    first = ["2025-01-01T00:00:00.100000000Z a", "2025-01-01T00:00:00.100000000Z b", "2025-01-01T00:00:01.5Z c"]
    written = [split_timestamp(line)[1] for line in first if cursor.admit(split_timestamp(line)[0], 0.0)]
    assert written == ["a", "b", "c"]
    cursor.restart()
    again = [*first, "2025-01-01T00:00:01.500000000Z d", "2025-01-01T00:00:02.000000000Z e"]
    written = [split_timestamp(line)[1] for line in again if cursor.admit(split_timestamp(line)[0], 1.0)]
    assert written == ["d", "e"]  # 'c' and 'd' share a timestamp: only the line not yet written passes
    assert cursor.since_seconds(31.2) == 31 + 60
    assert split_timestamp("plain line") == ("", "plain line")
