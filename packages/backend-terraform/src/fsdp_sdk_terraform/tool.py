"""One Terraform working directory driven by the ``terraform`` CLI.

python-terraform builds every argument list (``generate_cmd_string``: keyword options become
``-flag=value`` arguments, never a shell string). Long commands (``init``, ``plan``, ``apply``) run
through :func:`fsdp_sdk.tools.run_tool`, which streams ``[terraform mm:ss] line`` to the progress
callback and stops terraform's process group on Ctrl-C or SIGTERM, giving it time to write its state.
Commands whose stdout is JSON (``version``, ``output``, ``show``, ``state list``) run through
python-terraform's own runner, which keeps stdout and stderr apart, so a warning on stderr never
corrupts the data.

A failure becomes one line: :class:`StateLockedError` when another run holds the state lock (naming
the holder, never waiting longer than ``-lock-timeout``), else a :class:`~fsdp_sdk.tools.ToolError`
naming the step and Terraform's own error lines.
"""

from __future__ import annotations

import json
import os
import re
import shutil
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from fsdp_sdk.errors import BackendError, ConfigError
from fsdp_sdk.tools import INSTALL_HINTS, ToolError, ToolNotFoundError, ToolResult, run_tool
from fsdp_sdk_terraform.changes import PlanChanges
from fsdp_sdk_terraform.settings import MIN_TERRAFORM_VERSION

__all__ = [
    "LockInfo",
    "StateLockedError",
    "TerraformTool",
    "error_lines",
    "find_terraform",
    "lock_info",
    "parse_version",
]

#: Seconds terraform gets to stop by itself (finish its API calls, write its state, release its lock)
#: after Ctrl-C or SIGTERM, before it is killed.
STOP_TIMEOUT_S = 300.0
# What python-terraform reads as the state after each command: nothing (the SDK reads state only through terraform).
_NO_STATE_FILE = ".fsdp-sdk-no-state"
_PREFIX = re.compile(r"^\[terraform \d+:\d\d\] ")
_LOCK_FIELD = re.compile(r"^\s+(ID|Path|Operation|Who|Version|Created|Info):\s*(.*)$")
_NOISE = re.compile(r"^\s*(on |with |\d+:|[│├╷╵─]|This was checked by|\(and \d+ more similar)")


@dataclass(frozen=True)
class LockInfo:
    """Who holds a state lock, as Terraform reports it.

    :param id: the lock's ID (what ``terraform force-unlock`` takes).
    :param who: ``user@host`` of the holder.
    :param operation: what the holder is doing (``OperationTypeApply``).
    :param created: when it took the lock.
    """

    id: str
    who: str
    operation: str
    created: str


class StateLockedError(BackendError):
    """Another run holds the cluster's state lock; the message names it and what to do.

    :param workdir: the cluster's working directory.
    :param step: what the SDK was doing.
    :param holder: the lock's holder, when Terraform said.
    :param timeout_s: how long the command waited.
    """

    def __init__(self, workdir: Path, step: str, holder: LockInfo | None, timeout_s: int) -> None:
        self.workdir, self.step, self.holder, self.timeout_s = workdir, step, holder, timeout_s
        if holder is not None:
            who = f"{holder.who or 'another run'} ({holder.operation or 'an operation'} since {holder.created or '?'}, lock ID {holder.id})"
            unlock = f"; if that run died, run 'terraform -chdir={workdir} force-unlock {holder.id}'"
        else:
            who, unlock = "another run", ""
        super().__init__(
            f"terraform: cannot {step}: the state is locked by {who}; waited {timeout_s}s "
            f"(terraform.lock_timeout_s): wait for that run to end and try again{unlock}"
        )


def parse_version(text: str) -> tuple[int, int, int]:
    """``(1, 11, 4)`` from ``1.11.4`` (a pre-release suffix is ignored).

    :raises ValueError: not a version.
    """
    match = re.match(r"^v?(\d+)\.(\d+)\.(\d+)", text.strip())
    if match is None:
        raise ValueError(f"not a version: {text!r}")
    major, minor, patch = (int(part) for part in match.groups())
    return major, minor, patch


def find_terraform(binary: str) -> str:
    """The full path of the terraform executable named by ``terraform.binary``.

    :raises ToolNotFoundError: it is not on PATH, or the path given does not exist or is not executable.
    """
    hint = INSTALL_HINTS["terraform"]
    if os.sep in binary:
        path = Path(binary).expanduser()
        if not path.is_file():
            raise ToolNotFoundError(
                "terraform", fix=f"terraform.binary is {binary}, which does not exist; fix the path or {hint}"
            )
        if not os.access(path, os.X_OK):
            raise ToolNotFoundError("terraform", fix=f"{binary} is not executable; fix its permissions")
        return str(path)
    found = shutil.which(binary)
    if found is None:
        raise ToolNotFoundError(
            "terraform", fix=hint + (f" (looked for {binary!r} on PATH)" if binary != "terraform" else "")
        )
    return found


