"""The trainer's exceptions: one hierarchy, one-line messages that name the flag to change."""

from __future__ import annotations


class TrainerError(Exception):
    """Base class of every error the trainer raises on purpose (exit status 1)."""

    exit_code = 1


class ConfigError(TrainerError, ValueError):
    """A bad setting; the message starts with the flag to change, e.g. ``--parallel.sharding: ...``.

    Raised both while loading the config and at start-up, when a setting turns out
    not to fit the machine (world size, device). The CLI prints it and exits 2.
    """

    exit_code = 2
