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
import re
from collections.abc import Mapping
from typing import Any

from fsdp_sdk._fields import FrozenFields

__all__ = [
    "ImageTag",
    "KubernetesRelease",
    "Pin",
    "check_kubernetes_version",
    "control_plane_usd_per_hour",
    "default_kubernetes_version",
    "image_tag",
    "image_tags",
    "kubernetes_release",
    "kubernetes_releases",
    "pin",
    "pins",
    "supported_kubernetes_versions",
    "table",
    "table_date",
    "today",
    "versions_report",
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
    note: str = ""

    def image_ref(self, **placeholders: str) -> str:
        """``image:version``, with ``{placeholders}`` of the image filled (``eks_registry=...``)."""
        if not self.image:
            raise ValueError(f"pin {self.name!r} has no image")
        return f"{self.image.format(**placeholders)}:{self.version}"

    @property
    def current(self) -> bool:
        """Whether the pin was the newest release seen when it was checked."""
        return not self.latest or self.latest == self.version

    def state(self) -> str:
        """``current``, or ``newer available`` when the table saw a newer release than the pin."""
        return "current" if self.current else "newer available"


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
class ImageTag(FrozenFields):
    """One image tag fsdp-sdk renders, as ``fsdp_sdk/data/image_tags.json`` records it.

    ``image`` may hold ``{eks_registry}`` (the region's EKS registry); ``upstream`` is the chart (or manifest) of the
    component's own project and the tag it names; ``differs`` says why the tag is not the upstream one, and
    ``no_upstream`` why there is none to compare with.
    """

    image: str
    tag: str
    seen: str
    where: str
    pin: str = ""
    upstream: Mapping[str, str] = dataclasses.field(default_factory=dict)
    differs: str = ""
    no_upstream: str = ""
    note: str = ""

    def matches(self, reference: str) -> bool:
        """Whether ``reference`` (``repository:tag``) is this image and tag, any registry standing for a placeholder."""
        repository, _, tag = reference.rpartition(":")
        if tag != self.tag or "/" in tag:
            return False
        if "{" not in self.image:
            return repository == self.image
        pattern = re.escape(self.image).replace(re.escape("{eks_registry}"), r"[0-9]{12}\.dkr\.ecr\.[a-z0-9.-]+")
        return re.fullmatch(pattern, repository) is not None


@functools.cache
def image_tags() -> list[ImageTag]:
    """Every image tag of the table ``fsdp_sdk/data/image_tags.json``, parsed once per process."""
    with open(os.path.join(os.path.dirname(__file__), "data", "image_tags.json"), encoding="utf-8") as file:
        data: dict[str, Any] = json.load(file)
    return [ImageTag(**entry) for entry in data["images"]]


def image_tag(reference: str) -> ImageTag | None:
    """The table's entry for the image reference ``reference``, or None when the table has not seen that tag."""
    return next((entry for entry in image_tags() if entry.matches(reference)), None)


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


def table_date() -> datetime.date:
    """The day the table was checked as a whole: defaults that depend on the date (the Kubernetes version) use it."""
    return datetime.date.fromisoformat(str(table()["checked"]))


def kubernetes_releases() -> list[KubernetesRelease]:
    """The EKS Kubernetes calendar of the table, oldest first."""
    return [KubernetesRelease(**entry) for entry in table()["kubernetes"]]


def kubernetes_release(version: str) -> KubernetesRelease | None:
    """The calendar entry of ``version`` (``"1.35"``), or None when the table does not list it."""
    return next((r for r in kubernetes_releases() if r.version == version), None)


def supported_kubernetes_versions(on: datetime.date) -> list[str]:
    """The versions EKS creates clusters of on ``on`` (standard or extended support), oldest first."""
    return [r.version for r in kubernetes_releases() if r.state(on) != "ended"]


def default_kubernetes_version() -> str:
    """The newest version in EKS standard support on the table's date (:func:`table_date`)."""
    on = table_date()
    standard = [r for r in kubernetes_releases() if r.state(on) == "standard"]
    if not standard:
        raise RuntimeError(f"fsdp_sdk/data/pins.json lists no Kubernetes version in standard support on {on}")
    return max(standard, key=lambda r: tuple(int(p) for p in r.version.split("."))).version


def control_plane_usd_per_hour(version: str, on: datetime.date) -> float:
    """The EKS control plane's price per cluster-hour for ``version`` on ``on``: standard or extended support.

    A version the table does not list, or one past extended support, is priced at the standard rate: refusing it
    is the configuration's business, not the price's.
    """
    prices = table()["eks_control_plane_usd_per_hour"]
    release = kubernetes_release(version)
    state = release.state(on) if release else "standard"
    return float(prices["extended"] if state == "extended" else prices["standard"])


def today() -> datetime.date:
    """The date support states and prices are computed for when the caller passes none (the local date)."""
    return datetime.date.today()


def check_kubernetes_version(version: str, on: datetime.date) -> str | None:
    """Whether EKS creates a cluster of ``version`` on ``on``: ``None`` in standard support, a warning line in
    extended support (it costs more), and a :class:`~fsdp_sdk.errors.ConfigError` past extended support or for a
    version the EKS calendar does not list.
    """
    from fsdp_sdk.errors import ConfigError

    release = kubernetes_release(version)
    working = supported_kubernetes_versions(on)
    fix = f"set cluster.kubernetes_version to one EKS creates clusters of on {on}: {', '.join(reversed(working))}"
    if release is None:
        raise ConfigError("cluster.kubernetes_version", f"EKS offers no Kubernetes {version}", fix)
    state = release.state(on)
    if state == "ended":
        raise ConfigError(
            "cluster.kubernetes_version",
            f"Kubernetes {version} left EKS extended support on {release.end_of_extended}",
            fix,
        )
    if state == "extended":
        prices = table()["eks_control_plane_usd_per_hour"]
        return (
            f"Kubernetes {version} is in EKS extended support until {release.end_of_extended}: its control plane "
            f"costs ${float(prices['extended']):.2f}/h instead of ${float(prices['standard']):.2f}/h; "
            f"{default_kubernetes_version()} is in standard support"
        )
    return None


def versions_report(on: datetime.date) -> dict[str, Any]:
    """Every pin and every Kubernetes version of the table with its state on ``on`` (``fsdp-sdk versions``).

    A component is ``current`` or ``newer available`` (the table saw a newer release than the pin); a Kubernetes
    version is ``current`` (the newest in standard support), ``newer available`` (in standard support, a newer one
    too), ``in extended support`` or ``past end of life`` (EKS creates no cluster of it), its ``support`` the EKS
    state behind it (``standard``, ``extended``, ``ended``) with the control plane's price per hour on ``on``.
    """
    releases = kubernetes_releases()
    standard = [r.version for r in releases if r.state(on) == "standard"]
    newest = max(standard, key=lambda v: tuple(int(p) for p in v.split(".")), default=None)
    kubernetes = []
    for release in releases:
        state = release.state(on)
        said = {
            "standard": "current" if release.version == newest else "newer available",
            "extended": "in extended support",
            "ended": "past end of life",
        }[state]
        until = release.end_of_standard if state == "standard" else release.end_of_extended
        kubernetes.append(
            {
                "version": release.version,
                "state": said,
                "support": state,
                "until": until if state != "ended" else None,
                "released": release.released,
                "end_of_standard_support": release.end_of_standard,
                "end_of_extended_support": release.end_of_extended,
                "control_plane_usd_per_hour": control_plane_usd_per_hour(release.version, on)
                if state != "ended"
                else None,
                "checked": release.checked,
                "source": release.source,
            }
        )
    components = [
        {
            "name": p.name,
            "version": p.version,
            "latest": p.latest or p.version,
            "state": p.state(),
            "image": p.image,
            "api": p.api,
            "checked": p.checked,
            "source": p.source,
            "note": p.note,
        }
        for p in pins().values()
    ]
    return {
        "on": on.isoformat(),
        "table_checked": table_date().isoformat(),
        "default_kubernetes_version": default_kubernetes_version(),
        "components": components,
        "kubernetes": kubernetes,
        "kubernetes_note": str(table().get("kubernetes_note", "")),
        "eks_control_plane_usd_per_hour": dict(table()["eks_control_plane_usd_per_hour"]),
    }
