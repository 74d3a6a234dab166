"""The local backend's state directory: ``state.json`` written atomically, read without trusting it, and one lock.

``state.json`` is replaced whole (a temporary file in the same directory, fsynced, renamed over
it): a kill at any moment leaves the old file or the new one. A file that is empty, truncated or
not what this module writes is reported as :class:`StateDamaged` rather than acted on; ``up`` and
``down`` repair it (they find the etcd that serves the data directory by its arguments, verify
it, stop it, and start from a clean state).

Commands that change the state (``up``, ``down``, ``scale``, a run that starts etcd or
registers itself) hold :meth:`LocalState.locked`, an exclusive ``flock`` on ``.lock``: two
commands started together take turns instead of both starting an etcd. The kernel releases the
lock when its holder dies, however it dies.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from fsdp_sdk.errors import BackendError

__all__ = ["LocalState", "StateDamaged", "atomic_write_json", "lock_file"]

#: Written into every state file; a file without it (or with another value) is not trusted.
STATE_VERSION = 2


class StateDamaged(BackendError):
    """``state.json`` exists but cannot be used (empty, truncated, not written by this version)."""

    def __init__(self, path: Path, problem: str) -> None:
        self.path, self.problem = path, problem
        super().__init__(
            f"local: {path} is damaged ({problem}); 'fsdp-sdk down --backend local' or 'fsdp-sdk up --backend local' "
            "repairs it"
        )


def atomic_write_json(path: Path, data: Any) -> None:
    """Replace ``path`` with ``data`` as JSON: never a moment with half a file."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.{threading.get_ident()}.tmp")
    with open(tmp, "w", encoding="utf-8") as f:
        f.write(json.dumps(data, indent=2) + "\n")
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)
    with contextlib.suppress(OSError):
        fd = os.open(path.parent, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)


_held: dict[str, tuple[int, int]] = {}
_held_guard = threading.RLock()


@contextlib.contextmanager
def lock_file(
    path: Path, *, what: str, timeout: float = 300.0, progress: Callable[[str], None] | None = None
) -> Iterator[None]:
    """Hold an exclusive ``flock`` on ``path`` (re-entrant within a thread; other threads and processes wait).

    :param path: the lock file (created).
    :param what: what the lock protects, for messages.
    :param timeout: seconds to wait for another holder before failing.
    :param progress: told once when this call has to wait, naming the holder.
    :raises BackendError: another process held it for ``timeout`` seconds.
    """
    key = f"{path}#{threading.get_ident()}"
    with _held_guard:
        if key in _held:
            fd, depth = _held[key]
            _held[key] = (fd, depth + 1)
            reentered = True
        else:
            reentered = False
    if reentered:
        try:
            yield
        finally:
            with _held_guard:
                fd, depth = _held[key]
                _held[key] = (fd, depth - 1)
        return
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        deadline = time.monotonic() + timeout
        told = False
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                holder = _holder(path)
                if time.monotonic() > deadline:
                    raise BackendError(
                        f"local: {what} is locked by {holder} for more than {timeout:.0f} s; "
                        f"wait for it to finish, or stop it (lock: {path})"
                    ) from None
                if not told and progress is not None:
                    progress(f"waiting for {holder}, which is changing {what}")
                    told = True
                time.sleep(0.05)
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"{os.getpid()} {' '.join(_own_cmdline())}\n".encode(), 0)
        with _held_guard:
            _held[key] = (fd, 1)
        try:
            yield
        finally:
            with _held_guard:
                del _held[key]
            with contextlib.suppress(OSError):
                os.ftruncate(fd, 0)
    finally:
        os.close(fd)  # closing the descriptor releases the lock


def _own_cmdline() -> list[str]:
    try:
        return Path("/proc/self/cmdline").read_bytes().decode(errors="replace").split("\0")[:6]
    except OSError:
        return ["fsdp-sdk"]


def _holder(path: Path) -> str:
    try:
        text = path.read_text(errors="replace").strip()
    except OSError:
        text = ""
    pid, _, command = text.partition(" ")
    return f"another fsdp-sdk command (pid {pid}: {command.strip()[:80]})" if pid else "another fsdp-sdk command"


class LocalState:
    """The files of the local backend under ``<cluster.state_dir>/local``.

    :param root: ``<cluster.state_dir>/local``.
    """

    def __init__(self, root: Path) -> None:
        self.root = root
        self.path = root / "state.json"
        self.lock_path = root / ".lock"
        self.etcd_dir = root / "etcd"
        self.etcd_log = root / "etcd.log"
        self.runs_dir = root / "runs"

    def read(self) -> dict[str, Any] | None:
        """The state, or ``None`` when there is no state file.

        :raises StateDamaged: the file exists but is empty, truncated or not a state file of this version.
        """
        try:
            text = self.path.read_text(encoding="utf-8")
        except FileNotFoundError:
            return None
        except OSError as exc:
            raise StateDamaged(self.path, f"unreadable: {exc.strerror or exc}") from exc
        if not text.strip():
            raise StateDamaged(self.path, "empty")
        try:
            data = json.loads(text)
        except ValueError as exc:
            raise StateDamaged(self.path, f"not valid JSON: {exc}") from exc
        if not isinstance(data, dict) or data.get("version") != STATE_VERSION:
            raise StateDamaged(self.path, f"not a version-{STATE_VERSION} state file")
        return data

    def read_or_none(self) -> tuple[dict[str, Any] | None, StateDamaged | None]:
        """The state and, instead of raising, the damage found (``(None, damage)`` for a damaged file)."""
        try:
            return self.read(), None
        except StateDamaged as damage:
            return None, damage

    def write(self, state: dict[str, Any]) -> None:
        """Replace the state file atomically."""
        atomic_write_json(self.path, {**state, "version": STATE_VERSION})

    def remove(self) -> None:
        """Delete the state file, etcd's data and log (run outputs under ``runs/`` stay)."""
        import shutil

        shutil.rmtree(self.etcd_dir, ignore_errors=True)
        for path in (self.path, self.etcd_log):
            path.unlink(missing_ok=True)

    def locked(
        self, *, timeout: float = 300.0, progress: Callable[[str], None] | None = None
    ) -> contextlib.AbstractContextManager[None]:
        """Hold the state lock (see the module docstring)."""
        return lock_file(self.lock_path, what=f"the local cluster in {self.root}", timeout=timeout, progress=progress)
