"""Entry-point discovery for one group, without :mod:`importlib.metadata`.

The CLI looks for plugins on every start, ``--help`` included. Importing
:mod:`importlib.metadata` alone costs about 20 ms (it pulls in the email
parser), as much as starting click itself, so this module reads the
``entry_points.txt`` files of the ``*.dist-info`` and ``*.egg-info``
directories on ``sys.path`` directly. The semantics follow
:func:`importlib.metadata.entry_points`: the first distribution of a given
(normalised) name on the path wins; tests check both agree.

Reading those files costs a few milliseconds per start on a full environment
(one ``open`` per installed distribution), so what a directory holds is cached
in ``$XDG_CACHE_HOME/fsdp-sdk/entry-points.json`` (``~/.cache`` by default),
keyed by the directory's modification time: installing or removing a
distribution adds or deletes its metadata directory, which changes that time,
and the directory is read again. ``FSDP_SDK_NO_CACHE=1`` reads every time. An
unwritable cache directory only costs the reading.
"""

from __future__ import annotations

import importlib
import json
import os
import re
import sys
import time
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from fsdp_sdk._fields import FrozenFields

__all__ = ["EntryPoint", "entry_points"]

_SUFFIXES = (".dist-info", ".egg-info")


@dataclass(frozen=True, eq=False, repr=False)
class EntryPoint(FrozenFields):
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


#: A directory's distributions, in path order: (normalised name, name, version, entry_points.txt or None).
_Listing = list[tuple[str, str, str, str | None]]
_CACHE_VERSION = 1
#: Directories the cache remembers (``sys.path`` differs between environments and, with ``python -c``, by
#: working directory): the most recently read ones are kept.
_CACHE_DIRECTORIES = 64
_SETTLED_NS = 2_000_000_000


def _cache_file() -> str | None:
    if os.environ.get("FSDP_SDK_NO_CACHE", "") not in ("", "0"):
        return None
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return os.path.join(base, "fsdp-sdk", "entry-points.json")


def _read_cache(path: str | None) -> dict[str, Any]:
    if path is None:
        return {}
    try:
        with open(path, encoding="utf-8") as file:
            data = json.load(file)
    except (OSError, ValueError):
        return {}
    return data["dirs"] if isinstance(data, dict) and data.get("version") == _CACHE_VERSION else {}


def _write_cache(path: str, dirs: dict[str, Any]) -> None:
    try:
        os.makedirs(os.path.dirname(path), exist_ok=True)
        temporary = f"{path}.{os.getpid()}.tmp"
        text = json.dumps({"version": _CACHE_VERSION, "dirs": dirs})  # one shot: C encoder (json.dump is Python's)
        with open(temporary, "w", encoding="utf-8") as file:
            file.write(text)
        os.replace(temporary, path)  # atomic: a concurrent start reads the old cache or the new one
    except OSError:
        pass


def _list_directory(directory: str) -> _Listing:
    """Every distribution whose metadata directory is in ``directory``, in name order, with its entry points."""
    try:
        entries = sorted(os.scandir(directory or "."), key=lambda e: e.name)
    except OSError:
        return []
    listing: _Listing = []
    for entry in entries:
        if not entry.name.endswith(_SUFFIXES):
            continue
        name, version = _split_dir_name(entry.name.rsplit(".", 1)[0])
        try:
            with open(os.path.join(entry.path, "entry_points.txt"), encoding="utf-8") as file:
                text: str | None = file.read()
        except OSError:  # no entry points, or an egg-info file rather than a directory
            text = None
        listing.append((_normalise(name), name, version, text))
    return listing


def entry_points(group: str, path: Iterable[str] | None = None) -> list[EntryPoint]:
    """Every entry point of ``group`` declared by the distributions on ``path``.

    :param group: the entry-point group, e.g. ``fsdp_sdk``.
    :param path: directories to search; defaults to ``sys.path``.
    """
    cache_file = _cache_file()
    cached = _read_cache(cache_file)
    fresh: dict[str, Any] = {}
    changed = False
    seen: set[str] = set()
    found: list[EntryPoint] = []
    for directory in sys.path if path is None else path:
        key = os.path.abspath(directory or ".")
        try:
            mtime = os.stat(key).st_mtime_ns
        except OSError:
            continue
        hit = cached.get(key)
        if isinstance(hit, dict) and hit.get("mtime_ns") == mtime:
            listing = [(row[0], row[1], row[2], row[3]) for row in hit["listing"]]
            fresh[key] = hit
        else:
            listing = _list_directory(key)
            # A directory changed in the last seconds may change again within its timestamp's granularity
            # (file times tick with the kernel's clock): read it again next time rather than trust the time.
            if time.time_ns() - mtime > _SETTLED_NS:
                fresh[key] = {"mtime_ns": mtime, "listing": listing}
                changed = True
        for normalised, name, version, text in listing:
            if normalised in seen:
                continue
            seen.add(normalised)
            if text is not None:
                found += [EntryPoint(n, v, group, name, version) for n, v in _parse(text, group)]
    if cache_file is not None and changed:
        kept = {k: v for k, v in cached.items() if k not in fresh}
        kept.update(fresh)
        _write_cache(cache_file, dict(list(kept.items())[-_CACHE_DIRECTORIES:]))
    return found
