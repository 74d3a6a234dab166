"""Naming a hung rank (``fsdp_sdk.backends.local.hang``) from heartbeats and process states, without processes.

The end-to-end case (a real rank SIGSTOPped under torchrun, twice) is
``tests/reliability/test_local_faults.py::test_a_rank_that_hangs_in_a_collective``.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from fsdp_sdk.backends.local.hang import RankState, Snapshot, diagnose, read_heartbeats

GLOO_TIMEOUT = (
    "RuntimeError: [/__w/pytorch/pytorch/third_party/gloo/gloo/transport/tcp/unbound_buffer.cc:78] "
    "Timed out waiting 30000ms for recv operation to complete"
)


def _waiting(rank: int = 0) -> RankState:
    return RankState(rank, 100 + rank, 8, "backward", "FSDP reduce-scatters", 30.5, 0.4, "exited", 30)


def test_a_stopped_rank_is_named_with_its_phase_and_the_timeout() -> None:
    hung = RankState(1, 101, 8, "forward", "FSDP all-gathers", 31.0, 31.0, "stopped", 30)
    named = diagnose(Snapshot([_waiting(), hung], timed_out=True))
    assert named is not None and named.rank == 1
    assert named.describe() == (
        "rank 1 (pid 101) hung: stopped (SIGSTOP) in step 8 (forward), silent for 31 s; rank 0 waited for it in "
        "step 8 (backward: FSDP reduce-scatters) until the collective timeout (runtime.timeout_s 30) ended the run"
    )
    assert named.to_dict()["waiting"] == [
        {"rank": 0, "step": 8, "phase": "backward", "collective": "FSDP reduce-scatters"}
    ]


def test_a_silent_heartbeat_names_the_rank_when_its_state_is_unknown() -> None:
    hung = RankState(2, 102, 3, "clip", "the gradient-norm all-reduce", 40.0, 40.0, "sleeping", 30)
    named = diagnose(Snapshot([_waiting(0), _waiting(1), hung], timed_out=True))
    assert named is not None and named.rank == 2 and named.how.startswith("silent")
    assert "rank 0, rank 1 waited for it in step 8 (backward: FSDP reduce-scatters)" in named.describe()


def test_a_stuck_kernel_that_keeps_beating_is_the_live_rank_behind() -> None:
    """The heartbeat thread of a rank stuck in a kernel keeps beating: the live rank left behind is named."""
    stuck = RankState(1, 101, 8, "forward", "FSDP all-gathers", 30.2, 0.3, "running", 30)
    named = diagnose(Snapshot([_waiting(), stuck], timed_out=True))
    assert named is not None and named.rank == 1 and named.how == "stuck in forward"


@pytest.mark.parametrize(
    "ranks, timed_out",
    [
        ([_waiting(0), RankState(1, 101, 8, "forward", "", 1.0, 0.2, "running", 30)], False),  # a crash, no timeout
        ([_waiting(0), _waiting(1)], True),  # every rank timed out and exited: nobody to name
    ],
    ids=["no-timeout", "nobody-left"],
)
def test_no_hang_is_named_without_evidence(ranks: list[RankState], timed_out: bool) -> None:
    assert diagnose(Snapshot(ranks, timed_out=timed_out)) is None


def test_the_trainer_heartbeat_file_is_read_by_the_supervisor(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    heartbeat = pytest.importorskip("fsdp_trainer.heartbeat")
    monkeypatch.setenv(heartbeat.ENV, str(tmp_path))
    beat = heartbeat.Heartbeat(tmp_path, 3, 30)
    try:
        beat.set("backward", 12)
        record = read_heartbeats(tmp_path)[3]
        assert (record["step"], record["phase"], record["pid"], record["timeout_s"]) == (
            12,
            "backward",
            os.getpid(),
            30,
        )
        assert record["collective"] == "FSDP reduce-scatters" and record["beat"] >= record["since"] - 1
    finally:
        beat.close()
    assert read_heartbeats(tmp_path)[3]["phase"] == "end"


def test_the_timeout_line_is_recognised() -> None:
    from fsdp_sdk.backends.local.hang import COLLECTIVE_TIMEOUT

    assert COLLECTIVE_TIMEOUT.search(GLOO_TIMEOUT)
    nccl = (
        "[rank0]:[E1206 22:31:19.1 ProcessGroupNCCL.cpp:632] [Rank 0] Watchdog caught collective operation timeout: "
        "WorkNCCL(SeqNum=42, OpType=_REDUCE_SCATTER_BASE, Timeout(ms)=30000) ran for 30012 milliseconds before timing out."
    )
    assert COLLECTIVE_TIMEOUT.search(nccl)
    assert not COLLECTIVE_TIMEOUT.search("RuntimeError: Connection closed by peer [127.0.0.1]:29500")
