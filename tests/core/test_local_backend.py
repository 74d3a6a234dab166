"""The local backend: the conformance suite, its state directory, the c10d fallback, the torchrun commands."""

from __future__ import annotations

import itertools
import json
import re
from pathlib import Path

import pytest

from fsdp_sdk import Client, etcd
from fsdp_sdk.backends import builtin
from fsdp_sdk.backends.local import LocalBackend
from fsdp_sdk.backends.local import backend as local_backend
from fsdp_sdk.backends.local.cause import ErrorLine, classify, describe, root_cause
from fsdp_sdk.testing import BackendConformance

from .conftest import etcd_or_skip


class TestLocalBackend(BackendConformance):
    backend_class = LocalBackend
    plugin = builtin
    lifecycle = True  # starts a real etcd when one is on PATH, else takes the c10d path
    scale_to = 3


def test_up_starts_etcd_and_records_it_down_stops_it(state_dir: Path) -> None:
    etcd_or_skip()
    messages: list[str] = []
    client = Client.from_sources(progress=messages.append)
    status = client.up()
    state = json.loads((state_dir / "local" / "state.json").read_text())
    server = state["etcd"]
    assert state["rdzv_backend"] == "etcd-v2" and status.endpoint == f"127.0.0.1:{server['client_port']}"
    assert etcd.pid_alive(server["pid"]) and etcd.is_healthy(server["client_port"])
    assert (state_dir / "local" / "etcd").is_dir()
    assert any("etcd is healthy" in m for m in messages)
    (state_dir / "local" / "runs" / "r1").mkdir(parents=True)

    assert client.down().state == "absent"
    assert not etcd.pid_alive(server["pid"])
    assert not (state_dir / "local" / "state.json").exists() and not (state_dir / "local" / "etcd").exists()
    assert (state_dir / "local" / "runs" / "r1").is_dir(), "run outputs are kept"


def test_a_dead_etcd_shows_as_degraded_and_up_repairs_it(state_dir: Path) -> None:
    etcd_or_skip()
    client = Client.from_sources()
    first = client.up()
    etcd.stop_process(first.details["etcd_pid"])
    assert client.status().state == "degraded"
    try:
        assert client.up().ready
    finally:
        client.down()


def test_without_etcd_runs_use_the_c10d_rendezvous(monkeypatch: pytest.MonkeyPatch, state_dir: Path) -> None:
    monkeypatch.setattr(etcd, "etcd_binary", lambda: None)
    messages: list[str] = []
    client = Client.from_sources(progress=messages.append)
    assert client.up().ready
    assert any("etcd is not on PATH: local runs will use torch's c10d rendezvous" in m for m in messages)
    assert any(not r.ok and "c10d" in r.message for r in client.preflight())
    command = client.run(dry_run=True).commands[0]
    assert command[command.index("--rdzv-backend") + 1] == "c10d"
    assert command[command.index("--rdzv-conf") + 1].startswith("join_timeout=")
    client.down()


def test_the_run_command_line(state_dir: Path) -> None:
    client = Client.from_sources(overrides={"job.num_workers": 3, "job.nproc_per_node": 2})
    first = client.run(
        trainer_overrides={"model.preset": "tiny", "train.steps": 20},
        trainer_args=["--train.lr", "0.01", "--parallel.api=fsdp1"],
        dry_run=True,
    )
    second = client.run(dry_run=True)
    assert first.dry_run and first.run_id != second.run_id, "a fresh run id per run"
    assert first.run_id.startswith("fsdp-")
    assert len(first.commands) == 3 and len(set(first.commands)) == 1
    command = list(first.commands[0])
    assert command[1:3] == ["-m", "fsdp_sdk.backends.local.agent"]
    flags = dict(itertools.pairwise(command[3:]))
    assert flags["--nnodes"] == "3" and flags["--nproc-per-node"] == "2"
    assert flags["--max-restarts"] == "0", "restarts are the supervisor's: every agent launched again together"
    assert first.extra["plan"]["max_restarts"] == 3, "job.max_restarts"
    assert flags["--rdzv-id"].startswith(first.run_id + "-"), "a fresh rendezvous id per launch"
    assert flags["--local-addr"] == "127.0.0.1"
    assert "--node-rank" not in command
    rank = command.index("fsdp_sdk.backends.local.rank")
    assert command[rank - 1 : rank + 2] == ["-m", "fsdp_sdk.backends.local.rank", "fsdp_trainer"]
    trainer = command[rank + 2 :]
    assert dict(zip(trainer[::2], trainer[1::2], strict=True)) == {
        "--model.preset": "tiny",
        "--train.steps": "20",
        "--train.lr": "0.01",
        "--parallel.api": "fsdp1",
        "--train.output_dir": str(state_dir / "local" / "runs" / first.run_id),
        "--checkpoint.every_steps": "2",
    }
    plan = first.extra["plan"]
    assert plan["total_steps"] == 20 and plan["checkpoint_dir"].endswith("/checkpoints")
    assert not state_dir.exists(), "a dry run starts and creates nothing"


