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

__all__ = ["MASK", "SECRET_NAME", "forget_all", "known", "redact", "redact_data", "register"]

#: What a secret is replaced by.
MASK = "**********"
#: Names of variables and settings that hold secrets.
SECRET_NAME = re.compile(
    r"TOKEN|SECRET|PASSWORD|PASSWD|API_?KEY|ACCESS_?KEY|CREDENTIAL|PRIVATE_?KEY|SESSION_?KEY", re.IGNORECASE
)
#: Names that match :data:`SECRET_NAME` but hold the *name* of a Kubernetes Secret, not a secret.
NOT_SECRET_NAME = re.compile(r"(^|[._])HF_TOKEN_SECRET$", re.IGNORECASE)
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
