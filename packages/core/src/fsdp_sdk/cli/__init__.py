"""The ``fsdp-sdk`` command line.

One module per command (group) in this package; the root group loads each one
only when it is named (or when ``--help`` lists it), from :data:`COMMANDS`.
Plugins add commands through the ``fsdp_sdk_register_commands`` hook. Heavy
imports (torch, boto3, kubernetes, yaml, rich) happen inside command bodies, so
``fsdp-sdk --help`` starts instantly.

Exit codes: 0 success, 1 failure, 2 usage or configuration error. Errors are
one line on stderr; ``--debug`` adds the traceback.
"""

from __future__ import annotations

import importlib
import os
import sys
from collections.abc import Sequence
from typing import Any

import click

from fsdp_sdk import __version__
from fsdp_sdk.cli.application import Application
from fsdp_sdk.cli.options import common_options, format_global_options_apart
from fsdp_sdk.errors import FsdpSdkError

__all__ = ["COMMANDS", "SHORT_HELP", "LazyGroup", "cli", "main"]

#: Built-in commands: name -> "module:attribute". Modules are imported only when needed.
COMMANDS: dict[str, str] = {
    "up": "fsdp_sdk.cli.up:up",
    "down": "fsdp_sdk.cli.down:down",
    "scale": "fsdp_sdk.cli.scale:scale",
    "status": "fsdp_sdk.cli.status:status",
    "clusters": "fsdp_sdk.cli.clusters:clusters",
    "run": "fsdp_sdk.cli.run:run",
    "launch": "fsdp_sdk.cli.launch:launch",
    "runs": "fsdp_sdk.cli.runs:runs",
    "plugins": "fsdp_sdk.cli.plugins:plugins",
    "instance-types": "fsdp_sdk.cli.instance_types:instance_types",
    "config": "fsdp_sdk.cli.config:config",
    "prereqs": "fsdp_sdk.cli.prereqs:prereqs",
    "image": "fsdp_sdk.cli.image:image",
    "job": "fsdp_sdk.cli.job:job",
    "monitor": "fsdp_sdk.cli.monitor:monitor",
    "estimate": "fsdp_sdk.cli.estimate:estimate",
    "bench": "fsdp_sdk.cli.bench:bench",
    "versions": "fsdp_sdk.cli.versions:versions",
    "completion": "fsdp_sdk.cli.completion:completion",
}

#: The one-line help ``fsdp-sdk --help`` lists for the built-in commands, so that listing them imports none of their
#: modules (a test checks each line is the command's own ``short_help``). A command missing here is imported.
SHORT_HELP: dict[str, str] = {
    "up": "Create the cluster (local backend: start etcd).",
    "down": "Delete the cluster (local backend: stop etcd).",
    "scale": "Change the number of nodes.",
    "status": "Show the cluster's state.",
    "clusters": "List every known cluster: backend, region, nodes, cost, jobs.",
    "run": "Run the FSDP trainer and print its summary.",
    "launch": "Create what is missing, run the job and follow it (one command).",
    "runs": "List the local runs: state, steps, loss, tokens/s, duration.",
    "plugins": "List plugins, the backends they provide, and their problems.",
    "instance-types": "List the known GPU instance types.",
    "config": "Inspect the configuration.",
    "prereqs": "Install and check etcd and the Kubeflow job controller.",
    "image": "Build the trainer image and push it to ECR.",
    "job": "Render, submit and follow training jobs (status, logs, stop, wait, list: local runs too).",
    "monitor": "Install and use GPU and training monitoring (DCGM, Prometheus, Grafana, CloudWatch).",
    "estimate": "Estimate memory per GPU, speed and cost of a training job.",
    "bench": "Measure the configured job: a node-count scaling sweep.",
    "versions": "List every pinned version and its state today.",
    "completion": "Shell completion: install it, or print its script.",
}


