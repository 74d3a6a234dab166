"""Plain-text rendering shared by the commands: aligned tables and key/value blocks."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import click


def table(headers: Sequence[str], rows: Sequence[Sequence[Any]]) -> str:
    """Columns aligned on the widest cell; ``None`` shows as ``-``."""
    cells = [[("-" if value is None else str(value)) for value in row] for row in rows]
    widths = [max([len(h), *(len(row[i]) for row in cells)]) for i, h in enumerate(headers)]
    lines = ["  ".join(h.upper().ljust(w) for h, w in zip(headers, widths, strict=True)).rstrip()]
    lines += ["  ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)).rstrip() for row in cells]
    return "\n".join(lines)


def key_values(data: Mapping[str, Any], indent: str = "") -> str:
    """``key: value`` lines; nested mappings are indented."""
    lines = []
    for key, value in data.items():
        if isinstance(value, Mapping):
            lines.append(f"{indent}{key}:")
            if value:
                lines.append(key_values(value, indent + "  "))
        else:
            lines.append(f"{indent}{key}: {'-' if value is None else value}")
    return "\n".join(lines)


def echo_status(status: Any) -> None:
    """Print a :class:`~fsdp_sdk.backends.base.ClusterStatus` as text."""
    data = status.to_dict()
    click.echo(key_values(data))
