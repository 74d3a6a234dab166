"""Generic machinery for nested dataclass configs: field docs, typed coercion, CLI flags.

A config is a dataclass whose fields are "sections" (dataclasses of plain fields).
Each plain field is typed with ``bool``, ``int``, ``float``, ``str``, a ``Literal``
of choices, or ``X | None``, and has a docstring: a string literal right under it,
read here from the source with ``ast`` (as tyro does), so ``--help`` shows it.
Torch-free on purpose.
"""

from __future__ import annotations

import dataclasses
import functools
import sys
import types
import typing
from typing import Any, Literal, Union

from .errors import ConfigError

_NONE_WORDS = ("none", "null", "auto", "")
_TRUE_WORDS = ("true", "1", "yes", "on")
_FALSE_WORDS = ("false", "0", "no", "off")


@functools.cache
def field_docs(cls: type) -> dict[str, str]:
    """Docstrings written under the fields of dataclass ``cls`` (empty string when missing)."""
    # ast/inspect are needed for help texts only: imported here to keep `import fsdp_trainer.config` cheap
    # (the SDK's CLI imports it to validate trainer settings).
    import ast
    import inspect
    import textwrap

    source = textwrap.dedent(inspect.getsource(cls))
    node = ast.parse(source).body[0]
    body = node.body if isinstance(node, ast.ClassDef) else []
    docs: dict[str, str] = {}
    for node, nxt in zip(body, [*body[1:], None], strict=True):
        if isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            doc = ""
            if isinstance(nxt, ast.Expr) and isinstance(nxt.value, ast.Constant) and isinstance(nxt.value.value, str):
                doc = inspect.cleandoc(nxt.value.value)
            docs[node.target.id] = doc
    return docs


class Section:
    """Base of the trainer's configuration dataclasses (``@dataclass(eq=False, repr=False)``): ``==`` and ``repr``
    from the fields, written once here rather than generated for each class. ``fsdp-sdk`` imports the trainer's
    configuration to check its settings on every command that has some, and generating those methods for each
    of its classes is a measurable part of that start-up."""

    __slots__ = ()

    def __eq__(self, other: object) -> bool:
        if other.__class__ is not self.__class__:
            return NotImplemented
        return all(getattr(self, f.name) == getattr(other, f.name) for f in dataclasses.fields(self) if f.compare)  # type: ignore[arg-type]

    __hash__ = None  # type: ignore[assignment]  # mutable, like a dataclass with eq=True

    def __repr__(self) -> str:
        shown = ", ".join(f"{f.name}={getattr(self, f.name)!r}" for f in dataclasses.fields(self) if f.repr)  # type: ignore[arg-type]
        return f"{type(self).__qualname__}({shown})"


@functools.cache
def field_types(cls: type) -> dict[str, Any]:
    """Resolved type hints of a dataclass's fields."""
    module = sys.modules[cls.__module__]
    return typing.get_type_hints(cls, globalns=vars(module))


def _split_optional(tp: Any) -> tuple[Any, bool]:
    if typing.get_origin(tp) in (Union, types.UnionType):
        args = [a for a in typing.get_args(tp) if a is not type(None)]
        if len(args) == 1 and len(typing.get_args(tp)) == 2:
            return args[0], True
    return tp, False


def type_label(tp: Any) -> str:
    """Short human label of a field type, for ``--help``."""
    inner, optional = _split_optional(tp)
    if typing.get_origin(inner) is Literal:
        label = "|".join(str(c) for c in typing.get_args(inner))
    else:
        label = getattr(inner, "__name__", str(inner))
    return f"{label}|none" if optional else label


