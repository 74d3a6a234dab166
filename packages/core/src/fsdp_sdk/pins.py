"""Every version fsdp-sdk pins, read from one dated table (``fsdp_sdk/data/pins.json``).

Renderers take images and versions from here (``pin("nvidia-device-plugin").image_ref()``); no other module
writes a version of a component down. Each entry records the date it was checked and where, and the newest
release seen on that date (``latest``), so ``fsdp-sdk versions`` can say which pins have moved on.
"""

from __future__ import annotations

import dataclasses
import datetime
import functools
import json
import os
from typing import Any

from fsdp_sdk._fields import FrozenFields

__all__ = [
    "KubernetesRelease",
    "Pin",
    "control_plane_usd_per_hour",
    "kubernetes_release",
    "kubernetes_releases",
    "pin",
    "pins",
    "table",
]


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
    # a plain file beside this module: importlib.resources would add zipfile and tempfile to the CLI's start-up
    with open(os.path.join(os.path.dirname(__file__), "data", "pins.json"), encoding="utf-8") as file:
        text = file.read()
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


@dataclasses.dataclass(frozen=True, eq=False, repr=False)
class KubernetesRelease(FrozenFields):
    """One Kubernetes minor version on EKS: when EKS released it and when its standard and extended support end."""

    version: str
    released: str
    end_of_standard: str
    end_of_extended: str
    checked: str
    source: str

    def state(self, on: datetime.date) -> str:
        """``standard``, ``extended`` or ``ended`` (past extended support: EKS creates no cluster of it) on ``on``."""
        if on <= datetime.date.fromisoformat(self.end_of_standard):
            return "standard"
        if on <= datetime.date.fromisoformat(self.end_of_extended):
            return "extended"
        return "ended"


def kubernetes_releases() -> list[KubernetesRelease]:
    """The EKS Kubernetes calendar of the table, oldest first."""
    return [KubernetesRelease(**entry) for entry in table()["kubernetes"]]


def kubernetes_release(version: str) -> KubernetesRelease | None:
    """The calendar entry of ``version`` (``"1.35"``), or None when the table does not list it."""
    return next((r for r in kubernetes_releases() if r.version == version), None)


def control_plane_usd_per_hour(version: str, on: datetime.date) -> float:
    """The EKS control plane's price per cluster-hour for ``version`` on ``on``: standard or extended support.

    A version the table does not list, or one past extended support, is priced at the standard rate: refusing it
    is the configuration's business, not the price's.
    """
    prices = table()["eks_control_plane_usd_per_hour"]
    release = kubernetes_release(version)
    state = release.state(on) if release else "standard"
    return float(prices["extended"] if state == "extended" else prices["standard"])