class LazyGroup(click.Group):
    """A group whose commands come from an import table and from plugins, loaded on demand."""

    def __init__(
        self,
        *args: Any,
        lazy_commands: dict[str, str] | None = None,
        lazy_short_help: dict[str, str] | None = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(*args, **kwargs)
        self.lazy_commands = dict(lazy_commands or {})
        self.lazy_short_help = dict(lazy_short_help or {})
        self._plugin_commands: dict[str, click.Command] | None = None
        self._unavailable: dict[str, str] = {}

    def plugin_commands(self) -> dict[str, click.Command]:
        """Commands plugins registered (collected once); names of built-in commands win.

        A name two plugins register is refused: it is left out with a warning naming both,
        and running it is a usage error saying which plugins claim it.
        """
        if self._plugin_commands is None:
            from fsdp_sdk.plugins import get_plugins

            plugins = get_plugins()
            collector = click.Group()
            conflicts = plugins.hooks.register_commands(collector)
            for name, owners in conflicts.items():
                if name in self.lazy_commands or name in self.commands:
                    _warn(f"a plugin command named {name!r} is ignored: a built-in command has that name")
                    continue
                claimants = " and ".join(plugins.describe(owner) for owner in owners)
                every = "both" if len(owners) == 2 else "all"
                problem = f"plugins {claimants} {every} register a command named {name!r}"
                fix = "uninstall one of them, or ask its author to rename the command"
                self._unavailable[name] = f"{problem}; {fix}"
                _warn(f"{problem}, so it is left out; {fix}")
            self._plugin_commands = {}
            for name, command in collector.commands.items():
                if name in self.lazy_commands or name in self.commands:
                    _warn(f"a plugin command named {name!r} is ignored: a built-in command has that name")
                else:
                    self._plugin_commands[name] = command
        return self._plugin_commands

    def list_commands(self, ctx: click.Context) -> list[str]:
        names = set(self.commands) | set(self.lazy_commands) | set(self.plugin_commands())
        return sorted(names)

    def format_commands(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        """The commands section of ``--help``: built-in commands not yet loaded are listed from :attr:`lazy_short_help`
        (importing none of them), the others as click lists them."""
        rows: list[tuple[str, str]] = []
        names = self.list_commands(ctx)
        limit = formatter.width - 6 - max((len(name) for name in names), default=0)
        for name in names:
            if name not in self.commands and name in self.lazy_short_help and name in self.lazy_commands:
                rows.append((name, self.lazy_short_help[name]))
                continue
            command = self.get_command(ctx, name)
            if command is not None and not command.hidden:
                rows.append((name, command.get_short_help_str(limit)))
        if rows:
            with formatter.section("Commands"):
                formatter.write_dl(rows)

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        if cmd_name in self.commands:
            return self.commands[cmd_name]
        if cmd_name in self.lazy_commands:
            return self._load(cmd_name)
        return self.plugin_commands().get(cmd_name)

    def _load(self, name: str) -> click.Command | None:
        module_name, _, attribute = self.lazy_commands[name].partition(":")
        try:
            module = importlib.import_module(module_name)
        except ModuleNotFoundError as exc:
            if exc.name != module_name:
                raise
            # Not written or not installed yet: leave it out of --help rather than crash.
            self._unavailable[name] = f"module {module_name} is not available"
            return None
        command = getattr(module, attribute)
        if not isinstance(command, click.Command):
            raise TypeError(f"{module_name}:{attribute} is not a click command")
        format_global_options_apart(command)
        self.commands[name] = command
        return command

    # click overloads main() on standalone_mode (returns or exits); this one ignores standalone_mode and always exits
    def main(self, args: Sequence[str] | None = None, prog_name: str | None = None, **extra: Any) -> Any:  # type: ignore[override]
        """Run the command line and exit: one-line errors on stderr, exit 1 for failures and 2 for usage or
        configuration errors, the traceback only with ``--debug`` (or ``FSDP_SDK_DEBUG=1``).

        Everything written to stdout and stderr while the command runs passes through
        :func:`fsdp_sdk.secrets.redact`: a secret's value never leaves the process, whichever command,
        log line or error message would have carried it."""
        args = list(sys.argv[1:] if args is None else args)
        extra.pop("standalone_mode", None)
        debug = "--debug" in args or os.environ.get("FSDP_SDK_DEBUG", "") not in ("", "0")
        from fsdp_sdk import secrets

        for name, value in os.environ.items():  # AWS keys, tokens: never echoed, whatever would carry them
            secrets.register_named(name, value)
        streams = sys.stdout, sys.stderr
        sys.stdout, sys.stderr = _Redacting(sys.stdout), _Redacting(sys.stderr)
        try:
            self._main(args, prog_name, debug, **extra)
        finally:
            sys.stdout, sys.stderr = streams

    def _main(self, args: list[str], prog_name: str | None, debug: bool, **extra: Any) -> None:
        try:
            result = super().main(args=args, prog_name=prog_name, standalone_mode=False, **extra)
        except click.exceptions.NoArgsIsHelpError as exc:
            click.echo(exc.ctx.get_help())
            sys.exit(0)
        except click.UsageError as exc:
            if isinstance(exc, click.NoSuchOption):  # a trainer option before '--' gets the corrected command
                from fsdp_sdk.cli.usage_hints import misplaced_trainer_option_hint

                message = misplaced_trainer_option_hint(exc, args, prog_name or "fsdp-sdk")
                if message is not None:
                    _echo_error(message)
                    sys.exit(exc.exit_code)
            hint = f" (see '{exc.ctx.command_path} --help')" if exc.ctx is not None else ""
            _echo_error(f"{' '.join(exc.format_message().split())}{hint}")
            sys.exit(exc.exit_code)
        except click.ClickException as exc:
            _echo_error(" ".join(exc.format_message().split()))
            sys.exit(exc.exit_code)
        except click.Abort:
            click.echo("Aborted.", err=True)
            sys.exit(130)
        except FsdpSdkError as exc:
            if debug:
                import traceback

                traceback.print_exc()
            _echo_error(str(exc))
            sys.exit(exc.exit_code)
        except Exception as exc:
            if debug:
                raise
            message = " ".join(str(exc).split())
            _echo_error(f"unexpected {type(exc).__name__}: {message} (run again with --debug for the traceback)")
            sys.exit(1)
        sys.exit(result if isinstance(result, int) else 0)

    def resolve_command(
        self, ctx: click.Context, args: list[str]
    ) -> tuple[str | None, click.Command | None, list[str]]:
        name = args[0] if args else None
        if name is not None and self.get_command(ctx, name) is None and name in self._unavailable:
            raise click.UsageError(f"command {name!r} is not available here ({self._unavailable[name]})", ctx)
        try:
            return super().resolve_command(ctx, args)
        except click.exceptions.NoSuchCommand as exc:  # commands load lazily: did-you-mean among every name
            if name is None or exc.possibilities:
                raise
            raise click.exceptions.NoSuchCommand(name, possibilities=self.list_commands(ctx), ctx=ctx) from None


def _echo_error(message: str) -> None:
    """Print ``Error: message`` on stderr, with what it quotes of the input masked where it looks like a secret."""
    from fsdp_sdk.secrets import mask_error

    click.echo(f"Error: {mask_error(message)}", err=True)


def _warn(message: str) -> None:
    sys.stderr.write(f"fsdp-sdk: warning: {message}\n")


class _Redacting:
    """A text stream that masks every registered secret in what is written to it."""

    def __init__(self, stream: Any) -> None:
        self._stream = stream

    def write(self, text: str) -> int:
        from fsdp_sdk.secrets import redact

        return self._stream.write(redact(text) if isinstance(text, str) else text)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._stream, name)


@click.group(
    cls=LazyGroup,
    lazy_commands=COMMANDS,
    lazy_short_help=SHORT_HELP,
    context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 100},
)
@common_options
@click.version_option(__version__, "--version", prog_name="fsdp-sdk")
@click.pass_context
def cli(ctx: click.Context) -> None:
    """Provision GPU clusters and run PyTorch FSDP training on them, or locally under torchrun.

    \b
    Configuration comes from, in increasing priority: defaults, a YAML file (-c),
    a .env file (./.env by default; the variable names of the original scripts),
    FSDP_SDK_<SECTION>__<FIELD> environment variables, and command-line flags.
    'fsdp-sdk config show' prints the result.

    \b
    Quick start on this machine:
      fsdp-sdk run --nodes 2 --nproc-per-node 1 --preset tiny --steps 20
    """
    ctx.ensure_object(Application)


def main(argv: Sequence[str] | None = None) -> None:
    """Entry point of the ``fsdp-sdk`` console script: run the CLI and exit with its status."""
    cli.main(args=argv, prog_name="fsdp-sdk")
