"""Plain-text rendering shared by the commands: aligned tables and key/value blocks (the YAML writer, shared with
the library, is :mod:`fsdp_sdk.yamltext`)."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

import click

from fsdp_sdk.yamltext import to_yaml, to_yaml_documents

__all__ = ["echo_status", "key_values", "table", "to_yaml", "to_yaml_documents"]


def table(headers: Sequence[str], rows: Sequence[Sequence[Any]]) -> str:
    """Columns aligned on the widest cell; ``None`` shows as ``-``."""
    cells = [[("-" if value is None else str(value)) for value in row] for row in rows]
    widths = [max([len(h), *(len(row[i]) for row in cells)]) for i, h in enumerate(headers)]
    lines = ["  ".join(h.upper().ljust(w) for h, w in zip(headers, widths, strict=True)).rstrip()]
    lines += ["  ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)).rstrip() for row in cells]
    return "\n".join(lines)


def _is_rows(value: Any) -> bool:
    return isinstance(value, list) and bool(value) and all(isinstance(v, Mapping) for v in value)


def key_values(data: Mapping[str, Any], indent: str = "") -> str:
    """``key: value`` lines; nested mappings are indented, lists of mappings shown as tables, lists of strings one
    per line."""
    lines = []
    for key, value in data.items():
        if isinstance(value, Mapping):
            lines.append(f"{indent}{key}:")
            if value:
                lines.append(key_values(value, indent + "  "))
        elif _is_rows(value):
            lines.append(f"{indent}{key}:")
            headers = list(value[0])
            rows = [[row.get(h) for h in headers] for row in value]
            lines += [indent + "  " + line for line in table(headers, rows).splitlines()]
        elif isinstance(value, list) and value and all(isinstance(v, str) for v in value):
            lines.append(f"{indent}{key}:")
            lines += [f"{indent}  - {v}" for v in value]
        else:
            lines.append(f"{indent}{key}: {'-' if value is None else value}")
    return "\n".join(lines)


def echo_status(status: Any, *, as_json: bool = False, dry_run: bool = False) -> None:
    """Print a :class:`~fsdp_sdk.backends.base.ClusterStatus`: JSON, or text (noting a dry run)."""
    data = status.to_dict()
    if as_json:
        click.echo(json.dumps(data, indent=2, default=str))
        return
    click.echo(key_values({k: v for k, v in data.items() if v or k != "details"}))  # no empty "details:" line
    if dry_run:
        click.echo("dry run: nothing changed")
