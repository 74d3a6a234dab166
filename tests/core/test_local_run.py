"""End to end on this machine: a real etcd, torchrun agents, the tiny trainer, through the console script.

These tests start real processes (etcd, 2 torchrun agents, 2 trainer ranks) and take several seconds each.
"""

from __future__ import annotations

import importlib.util
import json
import re
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from fsdp_sdk import Client, etcd, hookimpl
from fsdp_sdk.plugins import get_plugins
from fsdp_sdk.rendezvous import EtcdV2, clear_rendezvous

from .conftest import etcd_or_skip, run_cli

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(
        importlib.util.find_spec("fsdp_trainer") is None,
        reason="the trainer package (fsdp_trainer) is not installed: pip install -e packages/trainer",
    ),
]

TINY = ["--backend", "local", "--nodes", "2", "--nproc-per-node", "1", "--preset", "tiny", "--steps", "3"]
NO_CHECKPOINT = ["--", "--checkpoint.enabled", "false"]


def _run_id(stderr: str) -> str:
    match = re.search(r"^run (\S+): 2 agents x 1 processes", stderr, re.MULTILINE)
    assert match, stderr
    return match.group(1)


def _processes_mentioning(text: str) -> list[int]:
    """Pids whose command line contains ``text`` (agents and trainer ranks carry the run id in their arguments)."""
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                cmdline = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
            except OSError:
                continue
            if text in cmdline and etcd.pid_alive(int(entry.name)):
                found.append(int(entry.name))
    return found


def _wait_until_gone(run_id: str, timeout: float = 20.0) -> list[int]:
    deadline = time.monotonic() + timeout
    while (left := _processes_mentioning(run_id)) and time.monotonic() < deadline:
        time.sleep(0.2)
    return left


@pytest.fixture
def local_cluster(state_dir: Path) -> Iterator[dict]:
    """``fsdp-sdk up --backend local``: a real etcd on free ports, stopped by ``fsdp-sdk down`` afterwards."""
    etcd_or_skip()
    up = run_cli("up", "--backend", "local", "--json")
    assert up.returncode == 0, up.stderr
    status = json.loads(up.stdout)
    try:
        yield status
    finally:
        down = run_cli("down", "--backend", "local")
        assert down.returncode == 0, down.stderr
        assert not etcd.pid_alive(status["details"]["etcd_pid"])


def test_two_runs_in_a_row(local_cluster: dict, state_dir: Path) -> None:
    """The same command twice (a fresh rendezvous id each time, the old keys cleared): first with --json, then
    with the text output."""
    port = int(local_cluster["endpoint"].rsplit(":", 1)[1])
    run_ids = []
    for as_json in (True, False):
        result = run_cli("run", *TINY, *(["--json"] if as_json else []), *NO_CHECKPOINT, timeout=240)
        assert result.returncode == 0, result.stderr[-3000:]
        assert "RendezvousClosedError" not in result.stderr
        run_id = _run_id(result.stderr)
        run_ids.append(run_id)
        # the run used the cluster's etcd through torch's etcd-v2 rendezvous, not the c10d fallback
        assert re.search(rf"^run {run_id}: .*, etcd-v2 rendezvous at 127\.0\.0\.1:{port}, ", result.stderr, re.M), (
            result.stderr[-3000:]
        )
        run_dir = state_dir / "local" / "runs" / run_id
        summary = json.loads((run_dir / "summary.json").read_text())
        assert (summary["steps"], summary["world_size"]) == (3, 2)
        assert sorted(p.name for p in (run_dir / "logs").iterdir()) == ["agent-0.log", "agent-1.log"]
        if as_json:
            # stdout is only the summary, one JSON object on one line; the leader's log went to stderr
            printed = json.loads(result.stdout)
            assert result.stdout.count("\n") == 1
            assert printed == {"run_id": run_id, "output_dir": str(run_dir), **summary}
            log = result.stderr
        else:
            # piped: stdout is the per-step JSON lines only; the log and the summary go to stderr
            assert [json.loads(line)["step"] for line in result.stdout.splitlines()] == [1, 2, 3]
            assert f"Run {run_id} finished in " in result.stderr
            assert f"final loss {summary['final_loss']:.4f}" in result.stderr
            assert f"outputs      {run_dir} " in result.stderr
            log = result.stdout + result.stderr
            # the summary once: the trainer's own summary line (internal fields) is not streamed
            assert '"steps_run"' not in result.stdout + result.stderr
        assert re.search(r"^\[rank0\] .*master_addr=127\.0\.0\.1", log, re.M)
        assert re.search(r'^\{"step": 3', log, re.M), "piped: the per-step JSON lines as the trainer printed them"
        # torch's etcd-v2 rendezvous wrote its state and store keys during the run; the run cleared them
        assert clear_rendezvous(EtcdV2.direct(f"http://127.0.0.1:{port}"), "etcd-v2", run_id) == [], (
            "the run's rendezvous keys were left in etcd"
        )
    assert run_ids[0] != run_ids[1]


