"""Running external tools (eksctl, terraform, kubectl, docker, aws...): one runner for every caller.

Every command is an argument list handed to :class:`subprocess.Popen` without a
shell, so a value with spaces, quotes, ``;``, ``$(...)`` or a newline reaches the
tool as one argument and is never interpreted. The runner:

* finds the binary on ``PATH`` first; a missing one is a one-line
  :class:`ToolNotFoundError` (exit status 2) saying how to install it;
* merges the tool's stdout and stderr and passes each line, as it comes, to the
  progress callback, prefixed with the tool's name and the elapsed time
  (``[eksctl 02:31] creating nodegroup "gpu"``), with secrets redacted;
* maps a non-zero exit to a :class:`ToolError` naming the tool, the step that
  ran it and the last lines of its output;
* on Ctrl-C or SIGTERM stops the tool (its whole process group) before re-raising.

::

    from fsdp_sdk.tools import run_tool

    result = run_tool(["eksctl", "create", "cluster", "-f", str(path)], step="create the cluster",
                      progress=print)
    print(result.elapsed, result.lines[-1])
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import threading
import time
from collections import deque
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from fsdp_sdk.errors import BackendError, ConfigError

__all__ = [
    "INSTALL_HINTS",
    "ToolError",
    "ToolNotFoundError",
    "ToolResult",
    "find_tool",
    "run_tool",
]

#: How to install each tool the SDK runs, for the error a missing binary gives.
INSTALL_HINTS: dict[str, str] = {
    "eksctl": "install eksctl: https://eksctl.io/installation/ (e.g. the release tarball for your platform)",
    "terraform": "install Terraform 1.5 or newer: https://developer.hashicorp.com/terraform/install",
    "kubectl": "install kubectl: https://kubernetes.io/docs/tasks/tools/ (or 'apt-get install kubectl')",
    "docker": "install Docker (https://docs.docker.com/engine/install/), or use --tool finch or --tool buildah",
    "finch": "install Finch: https://runfinch.com/",
    "buildah": "install Buildah: 'apt-get install buildah'",
    "git": "install git: 'apt-get install git' (or https://git-scm.com/downloads)",
    "aws": "install the AWS CLI v2: https://docs.aws.amazon.com/cli/latest/userguide/getting-started-install.html",
    "helm": "install Helm: https://helm.sh/docs/intro/install/",
    "promtool": "install Prometheus's promtool: 'apt-get install prometheus'",
}

#: Lines of the tool's output kept for the error message of a failed run.
TAIL_LINES = 8


class ToolNotFoundError(ConfigError):
    """The tool is not on ``PATH``; the message says how to install it (exit status 2: nothing was started)."""

    def __init__(self, tool: str, *, fix: str | None = None) -> None:
        super().__init__(
            tool, "is not installed (not found on PATH)", fix or INSTALL_HINTS.get(tool, f"install {tool}")
        )
        self.tool = tool


class ToolError(BackendError):
    """A tool exited with a non-zero status.

    :param tool: the tool's name (``eksctl``).
    :param step: what the SDK was doing with it (``create the cluster``).
    :param returncode: its exit status (negative: killed by that signal).
    :param tail: its last output lines.
    """

    def __init__(self, tool: str, step: str, returncode: int, tail: Sequence[str]) -> None:
        self.tool, self.step, self.returncode, self.tail = tool, step, returncode, list(tail)
        how = f"was killed by signal {-returncode}" if returncode < 0 else f"exited with status {returncode}"
        last = " | ".join(" ".join(line.split()) for line in tail if line.strip()) or "no output"
        super().__init__(f"{tool} {how} while it tried to {step}: {last[-600:]}")


@dataclass(frozen=True)
class ToolResult:
    """What :func:`run_tool` returns for a run that ended with an accepted status.

    :param argv: the command as run.
    :param returncode: the exit status.
    :param lines: every output line (stdout and stderr merged, secrets redacted).
    :param elapsed: seconds the tool ran.
    """

    argv: tuple[str, ...]
    returncode: int
    lines: tuple[str, ...] = field(repr=False)
    elapsed: float

    @property
    def output(self) -> str:
        """The whole output as one string."""
        return "\n".join(self.lines)


def find_tool(name: str, *, fix: str | None = None) -> str:
    """The full path of ``name`` on ``PATH``.

    :param name: the executable's name.
    :param fix: how to install it, when :data:`INSTALL_HINTS` does not know the tool.
    :raises ToolNotFoundError: it is not on ``PATH``.
    """
    found = shutil.which(name, path=os.environ.get("PATH"))
    if found is None:
        raise ToolNotFoundError(name, fix=fix)
    return found


def _check_argv(argv: Sequence[str]) -> list[str]:
    if isinstance(argv, (str, bytes)) or not argv:
        raise TypeError("run_tool takes a non-empty list of arguments, never a command string")
    for arg in argv:
        if not isinstance(arg, str):
            raise TypeError(f"every argument must be a str, got {type(arg).__name__}: {arg!r}")
        if "\x00" in arg:
            raise ConfigError(argv[0], "an argument contains a NUL character", "remove it from the value")
    return list(argv)


def _redactor(secrets: Iterable[str]) -> Callable[[str], str]:
    values = sorted({s for s in secrets if s and len(s) >= 4}, key=len, reverse=True)

    def redact(line: str) -> str:
        for value in values:
            line = line.replace(value, "**********")
        return line

    return redact


def _stop(process: subprocess.Popen[bytes], timeout: float = 10.0) -> None:
    """SIGTERM to the tool's process group, SIGKILL after ``timeout``."""
    for sig, wait in ((signal.SIGTERM, timeout), (signal.SIGKILL, 5.0)):
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(process.pid, sig)
        with contextlib.suppress(subprocess.TimeoutExpired):
            process.wait(timeout=wait)
            return


