"""Faults on the Kubernetes path: the loopback API server misbehaves during submit, wait, logs and stop.

Each test injects a fault for one path and verb a given number of times (500, 503, 429 with
``Retry-After``, 409, a dropped connection, an answer lost after the request was carried out,
a slow answer, a stream cut off) and checks the outcome the user sees: the command succeeds
after retrying with backoff, with nothing applied twice and nothing half-created; or, when the
fault outlasts the retries, a one-line error and nothing left behind. Retries do not sleep
here: the delays they ask for are recorded (:func:`waits`). The last test runs a real trainer
as the job's worker, kills it after a checkpoint and restarts it: it resumes from the node's disk.
"""

from __future__ import annotations

import base64
import json
import os
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from fsdp_sdk.cli import main
from fsdp_sdk.client import Client
from fsdp_sdk.config import Config
from fsdp_sdk.k8s import retry
from fsdp_sdk.k8s.jobs import JobClient
from fsdp_sdk.plugins import reset_plugins
from k8s.conftest import PYTORCHJOB_CRD, TRAINJOB_CRD
from k8s.fake_apiserver import FakeApiServer, schema_validators
from k8s.kubelet import LocalNode
from k8s.tools import Lines, kubernetes_plugins

REGISTRY = "123456789012.dkr.ecr.us-west-2.amazonaws.com"
TOKEN = "hf_CanaryTokenForFaults0001"
JOB_PATH = "/apis/kubeflow.org/v1/namespaces/default/pytorchjobs/fsdp$"
JOBS_PATH = "/apis/kubeflow.org/v1/namespaces/default/pytorchjobs$"
SECRET_PATH = "/api/v1/namespaces/default/secrets/hf-token$"
JOB = ("kubeflow.org/v1", "PyTorchJob", "fsdp")


# ---------------------------------------------------------------------------------------------- fixtures


@pytest.fixture
def waits(monkeypatch: pytest.MonkeyPatch) -> list[float]:
    """Retries without sleeping: the delays asked for are recorded."""
    recorded: list[float] = []
    monkeypatch.setattr(retry, "DEFAULT_POLICY", retry.RetryPolicy(sleep=recorded.append, request_timeout=5.0))
    monkeypatch.setattr(JobClient, "leader_recheck_s", 1.0)
    return recorded


@pytest.fixture
def api(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, waits: list[float]) -> Iterator[FakeApiServer]:
    """The loopback API server (validating against the real schemas) as the cluster of KUBECONFIG, in an empty
    directory with no FSDP_SDK_* settings from outside and no third-party plugins."""
    for path in (PYTORCHJOB_CRD, TRAINJOB_CRD):
        if not path.exists():
            pytest.skip(f"{path.name} not found at ../shared/schemas/ (the shared schemas sit beside the project root)")
    monkeypatch.chdir(tmp_path)
    for name in list(os.environ):
        if name.startswith(("FSDP_SDK_", "AWS_")):
            monkeypatch.delenv(name)
    monkeypatch.setenv("FSDP_SDK_DISABLE_PLUGIN_AUTOLOAD", "1")
    monkeypatch.setenv("FSDP_SDK_JOB__REGISTRY", REGISTRY)
    reset_plugins()
    with FakeApiServer(schema_validators(PYTORCHJOB_CRD, TRAINJOB_CRD)) as server:
        monkeypatch.setenv("KUBECONFIG", str(server.write_kubeconfig(tmp_path / "kubeconfig")))
        yield server
    reset_plugins()