def lock_info(lines: Sequence[str]) -> LockInfo | None:
    """The lock holder from the output of a command that could not take the state lock, or ``None``."""
    if not any("Error acquiring the state lock" in line for line in lines):
        return None
    fields: dict[str, str] = {}
    for line in lines:
        match = _LOCK_FIELD.match(line)
        if match:
            fields.setdefault(match.group(1), match.group(2).strip())
    return LockInfo(
        fields.get("ID", "?"), fields.get("Who", ""), fields.get("Operation", ""), fields.get("Created", "")
    )


def error_lines(lines: Sequence[str], limit: int = 4) -> list[str]:
    """Terraform's diagnostics in ``lines``, one string each: ``Error: summary: detail`` (the detail's wrapped lines
    joined, the source snippets and locations left out)."""
    found: list[list[str]] = []
    inside = False
    for line in lines:
        text = line.rstrip()
        if text.startswith("Error: "):
            inside = True
            found.append([text])
        elif text.startswith(("Warning: ", "Planning failed", "Terraform acquires a state lock")):
            inside = False
        elif inside and text.strip() and not _NOISE.match(text):
            found[-1].append(text.strip())
    return [parts[0] + (": " + " ".join(parts[1:]) if len(parts) > 1 else "") for parts in found[:limit]]