def test_the_checkpoint_period_is_left_to_the_user_when_set(state_dir: Path) -> None:
    client = Client.from_sources(overrides={"local.checkpoint_every_steps": 0})
    command = client.run(trainer_overrides={"train.steps": 50}, dry_run=True).commands[0]
    assert command[command.index("--checkpoint.every_steps") + 1] == "0"
    command = client.run(trainer_overrides={"checkpoint.every_steps": 7}, dry_run=True).commands[0]
    assert command[command.index("--checkpoint.every_steps") + 1] == "7"
    command = client.run(trainer_overrides={"checkpoint.enabled": False}, dry_run=True).commands[0]
    assert "--checkpoint.every_steps" not in command


def test_a_run_name_must_be_a_safe_directory_name(state_dir: Path) -> None:
    client = Client.from_sources()
    for bad in ("../x", "a/b", "-rf", "x y", "a;b", ""):
        with pytest.raises(local_backend.ConfigError, match="cannot name a run"):
            client.run(run_id=bad, dry_run=True)
    assert not state_dir.exists()


def test_resume_needs_an_existing_run(state_dir: Path) -> None:
    with pytest.raises(
        local_backend.ConfigError, match=r"--resume: no local run 'nope' in .*'fsdp-sdk runs' lists them"
    ):
        Client.from_sources().run(resume="nope", dry_run=True)


def test_the_state_directory_is_cluster_state_dir_slash_local(tmp_path: Path) -> None:
    config = Client.from_sources(overrides={"cluster.state_dir": str(tmp_path / "elsewhere")}).config
    assert LocalBackend.root(config) == tmp_path / "elsewhere" / "local"


def test_the_root_cause_is_the_first_primary_error_not_the_last_agent_line(tmp_path: Path) -> None:
    lines = [
        (2.0, "agent 1", "[rank1] RuntimeError: [../gloo/transport/tcp/pair.cc:534] Connection closed by peer"),
        (1.5, "agent 0", "[rank0] ValueError: bad shape"),
        (3.0, "agent 0", "torch.distributed.elastic.multiprocessing.errors.ChildFailedError: "),
        (0.5, "agent 1", "[rank1] 12:00:00 INFO fsdp_trainer: loading"),
    ]
    errors = [ErrorLine(at, src, text, p) for at, src, text in lines if (p := classify(text)) is not None]
    assert len(errors) == 3
    cause = root_cause(errors, [tmp_path])
    assert cause is not None and cause.source == "agent 0" and cause.text.endswith("ValueError: bad shape")


@pytest.mark.parametrize(
    "line, expected",
    [
        (
            "RuntimeError: [enforce fail at inline_container.cc:672] . unexpected pos 1088 vs 1000",
            r"no space left on device writing .*/out \(.* free on the filesystem of .*\)",
        ),
        (
            "OSError: [Errno 28] No space left on device: '/data/ck/x.distcp'",
            r"no space left on device writing /data/ck/x.distcp",
        ),
        ("OSError: [Errno 30] Read-only file system: '/ro/out/metrics.jsonl'", r"/ro/out/metrics.jsonl is read-only"),
        ("ValueError: bad shape", r"^ValueError: bad shape$"),
    ],
)
def test_disk_errors_are_named_with_the_path(tmp_path: Path, line: str, expected: str) -> None:
    out = tmp_path / "out"
    out.mkdir()
    assert classify(line) is True
    assert re.search(expected, describe(ErrorLine(0, "agent 0", line, True), [out])), describe(
        ErrorLine(0, "agent 0", line, True), [out]
    )


