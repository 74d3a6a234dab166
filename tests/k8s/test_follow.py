"""The one-command loop: submit --wait --logs, logs -f that waits for the leader, --replace / --unique, watched status."""

from __future__ import annotations

import json
import threading
from pathlib import Path

import pytest

from fsdp_sdk.config import Config
from fsdp_sdk.k8s.jobs import JobClient, JobStatus
from fsdp_sdk.plugins import build_plugins

from .fake_apiserver import FakeApiServer
from .tools import Lines, cli

REGISTRY = "123456789012.dkr.ecr.us-west-2.amazonaws.com"
JOB_LABEL = "training.kubeflow.org/job-name"
JOB = ("kubeflow.org/v1", "PyTorchJob", "fsdp")
LEADER = "[rank0] 12:00:00 INFO fsdp_trainer.distributed: master_addr={pod} host={pod}.fsdp\n"


@pytest.fixture(autouse=True)
def _isolated(isolated_cli: None, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("FSDP_SDK_JOB__REGISTRY", REGISTRY)


def client(kubeconfig: Path, progress: list[str] | None = None) -> JobClient:
    config = Config.from_dict({"job": {"registry": REGISTRY}, "trainer": {"model": {"preset": "tiny"}}})
    return JobClient(
        config,
        kubeconfig=kubeconfig,
        plugins=build_plugins(autoload=False),
        progress=None if progress is None else progress.append,
    )


def conditions(*types: str) -> dict:
    return {"conditions": [{"type": t, "status": "True", "reason": t, "message": f"job {t.lower()}"} for t in types]}


def run_cli(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[threading.Thread, list[tuple[int, str, str]]]:
    result: list[tuple[int, str, str]] = []
    thread = threading.Thread(target=lambda: result.append(cli(capsys, *args)))
    thread.start()
    return thread, result


def test_logs_follow_waits_for_the_leader_and_goes_on_after_a_restart(
    apiserver: FakeApiServer, kubeconfig: Path
) -> None:
    progress: list[str] = []
    jobs = client(kubeconfig, progress)
    jobs.submit(run_id="fsdp-l1")
    lines = Lines()
    follower = threading.Thread(target=jobs.logs, kwargs={"follow": True, "out": lines})
    follower.start()
    apiserver.wait_for(lambda: any(r.watch and r.path.endswith("/pods") for r in apiserver.requests))
    assert follower.is_alive() and any("waiting for the leader of job default/fsdp" in p for p in progress)
    labels = {JOB_LABEL: "fsdp"}
    apiserver.add_pod("fsdp-worker-0", labels=labels, log="waiting for the rendezvous\n", follow_open=True)
    apiserver.add_pod("fsdp-worker-1", labels=labels, log="loading\n", follow_open=True)
    apiserver.set_status(*JOB, conditions("Created", "Running"))
    apiserver.append_log("fsdp-worker-1", LEADER.format(pod="fsdp-worker-1") + '{"step": 1}\n')
    lines.wait_for(lambda got: got[-1:] == ['{"step": 1}'])
    apiserver.set_status(*JOB, conditions("Created", "Running", "Restarting"))
    apiserver.restart_container("fsdp-worker-1", log=LEADER.format(pod="fsdp-worker-1") + '{"step": 2}\n')
    lines.wait_for(lambda got: got[-1:] == ['{"step": 2}'])
    apiserver.set_status(*JOB, conditions("Created", "Running", "Succeeded"))
    apiserver.close_log("fsdp-worker-1")
    follower.join(timeout=20)
    assert not follower.is_alive()
    leader = LEADER.format(pod="fsdp-worker-1").rstrip()
    assert lines.items == ["loading", leader, '{"step": 1}', leader, '{"step": 2}']  # each line once


def test_logs_of_a_job_that_does_not_exist_do_not_wait(
    apiserver: FakeApiServer, kubeconfig: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code, _, err = cli(capsys, "job", "logs", "-f", "nope")
    assert code == 1 and "PyTorchJob default/nope does not exist" in err


def _operate(apiserver: FakeApiServer, end: str) -> None:
    """The Training Operator and the trainer: a leader that logs two steps, then the job ends as ``end``."""
    apiserver.wait_for(lambda: apiserver.get(*JOB))
    apiserver.add_pod(
        "fsdp-worker-0", labels={JOB_LABEL: "fsdp"}, log=LEADER.format(pod="fsdp-worker-0"), follow_open=True
    )
    apiserver.set_status(*JOB, conditions("Created", "Running"))
    apiserver.append_log("fsdp-worker-0", '{"step": 1, "loss": 3.1}\n{"step": 2, "loss": 2.9}\n')
    apiserver.set_status(*JOB, conditions("Created", "Running", end))
    apiserver.close_log("fsdp-worker-0")


@pytest.mark.parametrize(("end", "code"), [("Succeeded", 0), ("Failed", 1)])
def test_submit_wait_logs_is_one_command(
    apiserver: FakeApiServer, kubeconfig: Path, capsys: pytest.CaptureFixture[str], end: str, code: int
) -> None:
    thread, result = run_cli(capsys, "job", "submit", "--wait", "--logs")
    _operate(apiserver, end)
    thread.join(timeout=30)
    exit_code, out, err = result[0]
    assert exit_code == code, err
    assert out.splitlines() == [
        LEADER.format(pod="fsdp-worker-0").rstrip(),
        '{"step": 1, "loss": 3.1}',
        '{"step": 2, "loss": 2.9}',
    ]
    assert "submitted PyTorchJob default/fsdp" in err and f"PyTorchJob default/fsdp: {end}" in err


def test_submit_wait_times_out_with_exit_3(
    apiserver: FakeApiServer, kubeconfig: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code, out, err = cli(capsys, "job", "submit", "--wait", "--timeout", "1", "--json")
    assert code == 3 and "timed out after 1s: fsdp is still Pending" in err
    assert json.loads(out)["timed_out"] is True and apiserver.get(*JOB) is not None  # the job keeps running


def test_replace_deletes_the_old_job_waits_and_submits_again(
    apiserver: FakeApiServer, kubeconfig: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert cli(capsys, "job", "submit", "--rdzv-id", "fsdp-old")[0] == 0
    old = apiserver.get(*JOB)
    apiserver.add_pod("fsdp-worker-0", labels={JOB_LABEL: "fsdp"}, owner=old)
    apiserver.hold_deletions = True  # the old job stays until its pods are gone
    thread, result = run_cli(capsys, "job", "submit", "--replace", "--rdzv-id", "fsdp-new")
    apiserver.wait_for(lambda: (apiserver.get(*JOB) or {}).get("metadata", {}).get("deletionTimestamp"))
    delete = next(r for r in apiserver.writes() if r.method == "DELETE")
    assert delete.query["propagationPolicy"] == ["Foreground"]
    assert thread.is_alive() and apiserver.get(*JOB)["spec"]["elasticPolicy"]["rdzvId"] == "fsdp-old"
    apiserver.release_deletions()
    thread.join(timeout=30)
    code, _, err = result[0]
    assert code == 0, err
    assert "replacing PyTorchJob default/fsdp (Pending)" in err
    assert apiserver.get(*JOB)["spec"]["elasticPolicy"]["rdzvId"] == "fsdp-new"
    assert apiserver.get("v1", "Pod", "fsdp-worker-0") is None  # the old job's pods went with it


def test_unique_submits_a_new_job_next_to_the_old_one(
    apiserver: FakeApiServer, kubeconfig: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert cli(capsys, "job", "submit")[0] == 0
    code, out, err = cli(capsys, "job", "submit", "--unique", "--json")
    assert code == 0, err
    name = json.loads(out)["name"]
    assert name.startswith("fsdp-") and len(name) == len("fsdp-") + 5
    jobs = {j["metadata"]["name"]: j for j in apiserver.objects("PyTorchJob")}
    assert set(jobs) == {"fsdp", name}
    args = jobs[name]["spec"]["pytorchReplicaSpecs"]["Worker"]["template"]["spec"]["containers"][0]["args"]
    assert args[args.index("--train.output_dir") + 1] == f"/local/fsdp-sdk/default/{name}"  # its own checkpoints


def test_status_changes_come_from_the_watch(apiserver: FakeApiServer, kubeconfig: Path) -> None:
    jobs = client(kubeconfig)
    jobs.submit(run_id="fsdp-w1")
    apiserver.requests.clear()
    seen: list[str] = []
    done: list[JobStatus] = []
    waiter = threading.Thread(
        target=lambda: done.append(jobs.wait_for_completion(timeout=60, on_change=lambda s: seen.append(s.phase)))
    )
    waiter.start()
    apiserver.wait_for(lambda: any(r.watch for r in apiserver.requests))
    for phases in (["Created"], ["Created", "Running"], ["Created", "Running", "Restarting"], ["Created", "Running"]):
        count = len(seen)
        apiserver.set_status(*JOB, conditions(*phases))
        apiserver.wait_for(lambda count=count: len(seen) > count)
    apiserver.set_status(*JOB, conditions("Created", "Running", "Succeeded"))
    waiter.join(timeout=20)
    assert seen == ["Pending", "Created", "Running", "Restarting", "Running", "Succeeded"]
    assert done[0].succeeded
    reads = [r for r in apiserver.requests if r.method == "GET" and r.path.endswith("/pytorchjobs/fsdp")]
    watches = [r for r in apiserver.requests if r.watch]
    assert len(reads) == 1 and len(watches) == 1  # one read, then one watch: no polling
