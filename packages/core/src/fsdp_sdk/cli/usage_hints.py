"""Usage errors that say what the user meant: a trainer option given among the command's own options.

Imported only when a command line is refused, so start-up does not pay for it.
"""

from __future__ import annotations

import shlex
from collections.abc import Sequence

import click

__all__ = ["is_trainer_option", "misplaced_trainer_option_hint"]

#: The name of the ``nargs=-1`` argument of commands that take trainer options after ``--``.
TRAINER_ARGS_PARAM = "trainer_args"


def is_trainer_option(arg: str) -> bool:
    """Whether ``arg`` is written like a trainer option: ``--section.field``, ``--section.field=VALUE``, ``--auto``."""
    if not arg.startswith("--") or arg == "--":
        return False
    key = arg[2:].split("=", 1)[0]
    return key == "auto" or (key.count(".") >= 1 and all(part.strip() for part in key.split(".")))


def _takes_trainer_args(command: click.Command) -> bool:
    return any(isinstance(p, click.Argument) and p.name == TRAINER_ARGS_PARAM for p in command.params)


def _split_misplaced(args: Sequence[str]) -> tuple[list[str], list[tuple[str, str | None]]]:
    """``args`` before ``--`` without the trainer options among them, and those options with their values."""
    end = args.index("--") if "--" in args else len(args)
    kept: list[str] = []
    moved: list[tuple[str, str | None]] = []
    i = 0
    while i < end:
        arg = args[i]
        if is_trainer_option(arg):
            if "=" in arg or arg == "--auto" or i + 1 >= end:
                moved.append((arg, None))
                i += 1
            else:
                moved.append((arg, args[i + 1]))
                i += 2
            continue
        kept.append(arg)
        i += 1
    return kept, moved


def misplaced_trainer_option_hint(error: click.NoSuchOption, args: Sequence[str], prog_name: str) -> str | None:
    """The one-line error for a trainer option given where only the command's options go, with the corrected
    command, or ``None`` when ``error`` is about something else.

    :param error: click's refusal.
    :param args: the whole command line after the program's name, as typed.
    :param prog_name: the program's name (``fsdp-sdk``).
    """
    if error.ctx is None or not is_trainer_option(error.option_name):
        return None
    kept, moved = _split_misplaced(args)
    if not moved:
        return None
    option = error.option_name
    if _takes_trainer_args(error.ctx.command):
        rest = list(args[args.index("--") + 1 :]) if "--" in args else []
        flat = [part for arg, value in moved for part in (arg, value) if part is not None]
        corrected = shlex.join([prog_name, *kept, "--", *flat, *rest])
        return f"{option} is a trainer option: trainer options go after '--', as in: {corrected}"
    sets: list[str] = []
    for arg, value in moved:
        key, sep, inline = arg[2:].partition("=")
        if key == "auto" and not sep:
            sets += ["--set", "auto.enabled=true"]
        else:
            sets += ["--set", f"{key}={inline if sep else (value or 'VALUE')}"]
    corrected = shlex.join([prog_name, *kept, *sets])
    return (
        f"{option} is a trainer option: '{error.ctx.command_path}' takes it as --set section.field=VALUE: {corrected}"
    )
