"""What each rank is doing, for the process that supervises it: a heartbeat file per rank.

With ``FSDP_TRAINER_HEARTBEAT_DIR`` set (``fsdp-sdk run`` on the local backend sets it), every rank keeps
``<dir>/rank-<RANK>.json`` up to date with one JSON object::

    {"rank": 1, "pid": 4242, "step": 8, "phase": "backward", "collective": "FSDP reduce-scatters",
     "since": 1796596269.3, "beat": 1796596270.1, "timeout_s": 30}

``step`` is the step being trained (the one after the last finished), ``phase`` what the rank is in
(``startup``, ``model``, ``resume``, ``data``, ``forward``, ``backward``, ``clip``, ``optimizer``, ``loss``,
``checkpoint``, ``end``), ``collective`` the collectives that phase waits in (empty when none), ``since`` when it
entered it and ``beat`` when it last said it is alive (a background thread, every second). A rank that waits in
a collective keeps beating; a stopped one (SIGSTOP, a dead mount in the kernel) does not: the supervisor tells a
hung rank from the ranks waiting for it by that, and names the phase each was in.

The file is memory-mapped and holds two slots: each change is written into the slot not in use, then the first
byte names it, so a change of phase costs a memory copy (no system call in the training loop) and a process
stopped in the middle of a write still leaves the previous record whole. :func:`read` reads it. Without the
variable nothing is written and :func:`phase` does nothing.
"""

from __future__ import annotations

import contextlib
import json
import os
import threading
import time
from pathlib import Path

__all__ = ["ENV", "PHASE_COLLECTIVES", "Heartbeat", "phase", "read", "start", "stop"]

#: The directory the heartbeat files go to (unset: no heartbeat).
ENV = "FSDP_TRAINER_HEARTBEAT_DIR"
#: Seconds between beats.
BEAT_S = 1.0
#: The collectives each phase waits in (what a peer waiting for a hung rank sits in).
PHASE_COLLECTIVES = {
    "startup": "the process group's rendezvous",
    "model": "parameter broadcast",
    "resume": "checkpoint load",
    "data": "the label-count all-reduce",
    "forward": "FSDP all-gathers",
    "backward": "FSDP reduce-scatters",
    "clip": "the gradient-norm all-reduce",
    "optimizer": "",
    "loss": "the loss all-reduce",
    "checkpoint": "checkpoint save",
    "end": "the final barrier",
}


#: The file's layout: the active slot's number at byte 0, slots of SLOT bytes from byte SLOT.
SLOT = 512
SIZE = 3 * SLOT


class Heartbeat:
    """The heartbeat of this rank (see the module docstring).

    :param directory: where ``rank-<rank>.json`` is written.
    :param rank: this process's rank.
    :param timeout_s: the collective timeout, written beside the phase.
    """

    def __init__(self, directory: Path, rank: int, timeout_s: float | None = None) -> None:
        import mmap

        self.path = directory / f"rank-{rank}.json"
        self.rank, self.timeout_s, self.pid = rank, timeout_s, os.getpid()
        self.step, self.phase, self.since = 0, "startup", time.time()
        self._lock = threading.Lock()
        self._stop = threading.Event()
        directory.mkdir(parents=True, exist_ok=True)
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_TRUNC, 0o644)
        try:
            os.ftruncate(fd, SIZE)
            self._map = mmap.mmap(fd, SIZE)
        finally:
            os.close(fd)
        self._slot = 0
        self._write()
        self._thread = threading.Thread(target=self._beat, name="fsdp-heartbeat", daemon=True)
        self._thread.start()

    def set(self, name: str, step: int | None = None) -> None:
        """Enter phase ``name`` (of ``step`` when given)."""
        self.phase, self.since = name, time.time()
        if step is not None:
            self.step = step
        self._write()

    def _write(self) -> None:
        data = json.dumps(
            {
                "rank": self.rank,
                "pid": self.pid,
                "step": self.step,
                "phase": self.phase,
                "collective": PHASE_COLLECTIVES.get(self.phase, ""),
                "since": round(self.since, 3),
                "beat": round(time.time(), 3),
                "timeout_s": self.timeout_s,
            }
        ).encode()[: SLOT - 1]
        with self._lock:
            slot = 1 - self._slot
            offset = SLOT * (1 + slot)
            self._map[offset : offset + SLOT] = data.ljust(SLOT, b" ")
            self._map[0:1] = b"01"[slot : slot + 1]
            self._slot = slot

    def _beat(self) -> None:
        while not self._stop.wait(BEAT_S):
            self._write()

    def close(self) -> None:
        """Stop beating (the file stays, saying ``end``)."""
        self._stop.set()
        self._thread.join(timeout=2)
        self.set("end")
        with contextlib.suppress(ValueError, OSError):
            self._map.flush()


def read(path: Path) -> dict | None:
    """The record of a heartbeat file (``None`` when it holds none)."""
    try:
        data = path.read_bytes()
    except OSError:
        return None
    if len(data) < SIZE or data[:1] not in (b"0", b"1"):
        return None
    offset = SLOT * (1 + int(data[:1]))
    try:
        record = json.loads(data[offset : offset + SLOT])
    except ValueError:
        return None
    return record if isinstance(record, dict) else None


_current: Heartbeat | None = None


def start(rank: int, timeout_s: float | None = None) -> Heartbeat | None:
    """Start this rank's heartbeat when :data:`ENV` names a directory; ``None`` otherwise."""
    global _current
    directory = os.environ.get(ENV)
    if not directory or _current is not None:
        return _current
    _current = Heartbeat(Path(directory), rank, timeout_s)
    return _current


def phase(name: str, step: int | None = None) -> None:
    """Say that this rank enters phase ``name`` (of ``step``); nothing without a heartbeat."""
    if _current is not None:
        _current.set(name, step)


def stop() -> None:
    """Stop this rank's heartbeat, if it has one."""
    global _current
    if _current is not None:
        _current.close()
        _current = None
