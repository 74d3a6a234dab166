"""Entry-point discovery for one group, without :mod:`importlib.metadata`.

The CLI looks for plugins on every start, ``--help`` included. Importing
:mod:`importlib.metadata` alone costs about 20 ms (it pulls in the email
parser), as much as starting click itself, so this module reads the
``entry_points.txt`` files of the ``*.dist-info`` and ``*.egg-info``
directories on ``sys.path`` directly. The semantics follow
:func:`importlib.metadata.entry_points`: the first distribution of a given
(normalised) name on the path wins; tests check both agree.
"""

from __future__ import annotations

import importlib
import os
import re
import sys
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

__all__ = ["EntryPoint", "entry_points"]

_SUFFIXES = (".dist-info", ".egg-info")


@dataclass(frozen=True)
class EntryPoint:
    """One entry point: ``name = module:attribute`` in ``group``, declared by a distribution.

    :param name: the entry point's name.
    :param value: ``module`` or ``module:attribute`` (extras stripped).
    :param group: its group.
    :param distribution: the declaring distribution's name, as its metadata directory spells it.
    :param version: that distribution's version.
    """

    name: str
    value: str
    group: str
    distribution: str
    version: str

    def load(self) -> Any:
        """Import the module and return the object the entry point names."""
        module_name, _, attribute = self.value.partition(":")
        obj: Any = importlib.import_module(module_name.strip())
        for part in filter(None, attribute.strip().split(".")):
            obj = getattr(obj, part)
        return obj


def _normalise(name: str) -> str:
    return re.sub(r"[-_.]+", "_", name).lower()


def _split_dir_name(stem: str) -> tuple[str, str]:
    # "fsdp_sdk-0.1.0" or "pkg-1.0-py3.11" (egg-info) -> (name, version)
    parts = stem.split("-")
    return parts[0], parts[1] if len(parts) > 1 else ""


def _parse(text: str, group: str) -> list[tuple[str, str]]:
    """``(name, value)`` pairs of ``[group]`` in an entry_points.txt (INI syntax)."""
    pairs, inside = [], False
    for raw in text.splitlines():
        line = raw.strip()
        if not line or line[0] in "#;":
            continue
        if line.startswith("[") and line.endswith("]"):
            inside = line[1:-1].strip() == group
            continue
        if inside and "=" in line:
            name, _, value = line.partition("=")
            pairs.append((name.strip(), value.split("[", 1)[0].strip()))
    return pairs


def entry_points(group: str, path: Iterable[str] | None = None) -> list[EntryPoint]:
    """Every entry point of ``group`` declared by the distributions on ``path``.

    :param group: the entry-point group, e.g. ``fsdp_sdk``.
    :param path: directories to search; defaults to ``sys.path``.
    """
    seen: set[str] = set()
    found: list[EntryPoint] = []
    for directory in sys.path if path is None else path:
        try:
            entries = sorted(os.scandir(directory or "."), key=lambda e: e.name)
        except OSError:
            continue
        for entry in entries:
            if not entry.name.endswith(_SUFFIXES):
                continue
            name, version = _split_dir_name(entry.name.rsplit(".", 1)[0])
            key = _normalise(name)
            if key in seen:
                continue
            seen.add(key)
            try:
                with open(os.path.join(entry.path, "entry_points.txt"), encoding="utf-8") as file:
                    text = file.read()
            except OSError:  # no entry points, or an egg-info file rather than a directory
                continue
            found += [EntryPoint(n, v, group, name, version) for n, v in _parse(text, group)]
    return found
