"""``==``, ``repr`` and ``hash`` written once for the dataclasses the CLI builds on every start.

``@dataclass`` generates each of these methods from source text for every class (``exec`` of a new function);
for the few dozen classes imported on each start of ``fsdp-sdk`` that is a measurable part of its start-up (see
bench/reports/2026-12-02-cpu-cli-startup.md). A class declared ``@dataclass(eq=False, repr=False)`` (with
``frozen=True`` where it is frozen) deriving from :class:`Fields` or :class:`FrozenFields` behaves as the generated
methods would: equal when of the same class with equal compared fields, shown with its ``repr`` fields, hashable
when frozen.
"""

from __future__ import annotations

import dataclasses
from typing import Any

__all__ = ["Fields", "FrozenFields"]


class Fields:
    """``==`` and ``repr`` from the dataclass fields; unhashable, as a mutable dataclass is."""

    __slots__ = ()

    def _compared(self) -> tuple[Any, ...]:
        return tuple(getattr(self, f.name) for f in dataclasses.fields(self) if f.compare)  # type: ignore[arg-type]

    def __eq__(self, other: object) -> bool:
        if other.__class__ is not self.__class__:
            return NotImplemented
        return self._compared() == other._compared()

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        parts = [f"{f.name}={getattr(self, f.name)!r}" for f in dataclasses.fields(self) if f.repr]  # type: ignore[arg-type]
        return type(self).__qualname__ + "(" + ", ".join(parts) + ")"


class FrozenFields(Fields):
    """:class:`Fields` for frozen dataclasses: hashable by the compared fields."""

    __slots__ = ()

    def __hash__(self) -> int:  # type: ignore[override]  # Fields: unhashable, as mutable dataclasses are
        return hash(self._compared())
