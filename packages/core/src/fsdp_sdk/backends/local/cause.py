"""The root cause of a failed local run: the first real failure, in words a user can act on.

When one rank fails, the others fail moments later with errors that only say a peer went
away (gloo's "Connection closed by peer", torchrun's ``ChildFailedError``), and which agent
exits first is a matter of timing. So every error line is kept with the time it arrived and
classified: *secondary* errors (a peer disappeared, a launcher's wrapper) rank below
*primary* ones, and the earliest primary error is the cause. Disk errors are rewritten: a
full disk shows up in torch's serialisation as ``inline_container.cc:... unexpected pos`` or
``file write failed``, so those (and ``[Errno 28]``) become "no space left on device" with the
directory and its free space; ``[Errno 30]``/``[Errno 13]`` on the outputs become "read-only".
"""

from __future__ import annotations

import contextlib
import os
import re
import shutil
from dataclasses import dataclass
from pathlib import Path

__all__ = ["ErrorLine", "classify", "disk_problem", "root_cause"]

_EXCEPTION = re.compile(r"\b(\w*(?:Error|Exception|Interrupt)): ")
_TRAINER_ERROR = re.compile(r"\berror: ")
# Errors that only say a peer or a child went away, or wrap another error.
_SECONDARY = re.compile(
    r"ChildFailedError|SignalException|Connection closed by peer|Connection reset by peer|"
    r"Broken pipe|ProcessGroupGloo|Socket Timeout|RendezvousClosedError|RendezvousConnectionError|"
    r"recvBytes|sendBytes|DistNetworkError|DistBackendError|Terminated|NCCL (?:remote|communicator) error|"
    r"Timed out waiting|Received \d+ death signal|failed to shutdown the rendezvous|Error waiting on exit barrier|"
    r"CheckpointException",
    re.IGNORECASE,
)
_NO_SPACE = re.compile(r"No space left on device|Errno 28\]|ENOSPC|unexpected pos \d+|file write failed", re.IGNORECASE)
_READ_ONLY = re.compile(r"Read-only file system|Errno 30\]|EROFS", re.IGNORECASE)
_PERMISSION = re.compile(r"Permission denied|Errno 13\]", re.IGNORECASE)
_PATH_IN_ERROR = re.compile(r"""(?:'|")(/[^'"]+)(?:'|")""")


@dataclass(frozen=True)
class ErrorLine:
    """An error line from a run's output.

    :param at: when it arrived (monotonic seconds).
    :param source: where it came from (``agent 1``).
    :param text: the line.
    :param primary: whether it reports a failure of its own rather than a peer's.
    """

    at: float
    source: str
    text: str
    primary: bool


def classify(line: str) -> bool | None:
    """``True`` for a primary error line, ``False`` for a secondary one, ``None`` for a line that is no error."""
    is_error = bool(_EXCEPTION.search(line) or _TRAINER_ERROR.search(line) or _NO_SPACE.search(line))
    if not is_error:
        return None
    if _NO_SPACE.search(line) or _READ_ONLY.search(line):
        return True
    return not _SECONDARY.search(line)


def _free(path: Path) -> tuple[Path, int] | None:
    for candidate in (path, *path.parents):
        if candidate.exists():
            try:
                return candidate, shutil.disk_usage(candidate).free
            except OSError:
                return None
    return None


def _size(n: int) -> str:
    value = float(n)
    for unit in ("B", "KiB", "MiB", "GiB"):
        if value < 1024 or unit == "GiB":
            return f"{value:.0f} {unit}" if unit == "B" else f"{value:.1f} {unit}"
        value /= 1024
    return f"{n} B"


def disk_problem(text: str, directories: list[Path]) -> str | None:
    """A full or read-only disk behind ``text``, in words with the path; ``None`` when it is not one.

    :param text: an error line.
    :param directories: the run's output directory, then its checkpoint directory.
    """
    named = _PATH_IN_ERROR.search(text)
    where = Path(named.group(1)) if named else None
    if _NO_SPACE.search(text):
        # torch's serialisation (a checkpoint) reports a full disk without a path: name the checkpoint directory
        serialisation = "inline_container" in text or "file write failed" in text
        target = where or (directories[-1 if serialisation else 0] if directories else None)
        if target is None:
            return "no space left on device"
        free = _free(target if target.is_dir() else target.parent)
        room = f" ({_size(free[1])} free on the filesystem of {free[0]})" if free else ""
        return f"no space left on device writing {target}{room}; free space there or set train.output_dir elsewhere"
    if _READ_ONLY.search(text) or (_PERMISSION.search(text) and where is not None):
        target = where or (directories[0] if directories else Path("?"))
        kind = "read-only" if _READ_ONLY.search(text) else "not writable"
        return f"{target} is {kind}; set train.output_dir (or checkpoint.dir) to a writable directory"
    return None


def root_cause(errors: list[ErrorLine], directories: list[Path]) -> ErrorLine | None:
    """The error that started the failure: the earliest primary one, else the earliest of all."""
    if not errors:
        return None
    primary = [e for e in errors if e.primary]
    return min(primary or errors, key=lambda e: e.at)


def describe(error: ErrorLine, directories: list[Path]) -> str:
    """One line for the user: the disk problem when it is one, else the error text."""
    text = " ".join(error.text.split())
    disk = disk_problem(text, directories)
    return disk or text[:300]


def writable_problem(directory: Path) -> str | None:
    """Why the trainer could not write in ``directory`` (read-only, not writable, full); ``None`` when it can.

    Probes by creating and deleting a file, so it holds for root too.
    """
    existing = next((p for p in (directory, *directory.parents) if p.exists()), None)
    if existing is None or not existing.is_dir():
        return f"{directory} cannot be created ({existing} is not a directory)"
    probe = existing / f".fsdp-sdk-write-test-{os.getpid()}"
    try:
        with open(probe, "wb") as f:
            f.write(b"x")
            f.flush()
            os.fsync(f.fileno())
    except OSError as exc:
        if exc.errno == 28:
            free = _free(existing)
            room = f" ({_size(free[1])} free)" if free else ""
            return f"no space left on device in {existing}{room}"
        if exc.errno == 30:
            return f"{existing} is on a read-only filesystem"
        return f"{existing} is not writable ({exc.strerror})"
    finally:
        with contextlib.suppress(OSError):  # a read-only filesystem refuses even deleting what is not there
            probe.unlink(missing_ok=True)
    return None
