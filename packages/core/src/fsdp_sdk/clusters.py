"""Every cluster a state directory knows, at a glance (``fsdp-sdk clusters``).

Each time a command observes or changes a cluster (``status``, ``up``, ``scale``, ``down``), it writes what it saw
to ``<cluster.state_dir>/clusters/<backend>--<region>--<name>.json``: a :class:`ClusterSnapshot`. ``clusters``
lists these, refreshed from the backend's own ``status`` where it can be reached (credentials, tools), and
otherwise as last known, with when. A cluster that left other traces (a cost ledger from before snapshots, an
eksctl or Terraform working directory) is listed too, with what those traces tell.

This module reads and writes the records and lays out the table (it asks no backend): the cluster workflow makes
the snapshots (:meth:`fsdp_sdk.workflows.cluster.ClusterWorkflow.snapshot`) and the job workflow observes a live
cluster (:meth:`fsdp_sdk.workflows.jobs.JobWorkflow.observe`).
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import json
import os
import re
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    pass

__all__ = [
    "ClusterSnapshot",
    "known_clusters",
    "remember",
    "snapshot_path",
    "table_rows",
]

#: Job phases that count as running, and as waiting for a place (queued), in a snapshot's job counts.
RUNNING_PHASES = frozenset({"Running", "Restarting"})
QUEUED_PHASES = frozenset({"Pending", "Created", "Suspended", "Queued"})

_SAFE = re.compile(r"[^A-Za-z0-9_.-]+")


@dataclasses.dataclass(frozen=True)
class ClusterSnapshot:
    """What was known of one cluster at one moment.

    :param name: the cluster's name.
    :param backend: the backend that owns it (``local``, ``eksctl``, ``terraform``, a plugin's).
    :param region: its AWS region (``local`` for the local backend).
    :param state: ``ready``, ``pending``, ``degraded``, ``absent`` (torn down), or ``unknown``.
    :param observed_at: when this was seen (UTC).
    :param nodes: GPU nodes then; ``max_nodes`` the most it scales to.
    :param instance_type: the GPU nodes' instance type; ``gpu`` what one node holds (``8x H100 80 GiB``).
    :param kubernetes_version: the control plane's version; ``standard_support_until`` when EKS standard support
        of that version ends (the pins table's calendar).
    :param usd_per_hour: what it cost per hour then; ``cost_usd`` what it had cost since ``up``; ``since`` the ``up``.
    :param idle_minutes: the idle policy: the GPU nodes scale to 0 after this many idle minutes (None: off).
    :param jobs_running: jobs running then; ``jobs_queued`` jobs created but waiting for a place (None: not known).
    :param source: ``live`` (read from the backend just now) or ``recorded`` (the last snapshot written).
    :param note: why a live reading was not possible, when it was not.
    """

    name: str
    backend: str
    region: str
    state: str
    observed_at: dt.datetime
    nodes: int | None = None
    max_nodes: int | None = None
    instance_type: str | None = None
    gpu: str | None = None
    kubernetes_version: str | None = None
    standard_support_until: str | None = None
    usd_per_hour: float | None = None
    cost_usd: float | None = None
    since: dt.datetime | None = None
    idle_minutes: int | None = None
    jobs_running: int | None = None
    jobs_queued: int | None = None
    source: str = "recorded"
    note: str | None = None

    @property
    def key(self) -> tuple[str, str, str]:
        """What identifies the cluster: (backend, region, name)."""
        return (self.backend, self.region, self.name)

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready dict (the record's content, and ``clusters --json``'s)."""
        data = dataclasses.asdict(self)
        data["observed_at"] = self.observed_at.isoformat()
        data["since"] = self.since.isoformat() if self.since else None
        return data

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> ClusterSnapshot:
        """Read a record; keys this version does not know are ignored."""
        names = {f.name for f in dataclasses.fields(cls)}
        values = {key: value for key, value in data.items() if key in names}
        values["source"] = "recorded"  # read back, it is what was last recorded, however it was seen then
        values["observed_at"] = dt.datetime.fromisoformat(values["observed_at"])
        if values.get("since"):
            values["since"] = dt.datetime.fromisoformat(values["since"])
        return cls(**values)


def snapshot_path(state_dir: str | os.PathLike[str], backend: str, region: str, name: str) -> Path:
    """Where the snapshot of a cluster is kept."""
    parts = (_SAFE.sub("_", part) for part in (backend, region, name))
    return Path(state_dir) / "clusters" / ("--".join(parts) + ".json")


def remember(state_dir: str | os.PathLike[str], snapshot: ClusterSnapshot) -> Path:
    """Write ``snapshot`` as the cluster's last known state (atomically: a reader never sees half a record)."""
    path = snapshot_path(state_dir, *snapshot.key)
    path.parent.mkdir(parents=True, exist_ok=True)
    temporary = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    temporary.write_text(json.dumps(snapshot.to_dict(), indent=2) + "\n", encoding="utf-8")
    os.replace(temporary, path)
    return path


def known_clusters(state_dir: str | os.PathLike[str]) -> list[ClusterSnapshot]:
    """Every cluster ``state_dir`` knows: its snapshots, and clusters that left only older traces (a cost ledger,
    an eksctl or Terraform working directory), oldest traces as ``unknown``. Sorted by backend, region, name."""
    root = Path(state_dir)
    found: dict[tuple[str, str, str], ClusterSnapshot] = {}
    for path in sorted((root / "clusters").glob("*.json")):
        try:
            snapshot = ClusterSnapshot.from_dict(json.loads(path.read_text(encoding="utf-8")))
        except (OSError, ValueError, TypeError, KeyError):
            continue
        found[snapshot.key] = snapshot
    named = {(backend, name) for backend, _, name in found}
    for snapshot in _traces(root):
        if (snapshot.backend, snapshot.name) not in named and snapshot.key not in found:
            found[snapshot.key] = snapshot
    return [found[key] for key in sorted(found)]


def _traces(root: Path) -> Iterable[ClusterSnapshot]:
    """Clusters known only from what backends leave in the state directory."""
    from fsdp_sdk.costs import cluster_cost, read_ledger

    now = dt.datetime.now(dt.timezone.utc)
    for backend in ("eksctl", "terraform"):
        folder = root / backend
        if not folder.is_dir():
            continue
        for directory in sorted(folder.iterdir()):
            if not directory.is_dir() or directory.name in {"plugin-cache"}:
                continue
            entries = read_ledger(root, directory.name)
            cost = cluster_cost(entries, now=now) if entries else None
            seen = dt.datetime.fromtimestamp(directory.stat().st_mtime, dt.timezone.utc)
            torn_down = bool(entries) and entries[-1].event == "down"
            yield ClusterSnapshot(
                name=directory.name,
                backend=backend,
                region="?",
                state="absent" if torn_down else "unknown",
                observed_at=entries[-1].at if entries else seen,
                nodes=entries[-1].nodes if entries else None,
                instance_type=entries[-1].instance_type if entries else None,
                usd_per_hour=0.0 if torn_down else cost.usd_per_hour if cost else None,
                cost_usd=cost.usd if cost else None,
                since=cost.since if cost else None,
                note=f"known from {directory} only: 'fsdp-sdk status --backend {backend} --name {directory.name}' "
                "records it",
            )


def _age(then: dt.datetime, now: dt.datetime) -> str:
    seconds = max(0, int((now - then).total_seconds()))
    if seconds < 90:
        return f"{seconds}s ago"
    if seconds < 90 * 60:
        return f"{seconds // 60} min ago"
    if seconds < 48 * 3600:
        return f"{seconds // 3600} h ago"
    return f"{seconds // 86400} days ago"


def _idle(snap: ClusterSnapshot) -> str:
    if snap.backend == "local":
        return "-"
    return f"0 after {snap.idle_minutes} min" if snap.idle_minutes else "off"


def _money(value: float | None) -> str:
    return "?" if value is None else f"${value:,.2f}"


def table_rows(snapshots: Sequence[ClusterSnapshot], *, now: dt.datetime | None = None) -> list[dict[str, str]]:
    """One row of text per cluster, in the table's column order."""
    now = now or dt.datetime.now(dt.timezone.utc)
    rows = []
    for snap in snapshots:
        nodes = "?" if snap.nodes is None else str(snap.nodes)
        if snap.max_nodes is not None:
            nodes += f"/{snap.max_nodes}"
        k8s = snap.kubernetes_version or "-"
        if snap.standard_support_until:
            k8s += f" (std until {snap.standard_support_until})"
        jobs = "?" if snap.jobs_running is None else f"{snap.jobs_running} running"
        if snap.jobs_running is not None and snap.jobs_queued:
            jobs += f", {snap.jobs_queued} waiting"
        seen = "now" if snap.source == "live" else f"as of {_age(snap.observed_at, now)}"
        rows.append(
            {
                "NAME": snap.name,
                "BACKEND": snap.backend,
                "REGION": snap.region,
                "KUBERNETES": k8s,
                "GPU": f"{snap.instance_type} ({snap.gpu})" if snap.instance_type and snap.gpu else snap.gpu or "-",
                "NODES": nodes,
                "STATE": snap.state,
                "$/H NOW": _money(snap.usd_per_hour),
                "COST SINCE UP": _money(snap.cost_usd),
                "IDLE": _idle(snap),
                "JOBS": jobs,
                "SEEN": seen,
            }
        )
    return rows