class TerraformTool:
    """Runs terraform commands in one working directory.

    :param workdir: the working directory (the root module: configuration, tfvars, backend).
    :param binary: the terraform executable (name on PATH or path).
    :param lock_timeout_s: ``-lock-timeout`` of every command that takes the state lock.
    :param parallelism: ``-parallelism`` of plan and apply.
    :param env: variables added to terraform's environment (``TF_PLUGIN_CACHE_DIR``...).
    :param progress: receives ``[terraform mm:ss] line`` for each output line of long commands.
    :raises ToolNotFoundError: terraform is not installed.
    """

    def __init__(
        self,
        workdir: Path,
        *,
        binary: str = "terraform",
        lock_timeout_s: int = 60,
        parallelism: int = 10,
        env: Mapping[str, str] | None = None,
        progress: Callable[[str], None] | None = None,
    ) -> None:
        from python_terraform import Terraform

        self.workdir = Path(workdir)
        self.binary = find_terraform(binary)
        self.lock_timeout_s = lock_timeout_s
        self.parallelism = parallelism
        self.env = {"TF_IN_AUTOMATION": "1", "TF_INPUT": "0", "CHECKPOINT_DISABLE": "1", **(env or {})}
        self.progress = progress
        self._tf = Terraform(working_dir=str(self.workdir), terraform_bin_path=self.binary, state=_NO_STATE_FILE)

    # ------------------------------------------------------------------ argument lists

    def argv(self, command: str, *args: str, **options: Any) -> list[str]:
        """The argument list of ``terraform COMMAND [-option=value...] ARGS`` (python-terraform's spelling:
        ``lock_timeout="60s"`` is ``-lock-timeout=60s``, ``no_color=IsFlagged`` is ``-no-color``)."""
        return list(self._tf.generate_cmd_string(command, *args, **options))

    def _flags(self, **options: Any) -> dict[str, Any]:
        from python_terraform import IsFlagged

        return {"input": False, "no_color": IsFlagged, **options}

    def _locking(self) -> dict[str, Any]:
        return {"lock_timeout": f"{self.lock_timeout_s}s"}

    # ------------------------------------------------------------------ running

    def run(self, argv: Sequence[str], *, step: str) -> ToolResult:
        """Run a long command through :func:`run_tool`, streaming its lines; map failures to one line.

        :raises StateLockedError: another run holds the state lock.
        :raises ToolError: terraform failed (the message holds its error lines).
        """
        seen: list[str] = []

        def record(line: str) -> None:
            seen.append(_PREFIX.sub("", line, count=1))
            if self.progress is not None:
                self.progress(line)

        try:
            return run_tool(
                argv, step=step, progress=record, cwd=self.workdir, env=self.env, stop_timeout=STOP_TIMEOUT_S
            )
        except ToolError as error:
            raise self._mapped(step, error.returncode, seen or error.tail) from None

    def _mapped(self, step: str, returncode: int, lines: Sequence[str]) -> BackendError:
        holder = lock_info(lines)
        if holder is not None:
            return StateLockedError(self.workdir, step, holder if holder.id != "?" else None, self.lock_timeout_s)
        return ToolError("terraform", step, returncode, error_lines(lines) or list(lines)[-8:])

    def read_json(self, command: str, *args: str, step: str, **options: Any) -> Any:
        """Run a short command whose stdout is JSON (stderr kept apart) and parse it.

        :raises ToolError: terraform failed, or printed something that is not JSON.
        """
        from python_terraform import IsFlagged

        returncode, out, err = self._tf.cmd(command, *args, json=IsFlagged, no_color=IsFlagged, **options)
        if returncode != 0:
            raise self._mapped(step, returncode, [*out.splitlines(), *err.splitlines()])
        try:
            return json.loads(out)
        except ValueError:
            raise ToolError("terraform", step, returncode, [f"printed no JSON: {out.strip()[:200]!r}"]) from None

    # ------------------------------------------------------------------ commands

    def version(self) -> str:
        """The binary's version (the ``Terraform vX.Y.Z`` line of ``terraform version``).

        :raises ToolError: it printed no version.
        """
        result = run_tool(self.argv("version"), step="read its version", env=self.env, echo=False)
        for line in result.lines:
            match = re.match(r"^Terraform v(\d+\.\d+\.\d+\S*)", line.strip())
            if match:
                return match.group(1)
        raise ToolError("terraform", "read its version", result.returncode, ["printed no 'Terraform vX.Y.Z' line"])

    def check_version(self, exact: str | None = None) -> str:
        """The binary's version, checked against the configuration's minimum and ``exact`` when given.

        :raises ConfigError: too old, or not the exact version asked for.
        """
        version = self.version()
        if exact is not None and parse_version(version) != parse_version(exact):
            raise ConfigError(
                "terraform.version",
                f"is {exact} but {self.binary} is Terraform {version}",
                "install that version, point terraform.binary at it, or unset terraform.version",
            )
        if parse_version(version) < MIN_TERRAFORM_VERSION:
            wanted = ".".join(str(part) for part in MIN_TERRAFORM_VERSION)
            raise ConfigError(
                "terraform.binary", f"{self.binary} is Terraform {version}", f"install Terraform {wanted} or newer"
            )
        return version

    def init(self) -> None:
        """``terraform init``: backend and providers (idempotent); creates the provider cache directory it is given."""
        if self.env.get("TF_PLUGIN_CACHE_DIR"):
            Path(self.env["TF_PLUGIN_CACHE_DIR"]).mkdir(parents=True, exist_ok=True)
        self.run(self.argv("init", **self._flags(**self._locking())), step="initialise the working directory")

    def plan(self, out: str, *, destroy: bool = False, lock: bool = True, step: str | None = None) -> None:
        """``terraform plan -out OUT`` (``-destroy`` for a destroy plan; ``lock=False`` for a read-only preview)."""
        from python_terraform import IsFlagged, IsNotFlagged

        options = self._flags(out=out, parallelism=self.parallelism, destroy=IsFlagged if destroy else IsNotFlagged)
        options.update(self._locking() if lock else {"lock": False})
        self.run(self.argv("plan", **options), step=step or ("plan the deletion" if destroy else "plan the changes"))

    def show_plan(self, plan_file: str) -> PlanChanges:
        """What the saved plan ``plan_file`` will do (``terraform show -json``)."""
        return PlanChanges.from_plan_json(self.read_json("show", plan_file, step="read the saved plan"))

    def apply(self, plan_file: str, *, step: str = "apply the saved plan") -> None:
        """``terraform apply PLAN_FILE``: exactly the saved plan."""
        options = self._flags(parallelism=self.parallelism, **self._locking())
        self.run(self.argv("apply", plan_file, **options), step=step)

    def outputs(self) -> dict[str, Any]:
        """The root module's outputs by name (``terraform output -json``); empty without state."""
        data = self.read_json("output", step="read the outputs")
        return {name: entry.get("value") for name, entry in (data or {}).items()}

    def state_resources(self) -> list[str]:
        """Addresses of the resources in the state (``terraform state list``)."""
        from python_terraform import IsFlagged

        returncode, out, err = self._tf.cmd("state list", no_color=IsFlagged)
        if returncode != 0:
            raise self._mapped("list the resources in the state", returncode, [*out.splitlines(), *err.splitlines()])
        return [line.strip() for line in out.splitlines() if line.strip()]
