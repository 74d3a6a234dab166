"""The local backend: the conformance suite, its state directory, the c10d fallback, the torchrun commands."""

from __future__ import annotations

import itertools
import json
from pathlib import Path

import pytest

from fsdp_sdk import Client, etcd
from fsdp_sdk.backends import builtin, local
from fsdp_sdk.backends.local import LocalBackend, _failure_cause
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
    assert first.dry_run and first.run_id != second.run_id, "a fresh rendezvous id per run"
    assert len(first.commands) == 3 and len(set(first.commands)) == 1
    command = list(first.commands[0])
    assert command[1:3] == ["-m", "torch.distributed.run"]
    flags = dict(itertools.pairwise(command[3:]))
    assert flags["--nnodes"] == "3" and flags["--nproc-per-node"] == "2" and flags["--max-restarts"] == "0"
    assert flags["--rdzv-id"] == first.run_id and flags["--local-addr"] == "127.0.0.1"
    assert "--node-rank" not in command
    trainer = command[command.index("fsdp_trainer") + 1 :]
    assert dict(zip(trainer[::2], trainer[1::2], strict=True)) == {
        "--model.preset": "tiny",
        "--train.steps": "20",
        "--train.lr": "0.01",
        "--parallel.api": "fsdp1",
        "--train.output_dir": str(state_dir / "local" / "runs" / first.run_id),
    }
    assert not state_dir.exists(), "a dry run starts and creates nothing"


def test_the_state_directory_is_cluster_state_dir_slash_local(tmp_path: Path) -> None:
    config = Client.from_sources(overrides={"cluster.state_dir": str(tmp_path / "elsewhere")}).config
    assert LocalBackend.root(config) == tmp_path / "elsewhere" / "local"


@pytest.mark.parametrize(
    "lines, cause",
    [
        (
            ["[rank0] ValueError: bad shape", "torch...ChildFailedError: ", "exitcode  : 1 (pid: 9)"],
            "[rank0] ValueError: bad shape",
        ),
        (
            ["fsdp-train: error: --runtime.backend: nccl needs CUDA", "exitcode  : 2 (pid: 9)"],
            "fsdp-train: error: --runtime.backend: nccl needs CUDA",
        ),
        (
            [
                "terminate called without an active exception",
                "  exitcode  : -6 (pid: 8027)  (SIGABRT)",
                "  error_file: <N/A>",
            ],
            "worker exitcode : -6 (pid: 8027) (SIGABRT)",
        ),
        ([], "no output"),
    ],
)
def test_a_failed_agent_is_summed_up_by_its_most_telling_line(lines: list[str], cause: str) -> None:
    assert _failure_cause(lines) == cause


def test_run_requires_the_trainer(monkeypatch: pytest.MonkeyPatch, state_dir: Path) -> None:
    real = local.importlib.util.find_spec
    monkeypatch.setattr(
        local.importlib.util, "find_spec", lambda name, *a: None if name == "fsdp_trainer" else real(name, *a)
    )
    with pytest.raises(local.BackendError, match="the trainer is not installed"):
        Client.from_sources().run()
    assert not state_dir.exists()


def test_starting_etcd_without_a_binary_says_how_to_get_one(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setattr(etcd, "etcd_binary", lambda: None)
    with pytest.raises(local.BackendError, match="etcd: not found on PATH; install etcd"):
        etcd.start_etcd(tmp_path / "data", tmp_path / "etcd.log")
    assert not (tmp_path / "data").exists()