def test_a_failing_run_stops_every_agent_and_exits_1(local_cluster: dict) -> None:
    result = run_cli("run", *TINY, "--", "--runtime.backend", "nccl", timeout=240)  # no CUDA here
    assert result.returncode == 1
    last = result.stderr.rstrip().splitlines()[-1]
    assert re.match(r"^Error: run \S+ failed: agent \d: .*nccl needs CUDA.*; logs in ", last), last
    assert not _wait_until_gone(_run_id(result.stderr))


# Ctrl-C, SIGTERM and the other faults of a run: tests/reliability/test_local_faults.py.


def test_the_library_starts_etcd_when_up_was_not_run(state_dir: Path) -> None:
    etcd_or_skip()
    events = []

    class Recorder:
        @hookimpl
        def fsdp_sdk_job_submitted(self, job):
            events.append(("submitted", job.run_id))

        @hookimpl
        def fsdp_sdk_job_finished(self, job, succeeded, summary):
            events.append(("finished", job.run_id, succeeded, summary["steps"]))

    get_plugins().register(Recorder(), name="recorder")
    progress: list[str] = []
    output: list[str] = []
    client = Client.from_sources(overrides={"job.num_workers": 2}, plugins=get_plugins(), progress=progress.append)
    assert client.status().state == "absent"
    try:
        result = client.run(
            trainer_overrides={"model.preset": "tiny", "train.steps": 2, "checkpoint.enabled": False},
            on_output=output.append,
        )
        assert result.summary["steps"] == 2 and result.output_dir == state_dir / "local" / "runs" / result.run_id
        assert any("not up: starting it now" in line for line in progress)
        assert any("master_addr=" in line for line in output)
        assert events == [("submitted", result.run_id), ("finished", result.run_id, True, 2)]
        assert client.status().ready, "etcd is left running for the next run"
    finally:
        client.down()


def test_job_status_logs_and_stop_on_a_running_local_run(local_cluster: dict, state_dir: Path) -> None:
    """The job commands on a real local run: its state, its leader's log, and stop (as Ctrl-C would: exit 130,
    recorded interrupted, no process left)."""
    import subprocess

    from .conftest import FSDP_SDK

    name = "stopme"
    run = subprocess.Popen(
        [FSDP_SDK, "run", "--json", *TINY[:-1], "400", "--name", name, *NO_CHECKPOINT],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert run.stderr is not None
        for line in run.stderr:
            if line.startswith('{"step": 1,'):
                break
        else:
            pytest.fail(f"the run ended before its first step: {run.wait()}")
        status = run_cli("job", "status", name, "--backend", "local", "--json")
        assert status.returncode == 0 and json.loads(status.stdout)["phase"] == "Running", status.stderr
        logs = run_cli("job", "logs", name, "--backend", "local")
        assert logs.returncode == 0 and re.search(r"^\[rank0\] .*master_addr=127\.0\.0\.1", logs.stdout, re.M)
        assert re.search(r'^\{"step": 1,', logs.stdout, re.M), "the leader's log"
        stopped = run_cli("job", "stop", name, "--backend", "local", timeout=90)
        assert stopped.returncode == 0, stopped.stderr
        assert re.fullmatch(
            rf"stopped run {name} \(fsdp-sdk pid {run.pid}\): interrupted, stopped at step \d+; it saves no "
            r"checkpoints: a resume starts at step 1\n",
            stopped.stdout,
        ), stopped.stdout
        assert run.wait(timeout=30) == 130
        assert not _wait_until_gone(f"runs/{name}")
        assert json.loads(run_cli("job", "status", name, "--backend", "local", "--json").stdout)["phase"] == (
            "Interrupted"
        )
    finally:
        if run.poll() is None:
            run.kill()
        run.wait()
