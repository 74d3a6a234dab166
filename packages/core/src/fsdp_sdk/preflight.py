"""Preflight checks: what ``up`` and ``run`` verify before they start anything.

Checks come from plugins through the ``fsdp_sdk_preflight`` hook; each returns
:class:`PreflightResult` records. :func:`raise_for_failures` turns failed
``error`` checks into one :class:`~fsdp_sdk.errors.PreflightError`.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

from fsdp_sdk._fields import FrozenFields
from fsdp_sdk.errors import PreflightError

__all__ = ["PreflightResult", "raise_for_failures"]


@dataclass(frozen=True, eq=False, repr=False)
class PreflightResult(FrozenFields):
    """The outcome of one preflight check.

    :param check: short name of the check (``etcd``, ``aws-credentials``...).
    :param ok: whether the check passed.
    :param message: what was found, one line.
    :param fix: what to do when it failed, one line.
    :param severity: ``error`` stops the action when the check fails; ``warning`` is only shown.
    :param suggested: values for configuration fields the user left unset, by dotted path, that the check
        found (``{"cluster.availability_zones": ["us-west-2a", "us-west-2b"]}``); the client fills them in
        before planning, recording the check as their source.
    """

    check: str
    ok: bool
    message: str
    fix: str | None = None
    severity: Literal["error", "warning"] = "error"
    suggested: Mapping[str, Any] = field(default_factory=dict)

    @property
    def blocking(self) -> bool:
        """Whether this result stops the action."""
        return not self.ok and self.severity == "error"

    def line(self) -> str:
        """The result as one line for the terminal."""
        mark = "ok" if self.ok else self.severity
        text = f"[{mark}] {self.check}: {self.message}"
        if not self.ok and self.fix:
            text += f"; {self.fix}"
        return text

    def to_dict(self) -> dict[str, object]:
        """A JSON-ready dict."""
        data: dict[str, object] = {
            "check": self.check,
            "ok": self.ok,
            "message": self.message,
            "fix": self.fix,
            "severity": self.severity,
        }
        if self.suggested:
            data["suggested"] = dict(self.suggested)
        return data


def raise_for_failures(results: Iterable[PreflightResult]) -> None:
    """Raise :class:`~fsdp_sdk.errors.PreflightError` (exit status 2) naming every blocking failure, if any.

    :param results: the results of all preflight checks.
    """
    blocking = [r for r in results if r.blocking]
    if blocking:
        raise PreflightError("preflight failed: " + " | ".join(r.line() for r in blocking))
