"""The pluggy markers of fsdp-sdk's hooks, apart from the hook specifications (:mod:`fsdp_sdk.hookspecs`, which
name the types of every layer): a module that implements a hook imports its marker from here (or, as plugins do,
``fsdp_sdk.hookimpl`` / ``fsdp_sdk.hookspecs.hookimpl``, the same object) without reaching up to those types."""

from __future__ import annotations

import pluggy

__all__ = ["PROJECT_NAME", "hookimpl", "hookspec"]

#: The pluggy project name; also the entry-point group third-party plugins use.
PROJECT_NAME = "fsdp_sdk"

hookspec = pluggy.HookspecMarker(PROJECT_NAME)
#: Decorator for plugin hook implementations (also exported as ``fsdp_sdk.hookimpl``).
hookimpl = pluggy.HookimplMarker(PROJECT_NAME)
