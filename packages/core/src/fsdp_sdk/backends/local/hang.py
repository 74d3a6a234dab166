"""A hung rank, named: which rank, in which phase of which step, for how long, and what ended it.

When one rank stops making progress (SIGSTOP, a stuck kernel, a dead mount) its peers wait for it in a
collective until the collective timeout (``--runtime.timeout_s``) raises on them; they exit with an error
that only says they timed out, and torchrun reports "local rank 0 exited with code 1". What is known at that
moment tells the hung rank from the waiting ones:

* each rank's heartbeat file (``fsdp_trainer.heartbeat``: its step, its phase and when it entered it, and a
  beat written every second by a thread that keeps beating while the rank waits in a collective);
* each rank process's state (``psutil``): stopped (``T``), blocked in the kernel (``D``), or running;
* the error lines: a collective timeout (gloo's "Timed out waiting 30000ms for recv operation", NCCL's
  watchdog) says the collective timeout ended the run.

:func:`snapshot` takes that picture while the processes still exist (the supervisor takes it when torchrun
reports the first failed rank); :func:`diagnose` names the hang from it, or returns ``None`` when the failure
was no hang. Pure, so it is tested without processes.
"""

from __future__ import annotations

import contextlib
import json
import re
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

__all__ = [
    "COLLECTIVE_TIMEOUT",
    "Hang",
    "RankState",
    "Snapshot",
    "diagnose",
    "read_heartbeat",
    "read_heartbeats",
    "snapshot",
]

#: An error line that says a collective timed out (gloo on CPU, NCCL's watchdog on GPUs, the c10d store).
COLLECTIVE_TIMEOUT = re.compile(
    r"Timed out waiting \d+ ?ms for \w+ operation|Watchdog caught collective operation timeout|"
    r"ran for \d+ milliseconds before timing out|wait timeout after \d+ ?ms",
    re.IGNORECASE,
)
#: A beat older than this (seconds) means the rank's process is not running at all (stopped, frozen).
STALE_BEAT_S = 5.0


@dataclass
class RankState:
    """What one rank was doing when the failure was seen.

    :param rank: its global rank.
    :param pid: its process.
    :param step: the step it was training.
    :param phase: the phase it was in (``forward``, ``backward``, ...); ``None`` without a heartbeat.
    :param collective: the collectives that phase waits in.
    :param in_phase_s: seconds in that phase.
    :param silent_s: seconds since its last heartbeat.
    :param status: its process's state: ``stopped``, ``disk-sleep``, ``running``, ``sleeping``, or ``exited``.
    :param timeout_s: its collective timeout.
    """

    rank: int
    pid: int | None = None
    step: int | None = None
    phase: str | None = None
    collective: str = ""
    in_phase_s: float | None = None
    silent_s: float | None = None
    status: str = "exited"
    timeout_s: float | None = None


@dataclass
class Snapshot:
    """Every rank's :class:`RankState` at one moment, and whether a collective timeout was reported."""

    ranks: list[RankState]
    timed_out: bool
    at: float = field(default_factory=time.time)


@dataclass
class Hang:
    """A rank that hung, and the ranks that waited for it.

    :param rank: the hung rank.
    :param pid: its process.
    :param how: what it looked like (``stopped (SIGSTOP)``, ``blocked in the kernel (D state)``, ``silent``,
        ``stuck in backward``).
    :param step: the step it hung in.
    :param phase: the phase it hung in.
    :param seconds: how long it had been silent (or in that phase).
    :param waiting: ``[(rank, step, phase, collective)]`` of the ranks that waited for it.
    :param timeout_s: the collective timeout that ended the wait (``runtime.timeout_s``).
    :param timed_out: whether a collective timeout was reported.
    """

    rank: int
    pid: int | None
    how: str
    step: int | None
    phase: str | None
    seconds: float | None
    waiting: list[tuple[int, int | None, str | None, str]]
    timeout_s: float | None
    timed_out: bool

    def where(self) -> str:
        """``step 8 (backward)``, or what is known of it."""
        if self.step is None and self.phase is None:
            return "an unknown phase"
        if self.phase in (None, "startup", "model", "resume", "end"):
            return {"startup": "start-up", "model": "model set-up", "resume": "checkpoint load",
                    "end": "the end of the run"}.get(self.phase or "", "an unknown phase")  # fmt: skip
        return f"step {self.step} ({self.phase})"

    def describe(self) -> str:
        """One line: ``rank 1 (pid 42) hung: stopped (SIGSTOP) in step 8 (forward), silent for 31 s; rank 0 waited
        for it in step 8 (backward: FSDP reduce-scatters) until the collective timeout (runtime.timeout_s 30)
        ended the run``."""
        pid = f" (pid {self.pid})" if self.pid else ""
        silent = f", silent for {self.seconds:.0f} s" if self.seconds is not None else ""
        line = f"rank {self.rank}{pid} hung: {self.how} in {self.where()}{silent}"
        if self.waiting:
            waits = []
            for rank, step, phase, collective in self.waiting:
                at = f"step {step} ({phase}{': ' + collective if collective else ''})" if phase else "a collective"
                waits.append((rank, at))
            same = len({at for _, at in waits}) == 1
            names = ", ".join(f"rank {r}" for r, _ in waits)
            line += (
                f"; {names} waited for it in {waits[0][1]}"
                if same
                else "; " + ", ".join(f"rank {r} waited for it in {at}" for r, at in waits)
            )
        if self.timed_out:
            limit = f" (runtime.timeout_s {self.timeout_s:g})" if self.timeout_s else " (runtime.timeout_s)"
            line += f" until the collective timeout{limit} ended the run"
        return line

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready, for the run's record."""
        data = asdict(self)
        data["waiting"] = [{"rank": r, "step": s, "phase": p, "collective": c} for r, s, p, c in self.waiting]
        data["cause"] = self.describe()
        return data


