"""Cost spent, with a fixed clock: a cluster's node-hours x price from its ledger, a job's nodes x hours x price, and
local runs at 0 ("local") in ``runs``."""

from __future__ import annotations

import datetime as dt
import json
import time
from pathlib import Path

import pytest
from click.testing import CliRunner

from fsdp_sdk.costs import LedgerEntry, cluster_cost, job_cost, parse_time, read_ledger, record
from fsdp_sdk.k8s.jobs import JobStatus

T0 = dt.datetime(2026, 12, 2, 3, 0, tzinfo=dt.timezone.utc)
HOUR = dt.timedelta(hours=1)


def _entry(at: dt.datetime, event: str, nodes: int) -> LedgerEntry:
    return LedgerEntry(at, event, nodes, 40.0, 1.5, "p4de.24xlarge")


def test_cluster_cost_adds_each_interval_of_the_ledger(tmp_path: Path) -> None:
    record(tmp_path, "demo", _entry(T0 - 10 * HOUR, "up", 4))
    record(tmp_path, "demo", _entry(T0 - 9 * HOUR, "down", 0))  # an earlier life of the cluster: not counted
    for entry in (_entry(T0, "up", 2), _entry(T0 + HOUR, "scale", 0), _entry(T0 + 2 * HOUR, "scale", 2)):
        record(tmp_path, "demo", entry)
    (tmp_path / "costs" / "demo.jsonl").open("a").write("not json\n")  # a torn line is skipped
    entries = read_ledger(tmp_path, "demo")
    assert len(entries) == 5

    cost = cluster_cost(entries, now=T0 + 3 * HOUR)
    # 2 nodes for 1 h, 0 for 1 h, 2 for 1 h; the control plane and system nodes for all 3 h
    assert cost.node_hours == pytest.approx(4.0)
    assert cost.usd == pytest.approx(4 * 40.0 + 3 * 1.5)
    assert cost.usd_per_hour == pytest.approx(2 * 40.0 + 1.5)
    assert cost.since == T0 and cost.hours == pytest.approx(3.0)
    assert cost.line() == "cost so far: $164.50 (4.0 GPU node-hours in 3:00:00; $81.50/hour now)"
    idle = cluster_cost(entries, now=T0 + 3 * HOUR, nodes_now=0)  # the idle controller scaled the nodes to 0
    assert idle.usd_per_hour == pytest.approx(1.5) and idle.usd == pytest.approx(cost.usd)

    record(tmp_path, "demo", _entry(T0 + 3 * HOUR, "down", 0))
    ended = cluster_cost(read_ledger(tmp_path, "demo"), now=T0 + 30 * HOUR)
    assert ended.usd == pytest.approx(164.5) and ended.usd_per_hour is None  # nothing after the down
    assert cluster_cost([], now=T0).line() == "cost so far: unknown (no record of 'fsdp-sdk up' for this cluster here)"


def test_job_cost_is_nodes_by_hours_by_price() -> None:
    obj = {
        "apiVersion": "kubeflow.org/v1",
        "kind": "PyTorchJob",
        "metadata": {"name": "fsdp", "namespace": "default", "creationTimestamp": "2026-12-02T03:00:00Z"},
        "spec": {"pytorchReplicaSpecs": {"Worker": {"replicas": 2}}},
        "status": {
            "conditions": [{"type": "Succeeded", "status": "True", "lastTransitionTime": "2026-12-02T03:30:00Z"}],
            "completionTime": "2026-12-02T03:45:00Z",
        },
    }
    status = JobStatus.from_object(obj)
    assert status.nodes == 2 and status.completed == "2026-12-02T03:45:00Z"
    cost = job_cost(
        nodes=status.nodes,
        started=parse_time(status.created),
        ended=parse_time(status.completed),
        usd_per_node_hour=40.0,
        now=T0 + 10 * HOUR,  # ended: the clock does not matter
    )
    assert cost.usd == pytest.approx(2 * 0.75 * 40.0)
    assert cost.line() == "cost: $60.00 (2 node(s) x 0:45:00 x $40.00/node-hour)"
    del obj["status"]
    running = JobStatus.from_object(obj)
    so_far = job_cost(nodes=2, started=parse_time(running.created), ended=None, usd_per_node_hour=40.0, now=T0 + HOUR)
    assert so_far.usd == pytest.approx(80.0)
    local = job_cost(nodes=2, started=T0, ended=T0 + HOUR, usd_per_node_hour=None, now=T0, local=True)
    assert local.text() == "local" and local.to_dict()["usd"] == 0.0


def test_runs_lists_local_runs_at_cost_local(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from fsdp_sdk.cli import cli

    monkeypatch.setenv("FSDP_SDK_STATE_DIR", str(tmp_path))
    monkeypatch.chdir(tmp_path)
    run_dir = tmp_path / "local" / "runs" / "r1"
    run_dir.mkdir(parents=True)
    now = time.time()
    record_ = {
        "run_id": "r1",
        "state": "succeeded",
        "job_name": "fsdp",
        "run_dir": str(run_dir),
        "output_dir": str(run_dir / "out"),
        "nodes": 2,
        "nproc_per_node": 1,
        "total_steps": 20,
        "started_at": now - 60,
        "ended_at": now,
    }
    (run_dir / "run.json").write_text(json.dumps(record_))
    runner = CliRunner()
    result = runner.invoke(cli, ["runs", "--backend", "local"])
    assert result.exit_code == 0, result.output
    header, row = result.output.splitlines()[:2]
    assert header.split() == ["ID", "STATE", "STEPS", "LOSS", "TOKENS/S", "STARTED", "DURATION", "COST", "DIRECTORY"]
    assert row.split()[:2] == ["r1", "succeeded"] and row.split()[-2:] == ["local", str(run_dir / "out")]
    listed = json.loads(runner.invoke(cli, ["runs", "--backend", "local", "--json"]).output)
    assert listed[0]["cost"] == {"usd": 0.0, "local": True}