def test_run_requires_the_trainer(monkeypatch: pytest.MonkeyPatch, state_dir: Path) -> None:
    real = local_backend.importlib.util.find_spec
    monkeypatch.setattr(
        local_backend.importlib.util, "find_spec", lambda name, *a: None if name == "fsdp_trainer" else real(name, *a)
    )
    with pytest.raises(local_backend.BackendError, match="the trainer is not installed"):
        Client.from_sources().run()
    assert not state_dir.exists()


def test_starting_etcd_without_a_binary_says_how_to_get_one(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setattr(etcd, "etcd_binary", lambda: None)
    with pytest.raises(local_backend.BackendError, match="etcd: not found on PATH; install etcd"):
        etcd.start_etcd(tmp_path / "data", tmp_path / "etcd.log")
    assert not (tmp_path / "data").exists()


def test_rendering_a_run_is_pure_and_says_everything(tmp_path: Path) -> None:
    """configuration + cluster state -> the run's plan, with no process, file or network touched."""
    from fsdp_sdk.backends.local.plan import ClusterSnapshot, render_run

    config = Client.from_sources(
        overrides={"job.num_workers": 2, "job.max_restarts": 1, "job.env": {"A": "1"}, "job.hf_token": "hf_canary"}
    ).config
    plan = render_run(
        config,
        run_id="exp",
        rdzv_id="exp-0001",
        root=tmp_path / "local",
        cluster=ClusterSnapshot("etcd-v2", etcd_port=4321, nodes=2),
        base_env={"OMP_NUM_THREADS": "3"},
        cpu_count=8,
        python="/py",
    )
    assert plan.rdzv_endpoint == "127.0.0.1:4321" and plan.max_restarts == 1 and plan.world_size == 2
    assert plan.commands[0][:3] == ("/py", "-m", "fsdp_sdk.backends.local.agent")
    assert "read_timeout=5" in plan.commands[0][plan.commands[0].index("--rdzv-conf") + 1]
    assert plan.run_dir == plan.output_dir == tmp_path / "local" / "runs" / "exp"
    assert plan.checkpoint_dir == plan.output_dir / "checkpoints" and plan.total_steps == 100
    assert plan.env == {"PYTHONUNBUFFERED": "1", "A": "1", "HF_TOKEN": "hf_canary"}, "OMP_NUM_THREADS was set already"
    shown = json.dumps(plan.to_dict())
    assert "hf_canary" not in shown and '"HF_TOKEN": "**********"' in shown
    assert "hf_canary" not in " ".join(plan.commands[0]), "secrets travel in the environment, not in arguments"
    assert not (tmp_path / "local").exists()


# ---------------------------------------------------------------------- the runner (fsdp_sdk.runner), local


def _no_rdzv_suffix(text: str, run_id: str) -> str:
    return re.sub(rf"{re.escape(run_id)}-[0-9a-f]{{8}}", f"{run_id}-<rdzv>", text)


def test_run_dry_run_prints_the_runners_dryrun(invoke, state_dir: Path) -> None:
    args = ["--backend", "local", "--nodes", "2", "--preset", "tiny", "--steps", "4"]
    result = invoke("run", *args, "--name", "r1", "--dry-run")
    assert result.exit_code == 0, result.output
    client = Client.from_sources(overrides={"cluster.backend": "local", "job.num_workers": 2})
    plan = client.dryrun(trainer_overrides={"model.preset": "tiny", "train.steps": 4}, run_id="r1")
    assert _no_rdzv_suffix(result.stdout, "r1") == _no_rdzv_suffix("\n".join(plan.lines()) + "\n", "r1")
    assert result.stdout.startswith("Would run fsdp-r1 (run id r1) on backend local:")
    as_json = json.loads(invoke("run", *args, "--name", "r1", "--dry-run", "--json").stdout)
    assert _no_rdzv_suffix(json.dumps(as_json), "r1") == _no_rdzv_suffix(json.dumps(plan.to_dict()), "r1")
    assert not (state_dir / "local" / "runs" / "r1").exists(), "a dry run starts and writes nothing"
    # a default run id already starts with job.name: the job is named once (not fsdp-fsdp-...)
    default = invoke("run", *args, "--dry-run").stdout.splitlines()[0]
    assert re.match(r"^Would run fsdp-\d{8}-\d{6}-[0-9a-f]{4} \(run id fsdp-\d{8}", default), default


def test_a_local_run_that_will_not_fit_in_memory_is_refused_unless_forced(invoke, state_dir: Path) -> None:
    pytest.importorskip("fsdp_trainer.autotune")
    args = ["run", "--backend", "local", "--preset", "tiny", "--dry-run", "--set", "local.memory_limit_gib=0.001"]
    result = invoke(*args)
    assert result.exit_code == 2, result.output
    line = result.stderr.strip().splitlines()[-1]
    assert re.match(
        r"^Error: estimate: tiny needs about [\d.]+ GiB of host memory \([\d.]+ GiB per process x 2 processes\), "
        r"over the 0\.001 GiB available \(local\.memory_limit_gib\).*--force",
        line,
    ), line
    assert invoke(*args, "--force").exit_code == 0
    assert invoke(*args[:-1], "local.memory_limit_gib=64").exit_code == 0


def test_with_gpus_a_local_run_is_checked_against_each_gpus_memory(
    invoke, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A recording nvidia-smi first on PATH reports GPUs of 10 MiB: the run is held against their memory."""
    import os

    pytest.importorskip("fsdp_trainer.autotune")
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    calls = tmp_path / "calls"
    smi = bin_dir / "nvidia-smi"
    smi.write_text(f'#!/bin/sh\necho "$@" >> {calls}\necho 10\necho 10\n')
    smi.chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    result = invoke("run", "--backend", "local", "--preset", "tiny", "--dry-run")
    assert result.exit_code == 2, result.output
    assert re.search(
        r"Error: estimate: tiny needs about [\d.]+ GiB per GPU, over the [\d.]+ GiB usable \(\d+% of 0\.010 GiB, nvidia-smi\)",
        result.stderr,
    )
    assert calls.read_text() == "--query-gpu=memory.total --format=csv,noheader,nounits\n"
    assert invoke("run", "--backend", "local", "--preset", "tiny", "--dry-run", "--force").exit_code == 0


def _finished_run(state_dir: Path, run_id: str, steps: int) -> Path:
    from fsdp_sdk.backends.local.records import RunRecord

    run_dir = state_dir / "local" / "runs" / run_id
    run_dir.mkdir(parents=True)
    (run_dir / "summary.json").write_text(
        json.dumps({"steps": steps, "final_loss": 1.5, "tokens_per_s_per_gpu": 900.0})
    )
    RunRecord(run_id, "succeeded", "fsdp", str(run_dir), str(run_dir), 1, 1, steps, 1000.0, 1200.0).save()
    return run_dir


def test_a_finished_named_run_starts_nothing_and_keeps_its_record(invoke, state_dir: Path) -> None:
    pytest.importorskip("fsdp_trainer")
    run_dir = _finished_run(state_dir, "done", 3)
    before = (run_dir / "run.json").read_text()
    result = invoke("run", "--backend", "local", "--preset", "tiny", "--steps", "3", "--name", "done")
    assert result.exit_code == 0, result.output
    assert "run done has finished (3 steps): nothing started, its record is kept" in result.stderr
    assert "Run done finished in 3:20: 3 steps, final loss 1.5000" in result.stderr, "the record's duration"
    assert (run_dir / "run.json").read_text() == before, "the record is kept"
    listed = invoke("runs", "--backend", "local").stdout.splitlines()[1].split()
    assert listed[:3] == ["done", "succeeded", "3/3"] and "3:20" in listed, "one duration: 'runs' shows the same"
    assert not (state_dir / "local" / "state.json").exists(), "no etcd was started"
    assert not (run_dir / "logs").exists(), "no agent was started"
    # more steps than done: the run would continue
    client = Client.from_sources(overrides={"cluster.backend": "local"})
    assert client.dryrun(trainer_overrides={"model.preset": "tiny", "train.steps": 3}, run_id="done").finished
    assert client.dryrun(trainer_overrides={"model.preset": "tiny", "train.steps": 5}, run_id="done").finished is None


def _oom_plan(tmp_path: Path, script: str) -> object:
    import sys

    from fsdp_sdk.backends.local.plan import RunPlan

    return RunPlan(
        run_id="oom",
        rdzv_id="oom-1",
        job_name="fsdp",
        nodes=1,
        nproc_per_node=1,
        rdzv_backend="c10d",
        rdzv_endpoint="127.0.0.1:1",
        max_restarts=3,
        commands=((sys.executable, "-c", script),),
        env={},
        run_dir=tmp_path,
        output_dir=tmp_path,
        log_dir=tmp_path / "logs",
        checkpoint_dir=None,
        trainer={},
    )


@pytest.mark.parametrize("oom", [True, False])
def test_a_rank_killed_by_the_oom_killer_is_out_of_memory_and_not_restarted(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, oom: bool
) -> None:
    """A simulated OOM kill: the agent reports its rank killed by SIGKILL after bumping the OOM counter file."""
    import os

    from fsdp_sdk.backends.local.agent import EVENT_PREFIX
    from fsdp_sdk.backends.local.memory import OOM_COUNTERS_ENV
    from fsdp_sdk.backends.local.supervisor import Supervisor
    from fsdp_sdk.errors import RunError

    counters = tmp_path / "memory.events"
    counters.write_text("low 0\noom 0\noom_kill 0\n")
    monkeypatch.setenv(OOM_COUNTERS_ENV, str(counters))
    event = json.dumps({"event": "worker_failed", "exitcode": -9, "local_rank": 0, "pid": 4242})
    bump = f"open({str(counters)!r}, 'w').write('oom_kill 1\\n');" if oom else ""
    script = f"import sys; {bump} print({EVENT_PREFIX + event!r}, flush=True); sys.exit(1)"
    plan = _oom_plan(tmp_path, script)
    launches: list[object] = []

    def relaunch() -> object:
        launches.append(plan)
        counters.write_text("oom_kill 0\n")
        return _oom_plan(tmp_path, "import sys; sys.exit(1)")

    supervisor = Supervisor(plan, dict(os.environ), lambda event: None, relaunch=relaunch, poll_s=0.05)
    with pytest.raises(RunError) as err:
        supervisor.run()
    if oom:
        assert launches == [], "not restarted into the same death"
        assert str(err.value).startswith(
            "run oom failed: out of host memory: agent 0's local rank 0 (pid 4242) was killed by SIGKILL (the "
            "kernel's OOM killer: oom_kill in "
        ), "the memory and the rank first"
        assert "rose from 0 to 1)" in str(err.value)
    else:
        assert launches, "a rank killed without an OOM is restarted"
        assert "out of memory" not in str(err.value)


@pytest.mark.parametrize("oom", [True, False])
def test_an_agent_killed_by_the_oom_killer_is_out_of_memory(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, oom: bool
) -> None:
    """The agent itself dies by SIGKILL (the OOM killer took the torchrun process, not a rank): out of memory when
    the OOM counter rose meanwhile, a plain SIGKILL otherwise."""
    import os
    import re

    from fsdp_sdk.backends.local.memory import OOM_COUNTERS_ENV
    from fsdp_sdk.backends.local.supervisor import Supervisor
    from fsdp_sdk.errors import RunError

    counters = tmp_path / "memory.events"
    counters.write_text("low 0\noom 0\noom_kill 2\n")
    monkeypatch.setenv(OOM_COUNTERS_ENV, str(counters))
    bump = f"open({str(counters)!r}, 'w').write('oom_kill 3\\n');" if oom else ""
    plan = _oom_plan(tmp_path, f"import os, signal; {bump} os.kill(os.getpid(), signal.SIGKILL)")
    launches: list[object] = []

    def relaunch() -> object:
        launches.append(plan)
        return plan

    supervisor = Supervisor(plan, dict(os.environ), lambda event: None, relaunch=relaunch, poll_s=0.05)
    with pytest.raises(RunError) as err:
        supervisor.run()
    message = str(err.value)
    assert launches == [], "an agent killed outright is not restarted"
    if oom:
        assert re.search(
            r"failed: out of host memory: agent 0 \(pid \d+\) was killed by SIGKILL \(the kernel's OOM killer: "
            r"oom_kill in "
            + re.escape(str(counters))
            + r" rose from 2 to 3\); not restarted \(it would run out again\): use a smaller model or micro batch",
            message,
        ), message
    else:
        assert re.search(r"agent 0 \(pid \d+\) was killed by SIGKILL; its trainer processes were stopped", message)
        assert "out of memory" not in message


def test_a_rank_out_of_gpu_memory_is_said_first_with_the_estimate_and_not_restarted(tmp_path: Path) -> None:
    """A trainer's CUDA out-of-memory error: one line, GPU memory and the rank first, the estimate beside the
    limit; not restarted into the same error."""
    import os

    from fsdp_sdk.backends.local.agent import EVENT_PREFIX
    from fsdp_sdk.backends.local.supervisor import Supervisor
    from fsdp_sdk.errors import RunError

    error = (
        "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a total capacity of "
        "79.19 GiB of which 1.06 GiB is free."
    )
    event = json.dumps({"event": "worker_failed", "exitcode": 1, "local_rank": 0, "pid": 4242})
    script = f"import sys; print({error!r}, flush=True); print({EVENT_PREFIX + event!r}, flush=True); sys.exit(1)"
    plan = _oom_plan(tmp_path, script)
    launches: list[object] = []

    def relaunch() -> object:
        launches.append(plan)
        return plan

    supervisor = Supervisor(plan, dict(os.environ), lambda event: None, relaunch=relaunch, poll_s=0.05)
    supervisor.memory_estimate = "the estimate: 80.2 GiB per GPU of the 67.3 GiB usable"
    with pytest.raises(RunError) as err:
        supervisor.run()
    assert launches == [], "not restarted into the same error"
    assert str(err.value).startswith(
        "run oom failed: out of GPU memory: agent 0 (tried to allocate 2.00 GiB of a GPU of 79.19 GiB; the estimate: "
        "80.2 GiB per GPU of the 67.3 GiB usable); not restarted (it would run out again)"
    ), str(err.value)
    assert "\n" not in str(err.value) and "Traceback" not in str(err.value)


_SUPERVISOR = """
import json, sys, time
from pathlib import Path
from fsdp_sdk.backends.local.records import RunLock
run_dir = Path(sys.argv[1])
lock = RunLock(run_dir)
lock.acquire("busy")
print("ready", flush=True)
try:
    time.sleep(60)
except KeyboardInterrupt:
    data = json.loads((run_dir / "run.json").read_text())
    data.update(state="interrupted", ended_at=time.time())
    (run_dir / "run.json").write_text(json.dumps(data))
"""


def test_job_status_logs_and_stop_on_a_local_run(invoke, state_dir: Path) -> None:
    """A running local run (its supervising process stands in for 'fsdp-sdk run'): status, the leader's log, and
    stop, which interrupts that process as Ctrl-C would once its identity is checked."""
    import subprocess
    import sys

    from fsdp_sdk.backends.local.records import RunRecord
    from fsdp_sdk.processes import ProcessIdentity

    from .conftest import FSDP_SDK

    run_dir = state_dir / "local" / "runs" / "busy"
    (run_dir / "logs").mkdir(parents=True)
    (run_dir / "logs" / "agent-0.log").write_text("waiting\n")
    (run_dir / "logs" / "agent-1.log").write_text(
        '[rank0] master_addr=127.0.0.1 host=localhost\n{"step": 1, "loss": 2.0}\n'
    )
    child = subprocess.Popen([sys.executable, "-c", _SUPERVISOR, str(run_dir)], stdout=subprocess.PIPE, text=True)
    try:
        assert child.stdout is not None and child.stdout.readline().strip() == "ready"
        identity = ProcessIdentity.of(child.pid)
        assert identity is not None
        record = RunRecord("busy", "running", "fsdp", str(run_dir), str(run_dir), 2, 1, 10, 1000.0)
        record.supervisor = {**identity.to_dict(), "create_time": identity.create_time - 100}  # a reused pid
        record.save()
        status = invoke("job", "status", "busy", "--backend", "local", "--json")
        assert status.exit_code == 0, status.output
        assert json.loads(status.stdout)["phase"] == "Running"
        logs = invoke("job", "logs", "busy", "--backend", "local")
        assert (
            logs.exit_code == 0
            and logs.stdout == '[rank0] master_addr=127.0.0.1 host=localhost\n{"step": 1, "loss": 2.0}\n'
        )
        every = invoke("job", "logs", "--all", "busy", "--backend", "local").stdout
        assert every.startswith("[agent-0] waiting\n[agent-1] [rank0] master_addr=")
        refused = invoke("job", "stop", "busy", "--backend", "local")
        assert refused.exit_code == 1 and "now belongs to another process" in refused.stderr
        assert child.poll() is None, "a process that is not the run's is never signalled"
        record.supervisor = identity.to_dict()
        record.save()
        follow = subprocess.Popen(
            [FSDP_SDK, "job", "logs", "-f", "busy", "--backend", "local"], stdout=subprocess.PIPE, text=True
        )
        assert (
            follow.stdout is not None and follow.stdout.readline() == "[rank0] master_addr=127.0.0.1 host=localhost\n"
        )
        with open(run_dir / "logs" / "agent-1.log", "a") as log:
            log.write('{"step": 2, "loss": 1.9}\n')
        assert follow.stdout.readline().startswith('{"step": 1,')
        assert follow.stdout.readline() == '{"step": 2, "loss": 1.9}\n', "-f prints what is written meanwhile"
        timed_out = invoke("job", "wait", "busy", "--backend", "local", "--timeout", "0.2")
        assert timed_out.exit_code == 3 and "timed out after 0.2s: busy is still Running" in timed_out.stderr
        assert "run busy: Running" in timed_out.stderr
        listed = invoke("job", "list", "--backend", "local").stdout.splitlines()
        assert listed[0].split() == ["NAME", "PHASE", "STEPS", "STARTED"]
        assert listed[1].split() == ["busy", "Running", "-", "1970-01-01", "00:16:40", "UTC"]
        waiter = subprocess.Popen(
            [FSDP_SDK, "job", "wait", "busy", "--backend", "local", "--json"], stdout=subprocess.PIPE, text=True
        )
        kept = invoke("job", "stop", "busy", "--backend", "local", "--keep-rendezvous")
        assert kept.exit_code == 2 and "--keep-rendezvous" in kept.stderr and child.poll() is None
        stopped = invoke("job", "stop", "busy", "--backend", "local")
        assert stopped.exit_code == 0, stopped.output
        assert stopped.stdout == (
            f"stopped run busy (fsdp-sdk pid {child.pid}): interrupted, stopped before its first step; no checkpoint "
            "yet: a resume starts at step 1\n"
        )
        assert child.wait(timeout=10) == 0
        assert follow.wait(timeout=10) == 0, "-f ends with the run"
        waited, _ = waiter.communicate(timeout=30)
        assert waiter.returncode == 1, "the wait blocked until the run ended, interrupted: not a success"
        assert json.loads(waited)["phase"] == "Interrupted" and json.loads(waited)["timed_out"] is False
        assert (
            json.loads(invoke("job", "status", "busy", "--backend", "local", "--json").stdout)["phase"] == "Interrupted"
        )
        again = invoke("job", "stop", "busy", "--backend", "local")
        assert again.stdout == "run busy is not running (interrupted); nothing to stop\n"
    finally:
        child.kill()
        child.wait()


def test_job_wait_and_list_on_local_runs(invoke, state_dir: Path) -> None:
    """`job wait` exits as on Kubernetes from a local run's record (0 succeeded, 1 failed or lost); `job list`
    shows the local runs, oldest first, as `job list --json` gives them."""
    from fsdp_sdk.backends.local.records import RunRecord

    for run_id, state, started in (("ok", "succeeded", 1000.0), ("bad", "failed", 2000.0), ("gone", "running", 3000.0)):
        run_dir = state_dir / "local" / "runs" / run_id
        run_dir.mkdir(parents=True)
        error = "agent 0 exited with code 1: boom" if state == "failed" else None
        RunRecord(run_id, state, "fsdp", str(run_dir), str(run_dir), 1, 1, 5, started, started + 60, error=error).save()
    succeeded = invoke("job", "wait", "ok", "--backend", "local", "--json")
    assert succeeded.exit_code == 0, succeeded.output
    assert json.loads(succeeded.stdout)["phase"] == "Succeeded" and json.loads(succeeded.stdout)["backend"] == "local"
    failed = invoke("job", "wait", "bad", "--backend", "local")
    assert failed.exit_code == 1 and "run bad: Failed (agent 0 exited with code 1: boom)" in failed.stderr
    assert "phase: Failed" in failed.stdout
    lost = invoke("job", "wait", "--backend", "local", "--timeout", "5")  # the latest run: its process is gone
    assert lost.exit_code == 1 and "run gone: Lost" in lost.stderr
    listed = invoke("job", "list", "--backend", "local", "--json")
    assert [(r["name"], r["phase"]) for r in json.loads(listed.stdout)] == [
        ("ok", "Succeeded"),
        ("bad", "Failed"),
        ("gone", "Lost"),
    ]
    missing = invoke("job", "wait", "nope", "--backend", "local")
    assert missing.exit_code == 2 and "no local run 'nope'" in missing.stderr


def test_a_run_whose_start_callback_fails_is_stopped_and_recorded(state_dir: Path) -> None:
    """An exception between schedule and wait (the caller's on_started) leaves no agent running nor a 'running'
    record: the run is stopped as an interrupted one."""
    pytest.importorskip("fsdp_trainer")
    etcd_or_skip()
    client = Client.from_sources(overrides={"job.num_workers": 1})

    def refuse(job: object) -> None:
        raise RuntimeError("the platform refused")

    try:
        with pytest.raises(RuntimeError, match="the platform refused"):
            client.run(trainer_overrides={"model.preset": "tiny", "train.steps": 2}, run_id="cb", on_started=refuse)
        (record,) = client.runs()
        assert (record.run_id, record.state) == ("cb", "interrupted") and record.ended_at is not None
    finally:
        client.down()


def test_a_checkpoint_that_failed_to_load_is_not_restarted_into(tmp_path: Path) -> None:
    """A launch fails loading a checkpoint (the trainer could not mark it BROKEN), and its restart fails loading the
    same one: not restarted again; a restart that fails on another checkpoint would be."""
    import os

    from fsdp_sdk.backends.local.agent import EVENT_PREFIX
    from fsdp_sdk.backends.local.supervisor import Supervisor
    from fsdp_sdk.errors import RunError

    def failing_load(ckpt: str) -> object:
        event = json.dumps({"event": "worker_failed", "exitcode": 1, "local_rank": 0, "pid": 4242})
        line = f"error: checkpoint: loading {ckpt} failed (unpickling error); marked it BROKEN, so the next start"
        script = f"import sys; print({line!r}, flush=True); print({EVENT_PREFIX + event!r}, flush=True); sys.exit(1)"
        return _oom_plan(tmp_path, script)

    order = iter(["/c/step_00000004", "/c/step_00000002", "/c/step_00000002"])
    first = failing_load(next(order))
    launches: list[object] = []

    def relaunch() -> object:
        launches.append(1)
        return failing_load(next(order))

    supervisor = Supervisor(first, dict(os.environ), lambda event: None, relaunch=relaunch, poll_s=0.05)
    with pytest.raises(RunError) as err:
        supervisor.run()
    assert len(launches) == 2, "restarted after step 4 failed, and after step 2 failed the first time"
    assert "; not restarted: /c/step_00000002 failed to load in the previous launch too (after 2 restarts)" in str(
        err.value
    ), str(err.value)
