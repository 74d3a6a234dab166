"""``fsdp-sdk completion``: shell completion, installed with one command.

``install`` writes click's completion script for the shell to a file
(``$XDG_DATA_HOME/fsdp-sdk/completion.<shell>``; for fish, its autoloaded
``~/.config/fish/completions/fsdp-sdk.fish``) and adds one line that sources it to
the shell's rc file (``~/.bashrc``, ``${ZDOTDIR:-~}/.zshrc``). Sourcing a file keeps
the shell's start-up free of a ``fsdp-sdk`` start; running ``install`` again
rewrites the file and keeps one line. Completion itself runs the CLI with
``_FSDP_SDK_COMPLETE`` set: backends, instance types, presets and local run ids
complete.
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING

import click

from fsdp_sdk.cli.options import debug_option

if TYPE_CHECKING:
    from pathlib import Path

__all__ = ["SHELLS", "completion", "completion_script", "install_completion"]

#: Shells whose completion click writes.
SHELLS = ("bash", "zsh", "fish")
#: The environment variable click's completion scripts set when they call the CLI.
COMPLETE_VAR = "_FSDP_SDK_COMPLETE"
#: Ends the line ``install`` adds to an rc file, so running it again finds (and replaces) that line.
MARKER = "# fsdp-sdk shell completion"


def completion_script(shell: str) -> str:
    """Click's completion script of ``fsdp-sdk`` for ``shell`` (one of :data:`SHELLS`)."""
    from click.shell_completion import get_completion_class

    from fsdp_sdk.cli import cli

    completer = get_completion_class(shell)
    if completer is None:  # pragma: no cover - SHELLS are click's own
        raise click.BadParameter(f"{shell!r} has no completion; use one of {', '.join(SHELLS)}")
    return completer(cli, {}, "fsdp-sdk", COMPLETE_VAR).source()


def _shell(given: str | None) -> str:
    if given:
        return given
    login = os.path.basename(os.environ.get("SHELL", ""))
    if login in SHELLS:
        return login
    raise click.UsageError(
        f"cannot tell which shell to complete from $SHELL ({login or 'not set'}); give --shell {'|'.join(SHELLS)}"
    )


def _home() -> Path:
    from pathlib import Path  # not at the top: 'fsdp-sdk --help' imports this module

    return Path(os.path.expanduser("~"))


def _targets(shell: str) -> tuple[Path, Path | None]:
    """Where the script goes and the rc file that sources it (``None``: the shell loads the script by itself)."""
    from pathlib import Path

    if shell == "fish":
        config = Path(os.environ.get("XDG_CONFIG_HOME") or _home() / ".config")
        return config / "fish" / "completions" / "fsdp-sdk.fish", None
    data = Path(os.environ.get("XDG_DATA_HOME") or _home() / ".local" / "share")
    script = data / "fsdp-sdk" / f"completion.{shell}"
    rc = Path(os.environ.get("ZDOTDIR") or _home()) / ".zshrc" if shell == "zsh" else _home() / ".bashrc"
    return script, rc


def _rc_line(shell: str, script: Path) -> str:
    quoted = str(script).replace("'", "'\\''")
    source = f"[ -f '{quoted}' ] && . '{quoted}'"
    if shell == "zsh":  # click's zsh script registers itself with compdef, which compinit defines
        source = f"(( $+functions[compdef] )) || {{ autoload -Uz compinit && compinit; }}; {source}"
    return f"{source}  {MARKER}"


def install_completion(shell: str) -> list[str]:
    """Install completion for ``shell``: write the script, add the line that sources it; what changed, as lines.

    Idempotent: an rc file that already has the line is left as it is; one with an older line of this kind has
    that line replaced.
    """
    from fsdp_sdk.files import write_atomic

    script, rc = _targets(shell)
    source = completion_script(shell)
    done: list[str] = []
    if not script.is_file() or script.read_text(encoding="utf-8") != source:
        write_atomic(script, source)
        done.append(f"wrote {script}")
    if rc is not None:
        rc = rc.resolve()  # a dotfiles link: write its target, keep the link
        line = _rc_line(shell, script)
        lines = rc.read_text(encoding="utf-8").splitlines() if rc.is_file() else []
        kept = [each for each in lines if not each.rstrip().endswith(MARKER)]
        if line not in lines:
            text = "\n".join([*kept, line]) + "\n"
            write_atomic(rc, text, mode=rc.stat().st_mode & 0o777 if rc.exists() else 0o644)
            done.append(f"added to {rc}: {line}")
    return done


@click.group(short_help="Shell completion: install it, or print its script.")
def completion() -> None:
    """Complete commands, options, backends, instance types, presets and local run names in bash, zsh or fish.

    \b
      fsdp-sdk completion install                 # for $SHELL; open a new shell afterwards
      fsdp-sdk completion show --shell zsh        # the script, to install it your own way
    """


_shell_option = click.option(
    "--shell",
    type=click.Choice(SHELLS),
    help="The shell (default: the one $SHELL names).",
)


@completion.command(short_help="Install completion for your shell (safe to run again).")
@_shell_option
@debug_option
def install(shell: str | None) -> None:
    """Write the completion script and source it from the shell's rc file (~/.bashrc, ~/.zshrc; fish loads
    ~/.config/fish/completions/fsdp-sdk.fish by itself). Running it again changes nothing, or updates both."""
    chosen = _shell(shell)
    done = install_completion(chosen)
    script, rc = _targets(chosen)
    for line in done:
        click.echo(line)
    if not done:
        click.echo(f"{chosen} completion is already installed ({script}{f', sourced from {rc}' if rc else ''})")
        return
    click.echo(f"open a new shell to use it{f', or run: . {script}' if rc else ''}")


@completion.command(short_help="Print the completion script for a shell.")
@_shell_option
@debug_option
def show(shell: str | None) -> None:
    """Print the completion script (for --shell, or $SHELL's), e.g. to write it where your shell reads it:
    fsdp-sdk completion show --shell bash > ~/.local/share/bash-completion/completions/fsdp-sdk"""
    click.echo(completion_script(_shell(shell)), nl=False)