def cli(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    with pytest.raises(SystemExit) as exit_info:
        main(list(args))
    out, err = capsys.readouterr()
    return int(exit_info.value.code or 0), out, err


def requests(api: FakeApiServer, method: str, path: str) -> list:
    return [r for r in api.requests if r.method == method and r.path.endswith(path.rstrip("$"))]


def conditions(*types: str) -> dict:
    return {"conditions": [{"type": t, "status": "True", "reason": t, "message": f"job {t.lower()}"} for t in types]}


def error_line(err: str) -> str:
    lines = [line for line in err.splitlines() if line.startswith("Error: ")]
    assert len(lines) == 1, err
    return lines[0]


# ---------------------------------------------------------------------------------------------- submit


def test_submit_retries_server_errors_and_throttling_with_backoff(
    api: FakeApiServer, waits: list[float], capsys: pytest.CaptureFixture[str]
) -> None:
    api.fail("PATCH", JOB_PATH, 503, times=2)
    api.fail("PATCH", JOB_PATH, 429, retry_after=7)
    api.fail("PATCH", JOB_PATH, 500)
    code, out, err = cli(capsys, "job", "submit", "--rdzv-id", "fsdp-r1")
    assert code == 0, err
    assert out.startswith("submitted PyTorchJob default/fsdp")
    assert [r.fault for r in requests(api, "PATCH", JOB_PATH)] == ["status", "status", "status", "status", None]
    assert len(waits) == 4 and waits[0] < waits[1] and waits[2] >= 7  # backoff grows; Retry-After is honoured
    assert err.count("retrying in") == 4 and "503 ServiceUnavailable" in err and "429 TooManyRequests" in err
    assert api.get(*JOB)["spec"]["elasticPolicy"]["rdzvId"] == "fsdp-r1"


def test_submit_whose_answer_is_lost_applies_once(api: FakeApiServer, capsys: pytest.CaptureFixture[str]) -> None:
    api.lose_answer("PATCH", JOB_PATH)
    code, out, err = cli(capsys, "job", "submit", "--rdzv-id", "fsdp-lost1")
    assert code == 0, err
    patches = requests(api, "PATCH", JOB_PATH)
    assert [p.fault for p in patches] == ["lose"]  # read back and found as sent: not sent again
    reads = [r for r in requests(api, "GET", JOB_PATH) if r.at > patches[0].at]
    assert reads, "the object was not read back before deciding"
    assert "submitted PyTorchJob default/fsdp (rdzv id fsdp-lost1)" in out


def test_submit_retries_dropped_connections_and_conflicts(
    api: FakeApiServer, capsys: pytest.CaptureFixture[str]
) -> None:
    api.drop("PATCH", JOB_PATH, times=2)
    api.fail("PATCH", JOB_PATH, 409, reason="Conflict", message="the object has been modified; try again")
    code, _, err = cli(capsys, "job", "submit")
    assert code == 0, err
    assert [p.fault for p in requests(api, "PATCH", JOB_PATH)] == ["drop", "drop", "status", None]
    assert "no answer from the API server" in err and "409 Conflict" in err


def test_a_slow_answer_is_retried_and_applied_once(
    api: FakeApiServer, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setattr(retry, "DEFAULT_POLICY", retry.RetryPolicy(sleep=lambda s: None, request_timeout=1.0))
    api.slow("PATCH", JOB_PATH, 3.0)
    code, _, err = cli(capsys, "job", "submit", "--rdzv-id", "fsdp-slow1")
    assert code == 0, err
    assert "timed out" in err.lower() or "no answer" in err
    # On a loaded machine a retry may time out too: any number of plain retries after the slow one.
    patches = requests(api, "PATCH", JOB_PATH)
    assert patches[0].fault == "slow" and len(patches) >= 2 and all(p.fault is None for p in patches[1:])
    api.wait_for(lambda: patches[0].answered)  # the slow one is served late: the same apply, no second object
    assert api.get(*JOB)["spec"]["elasticPolicy"]["rdzvId"] == "fsdp-slow1"
    assert len(api.objects("PyTorchJob")) == 1


def test_a_submit_that_keeps_failing_is_one_line_and_leaves_no_secret(
    api: FakeApiServer, capsys: pytest.CaptureFixture[str]
) -> None:
    api.fail("PATCH", JOB_PATH, 500, times=100)
    code, out, err = cli(capsys, "job", "submit", "--set", f"job.hf_token={TOKEN}")
    assert code == 1
    line = error_line(err)
    assert "500 InternalError" in line and "gave up after 6 tries" in line, line
    assert api.objects("Secret") == [] and api.objects("PyTorchJob") == []  # the Secret was created, then removed
    assert [r.method for r in api.writes()].count("DELETE") == 1
    assert TOKEN not in out + err


def test_a_refused_job_takes_its_new_secret_with_it(api: FakeApiServer, capsys: pytest.CaptureFixture[str]) -> None:
    api.fail("PATCH", JOB_PATH, 422, reason="Invalid", message='PyTorchJob "fsdp" is invalid: spec: denied by policy')
    code, _, err = cli(capsys, "job", "submit", "--set", f"job.hf_token={TOKEN}")
    assert code == 1 and "422 Invalid" in error_line(err)
    assert len(requests(api, "PATCH", JOB_PATH)) == 1  # a refusal is final: no retry
    assert api.objects("Secret") == []


def test_a_secret_that_existed_before_is_left_alone(api: FakeApiServer, capsys: pytest.CaptureFixture[str]) -> None:
    api.put({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "hf-token", "namespace": "default"}})
    api.fail("PATCH", JOB_PATH, 422, reason="Invalid", message="denied")
    code, _, _ = cli(capsys, "job", "submit", "--set", f"job.hf_token={TOKEN}")
    assert code == 1
    assert api.get("v1", "Secret", "hf-token") is not None


def test_ctrl_c_during_a_submit_leaves_nothing_behind(
    api: FakeApiServer, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    def interrupted(seconds: float) -> None:
        raise KeyboardInterrupt

    monkeypatch.setattr(retry, "DEFAULT_POLICY", retry.RetryPolicy(sleep=interrupted))
    api.fail("PATCH", JOB_PATH, 503)  # Ctrl-C comes while the submit waits to retry the job
    code, _, err = cli(capsys, "job", "submit", "--set", f"job.hf_token={TOKEN}")
    assert code == 130, err
    assert api.objects("Secret") == [] and api.objects("PyTorchJob") == []


def test_submitting_again_after_a_lost_answer_is_success(
    api: FakeApiServer, capsys: pytest.CaptureFixture[str]
) -> None:
    assert cli(capsys, "job", "submit", "--rdzv-id", "fsdp-again1")[0] == 0
    writes = len(api.writes())
    code, _, err = cli(capsys, "job", "submit", "--rdzv-id", "fsdp-again1")  # the user's retry of the same submission
    assert code == 0 and "already submitted" in err
    assert len(api.writes()) == writes
    code, _, err = cli(capsys, "job", "submit", "--rdzv-id", "fsdp-other")  # another submission is refused
    assert code == 1 and "already exists (Pending); pass --replace" in error_line(err)


# ---------------------------------------------------------------------------------------------- wait


def test_job_wait_survives_an_api_blip(
    api: FakeApiServer, waits: list[float], capsys: pytest.CaptureFixture[str]
) -> None:
    assert cli(capsys, "job", "submit")[0] == 0
    api.set_status(*JOB, conditions("Created", "Running"))
    api.cut_stream("GET", JOBS_PATH, after=0, query={"watch": "true"})  # the first watch breaks off at once
    api.fail("GET", JOB_PATH, 503, times=4)  # the read that follows gets 503s...
    api.drop("GET", JOB_PATH, times=2)  # ...then no answer...
    api.fail("GET", JOBS_PATH, 500, times=3, query={"watch": "true"})  # ...then the watch itself fails for a while
    result: list[tuple[int, str, str]] = []
    waiter = threading.Thread(target=lambda: result.append(cli(capsys, "job", "wait", "--timeout", "3600", "--json")))
    waiter.start()
    api.wait_for(lambda: not api.faults_pending())
    watches = api.wait_for(lambda: [r for r in requests(api, "GET", JOBS_PATH) if r.watch and r.fault is None])
    assert watches[-1].query.get("resourceVersion"), "the watch did not resume from a resourceVersion"
    api.set_status(*JOB, conditions("Created", "Running", "Succeeded"))
    waiter.join(timeout=30)
    code, out, err = result[0]
    assert code == 0, err
    assert json.loads(out)["phase"] == "Succeeded"
    assert len(waits) >= 9 > retry.DEFAULT_POLICY.attempts  # past what a short command would retry
    gets = [r for r in requests(api, "GET", JOB_PATH) if r.fault is None]
    assert len(gets) <= 3, "wait polled the job instead of watching it"


def test_job_wait_lists_again_when_its_watch_expires(api: FakeApiServer, capsys: pytest.CaptureFixture[str]) -> None:
    assert cli(capsys, "job", "submit")[0] == 0
    api.expire_history()
    api.cut_stream("GET", JOBS_PATH, after=0, query={"watch": "true"})
    result: list[tuple[int, str, str]] = []
    waiter = threading.Thread(target=lambda: result.append(cli(capsys, "job", "wait", "--timeout", "600")))
    waiter.start()
    api.wait_for(lambda: len([r for r in requests(api, "GET", JOBS_PATH) if r.watch]) >= 2)
    api.set_status(*JOB, conditions("Created", "Failed"))
    waiter.join(timeout=30)
    assert result[0][0] == 1  # the job failed: the wait saw it


class FakeClock:
    """Monotonic time that moves only when the code under test sleeps."""

    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.now += seconds


def test_job_wait_gives_up_when_the_api_server_stays_away(
    api: FakeApiServer, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    assert cli(capsys, "job", "submit")[0] == 0
    clock = FakeClock()
    monkeypatch.setattr(
        retry, "DEFAULT_POLICY", retry.RetryPolicy(sleep=clock.sleep, clock=clock, patience=600, request_timeout=5.0)
    )
    api.fail("GET", "/pytorchjobs", 503, times=10_000)
    code, _, err = cli(capsys, "job", "wait", "--timeout", "86400")
    assert code == 1
    line = error_line(err)
    assert (
        "503 ServiceUnavailable" in line and "still failing after" in line and "check the cluster's API server" in line
    )
    # the patience in (fake) seconds: it stops short of a delay (at most 36s) that would pass it
    assert 600 - 36 <= clock.now - 1000 <= 700


# ---------------------------------------------------------------------------------------------- logs


def _leader(api: FakeApiServer, lines: str, *, follow_open: bool = True) -> None:
    api.add_pod(
        "fsdp-worker-0",
        labels={"training.kubeflow.org/job-name": "fsdp"},
        log="[rank0] 12:00:00 INFO fsdp_trainer.distributed: master_addr=fsdp-worker-0 host=fsdp-worker-0.fsdp\n"
        + lines,
        follow_open=follow_open,
    )


def test_a_followed_log_cut_off_resumes_without_losing_or_repeating_lines(
    api: FakeApiServer, capsys: pytest.CaptureFixture[str]
) -> None:
    assert cli(capsys, "job", "submit")[0] == 0
    api.set_status(*JOB, conditions("Created", "Running"))
    _leader(api, "".join(f'{{"step": {i}}}\n' for i in range(1, 4)))  # same timestamp for all four lines
    api.cut_stream("GET", "/pods/fsdp-worker-0/log", after=2, query={"follow": "true"})
    api.fail("GET", "/pods/fsdp-worker-0/log", 503, times=2, query={"follow": "true"})
    lines = Lines()
    follower = threading.Thread(target=lambda: Client.from_sources().jobs.logs(follow=True, out=lines))
    follower.start()
    lines.wait_for(lambda got: len(got) == 4)
    api.append_log("fsdp-worker-0", '{"step": 4}\n{"step": 5}\n')
    lines.wait_for(lambda got: len(got) == 6)
    api.set_status(*JOB, conditions("Created", "Running", "Succeeded"))
    api.close_log("fsdp-worker-0")
    follower.join(timeout=30)
    assert not follower.is_alive()
    assert lines.items[1:] == [f'{{"step": {i}}}' for i in range(1, 6)]
    follows = [r for r in requests(api, "GET", "/pods/fsdp-worker-0/log") if r.query.get("follow") == ["true"]]
    assert [f.fault for f in follows][:4] == ["cut", "status", "status", None]
    assert "sinceSeconds" in follows[3].query  # resumed, not read again from the start


def test_following_a_log_outlasts_an_outage_of_the_pod_list(
    api: FakeApiServer, capsys: pytest.CaptureFixture[str]
) -> None:
    assert cli(capsys, "job", "submit")[0] == 0
    api.set_status(*JOB, conditions("Created", "Running"))
    api.fail("GET", "/api/v1/namespaces/default/pods$", 503, times=12)  # twice what one request retries
    lines = Lines()
    follower = threading.Thread(target=lambda: Client.from_sources().jobs.logs(follow=True, out=lines))
    follower.start()
    api.wait_for(lambda: not api.faults_pending())
    _leader(api, "step 1\n")
    lines.wait_for(lambda got: got[-1:] == ["step 1"])
    api.set_status(*JOB, conditions("Created", "Running", "Succeeded"))
    api.close_log("fsdp-worker-0")
    follower.join(timeout=30)
    assert not follower.is_alive() and lines.items[-1] == "step 1"


def test_logs_without_follow_retry_server_errors(api: FakeApiServer, capsys: pytest.CaptureFixture[str]) -> None:
    assert cli(capsys, "job", "submit")[0] == 0
    _leader(api, "step 1\n", follow_open=False)
    api.fail("GET", "/api/v1/namespaces/default/pods$", 502, times=2)
    api.drop("GET", "/pods/fsdp-worker-0/log")
    code, out, err = cli(capsys, "job", "logs")
    assert code == 0, err
    assert out.splitlines()[-1] == "step 1"


# ---------------------------------------------------------------------------------------------- stop


def test_stop_whose_answer_is_lost_counts_as_deleted(api: FakeApiServer, capsys: pytest.CaptureFixture[str]) -> None:
    assert cli(capsys, "job", "submit")[0] == 0
    api.lose_answer("DELETE", JOB_PATH)
    code, out, err = cli(capsys, "job", "stop", "--keep-rendezvous", "--json")
    assert code == 0, err
    assert json.loads(out)["deleted"] is True
    assert [r.fault for r in requests(api, "DELETE", JOB_PATH)] == ["lose", None]  # the retry found it gone: 404
    assert api.get(*JOB) is None


def test_stop_retries_server_errors(api: FakeApiServer, capsys: pytest.CaptureFixture[str]) -> None:
    assert cli(capsys, "job", "submit")[0] == 0
    api.fail("DELETE", JOB_PATH, 500, times=2)
    api.fail("GET", JOB_PATH, 504)
    code, out, err = cli(capsys, "job", "stop", "--keep-rendezvous")
    assert code == 0, err
    assert "deleted job default/fsdp" in out and api.get(*JOB) is None


def test_the_secret_data_reaches_the_server_once_and_only_in_the_secret(
    api: FakeApiServer, capsys: pytest.CaptureFixture[str]
) -> None:
    api.lose_answer("PATCH", SECRET_PATH)
    code, _, err = cli(capsys, "job", "submit", "--set", f"job.hf_token={TOKEN}")
    assert code == 0, err
    assert base64.b64decode(api.get("v1", "Secret", "hf-token")["data"]["token"]).decode() == TOKEN
    assert [r.fault for r in requests(api, "PATCH", SECRET_PATH)] == ["lose"]
    assert TOKEN not in json.dumps([r.body for r in requests(api, "PATCH", JOB_PATH)])


# ---------------------------------------------------------------------------------------------- pod restart


@pytest.mark.slow
def test_a_restarted_worker_resumes_from_its_checkpoint_on_the_node_disk(api: FakeApiServer, tmp_path: Path) -> None:
    """The rendered job keeps its outputs on the node's disk: a worker killed after a checkpoint comes back from it."""
    steps = 4
    config = Config.from_dict(
        {
            "cluster": {"backend": "fake-kube"},
            "job": {"registry": REGISTRY, "num_workers": 1, "nproc_per_node": 1},
            "trainer": {
                "model": {"preset": "tiny"},
                "data": {"seq_len": 64},
                "train": {"steps": steps},
                "checkpoint": {"every_steps": 2},
            },
        }
    )
    client = Client(config, plugins=kubernetes_plugins(Path(os.environ["KUBECONFIG"])))
    node = LocalNode(api, tmp_path / "cluster")
    outcome: list[object] = []

    def run() -> None:
        try:
            outcome.append(client.run(run_id="fsdp-resume1", on_output=lines))
        except BaseException as error:
            outcome.append(error)

    lines = Lines()
    runner = threading.Thread(target=run, daemon=True)
    runner.start()
    api.wait_for(lambda: api.get(*JOB))
    first = node.start()
    first.wait_for_line(lambda line: "checkpoint: saved" in line and "step_00000002" in line)
    first.kill()  # the container dies (OOM, a lost node): the pod restarts on the same node
    second = node.start(restart=True)
    assert node.finish(second) == 0
    runner.join(timeout=120)
    assert outcome and not isinstance(outcome[0], BaseException), outcome
    summary = outcome[0].summary  # type: ignore[attr-defined]
    assert summary["steps"] == steps and summary["steps_run"] < steps  # the second container did not start over
    assert any("resumed from" in line for line in second.lines), second.lines[-20:]
    disk = tmp_path / "cluster" / "node" / "mnt/k8s-disks/0/fsdp-sdk/default/fsdp"
    assert (disk / "summary.json").exists() and (disk / "checkpoints").is_dir()
    assert not list((tmp_path / "cluster").glob("container-*/workdir/outputs"))  # nothing in the containers' own files
    assert lines.items.count(next(line for line in lines.items if line.startswith('{"steps"'))) == 1
