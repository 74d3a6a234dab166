"""Secret values, and masking them wherever text leaves the process.

Every value the SDK knows to be secret is registered here as it is read: a
:class:`~fsdp_sdk.config.Secret` registers itself when created (``job.hf_token``,
plugin settings typed ``Secret``), and the configuration loader registers the
values of variables named like secrets (:data:`SECRET_NAME`: ``*TOKEN*``,
``*SECRET*``, ``*PASSWORD*``, ``*ACCESS_KEY*``...) from every source before it
converts them, so even a value that is refused never reaches an error message.

:func:`redact` replaces every registered value, wherever it occurs in a text
(inside ``job.command``, a log line, an error), by ``**********``. The CLI passes
everything it prints through it; :func:`fsdp_sdk.tools.run_tool` masks them in
the output of the tools it runs.

This module imports only the standard library: the CLI imports it at start-up.
"""

from __future__ import annotations

import re
import threading
from collections.abc import Iterable
from typing import Any

__all__ = [
    "MASK",
    "SECRET_NAME",
    "SECRET_VALUE",
    "forget_all",
    "known",
    "mask_error",
    "mask_refused",
    "redact",
    "redact_data",
    "register",
]

#: What a secret is replaced by.
MASK = "**********"
#: Names of variables and settings that hold secrets.
SECRET_NAME = re.compile(
    r"TOKEN|SECRET|PASSWORD|PASSWD|API_?KEY|ACCESS_?KEY|CREDENTIAL|PRIVATE_?KEY|SESSION_?KEY", re.IGNORECASE
)
#: Names that match :data:`SECRET_NAME` but hold the *name* of a Kubernetes Secret, not a secret.
NOT_SECRET_NAME = re.compile(r"(^|[._])HF_TOKEN_SECRET$", re.IGNORECASE)
#: Values that are secrets whatever name holds them: Hugging Face tokens (``hf_`` and 30-odd letters), AWS access
#: key ids (``AKIA``/``ASIA``... and 16 capitals or digits), and 40-character AWS secret access keys (mixed-case
#: base64; hex digests and plain words are kept). Compiled on first use: the CLI imports this module at start-up.
SECRET_VALUE = (
    r"(?<![A-Za-z0-9_])hf_[A-Za-z0-9]{20,}"
    r"|(?<![A-Za-z0-9])(?:AKIA|ASIA|AIDA|AROA|AIPA|ANPA|ANVA|ABIA|ACCA)[A-Z0-9]{16}(?![A-Za-z0-9])"
    r"|(?<![A-Za-z0-9/+])[A-Za-z0-9/+]{40}(?![A-Za-z0-9/+])"
)
# One refused line: [export] NAME, then "=", ":" or blanks, then the value (to the end of the line).
_NAMED_VALUE = r"^(?P<head>\s*(?:export\s+)?-*(?P<name>[A-Za-z_][A-Za-z0-9_.\-]*)(?:\s*[:=]\s*|\s+))(?P<value>\S.*)$"
#: Shorter values are not masked: they would mask ordinary words and numbers.
MIN_LENGTH = 4

_LOCK = threading.Lock()
_VALUES: set[str] = set()


def register(value: str | None) -> None:
    """Remember ``value`` as a secret (values shorter than :data:`MIN_LENGTH` are not masked)."""
    if value and isinstance(value, str) and len(value) >= MIN_LENGTH:
        with _LOCK:
            _VALUES.add(value)


def register_named(name: str, value: Any) -> None:
    """Register ``value`` when ``name`` looks like the name of a secret (``HF_TOKEN``, ``AWS_SECRET_ACCESS_KEY``)."""
    if isinstance(value, str) and SECRET_NAME.search(name) and not NOT_SECRET_NAME.search(name):
        register(value)


def known() -> frozenset[str]:
    """Every registered secret value."""
    with _LOCK:
        return frozenset(_VALUES)


def forget_all() -> None:
    """Forget every registered value (tests)."""
    with _LOCK:
        _VALUES.clear()


def redact(text: str, extra: Iterable[str] = ()) -> str:
    """``text`` with every registered secret (and each of ``extra``) replaced by :data:`MASK`.

    Longer values are replaced first, so a secret that contains another is masked whole.
    """
    values = sorted({*known(), *(v for v in extra if v and len(v) >= MIN_LENGTH)}, key=len, reverse=True)
    for value in values:
        if value in text:
            text = text.replace(value, MASK)
    return text


def redact_data(data: Any) -> Any:
    """A copy of JSON-like ``data`` with every string (keys too) passed through :func:`redact`."""
    if isinstance(data, str):
        return redact(data)
    if isinstance(data, dict):
        return {redact_data(k): redact_data(v) for k, v in data.items()}
    if isinstance(data, (list, tuple)):
        return [redact_data(v) for v in data]
    return data


def _looks_like_aws_secret(text: str) -> bool:
    return any(c.isupper() for c in text) and any(c.islower() for c in text) and any(c.isdigit() for c in text)


def mask_refused(line: str) -> str:
    """``line``, a piece of user input echoed in an error (a ``.env`` line, a ``--set`` pair), with secrets masked:
    registered values, values that look like tokens or AWS keys (:data:`SECRET_VALUE`), and whatever follows a
    name that holds secrets (``HF_TOKEN hf_...``, ``AWS_SECRET_ACCESS_KEY: ...``), even when the line is refused
    before the value could be registered.
    """
    line = redact(line)
    lines = []
    for part in line.split("\n"):
        named = re.match(_NAMED_VALUE, part)
        if named is not None and SECRET_NAME.search(named["name"]) and not NOT_SECRET_NAME.search(named["name"]):
            part = named["head"] + MASK
        lines.append(part)
    line = "\n".join(lines)

    return re.sub(SECRET_VALUE, _mask_value, line)


def mask_error(message: str) -> str:
    """An error message with what it quotes of the user's input passed through :func:`mask_refused`, and values
    that look like secrets (:data:`SECRET_VALUE`) masked anywhere in it: a refused value is echoed, and it may be
    a token pasted into the wrong setting (``--set job.registry=hf_...``, ``HF_TOKEN hf_...`` as ``job.env``).
    """
    quoted = re.sub(
        r"'([^'\n]*)'|\"([^\"\n]*)\"",
        lambda m: f"'{mask_refused(m[1])}'" if m[1] is not None else f'"{mask_refused(m[2])}"',
        message,
    )
    return re.sub(SECRET_VALUE, _mask_value, quoted)


def _mask_value(match: re.Match[str]) -> str:
    found = match.group(0)
    if len(found) == 40 and not found.startswith("hf_") and (found[0] == "/" or not _looks_like_aws_secret(found)):
        return found  # a hex digest, a word, a path: not a secret access key
    return MASK
