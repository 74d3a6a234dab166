"""What a run and a cluster have cost so far: node-hours times the on-demand price the plan used.

A cluster's cost is read from its ledger, ``<cluster.state_dir>/costs/<cluster>.jsonl``: one line each time
``up``, ``scale`` or ``down`` changed its GPU nodes, with the time, the node count, the price per GPU node-hour
(:meth:`fsdp_sdk.Client.hourly_price`, the plan's source) and the hourly price of the rest (control plane, system
nodes). The cost so far adds each interval's nodes x price up to now (or the ``down``). A job's cost is its nodes x
the price per node-hour x its hours, from its creation to its end (or now). Local runs cost nothing ("local").

Every function takes ``now``, so the figures are reproducible.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

__all__ = ["ClusterCost", "JobCost", "LedgerEntry", "cluster_cost", "job_cost", "ledger_path", "read_ledger", "record"]


@dataclasses.dataclass(frozen=True)
class LedgerEntry:
    """One change of a cluster's GPU nodes.

    :param at: when (UTC).
    :param event: ``up``, ``scale`` or ``down``.
    :param nodes: GPU nodes from then on.
    :param usd_per_node_hour: the price of one GPU node-hour (None: unknown).
    :param fixed_usd_per_hour: the price of the rest per hour (control plane, system nodes).
    :param instance_type: the GPU nodes' instance type.
    """

    at: dt.datetime
    event: str
    nodes: int
    usd_per_node_hour: float | None
    fixed_usd_per_hour: float
    instance_type: str

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready dict (a ledger line)."""
        return {**dataclasses.asdict(self), "at": self.at.isoformat()}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> LedgerEntry:
        """Read a ledger line."""
        return cls(**{**data, "at": dt.datetime.fromisoformat(data["at"])})


def ledger_path(state_dir: str | Path, cluster: str) -> Path:
    """Where the ledger of ``cluster`` is kept."""
    return Path(state_dir) / "costs" / f"{cluster}.jsonl"


def read_ledger(state_dir: str | Path, cluster: str) -> list[LedgerEntry]:
    """The ledger's entries, oldest first (none when there is no ledger); unreadable lines are skipped."""
    path = ledger_path(state_dir, cluster)
    if not path.exists():
        return []
    entries = []
    for line in path.read_text(encoding="utf-8").splitlines():
        try:
            entries.append(LedgerEntry.from_dict(json.loads(line)))
        except (ValueError, TypeError, KeyError):
            continue
    return entries


def record(state_dir: str | Path, cluster: str, entry: LedgerEntry) -> None:
    """Append ``entry`` to the ledger of ``cluster``."""
    path = ledger_path(state_dir, cluster)
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("a", encoding="utf-8") as file:
        file.write(json.dumps(entry.to_dict()) + "\n")


