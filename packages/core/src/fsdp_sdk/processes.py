"""Processes fsdp-sdk starts and later signals: who they are, how they die with their parent, how to stop them.

A pid written to a state file may belong to another program by the time it is read (the
machine rebooted, the process ended and the pid was reused). :class:`ProcessIdentity` keeps
the pid with the process's creation time and command line; a process is signalled only when
all three still match, so a stale state file never kills an unrelated process.

:func:`die_with_parent` is the ``preexec_fn`` (or first call) that makes a child process
receive ``SIGKILL`` when its parent dies (Linux ``prctl(PR_SET_PDEATHSIG)``; elsewhere a
no-op): a local run's agents die with ``fsdp-sdk run`` even when it is killed with
``SIGKILL``, and the trainers die with their agent.
"""

from __future__ import annotations

import contextlib
import os
import signal
import sys
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

__all__ = ["ProcessIdentity", "die_with_parent", "find_processes", "stop_identified", "stop_tree"]

# Creation times from psutil are floats rounded to the clock tick; two reads of one process agree within this.
_CREATE_TIME_SLACK_S = 0.05
_PR_SET_PDEATHSIG = 1


def _psutil() -> Any:
    import psutil  # imported on use: the CLI's start-up does not pay for it

    return psutil


@dataclass(frozen=True)
class ProcessIdentity:
    """A process as it was when recorded: pid, creation time and command line.

    :param pid: the process id.
    :param create_time: its creation time (Unix seconds, as ``psutil`` reports it).
    :param cmdline: its arguments.
    """

    pid: int
    create_time: float
    cmdline: tuple[str, ...]

    @classmethod
    def of(cls, pid: int) -> ProcessIdentity | None:
        """The identity of the running process ``pid``; ``None`` when there is none (or it is a zombie)."""
        psutil = _psutil()
        try:
            process = psutil.Process(pid)
            if process.status() == psutil.STATUS_ZOMBIE:
                return None
            return cls(pid, process.create_time(), tuple(process.cmdline()))
        except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess):
            return None

    @classmethod
    def from_dict(cls, data: Any) -> ProcessIdentity | None:
        """Read what :meth:`to_dict` wrote; ``None`` for anything else (an old or damaged record)."""
        if not isinstance(data, dict):
            return None
        try:
            return cls(int(data["pid"]), float(data["create_time"]), tuple(str(a) for a in data["cmdline"]))
        except (KeyError, TypeError, ValueError):
            return None

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready dict."""
        return {"pid": self.pid, "create_time": self.create_time, "cmdline": list(self.cmdline)}

    def mismatch(self) -> str | None:
        """Why the process running under this pid now is not this one; ``None`` when it is."""
        current = ProcessIdentity.of(self.pid)
        if current is None:
            return f"no process {self.pid} is running"
        if abs(current.create_time - self.create_time) > _CREATE_TIME_SLACK_S:
            return f"pid {self.pid} now belongs to another process ({_short(current.cmdline)})"
        if current.cmdline != self.cmdline:
            return f"pid {self.pid} runs {_short(current.cmdline)}, not {_short(self.cmdline)}"
        return None

    def is_running(self) -> bool:
        """Whether this very process (same pid, creation time and command line) is still running."""
        return self.mismatch() is None


def _short(cmdline: Sequence[str], limit: int = 80) -> str:
    text = " ".join(cmdline) or "?"
    return text if len(text) <= limit else text[: limit - 3] + "..."


def die_with_parent(sig: int = signal.SIGKILL) -> None:
    """Ask the kernel to send ``sig`` to this process when its parent dies (Linux only; a no-op elsewhere).

    Use as ``subprocess.Popen(preexec_fn=die_with_parent)``, or call it first thing in a child. The
    setting is not inherited by the child's own children: each generation sets it.
    """
    if not sys.platform.startswith("linux"):
        return
    import ctypes

    libc = ctypes.CDLL(None, use_errno=True)
    libc.prctl(_PR_SET_PDEATHSIG, int(sig), 0, 0, 0)


def _signal_group_or_process(pid: int, sig: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        if os.getpgid(pid) == pid:
            os.killpg(pid, sig)
        else:
            os.kill(pid, sig)


def stop_identified(identity: ProcessIdentity, timeout: float = 10.0) -> bool:
    """Stop ``identity`` (and its process group when it leads one): SIGTERM, then SIGKILL after ``timeout``.

    Nothing is signalled unless the pid still belongs to that very process.

    :return: True when it was running and has been stopped.
    """
    if not identity.is_running():
        return False
    psutil = _psutil()
    for sig, wait in ((signal.SIGTERM, timeout), (signal.SIGKILL, 5.0)):
        if not identity.is_running():
            return True
        _signal_group_or_process(identity.pid, sig)
        with contextlib.suppress(psutil.Error, ChildProcessError):
            psutil.Process(identity.pid).wait(timeout=wait)
        with contextlib.suppress(ChildProcessError):
            os.waitpid(identity.pid, os.WNOHANG)  # reap it when it is our child
    return True


def stop_tree(pids: Iterable[int], timeout: float = 10.0) -> list[int]:
    """Stop processes and all their descendants: SIGTERM to all, SIGKILL to those left after ``timeout``.

    Descendants are collected before any signal, so children re-parented by a dying parent are not missed.

    :return: the pids that were running.
    """
    psutil = _psutil()
    processes: dict[int, Any] = {}
    for pid in pids:
        try:
            root = psutil.Process(pid)
        except psutil.Error:
            continue
        for process in (root, *_descendants(root)):
            processes.setdefault(process.pid, process)
    for process in processes.values():
        with contextlib.suppress(psutil.Error):
            process.send_signal(signal.SIGTERM)
            process.send_signal(signal.SIGCONT)  # a stopped process handles SIGTERM only once continued
    _, alive = psutil.wait_procs(list(processes.values()), timeout=timeout)
    for process in alive:
        with contextlib.suppress(psutil.Error):
            process.send_signal(signal.SIGKILL)
    psutil.wait_procs(alive, timeout=5)
    return sorted(processes)


def _descendants(process: Any) -> list[Any]:
    psutil = _psutil()
    try:
        return list(process.children(recursive=True))
    except psutil.Error:
        return []


def find_processes(*needles: str) -> list[ProcessIdentity]:
    """Running processes of this user whose argument list contains every string of ``needles`` as an argument.

    :param needles: exact arguments, e.g. ``"--data-dir", "/state/local/etcd"``.
    """
    psutil = _psutil()
    found = []
    wanted = set(needles)
    for process in psutil.process_iter(["pid", "cmdline", "create_time", "status"]):
        info = process.info
        cmdline = info.get("cmdline") or []
        if info.get("status") == psutil.STATUS_ZOMBIE or not wanted.issubset(cmdline):
            continue
        found.append(ProcessIdentity(info["pid"], info["create_time"], tuple(cmdline)))
    return found
