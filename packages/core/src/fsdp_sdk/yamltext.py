"""A small YAML writer for JSON-like data: what ``config show``, ``job render``, ``prereqs install --dry-run`` and
:meth:`fsdp_sdk.runner.DryRun.lines` print.

It is used instead of PyYAML, whose import alone costs the CLI's start-up as much as the rest of a command.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from typing import Any

__all__ = ["to_yaml", "to_yaml_documents"]

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