@dataclasses.dataclass(frozen=True)
class ClusterCost:
    """What a cluster has cost since it was last created (``up``), and what it costs per hour now.

    :param usd: the cost so far; None when a price is unknown.
    :param node_hours: GPU node-hours so far.
    :param hours: hours since ``up``.
    :param since: when ``up`` created it; None without a ledger.
    :param usd_per_hour: what it costs per hour now.
    """

    usd: float | None
    node_hours: float
    hours: float
    since: dt.datetime | None
    usd_per_hour: float | None

    def line(self) -> str:
        """``cost so far: $123.45 (24.0 GPU node-hours in 12:00:00; $55.04/hour now)``."""
        if self.since is None:
            return "cost so far: unknown (no record of 'fsdp-sdk up' for this cluster here)"
        usd = f"${self.usd:,.2f}" if self.usd is not None else "unknown"
        rate = f"; ${self.usd_per_hour:,.2f}/hour now" if self.usd_per_hour is not None else ""
        return f"cost so far: {usd} ({self.node_hours:,.1f} GPU node-hours in {_duration(self.hours)}{rate})"

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready dict."""
        return {
            "usd": _round(self.usd),
            "node_hours": round(self.node_hours, 4),
            "hours": round(self.hours, 4),
            "since": self.since.isoformat() if self.since else None,
            "usd_per_hour": _round(self.usd_per_hour),
        }


def cluster_cost(entries: Sequence[LedgerEntry], *, now: dt.datetime, nodes_now: int | None = None) -> ClusterCost:
    """The cost of the cluster's life since its last ``up`` (to its ``down``, or ``now``).

    :param nodes_now: the GPU nodes observed now; when they differ from the ledger's last entry (the idle
        controller scaled them to 0), the change counts from ``now``: the figure is an upper bound.
    """
    start = max((i for i, e in enumerate(entries) if e.event == "up"), default=None)
    if start is None:
        return ClusterCost(None, 0.0, 0.0, None, None)
    life = list(entries[start:])
    ended = next((i for i, e in enumerate(life) if e.event == "down"), None)
    if ended is not None:
        life = life[: ended + 1]
    usd: float | None = 0.0
    node_hours = 0.0
    for entry, after in zip(life, [*life[1:], None], strict=True):
        if entry.event == "down":
            break
        until = after.at if after is not None else now
        hours = max(0.0, (until - entry.at).total_seconds() / 3600)
        node_hours += entry.nodes * hours
        if usd is not None and entry.usd_per_node_hour is not None:
            usd += (entry.nodes * entry.usd_per_node_hour + entry.fixed_usd_per_hour) * hours
        elif entry.nodes:
            usd = None
    last = life[-1]
    end = last.at if last.event == "down" else now
    rate = None
    if last.event != "down" and last.usd_per_node_hour is not None:
        nodes = last.nodes if nodes_now is None else nodes_now
        rate = nodes * last.usd_per_node_hour + last.fixed_usd_per_hour
    hours = max(0.0, (end - life[0].at).total_seconds() / 3600)
    return ClusterCost(usd, node_hours, hours, life[0].at, rate)


@dataclasses.dataclass(frozen=True)
class JobCost:
    """What a job has cost: its nodes x hours x the price of a node-hour; ``local`` runs cost nothing.

    :param usd: the cost; None when the price is unknown.
    :param nodes: the job's nodes.
    :param hours: its hours so far (to its end, or now).
    :param usd_per_node_hour: the price used.
    :param local: a run on this machine.
    """

    usd: float | None
    nodes: int
    hours: float
    usd_per_node_hour: float | None
    local: bool = False

    def text(self) -> str:
        """``$12.34`` (``local`` for a local run, ``-`` when the price is unknown)."""
        if self.local:
            return "local"
        return f"${self.usd:,.2f}" if self.usd is not None else "-"

    def line(self) -> str:
        """``cost: $12.34 (2 nodes x 0:30:00 x $55.04/node-hour)``; ``cost: local ($0)``."""
        if self.local:
            return "cost: local ($0, this machine)"
        price = f"${self.usd_per_node_hour:,.2f}/node-hour" if self.usd_per_node_hour is not None else "no price"
        return f"cost: {self.text()} ({self.nodes} node(s) x {_duration(self.hours)} x {price})"

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready dict."""
        return {
            "usd": 0.0 if self.local else _round(self.usd),
            "nodes": self.nodes,
            "hours": round(self.hours, 4),
            "usd_per_node_hour": _round(self.usd_per_node_hour),
            "local": self.local,
        }


def job_cost(
    *,
    nodes: int,
    started: dt.datetime | None,
    ended: dt.datetime | None,
    usd_per_node_hour: float | None,
    now: dt.datetime,
    local: bool = False,
) -> JobCost:
    """A job's cost from its start to its end (or ``now``); a local run's is 0."""
    if local:
        return JobCost(0.0, nodes, _hours(started, ended or now), 0.0, local=True)
    hours = _hours(started, ended or now)
    usd = nodes * hours * usd_per_node_hour if usd_per_node_hour is not None else None
    return JobCost(usd, nodes, hours, usd_per_node_hour)


def parse_time(text: str | None) -> dt.datetime | None:
    """A Kubernetes timestamp (``2026-12-02T03:00:00Z``) as an aware datetime; None for None or garbage."""
    if not text:
        return None
    try:
        return dt.datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        return None


def _hours(start: dt.datetime | None, end: dt.datetime) -> float:
    return max(0.0, (end - start).total_seconds() / 3600) if start is not None else 0.0


def _round(value: float | None) -> float | None:
    return round(value, 4) if value is not None else None


def _duration(hours: float) -> str:
    seconds = round(hours * 3600)
    return f"{seconds // 3600}:{seconds % 3600 // 60:02d}:{seconds % 60:02d}"
