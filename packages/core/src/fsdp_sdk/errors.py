"""The one exception hierarchy of fsdp-sdk.

Every error the SDK raises on purpose derives from :class:`FsdpSdkError`. Its
message is a single line of the form ``<field>: <problem>; <fix>`` so the CLI can
print it as is, and :attr:`FsdpSdkError.exit_code` is the process exit status the
CLI uses for it (1 for failures, 2 for usage and configuration errors).

This module imports nothing beyond the standard library: it is imported by the
CLI at start-up and by every plugin.
"""

from __future__ import annotations

from collections.abc import Callable

__all__ = [
    "BackendError",
    "ConfigError",
    "FsdpSdkError",
    "KubernetesError",
    "PluginDeprecationWarning",
    "PluginError",
    "PreflightError",
    "RunError",
]


class FsdpSdkError(Exception):
    """Base class of every error raised by fsdp-sdk on purpose.

    The message is one line; the CLI prints it without a traceback (unless
    ``--debug``) and exits with :attr:`exit_code`.
    """

    #: Exit status of the CLI when this error ends a command.
    exit_code: int = 1


class ConfigError(FsdpSdkError):
    """A configuration or usage error: a value is missing, malformed or contradicts another.

    The message names the field as the user spelled it (``NUM_WORKERS`` in a
    ``.env`` file, ``job.num_workers`` in YAML, ``--nodes`` on the command line),
    where it came from, what is wrong, and how to fix it::

        NUM_WORKERS (from .env): 'two' is not an integer; set NUM_WORKERS to a whole number like 2

    :param field: the name of the offending setting, as the user wrote it.
    :param problem: what is wrong with it.
    :param fix: what to do about it (optional when ``problem`` already says it).
    :param source: where the value came from (``.env``, ``config.yaml``, ``environment``...).
    """

    exit_code = 2

    def __init__(self, field: str, problem: str, fix: str | None = None, *, source: str | None = None) -> None:
        self.field = field
        self.problem = problem
        self.fix = fix
        self.source = source
        where = f" (from {source})" if source else ""
        message = f"{field}{where}: {problem}"
        if fix:
            message += f"; {fix}"
        super().__init__(" ".join(message.split()))  # always one line

    def __reduce__(self) -> tuple[Callable[..., ConfigError], tuple[str, str, str | None, str | None]]:
        # keep pickling (multiprocessing, pytest-xdist) working
        return (_rebuild_config_error, (self.field, self.problem, self.fix, self.source))


def _rebuild_config_error(field: str, problem: str, fix: str | None, source: str | None) -> ConfigError:
    return ConfigError(field, problem, fix, source=source)


class PluginError(FsdpSdkError, ValueError):
    """A plugin could not be loaded or registered something invalid (a duplicate name, a bad class).

    It is also a :class:`ValueError`, the conventional error of registries that
    refuse a duplicate name. Exit status 2, like a configuration error: the way out
    is a change to what is installed (update, disable or uninstall the plugin), not
    running the same command again.
    """

    exit_code = 2


class PluginDeprecationWarning(DeprecationWarning):
    """A plugin uses a part of the hook contract that goes away (pluggy says so when the plugin is registered,
    naming the implementation's file and line: ``warn_on_impl_args``)."""


class BackendError(FsdpSdkError):
    """A cluster backend failed to carry out an action (start, stop, scale, query a cluster)."""


class PreflightError(BackendError):
    """A preflight check failed: what an action needs is not in place, and nothing was started or created.

    Like a configuration error, it exits with status 2: the fix is on the user's side (a quota, a zone,
    a reservation, a missing tool).
    """

    exit_code = 2


class KubernetesError(FsdpSdkError):
    """The Kubernetes API refused or failed a request of the job layer."""


class RunError(FsdpSdkError):
    """A training run started but did not finish successfully."""
