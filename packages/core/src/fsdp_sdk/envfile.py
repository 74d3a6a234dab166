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

import re
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path

from fsdp_sdk import secrets
from fsdp_sdk.errors import ConfigError

__all__ = ["EnvEntry", "expand", "read_env_file"]

_NAME = r"[A-Za-z_][A-Za-z0-9_]*"
_REFERENCE = re.compile(rf"\\\$|\$\{{(?P<braced>{_NAME})(?:(?P<op>:?-)(?P<default>[^}}]*))?\}}|\$(?P<bare>{_NAME})")
_SUBSTITUTION = re.compile(r"\$\(|`")
_VALID_NAME = re.compile(rf"^{_NAME}$")
# One assignment: optional `export`, the name, `=`, then the value's first character decides its kind.
_ASSIGNMENT = re.compile(r"[ \t]*(?:export[ \t]+)?(?P<name>[^=\s#]+)[ \t]*=[ \t]*")
_DOUBLE_ESCAPES = {"\\": "\\", '"': '"', "'": "'", "n": "\n", "t": "\t", "r": "\r", "a": "\a", "b": "\b",
                   "f": "\f", "v": "\v"}  # fmt: skip


class _LineError(ValueError):
    """A line of the file is not ``NAME=VALUE``; ``args[0]`` says why."""


def _parse(text: str) -> Iterator[tuple[str, str, bool, int, str]]:
    """``(name, value, single_quoted, line, source_text)`` of each assignment in ``text``, as the shell reads them.

    Values may be unquoted (to the end of the line, a `` #`` comment stripped), single-quoted (literal) or
    double-quoted (backslash escapes; ``\\$`` kept for :func:`expand`); quoted values may span lines.

    :raises _LineError: with ``(line number, reason, text)`` for a line that is not an assignment.
    """
    position, line = 0, 1
    while position < len(text):
        end = text.find("\n", position)
        end = len(text) if end < 0 else end
        current = text[position:end]
        stripped = current.strip()
        if not stripped or stripped.startswith("#"):
            position, line = end + 1, line + 1
            continue
        match = _ASSIGNMENT.match(current)
        if match is None:
            raise _LineError(line, "is not NAME=VALUE", stripped)
        name, start, first = match.group("name"), position + match.end(), line
        quote = text[start] if start < len(text) else ""
        if quote in ("'", '"'):
            chars, cursor = [], start + 1
            while True:
                if cursor >= len(text):
                    raise _LineError(first, f"has a {quote} quote that is never closed", stripped)
                char = text[cursor]
                if char == quote:
                    break
                if char == "\\" and cursor + 1 < len(text):
                    following = text[cursor + 1]
                    if quote == "'" and following in "\\'":
                        chars.append(following)
                        cursor += 2
                        continue
                    if quote == '"' and following in _DOUBLE_ESCAPES:
                        chars.append(_DOUBLE_ESCAPES[following])
                        cursor += 2
                        continue
                if char == "\n":
                    line += 1
                chars.append(char)
                cursor += 1
            end = text.find("\n", cursor)
            end = len(text) if end < 0 else end
            rest = text[cursor + 1 : end].strip()
            if rest and not rest.startswith("#"):
                raise _LineError(first, f"has text after the closing {quote} quote", stripped)
            yield name, "".join(chars), quote == "'", first, text[position:end]
        else:
            raw = text[start:end]
            comment = re.search(r"[ \t]#", raw)
            value = (raw[: comment.start()] if comment else raw).strip()
            yield name, value, False, first, current
        position, line = end + 1, line + 1


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
        return (
            None,
            f"is a command substitution ({_short(secrets.mask_refused(written[start:]))}) that fsdp-sdk does not run",
            None,
        )
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
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as error:
        raise ConfigError(path.name, f"cannot be read ({error})", "check the file") from None
    entries: dict[str, EnvEntry] = {}
    try:
        assignments = list(_parse(text.replace("\r\n", "\n")))
    except _LineError as error:
        line, reason, shown = error.args
        raise ConfigError(
            f"{path.name} line {line}",
            f"{_short(secrets.mask_refused(shown), 80)!r} {reason}",
            "write NAME=VALUE (quotes around values with spaces), or comment the line out with #",
        ) from None
    for name, written, single_quoted, line, _ in assignments:
        if not _VALID_NAME.match(name):
            raise ConfigError(
                f"{path.name} line {line}",
                f"{name!r} is not a variable name",
                "use letters, digits and _, not starting with a digit",
            )
        secrets.register_named(name, written)
        if single_quoted:
            entry = EnvEntry(name, written, line, written)
        else:
            value, problem, culprit = expand(written, entries, environ)
            entry = EnvEntry(name, value, line, written, problem, culprit)
            if value is not None:
                secrets.register_named(name, value)
        entries[name] = entry
    return list(entries.values())
