"""The conversions: each setting, as read from any source, converted to its field's type and checked
(:func:`fsdp_sdk.config.model._apply` stores it).

A bad value raises a one-line :class:`~fsdp_sdk.errors.ConfigError` naming the setting as the user wrote it
(``NUM_WORKERS``, ``job.num_workers``, ``--nodes``) and where it came from.
"""

from __future__ import annotations

import dataclasses
import functools
import os
import re
import types
import typing
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any, Literal

from fsdp_sdk import secrets
from fsdp_sdk.config.sections import Origin, Secret, Setting
from fsdp_sdk.errors import ConfigError, FsdpSdkError

__all__ = ["KNOWN_PLUGIN_SECTIONS", "NONE_WORDS"]


#: Sections of plugins the SDK knows of, with the distribution that provides them.
KNOWN_PLUGIN_SECTIONS = {
    "eksctl": "fsdp-sdk-eksctl",
    "terraform": "fsdp-sdk-terraform",
    "monitoring": "fsdp-sdk-observability",
}


def close_matches(word: str, possibilities: Iterable[str], n: int = 1, cutoff: float = 0.6) -> list[str]:
    """``difflib.get_close_matches``, imported only for errors and warnings: not on the start-up path."""
    import difflib

    return difflib.get_close_matches(word, list(possibilities), n=n, cutoff=cutoff)


def _unknown_key(key: str, known: list[str], source: str) -> ConfigError:
    section = key.split(".", 1)[0]
    installed = {k.split(".", 1)[0] for k in known}
    if section in KNOWN_PLUGIN_SECTIONS and section not in installed:
        package = KNOWN_PLUGIN_SECTIONS[section]
        return ConfigError(
            key,
            f"is a setting of the {package} plugin, which is not installed",
            f"pip install {package}",
            source=source,
        )
    close = close_matches(key, known, n=1)
    fix = f"did you mean {close[0]}?" if close else f"known keys: {', '.join(known)}"
    return ConfigError(key, "unknown setting", fix, source=source)


# --------------------------------------------------------------------- conversion


@functools.cache
def _field_types(cls: type) -> dict[str, Any]:
    return typing.get_type_hints(cls)


@functools.cache
def _field_names(cls: type) -> tuple[str, ...]:
    return tuple(f.name for f in dataclasses.fields(cls))


@functools.cache
def _field_metadata(cls: type, name: str) -> Mapping[str, Any]:
    return {f.name: f.metadata for f in dataclasses.fields(cls)}[name]


def _register_secrets(setting: Setting) -> None:
    """Remember the values of secret-named settings before they are converted (a refused one is masked too)."""
    value = setting.value
    for name in (setting.path, setting.origin.name):
        secrets.register_named(name, value)
    if isinstance(value, Mapping):
        for key, item in value.items():
            secrets.register_named(str(key), item)
    elif isinstance(value, str) and setting.path.endswith(".env"):
        for pair in value.split(","):
            key, _, item = pair.partition("=")
            secrets.register_named(key.strip(), item.strip())


def _show(value: Any) -> str:
    return repr(value) if isinstance(value, str) else str(value)


_TRUE = {"true", "yes", "on", "1"}
_FALSE = {"false", "no", "off", "0"}
#: Words an optional setting reads as "unset" (the trainer's coercer reads the same ones: ``auto`` lets the SDK or the
#: trainer choose).
NONE_WORDS = ("", "none", "null", "auto")


def _convert(value: Any, tp: Any, origin: Origin) -> Any:
    """Convert ``value`` to type ``tp`` or raise a ConfigError naming ``origin``."""
    name, source = origin.name, origin.source

    def fail(problem: str, fix: str) -> ConfigError:
        return ConfigError(name, f"{_show(value)} {problem}", fix, source=source)

    args = typing.get_args(tp)
    if typing.get_origin(tp) in (typing.Union, types.UnionType):
        inner = [a for a in args if a is not type(None)]
        if value is None or (isinstance(value, str) and value.strip().lower() in NONE_WORDS):
            return None
        return _convert(value, inner[0], origin)
    if tp is str:
        if isinstance(value, str):
            return value
        if isinstance(value, int) and not isinstance(value, bool):
            return str(value)
        raise fail("is not a string", f'write {name} as text in quotes, e.g. "{value}"')
    if tp is bool:
        if isinstance(value, bool):
            return value
        if isinstance(value, (str, int)) and str(value).strip().lower() in _TRUE | _FALSE:
            return str(value).strip().lower() in _TRUE
        raise fail("is not a boolean", f"set {name} to true or false")
    if tp is int:
        if isinstance(value, int) and not isinstance(value, bool):
            return value
        if isinstance(value, float) and value.is_integer():
            return int(value)
        if isinstance(value, str) and re.fullmatch(r"\s*[-+]?\d+(_\d+)*\s*", value):
            return int(value.replace("_", ""))
        raise fail("is not an integer", f"set {name} to a whole number like 2")
    if tp is float:
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            return float(value)
        try:
            return float(value)
        except (TypeError, ValueError):
            raise fail("is not a number", f"set {name} to a number like 0.5") from None
    if tp is Path:
        if isinstance(value, (str, os.PathLike)) and str(value):
            return Path(value).expanduser()
        raise fail("is not a path", f"set {name} to a directory path")
    if tp is Secret:
        if isinstance(value, Secret):
            return value
        if isinstance(value, str):
            return Secret(value)
        raise ConfigError(name, "is not a string", f"set {name} to the token text", source=source)
    if typing.get_origin(tp) is Literal:
        if isinstance(value, str) and value.strip() in args:
            return value.strip()
        raise fail("is not one of " + ", ".join(args), f"set {name} to one of: {', '.join(args)}")
    if typing.get_origin(tp) is list:
        if isinstance(value, str):
            return [item.strip() for item in value.split(",") if item.strip()]
        if isinstance(value, (list, tuple)) and all(isinstance(v, (str, int)) for v in value):
            return [str(v) for v in value]
        raise fail("is not a list of strings", f"write {name} as a list, or as comma-separated text (a,b)")
    if typing.get_origin(tp) is dict:
        if isinstance(value, Mapping):
            return {str(k): "" if v is None else str(v) for k, v in value.items()}
        if isinstance(value, str):
            pairs = [item for item in value.split(",") if item.strip()]
            if all("=" in item for item in pairs):
                return dict(item.strip().split("=", 1) for item in pairs)
        raise fail("is not a mapping", f"write {name} as a mapping, or as KEY=VALUE pairs separated by commas")
    raise FsdpSdkError(f"{name}: no conversion to {tp!r}")  # a field type this module does not handle: a bug