def coerce(flag: str, tp: Any, value: Any) -> Any:
    """Convert ``value`` (a CLI string or a YAML/JSON scalar) to type ``tp``, or raise ConfigError naming ``flag``."""
    inner, optional = _split_optional(tp)
    if value is None or (optional and isinstance(value, str) and value.strip().lower() in _NONE_WORDS):
        if optional:
            return None
        raise ConfigError(f"{flag}: a value is required (got none)")
    if typing.get_origin(inner) is Literal:
        choices = typing.get_args(inner)
        text = str(value).strip()
        for choice in choices:
            if text == str(choice) or (isinstance(value, bool) and value is choice):
                return choice
        raise ConfigError(f"{flag}: {value!r} is not one of {', '.join(str(c) for c in choices)}")
    if inner is bool:
        if isinstance(value, bool):
            return value
        text = str(value).strip().lower()
        if text in _TRUE_WORDS:
            return True
        if text in _FALSE_WORDS:
            return False
        raise ConfigError(f"{flag}: {value!r} is not a boolean (use true or false)")
    if inner is int:
        if isinstance(value, bool):
            raise ConfigError(f"{flag}: {value!r} is not an integer")
        if isinstance(value, int):
            return value
        if isinstance(value, float) and value.is_integer():
            return int(value)
        try:
            return int(str(value).strip().replace("_", ""))
        except ValueError:
            raise ConfigError(f"{flag}: {value!r} is not an integer") from None
    if inner is float:
        if isinstance(value, bool):
            raise ConfigError(f"{flag}: {value!r} is not a number")
        try:
            return float(value)
        except (TypeError, ValueError):
            raise ConfigError(f"{flag}: {value!r} is not a number") from None
    if inner is str:
        if isinstance(value, (dict, list)):
            raise ConfigError(f"{flag}: expected a string, got {type(value).__name__}")
        return str(value)
    raise TypeError(f"unsupported config field type {tp!r} for {flag}")


def check(flag: str, tp: Any, value: Any) -> None:
    """Raise ConfigError naming ``flag`` when ``value`` does not have type ``tp`` (used on dataclasses built in code)."""
    inner, optional = _split_optional(tp)
    if value is None:
        if not optional:
            raise ConfigError(f"{flag}: a value is required (got none)")
        return
    if typing.get_origin(inner) is Literal:
        choices = typing.get_args(inner)
        if value not in choices:
            raise ConfigError(f"{flag}: {value!r} is not one of {', '.join(str(c) for c in choices)}")
        return
    ok = {
        bool: isinstance(value, bool),
        int: isinstance(value, int) and not isinstance(value, bool),
        float: isinstance(value, (int, float)) and not isinstance(value, bool),
        str: isinstance(value, str),
    }[inner]
    if not ok:
        raise ConfigError(f"{flag}: {value!r} is not a {inner.__name__}")


def unknown_option(flag: str, known: list[str]) -> ConfigError:
    """The error for an option that does not exist, with the closest known flag as a hint."""
    import difflib

    close = difflib.get_close_matches(flag, known, n=1)
    if close:
        hint = f" (did you mean {close[0]}?)"
    elif "." not in flag.removeprefix("--"):  # a section nobody has: say which exist
        sections = sorted({k.removeprefix("--").split(".", 1)[0] for k in known})
        hint = f" (the sections are {', '.join(sections)})"
    else:
        hint = ""
    return ConfigError(f"{flag}: unknown option{hint}")


def parse_overrides(overrides: list[str]) -> list[tuple[str, str]]:
    """Split ``["--a.b", "1", "--c.d=x"]`` into ``[("a.b", "1"), ("c.d", "x")]``."""
    pairs: list[tuple[str, str]] = []
    i = 0
    while i < len(overrides):
        arg = overrides[i]
        if not arg.startswith("--") or len(arg) == 2:
            raise ConfigError(f"{arg}: expected an option like --section.field VALUE")
        key = arg[2:]
        if "=" in key:
            key, value = key.split("=", 1)
            i += 1
        else:
            if i + 1 >= len(overrides):
                raise ConfigError(f"--{key}: missing value")
            value = overrides[i + 1]
            i += 2
        if "." not in key:
            raise ConfigError(f"--{key}: expected --section.field (e.g. --train.steps 10)")
        pairs.append((key, value))
    return pairs


def is_section(tp: Any) -> bool:
    """True when a field's type is a nested dataclass."""
    return dataclasses.is_dataclass(tp)


def sections(cls: type) -> list[tuple[str, type]]:
    """(attribute name, dataclass) of each section of a top-level config class."""
    hints = field_types(cls)
    return [(f.name, hints[f.name]) for f in dataclasses.fields(cls) if is_section(hints[f.name])]
