"""The records behind ``fsdp-sdk clusters`` (:mod:`fsdp_sdk.clusters`): written atomically, read back the same, older
traces of a cluster (a cost ledger and an eksctl working directory) listed, and the table's text."""

from __future__ import annotations

import datetime as dt
import json
from pathlib import Path

from fsdp_sdk.clusters import ClusterSnapshot, known_clusters, remember, snapshot_path, table_rows
from fsdp_sdk.costs import LedgerEntry, record

NOW = dt.datetime(2026, 12, 6, 12, 0, tzinfo=dt.timezone.utc)


def snapshot(**changes: object) -> ClusterSnapshot:
    values: dict[str, object] = dict(
        name="team-a",
        backend="terraform",
        region="eu-west-1",
        state="ready",
        observed_at=NOW,
        nodes=2,
        max_nodes=4,
        instance_type="p5.48xlarge",
        gpu="8x H100 80 GiB",
        kubernetes_version="1.34",
        standard_support_until="2026-12-02",
        usd_per_hour=110.5,
        cost_usd=221.0,
        since=NOW - dt.timedelta(hours=2),
        idle_minutes=30,
        jobs_running=1,
        jobs_queued=2,
    )
    values.update(changes)
    return ClusterSnapshot(**values)  # type: ignore[arg-type]


def test_round_trip_and_one_record_per_backend_region_and_name(tmp_path: Path) -> None:
    first = snapshot()
    path = remember(tmp_path, first)
    assert path == snapshot_path(tmp_path, "terraform", "eu-west-1", "team-a")
    assert not list(path.parent.glob(".*.tmp"))
    same_name_elsewhere = snapshot(region="us-east-1", nodes=0)
    remember(tmp_path, same_name_elsewhere)
    remember(tmp_path, snapshot(nodes=3))  # the newer record of the same cluster replaces the older
    assert known_clusters(tmp_path) == [snapshot(nodes=3), same_name_elsewhere]  # by backend, region, name
    path.write_text("{not json", encoding="utf-8")  # a damaged record is skipped, not fatal
    assert known_clusters(tmp_path) == [same_name_elsewhere]


def test_clusters_known_only_from_older_traces(tmp_path: Path) -> None:
    (tmp_path / "eksctl" / "old").mkdir(parents=True)
    record(tmp_path, "old", LedgerEntry(NOW - dt.timedelta(hours=3), "up", 2, 40.0, 0.1, "p4de.24xlarge"))
    record(tmp_path, "old", LedgerEntry(NOW - dt.timedelta(hours=1), "down", 0, 40.0, 0.1, "p4de.24xlarge"))
    (old,) = known_clusters(tmp_path)
    assert (old.backend, old.name, old.state, old.instance_type) == ("eksctl", "old", "absent", "p4de.24xlarge")
    assert old.cost_usd == 2 * 2 * 40.0 + 2 * 0.1 and old.usd_per_hour == 0.0
    assert "status --backend eksctl --name old" in (old.note or "")
    remember(tmp_path, snapshot(backend="eksctl", name="old", region="us-west-2", state="absent"))
    (recorded,) = known_clusters(tmp_path)  # a record supersedes the traces
    assert recorded.region == "us-west-2"


def test_table_rows() -> None:
    (row,) = table_rows([snapshot(source="recorded", observed_at=NOW - dt.timedelta(minutes=5))], now=NOW)
    assert row == {
        "NAME": "team-a",
        "BACKEND": "terraform",
        "REGION": "eu-west-1",
        "KUBERNETES": "1.34 (std until 2026-12-02)",
        "GPU": "p5.48xlarge (8x H100 80 GiB)",
        "NODES": "2/4",
        "STATE": "ready",
        "$/H NOW": "$110.50",
        "COST SINCE UP": "$221.00",
        "IDLE": "0 after 30 min",
        "JOBS": "1 running, 2 waiting",
        "SEEN": "as of 5 min ago",
    }
    (live,) = table_rows(
        [snapshot(source="live", jobs_running=None, nodes=None, max_nodes=None, idle_minutes=None)], now=NOW
    )
    assert (live["SEEN"], live["JOBS"], live["NODES"], live["IDLE"]) == ("now", "?", "?", "off")
    assert json.loads(json.dumps(snapshot().to_dict()))["since"] == (NOW - dt.timedelta(hours=2)).isoformat()
