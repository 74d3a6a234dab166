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