#: ``fsdp_trainer.heartbeat``'s file layout: the active slot's number at byte 0, slots of this many bytes after.
_SLOT = 512


def read_heartbeat(path: Path) -> dict[str, Any] | None:
    """One heartbeat file's record (the slot its first byte names), ``None`` when it holds none."""
    try:
        data = path.read_bytes()
    except OSError:
        return None
    if data[:1] not in (b"0", b"1"):
        return None
    offset = _SLOT * (1 + int(data[:1]))
    try:
        record = json.loads(data[offset : offset + _SLOT])
    except ValueError:
        return None
    return record if isinstance(record, dict) else None


def read_heartbeats(directory: Path | None) -> dict[int, dict[str, Any]]:
    """The heartbeat of every rank that wrote one in ``directory`` (by rank)."""
    beats: dict[int, dict[str, Any]] = {}
    if directory is None or not directory.is_dir():
        return beats
    for path in directory.glob("rank-*.json"):
        record = read_heartbeat(path)
        with contextlib.suppress(ValueError, TypeError, KeyError):
            if record is not None:
                beats[int(record["rank"])] = record
    return beats


def snapshot(ranks: list[tuple[int, Any]], heartbeat_dir: Path | None, error_lines: list[str]) -> Snapshot:
    """What every rank is doing now.

    :param ranks: ``(rank, psutil.Process)`` of the rank processes still running.
    :param heartbeat_dir: the launch's heartbeat directory.
    :param error_lines: the error lines the run printed so far.
    """
    import psutil

    now = time.time()
    beats = read_heartbeats(heartbeat_dir)
    states: dict[int, RankState] = {}
    for rank, beat in beats.items():
        states[rank] = RankState(
            rank=rank,
            pid=beat.get("pid"),
            step=beat.get("step"),
            phase=beat.get("phase"),
            collective=beat.get("collective") or "",
            in_phase_s=now - float(beat["since"]) if beat.get("since") else None,
            silent_s=now - float(beat["beat"]) if beat.get("beat") else None,
            timeout_s=beat.get("timeout_s"),
        )
    for rank, process in ranks:
        state = states.setdefault(rank, RankState(rank=rank, pid=process.pid))
        if state.pid not in (None, process.pid):
            continue  # a heartbeat of another launch's process
        with contextlib.suppress(psutil.Error):
            status = process.status()
            state.status = {psutil.STATUS_STOPPED: "stopped", psutil.STATUS_DISK_SLEEP: "disk-sleep"}.get(
                status, "running" if status == psutil.STATUS_RUNNING else "sleeping"
            )
            state.pid = process.pid
    timed_out = any(COLLECTIVE_TIMEOUT.search(line) for line in error_lines)
    return Snapshot(sorted(states.values(), key=lambda s: s.rank), timed_out, now)


def diagnose(snap: Snapshot | None) -> Hang | None:
    """The hung rank in ``snap``, or ``None`` when the failure was no hang (or no rank can be named).

    A rank is hung when it is stopped or blocked in the kernel, or when its heartbeat went silent while it still
    runs; with a collective timeout reported, also the one rank still in a phase that is not the peers' wait (a
    stuck kernel keeps the heartbeat thread beating).
    """
    if snap is None:
        return None
    alive = [s for s in snap.ranks if s.status != "exited"]

    def pick() -> tuple[RankState, str] | None:
        for state in alive:
            if state.status == "stopped":
                return state, "stopped (SIGSTOP)"
        for state in alive:
            if state.status == "disk-sleep":
                return state, "blocked in the kernel (D state: I/O, a dead mount)"
        silent = [s for s in alive if s.silent_s is not None and s.silent_s > STALE_BEAT_S]
        if silent:
            state = max(silent, key=lambda s: s.silent_s or 0.0)
            return state, "silent (its process does not run)"
        if not snap.timed_out:
            return None
        # Every rank still beats (a stuck kernel): the hung one is the live rank furthest behind in its work.
        waiting = [s for s in snap.ranks if s.status == "exited"]
        if alive and waiting:
            behind = min(alive, key=lambda s: ((s.step or 0), -(s.in_phase_s or 0.0)))
            return behind, f"stuck in {behind.phase or 'its work'}"
        return None

    picked = pick()
    if picked is None:
        return None
    hung, how = picked
    seconds = hung.silent_s if hung.silent_s is not None and hung.silent_s > STALE_BEAT_S else hung.in_phase_s
    waiting: list[tuple[int, int | None, str | None, str]] = [
        (s.rank, s.step, s.phase, s.collective) for s in snap.ranks if s.rank != hung.rank and s.phase
    ]
    timeout = next((s.timeout_s for s in snap.ranks if s.timeout_s), None)
    return Hang(
        rank=hung.rank,
        pid=hung.pid,
        how=how,
        step=hung.step,
        phase=hung.phase,
        seconds=seconds,
        waiting=waiting,
        timeout_s=timeout,
        timed_out=snap.timed_out,
    )