def _interrupt(signum: int, frame: object) -> None:
    raise KeyboardInterrupt(f"signal {signum}")


def run_tool(
    argv: Sequence[str],
    *,
    step: str,
    progress: Callable[[str], None] | None = None,
    cwd: str | os.PathLike[str] | None = None,
    env: Mapping[str, str] | None = None,
    input: str | None = None,
    timeout: float | None = None,
    ok_codes: Iterable[int] = (0,),
    secrets: Iterable[str] = (),
    echo: bool = True,
    stop_timeout: float = 10.0,
) -> ToolResult:
    """Run one external tool to its end, streaming its output line by line.

    :param argv: the command as a list (``argv[0]`` is looked up on ``PATH``).
    :param step: what the run does, for messages (``create the cluster``).
    :param progress: receives ``[tool mm:ss] line`` for each output line.
    :param cwd: the working directory.
    :param env: variables added to (and overriding) this process's environment.
    :param input: text written to the tool's stdin (a password for ``--password-stdin``), then closed.
    :param timeout: seconds before the tool is stopped and the run fails.
    :param ok_codes: exit statuses that count as success.
    :param secrets: values masked in every line passed on or kept.
    :param echo: pass lines to ``progress`` (off for tools whose output is data, like ``terraform output -json``).
    :param stop_timeout: seconds the tool gets to stop after SIGTERM (on Ctrl-C, SIGTERM or ``timeout``) before
        SIGKILL; tools that must write their state first (terraform) need more than the default.
    :raises ToolNotFoundError: the tool is not installed.
    :raises ToolError: it exited with a status not in ``ok_codes``, or ran past ``timeout``.
    """
    args = _check_argv(argv)
    tool = Path(args[0]).name
    args[0] = find_tool(args[0]) if os.sep not in args[0] else args[0]
    from fsdp_sdk import secrets as known_secrets

    redact = _redactor([*secrets, *known_secrets.known()])
    say = progress if (progress is not None and echo) else None
    lines: list[str] = []
    tail: deque[str] = deque(maxlen=TAIL_LINES)
    start = time.monotonic()
    merged_env = {**os.environ, **(env or {})} if env is not None else None

    previous = None
    if threading.current_thread() is threading.main_thread():
        previous = signal.signal(signal.SIGTERM, _interrupt)
    try:
        try:
            process = subprocess.Popen(
                args,
                cwd=cwd,
                env=merged_env,
                stdin=subprocess.PIPE if input is not None else subprocess.DEVNULL,
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
                start_new_session=True,  # its own process group: stopped as a unit
            )
        except PermissionError as error:
            raise ToolNotFoundError(
                tool, fix=f"{args[0]} is not executable ({error.strerror}); fix its permissions"
            ) from None
        timer = None
        if timeout is not None:
            timer = threading.Timer(timeout, _stop, args=(process, stop_timeout))
            timer.daemon = True
            timer.start()
        try:
            if input is not None and process.stdin is not None:
                with contextlib.suppress(BrokenPipeError):
                    process.stdin.write(input.encode())
                process.stdin.close()
            assert process.stdout is not None
            for raw in process.stdout:
                line = redact(raw.decode("utf-8", errors="replace").rstrip("\r\n"))
                lines.append(line)
                tail.append(line)
                if say is not None:
                    minutes, seconds = divmod(int(time.monotonic() - start), 60)
                    say(f"[{tool} {minutes:02d}:{seconds:02d}] {line}")
            returncode = process.wait()
        except BaseException:
            _stop(process, stop_timeout)
            raise
        finally:
            if timer is not None:
                timer.cancel()
    finally:
        if previous is not None:
            signal.signal(signal.SIGTERM, previous)
    elapsed = time.monotonic() - start
    if timeout is not None and elapsed >= timeout and returncode not in set(ok_codes):
        raise ToolError(tool, step, returncode, [*tail, f"(stopped after {timeout:g}s)"])
    if returncode not in set(ok_codes):
        raise ToolError(tool, step, returncode, tail)
    return ToolResult(tuple(args), returncode, tuple(lines), elapsed)
