"""Plain-text rendering shared by the commands: aligned tables and key/value blocks."""

from __future__ import annotations

import json
import re
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


# A plain (unquoted) YAML scalar that no YAML 1.1 or 1.2 reader takes for anything but a string.
_PLAIN = re.compile(r"[A-Za-z_/][A-Za-z0-9_./@+-]*")
_RESERVED = {"y", "n", "yes", "no", "on", "off", "true", "false", "null", ".nan", ".inf"}


def to_yaml(data: Any, indent: str = "") -> str:
    """Block-style YAML of JSON-like data (dicts, lists, strings, numbers, booleans, None).

    ``config show`` prints with this rather than PyYAML, whose import alone costs
    the CLI's start-up as much as the rest of the command; every string that is not
    plainly a string is written as a JSON string, which YAML reads the same way.
    """
    lines: list[str] = []
    items = data.items() if isinstance(data, Mapping) else enumerate(data)
    for key, value in items:
        head = f"{indent}- " if not isinstance(data, Mapping) else f"{indent}{_scalar(str(key))}:"
        nested = isinstance(value, (Mapping, list, tuple)) and len(value) > 0
        if nested and isinstance(data, Mapping):
            lines.append(head)
            lines.append(to_yaml(value, indent + "  "))
        elif nested:
            lines.append(head.rstrip())
            lines.append(to_yaml(value, indent + "  "))
        else:
            sep = "" if not isinstance(data, Mapping) else " "
            lines.append(f"{head}{sep}{_scalar(value)}")
    return "\n".join(lines)


def to_yaml_documents(documents: Sequence[Any]) -> str:
    """Several documents as one multi-document YAML stream (``---`` between them), ending with a newline."""
    return "---\n".join(to_yaml(document) + "\n" for document in documents)


def _scalar(value: Any) -> str:
    if isinstance(value, (Mapping, list, tuple)):
        return "{}" if isinstance(value, Mapping) else "[]"
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float) and value != value:
        return ".nan"
    if isinstance(value, float) and value in (float("inf"), float("-inf")):
        return ".inf" if value > 0 else "-.inf"
    if isinstance(value, float):
        # YAML 1.1 readers (PyYAML) take a float only with a dot and a signed exponent: 1.0e-09, not 1e-09
        mantissa, e, exponent = repr(value).partition("e")
        mantissa = mantissa if "." in mantissa else mantissa + ".0"
        return mantissa + (e + (exponent if exponent[:1] in "+-" else "+" + exponent) if e else "")
    if isinstance(value, int):
        return str(value)
    text = str(value)
    if _PLAIN.fullmatch(text) and text.lower() not in _RESERVED:
        return text
    return json.dumps(text)
