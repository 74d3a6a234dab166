"""The backend's local state of one cluster, under ``<cluster.state_dir>/eksctl/<cluster>/``::

    cluster.yaml    the ClusterConfig eksctl was last given (the applied plan's document)
    kubeconfig      the cluster's kubeconfig, from eks:DescribeCluster (mode 0600)
    state.json      what the last up/scale/down did and whether it finished
    .lock           held while up, scale or down runs

AWS is the source of truth: ``status`` reads it, and ``up``/``down`` look at it before acting, so a
lost or stale local state never decides anything. ``state.json`` only records the last operation
(``phase``: ``creating``, ``ready``, ``deleting``...), which ``status`` reports and which tells the
next ``up`` or ``down`` that an earlier one stopped half-way. Files are written atomically.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from fsdp_sdk.aws.kubeconfig import write_private
from fsdp_sdk.errors import BackendError

__all__ = ["StateDir"]


@dataclass(frozen=True)
class StateDir:
    """The paths of one cluster's local state.

    :param root: ``<cluster.state_dir>/eksctl/<cluster>``.
    """

    root: Path

    @classmethod
    def of(cls, state_dir: str | os.PathLike[str], cluster: str) -> StateDir:
        """The state directory of ``cluster`` under ``state_dir`` (``cluster.state_dir``)."""
        return cls(Path(state_dir) / "eksctl" / cluster)

    @property
    def config_file(self) -> Path:
        """The ClusterConfig given to eksctl."""
        return self.root / "cluster.yaml"

    @property
    def kubeconfig(self) -> Path:
        """The cluster's kubeconfig."""
        return self.root / "kubeconfig"

    @property
    def state_file(self) -> Path:
        """The record of the last operation."""
        return self.root / "state.json"

    def read(self) -> dict[str, Any] | None:
        """The record of the last operation; ``None`` when there is none or it is unreadable (AWS decides)."""
        try:
            data = json.loads(self.state_file.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            return None
        return data if isinstance(data, dict) else None

    def record(self, phase: str, **facts: Any) -> None:
        """Record that the current operation reached ``phase`` (atomically)."""
        data = {"phase": phase, "updated_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), **facts}
        write_private(self.state_file, json.dumps(data, indent=2, default=str) + "\n")

    def write_config(self, text: str) -> Path:
        """Write the ClusterConfig for eksctl (atomically) and return its path."""
        return write_private(self.config_file, text)

    def remove(self) -> None:
        """Delete every file of the state directory, then the directory (the lock file last)."""
        if not self.root.exists():
            return
        for path in sorted(self.root.iterdir()):
            if path.name != ".lock" and path.is_file():
                path.unlink(missing_ok=True)
        (self.root / ".lock").unlink(missing_ok=True)
        with contextlib.suppress(OSError):
            self.root.rmdir()

    @contextlib.contextmanager
    def lock(self, action: str) -> Iterator[None]:
        """Hold the cluster's lock while ``action`` runs; another up/scale/down at the same time is refused.

        :raises BackendError: another process holds it (its pid and action are named).
        """
        self.root.mkdir(parents=True, exist_ok=True)
        path = self.root / ".lock"
        with open(path, "a+", encoding="utf-8") as handle:
            try:
                fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                handle.seek(0)
                holder = handle.read().strip() or "another process"
                raise BackendError(
                    f"eksctl: cluster {self.root.name} is busy ({holder}); wait for it to finish, then run {action} again"
                ) from None
            handle.seek(0)
            handle.truncate()
            handle.write(f"'fsdp-sdk {action}' in pid {os.getpid()}")
            handle.flush()
            try:
                yield
            finally:
                handle.seek(0)
                handle.truncate()
                fcntl.flock(handle, fcntl.LOCK_UN)
