"""The trainer's exceptions: one hierarchy, one-line messages that name the flag to change."""

from __future__ import annotations


class TrainerError(Exception):
    """Base class of every error the trainer raises on purpose (exit status 1)."""

    exit_code = 1


class ConfigError(TrainerError, ValueError):
    """A bad setting; the message starts with the flag to change, e.g. ``--parallel.sharding: ...``.

    Raised both while loading the config and at start-up, when a setting turns out
    not to fit the machine (world size, device). The CLI prints it and exits 2.

    :attr:`flag` (``--parallel.sharding``, ``None`` when the error names no flag) and :attr:`problem` (the rest of
    the line) let a caller name the setting as its user wrote it (the SDK names ``.env`` and YAML keys) without
    parsing the message.
    """

    exit_code = 2

    def __init__(self, message: str, *, flag: str | None = None, problem: str | None = None) -> None:
        super().__init__(message)
        if flag is None and message.startswith("--") and ": " in message:
            head, _, rest = message.partition(": ")
            if " " not in head:
                flag, problem = head, problem or rest
        self.flag = flag
        self.problem = problem if problem is not None else message

    def __reduce__(self) -> tuple[object, ...]:  # keep pickling (torchrun's error files, multiprocessing) working
        return (_rebuild, (str(self), self.flag, self.problem))


class CheckpointLoadFailed(TrainerError):
    """A checkpoint's files did not load; it is marked ``BROKEN`` (restarts resume the previous one)."""


class StoreStalled(TrainerError):
    """The checkpoint store stopped answering (an S3 endpoint that accepts and never answers); the message names the
    location and the bound (``checkpoint.s3_timeout_s``, ``checkpoint.save_timeout_s``). The stalled request cannot be
    cancelled: the process exits without waiting for it."""


def _rebuild(message: str, flag: str | None, problem: str) -> ConfigError:
    return ConfigError(message, flag=flag, problem=problem)
