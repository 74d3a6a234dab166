"""``--script PATH`` and ``--module pkg.mod``: your own training code instead of the built-in trainer
(``run``, ``launch``, ``job render``, ``job submit``; see :mod:`fsdp_sdk.user_code`)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

import click

from fsdp_sdk.cli.options import setting_option

F = TypeVar("F", bound=Callable[..., Any])

__all__ = ["code_options"]


def code_options(function: F) -> F:
    """The two options; what follows ``--`` is then your code's arguments (``code.args``)."""
    options = [
        setting_option(
            "--script",
            path="code.script",
            metavar="PATH",
            type=click.Path(dir_okay=True),
            help="Run your own training script on every rank instead of the built-in trainer (code.script); "
            "what follows -- are its arguments. It gets the rendezvous, FSDP_SDK_CHECKPOINT_DIR and "
            "FSDP_SDK_OUTPUT_DIR; on a cluster its directory travels as an image layer (code.dir).",
        ),
        setting_option(
            "--module",
            path="code.module",
            metavar="PKG.MOD",
            help="Run your own module (python -m PKG.MOD) on every rank instead of the built-in trainer (code.module).",
        ),
    ]
    for option in reversed(options):
        function = option(function)
    return function
