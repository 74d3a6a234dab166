"""Every version fsdp-sdk pins, read from one dated table (``fsdp_sdk/data/pins.json``).

Renderers take images and versions from here (``pin("nvidia-device-plugin").image_ref()``); no other module
writes a version of a component down. Each entry records the date it was checked and where, and the newest
release seen on that date (``latest``), so ``fsdp-sdk versions`` can say which pins have moved on.
"""

from __future__ import annotations

import dataclasses
import functools
import json
from importlib import resources
from typing import Any

from fsdp_sdk._fields import FrozenFields

__all__ = ["Pin", "pin", "pins", "table"]


@dataclasses.dataclass(frozen=True, eq=False, repr=False)
class Pin(FrozenFields):
    """One pinned component: its version, image (when it runs as a container), and when and where it was checked."""

    name: str
    version: str
    checked: str
    source: str
    latest: str = ""
    image: str = ""
    api: str = ""

    def image_ref(self, **placeholders: str) -> str:
        """``image:version``, with ``{placeholders}`` of the image filled (``eks_registry=...``)."""
        if not self.image:
            raise ValueError(f"pin {self.name!r} has no image")
        return f"{self.image.format(**placeholders)}:{self.version}"

    @property
    def current(self) -> bool:
        """Whether the pin was the newest release seen when it was checked."""
        return not self.latest or self.latest == self.version


@functools.cache
def table() -> dict[str, Any]:
    """The raw table, parsed once per process."""
    text = resources.files("fsdp_sdk").joinpath("data/pins.json").read_text(encoding="utf-8")
    data: dict[str, Any] = json.loads(text)
    return data


@functools.cache
def pins() -> dict[str, Pin]:
    """Every pinned component by name."""
    fields = {f.name for f in dataclasses.fields(Pin)}
    return {
        name: Pin(name=name, **{k: v for k, v in entry.items() if k in fields})
        for name, entry in table()["components"].items()
    }


def pin(name: str) -> Pin:
    """The pin called ``name``; a ``KeyError`` naming the known ones for a name the table lacks (a bug)."""
    try:
        return pins()[name]
    except KeyError:
        raise KeyError(f"no pin {name!r} in fsdp_sdk/data/pins.json (known: {', '.join(sorted(pins()))})") from None
