"""The local backend's state without running anything heavy: process identity, the lock, run records, damage."""

from __future__ import annotations

import json
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest

from fsdp_sdk.backends.local.records import RunLock, RunRecord, list_runs, read_record
from fsdp_sdk.backends.local.state import LocalState, StateDamaged, lock_file
from fsdp_sdk.errors import BackendError
from fsdp_sdk.processes import ProcessIdentity, stop_identified

_SLEEP = "import time; print('ready', flush=True); time.sleep(60)"


@pytest.fixture
def sleeper():
    # The child says it is running: until its exec completes, /proc/<pid>/cmdline may still be empty or the parent's.
    process = subprocess.Popen([sys.executable, "-c", _SLEEP], stdout=subprocess.PIPE, text=True)
    assert process.stdout is not None and process.stdout.readline().strip() == "ready"
    yield process
    process.kill()
    process.wait()


def test_a_recorded_pid_is_signalled_only_while_it_is_the_same_process(sleeper: subprocess.Popen) -> None:
    identity = ProcessIdentity.of(sleeper.pid)
    assert identity is not None and identity.cmdline == (sys.executable, "-c", _SLEEP) and identity.is_running()
    other_program = ProcessIdentity(sleeper.pid, identity.create_time, ("etcd", "--data-dir", "/x"))
    assert re.fullmatch(rf"pid {sleeper.pid} runs .*python.*, not etcd --data-dir /x", other_program.mismatch() or "")
    reused = ProcessIdentity(sleeper.pid, identity.create_time - 1000, identity.cmdline)
    assert "now belongs to another process" in (reused.mismatch() or "")
    assert not stop_identified(other_program) and not stop_identified(reused)
    assert sleeper.poll() is None, "an unverified pid is never signalled"
    assert stop_identified(identity)
    assert not identity.is_running()
    assert ProcessIdentity.from_dict(identity.to_dict()) == identity
    assert ProcessIdentity.from_dict({"pid": "x"}) is None


@pytest.mark.parametrize(
    "content, problem",
    [("", "empty"), ('{"version": 2, "etcd"', "not valid JSON"), ('{"etcd": null}', "not a version-2 state file")],
)
def test_a_damaged_state_file_is_reported_not_used(tmp_path: Path, content: str, problem: str) -> None:
    local = LocalState(tmp_path)
    local.path.write_text(content)
    with pytest.raises(StateDamaged, match=rf"{problem}.*'fsdp-sdk down --backend local' or 'fsdp-sdk up"):
        local.read()
    assert local.read_or_none()[0] is None


def test_the_state_is_replaced_whole(tmp_path: Path) -> None:
    local = LocalState(tmp_path / "local")
    local.write({"nodes": 2})
    assert local.read() == {"nodes": 2, "version": 2}
    assert [p.name for p in local.root.iterdir()] == ["state.json"], "no temporary file left"


def test_the_lock_names_its_holder_and_is_reentrant(tmp_path: Path) -> None:
    path = tmp_path / ".lock"
    holder = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import sys, time; from pathlib import Path; from fsdp_sdk.backends.local.state import lock_file\n"
            f"with lock_file(Path({str(path)!r}), what='x'):\n    print('held', flush=True); time.sleep(30)",
        ],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert holder.stdout is not None and holder.stdout.readline() == "held\n"
        told: list[str] = []
        start = time.monotonic()
        with (
            pytest.raises(BackendError, match=rf"locked by another fsdp-sdk command \(pid {holder.pid}: "),
            lock_file(path, what="the local cluster", timeout=0.5, progress=told.append),
        ):
            pass
        assert time.monotonic() - start < 5
        assert told and told[0].startswith(f"waiting for another fsdp-sdk command (pid {holder.pid}")
    finally:
        holder.kill()
        holder.wait()
    with lock_file(path, what="x", timeout=5), lock_file(path, what="x", timeout=0.1):
        pass  # the holder died: the kernel released its lock; and a second hold in this process does not block


def test_a_run_whose_process_died_is_lost(tmp_path: Path) -> None:
    run_dir = tmp_path / "runs" / "r1"
    record = RunRecord("r1", "running", "fsdp", str(run_dir), str(run_dir), 2, 1, 10, time.time())
    lock = RunLock(run_dir)
    lock.acquire("r1")
    record.save()
    (run_dir / "metrics.jsonl").write_text('{"step": 3, "loss": 2.5, "tokens_per_s_per_gpu": 100.0}\n{"step": 4, "lo')
    probe = subprocess.run(
        [
            sys.executable,
            "-c",
            "from pathlib import Path; from fsdp_sdk.backends.local.records import read_record\n"
            f"print(read_record(Path({str(run_dir)!r})).state)",
        ],
        capture_output=True,
        text=True,
    )
    assert probe.stdout.strip() == "running", probe.stderr
    with pytest.raises(BackendError, match="run r1 is already running"):
        RunLock(run_dir).acquire("r1")
    lock.release()
    seen = read_record(run_dir)
    assert seen is not None and seen.state == "lost"
    assert (seen.steps, seen.final_loss, seen.tokens_per_s) == (3, 2.5, 100.0), "from the last whole metrics line"
    assert [r.run_id for r in list_runs(tmp_path / "runs")] == ["r1"]
    assert json.loads((run_dir / "run.json").read_text())["state"] == "running", "reading changes nothing"
