"""Registries plugins fill by name (backends, instance types, settings sections), and their conflicts.

Each plugin's registration hook fills a registry of its own; the plugin manager then
merges it into the shared one (:meth:`NamedRegistry.merge`). Within one plugin a name
registered twice is a bug of that plugin (:class:`~fsdp_sdk.errors.PluginError`).
Across plugins a name claimed twice is a :class:`Conflict`: it is refused for every
claimant, so nobody silently gets another plugin's definition, while every other name
keeps working. The one exception is a name a built-in plugin registered: fsdp-sdk's
own definition is kept and the plugin's is ignored (the conflict is still reported).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Collection
from dataclasses import dataclass
from typing import Any, ClassVar, Generic, TypeVar

from fsdp_sdk._fields import FrozenFields
from fsdp_sdk.errors import PluginError

__all__ = ["Conflict", "NamedRegistry"]

T = TypeVar("T")


@dataclass(frozen=True, eq=False, repr=False)
class Conflict(FrozenFields):
    """A name that more than one plugin registered.

    :param kind: what the name names: ``backend``, ``instance type``, ``settings section``.
    :param name: the name.
    :param plugins: the plugins that registered it, in registration order (a plugin may appear twice).
    :param kept: the built-in plugin whose definition is kept; ``None`` when the name is refused for all.
    """

    kind: str
    name: str
    plugins: tuple[str, ...]
    kept: str | None = None

    @property
    def refused(self) -> tuple[str, ...]:
        """The plugins whose definition is not used."""
        return tuple(p for p in self.plugins if p != self.kept)

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready dict."""
        return {"kind": self.kind, "name": self.name, "plugins": list(self.plugins), "kept": self.kept}


class NamedRegistry(Generic[T]):
    """Entries by unique name, each with the plugin that registered it; conflicts recorded on :meth:`merge`.

    Subclasses add typed ``add`` methods that validate an entry and call :meth:`_claim`.
    """

    #: What an entry is, for messages (``instance type``).
    kind: ClassVar[str] = "entry"

    def __init__(self) -> None:
        self._entries: dict[str, T] = {}
        self._owners: dict[str, str] = {}
        self._conflicts: dict[str, Conflict] = {}
        #: Name of the plugin whose hook is running; set by the plugin manager for error messages.
        self.current_plugin: str | None = None

    def _claim(self, name: str, entry: T) -> None:
        """Store ``entry`` under ``name`` for :attr:`current_plugin`; a name already here is a :class:`PluginError`."""
        who = self.current_plugin or "?"
        if name in self._entries:
            raise PluginError(
                f"{self.kind} {name!r} from plugin {who} is already registered by plugin {self._owners[name]}; "
                f"uninstall one of the two plugins or rename the {self.kind}"
            )
        self._entries[name] = entry
        self._owners[name] = who

    def merge(self, other: NamedRegistry[T], *, keep: Collection[str] = ()) -> list[Conflict]:
        """Add the entries of ``other`` (what one plugin registered); a name both have becomes a conflict.

        :param other: a registry of the same kind, filled by one plugin.
        :param keep: plugins whose definition wins a conflict (the built-in ones); otherwise the name is
            refused for every plugin that registered it.
        :returns: the conflicts this merge created or extended.
        """
        changed: list[Conflict] = []
        for name, entry in other._entries.items():
            who = other._owners[name]
            conflict = self._conflicts.get(name)
            if conflict is not None:
                conflict = dataclasses.replace(conflict, plugins=(*conflict.plugins, who))
            elif name not in self._entries:
                self._entries[name] = entry
                self._owners[name] = who
                continue
            else:
                owner = self._owners[name]
                kept = owner if owner in keep else who if who in keep else None
                if kept is None:
                    del self._entries[name], self._owners[name]
                elif kept == who:
                    self._entries[name], self._owners[name] = entry, who
                conflict = Conflict(self.kind, name, (owner, who), kept)
            self._conflicts[name] = conflict
            changed.append(conflict)
        return changed

    @property
    def conflicts(self) -> list[Conflict]:
        """Every name more than one plugin registered, sorted by name."""
        return [self._conflicts[name] for name in sorted(self._conflicts)]

    def conflict(self, name: str) -> Conflict | None:
        """The conflict over ``name``, if plugins disagree about it."""
        return self._conflicts.get(name)

    def owner(self, name: str) -> str:
        """Name of the plugin that registered ``name``."""
        return self._owners[name]

    def names(self) -> list[str]:
        """Registered names, sorted."""
        return sorted(self._entries)

    def __contains__(self, name: object) -> bool:
        return name in self._entries

    def __len__(self) -> int:
        return len(self._entries)
