"""Reading ``.env`` files the way the shell scripts they come from read them, refusing what cannot be.

The seed scripts ``source`` their ``.env``: ``export NAME=value`` lines, comments,
quotes, and variables that use earlier ones (``REGISTRY=${ACCOUNT}.dkr.ecr.${AWS_REGION}
.amazonaws.com/``, ``CMD="torchrun --nproc-per-node=$NPROC_PER_WORKER ..."``). This
reader does what the shell would, where that is safe:

* ``$NAME``, ``${NAME}``, ``${NAME:-default}`` and ``${NAME-default}`` expand from the
  file's earlier variables, then the environment; single-quoted values stay literal,
  ``\\$`` is a literal ``$``;
* a reference to a secret (``$HF_TOKEN``, any name :data:`fsdp_sdk.secrets.SECRET_NAME`
  matches) is kept as written: the workers get the secret from a Kubernetes Secret and
  their shell expands it there, so no secret is copied into the configuration;
* a command substitution (``$(...)`` or backticks) is never run, and a reference to a
  variable set nowhere is not silently empty: such a value is *unresolved*, with the
  reason, and it is an error only when the SDK uses it (directly or through a
  variable that refers to it);
* a line that is not ``NAME=VALUE`` is an error naming the line, never skipped.
"""

from __future__ import annotations

import io
import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from fsdp_sdk import secrets
from fsdp_sdk.errors import ConfigError

__all__ = ["EnvEntry", "expand", "read_env_file"]

_NAME = r"[A-Za-z_][A-Za-z0-9_]*"
_REFERENCE = re.compile(rf"\\\$|\$\{{(?P<braced>{_NAME})(?:(?P<op>:?-)(?P<default>[^}}]*))?\}}|\$(?P<bare>{_NAME})")
_SUBSTITUTION = re.compile(r"\$\(|`")
_VALID_NAME = re.compile(rf"^{_NAME}$")


@dataclass(frozen=True)
class EnvEntry:
    """One variable of a ``.env`` file.

    :param name: the variable's name.
    :param value: its value after expansion (``None`` when unresolved).
    :param line: the line it is defined on.
    :param written: the value as written in the file.
    :param problem: why it could not be resolved (a command substitution, an unset variable), else ``None``.
    :param culprit: the variable at the root of ``problem`` (this one, or one it uses).
    """

    name: str
    value: str | None
    line: int
    written: str
    problem: str | None = None
    culprit: str | None = None


def _short(text: str, limit: int = 60) -> str:
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 3] + "..."


def expand(
    written: str, known: Mapping[str, EnvEntry], environ: Mapping[str, str]
) -> tuple[str | None, str | None, str | None]:
    """Expand the variables in ``written`` as the shell would.

    :returns: ``(value, None, None)``, or ``(None, problem, culprit)`` where ``culprit`` is the variable at the
        root of the problem (``None``: this value itself).

    :param written: the value as written (already unquoted; not single-quoted).
    :param known: the file's variables defined so far.
    :param environ: the process environment.
    """
    substitution = _SUBSTITUTION.search(written)
    if substitution is not None:
        start = substitution.start()
        return None, f"is a command substitution ({_short(written[start:])}) that fsdp-sdk does not run", None
    problems: list[tuple[str, str]] = []

    def replace(match: re.Match[str]) -> str:
        if match.group(0) == "\\$":
            return "$"
        name = match.group("braced") or match.group("bare")
        if secrets.SECRET_NAME.search(name):
            return match.group(0)  # expanded by the workers' shell, from their Secret
        entry = known.get(name)
        if entry is not None:
            if entry.value is None:
                problems.append((f"uses ${{{name}}}, which {entry.problem}", entry.culprit or name))
                return ""
            value: str | None = entry.value
        else:
            value = environ.get(name)
        op, default = match.group("op"), match.group("default")
        if op is not None and (value is None or (op == ":-" and value == "")):
            return default or ""
        if value is None:
            problems.append((f"uses ${name}, which is set neither earlier in the file nor in the environment", name))
            return ""
        return value

    value = _REFERENCE.sub(replace, written)
    if problems:
        return None, *problems[0]
    return value, None, None


def read_env_file(path: Path, environ: Mapping[str, str]) -> list[EnvEntry]:
    """Every variable of the ``.env`` file at ``path``, in order, expanded (see the module docstring).

    :raises ConfigError: the file cannot be read, or a line is not ``NAME=VALUE``.
    """
    from dotenv.parser import parse_stream  # python-dotenv's parser: quoting, escapes, comments, export

    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as error:
        raise ConfigError(path.name, f"cannot be read ({error})", "check the file") from None
    entries: dict[str, EnvEntry] = {}
    for binding in parse_stream(io.StringIO(text)):
        line = binding.original.line
        if binding.error:
            shown = secrets.redact(_short(binding.original.string.strip(), 80))
            raise ConfigError(
                f"{path.name} line {line}",
                f"cannot be read as NAME=VALUE: {shown!r}",
                "write NAME=VALUE (quotes around values with spaces), or comment the line out with #",
            )
        if binding.key is None:
            continue  # a comment or a blank line
        name = binding.key
        if not _VALID_NAME.match(name):
            raise ConfigError(
                f"{path.name} line {line}",
                f"{name!r} is not a variable name",
                "use letters, digits and _, not starting with a digit",
            )
        written = binding.value or ""
        secrets.register_named(name, written)
        after_equals = binding.original.string.split("=", 1)[1].lstrip() if "=" in binding.original.string else ""
        if after_equals.startswith("'"):
            entry = EnvEntry(name, written, line, written)
        else:
            value, problem, culprit = expand(written, entries, environ)
            entry = EnvEntry(name, value, line, written, problem, culprit)
            if value is not None:
                secrets.register_named(name, value)
        entries[name] = entry
    return list(entries.values())
