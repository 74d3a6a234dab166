"""Options shared by the commands.

Configuration options do not reach the command functions: their callbacks record
the value in the :class:`~fsdp_sdk.cli.application.Application`, which passes
them to the configuration loader as the highest-priority source, naming the flag
in error messages.
"""

from __future__ import annotations

import types
from collections.abc import Callable
from typing import Any, TypeVar

import click

from fsdp_sdk.cli.application import Application

F = TypeVar("F", bound=Callable[..., Any])


class GlobalOption(click.Option):
    """An option every command takes (configuration sources, backend, --set, --debug): listed apart in help."""


def format_global_options_apart(command: click.Command) -> None:
    """Make ``command`` (and its subcommands) list its :class:`GlobalOption` options in a section of their own,
    after the command's own options, so the options that matter for the command come first."""

    def format_options(self: click.Command, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        own: list[tuple[str, str]] = []
        shared: list[tuple[str, str]] = []
        for param in self.get_params(ctx):
            record = param.get_help_record(ctx)
            if record is not None:
                (shared if isinstance(param, GlobalOption) else own).append(record)
        if own:
            with formatter.section("Options"):
                formatter.write_dl(own)
        if shared:
            with formatter.section("Global options"):
                formatter.write_dl(shared)
        if isinstance(self, click.Group):
            self.format_commands(ctx, formatter)

    # one command object's help layout, not its class's: mypy refuses assigning to a method, on purpose here
    command.format_options = types.MethodType(format_options, command)  # type: ignore[method-assign]
    if isinstance(command, click.Group):
        for sub in command.commands.values():
            format_global_options_apart(sub)


def complete_backends(ctx: click.Context, param: click.Parameter, incomplete: str) -> list[Any]:
    """Shell completion of backend names (every installed plugin's)."""
    from fsdp_sdk.plugins import get_plugins

    return [name for name in get_plugins().backends.names() if name.startswith(incomplete)]


def complete_instance_types(ctx: click.Context, param: click.Parameter, incomplete: str) -> list[Any]:
    """Shell completion of instance type names (built-in and plugins')."""
    from fsdp_sdk.plugins import get_plugins

    return [name for name in get_plugins().instance_types.names() if name.startswith(incomplete)]


def complete_presets(ctx: click.Context, param: click.Parameter, incomplete: str) -> list[Any]:
    """Shell completion of the trainer's model presets (none when the trainer is not installed)."""
    try:
        from fsdp_trainer.presets import PRESETS
    except ImportError:
        return []
    return [name for name in sorted(PRESETS) if name.startswith(incomplete)]


def complete_run_names(ctx: click.Context, param: click.Parameter, incomplete: str) -> list[Any]:
    """Shell completion of local run ids, newest first: the directories under ``<state dir>/local/runs`` that hold
    a ``run.json`` (``$FSDP_SDK_STATE_DIR`` or ``~/.local/state/fsdp-sdk``). Reads one directory, imports
    nothing, so it answers as fast as the CLI starts."""
    import os

    state = os.environ.get("FSDP_SDK_STATE_DIR") or os.path.expanduser("~/.local/state/fsdp-sdk")
    runs = os.path.join(state, "local", "runs")
    try:
        entries = [e for e in os.scandir(runs) if e.name.startswith(incomplete) and e.is_dir()]
    except OSError:
        return []
    found = []
    for entry in entries:
        try:
            found.append((os.stat(os.path.join(entry.path, "run.json")).st_mtime, entry.name))
        except OSError:
            continue
    return [name for _, name in sorted(found, reverse=True)]


def _app(ctx: click.Context) -> Application:
    return ctx.ensure_object(Application)


def setting(path: str) -> Callable[[click.Context, click.Parameter, Any], Any]:
    """An option callback storing the value as configuration field ``path``."""

    def callback(ctx: click.Context, param: click.Parameter, value: Any) -> Any:
        if value is not None and not ctx.resilient_parsing:
            flag = (
                param.opts[0]
                if isinstance(param, FirstNameOption)
                else max(param.opts, key=len)
                if isinstance(param, click.Option)
                else param.name or path
            )
            _app(ctx).set(path, value, flag)
        return value

    return callback


def settings(*paths: str) -> Callable[[click.Context, click.Parameter, Any], Any]:
    """An option callback storing one value at several configuration paths."""
    callbacks = [setting(path) for path in paths]

    def callback(ctx: click.Context, param: click.Parameter, value: Any) -> Any:
        for each in callbacks:
            each(ctx, param, value)
        return value

    return callback


#: What ``--nodes`` means on every command: the help of each names this setting first.
NODES_HELP = "Nodes of the cluster the job runs on (cluster.nodes); the job runs one worker per node (job.num_workers)"


def nodes_option(extra: str = "", *, minimum: int = 1) -> Callable[[F], F]:
    """``--nodes N``: the nodes of the cluster (``cluster.nodes``), which the job's workers follow
    (``job.num_workers``): one setting, the same on every command. ``--nodes 0`` (``up``: a cluster without GPU
    nodes yet) leaves the workers to follow as they do (one at least)."""
    both, nodes_only = settings("cluster.nodes", "job.num_workers"), setting("cluster.nodes")

    def callback(ctx: click.Context, param: click.Parameter, value: Any) -> Any:
        return (both if value else nodes_only)(ctx, param, value)

    return click.option(
        "--nodes",
        type=click.IntRange(min=minimum),
        metavar="N",
        expose_value=False,
        callback=callback,
        help=f"{NODES_HELP}{extra}.",
    )


def workers_option(function: F) -> F:
    """``--workers N``: run the job on fewer workers than the cluster has nodes (``job.num_workers`` alone)."""
    return click.option(
        "--workers",
        type=click.IntRange(min=1),
        metavar="N",
        expose_value=False,
        callback=setting("job.num_workers"),
        help="Run the job on N workers, fewer than the cluster's nodes (job.num_workers; default: --nodes).",
    )(function)


def model_options(help: str, *, metavar: str = "NAME", path: str | None = "trainer.model.preset") -> Callable[[F], F]:
    """``--model`` (documented) and ``--preset`` (the same flag under its other name, hidden): the model a command
    trains or estimates, named the same way on ``run``, ``bench scale`` and ``estimate``.

    :param path: the setting both store; None makes ``--model`` a parameter of the command (``estimate``'s).
    """

    store: dict[str, Any] = {"expose_value": False, "callback": setting(path)} if path else {}
    return click.option(
        "--model",
        "--preset",
        "model",
        cls=FirstNameOption,
        metavar=metavar,
        shell_complete=complete_presets,
        help=help,
        **store,
    )


class FirstNameOption(click.Option):
    """An option with several names whose help and error messages show only the first: the one documented."""

    def get_help_record(self, ctx: click.Context) -> tuple[str, str] | None:
        every = self.opts
        self.opts = every[:1]
        try:
            return super().get_help_record(ctx)
        finally:
            self.opts = every


def _set_pairs(ctx: click.Context, param: click.Parameter, values: tuple[str, ...]) -> None:
    if not values:  # click calls this for every command line: without --set, import nothing
        return
    from fsdp_sdk.config import setting_from_pair
    from fsdp_sdk.errors import ConfigError

    for item in values:
        try:
            setting = setting_from_pair(item)
        except ConfigError as error:
            raise click.BadParameter(f"{error.problem} ({error.fix})") from None
        # Keys outside every section are trainer settings: the application decides once plugins are loaded.
        _app(ctx).set(setting.path, setting.value, setting.origin.name, "--set")


def _store(attribute: str) -> Callable[[click.Context, click.Parameter, Any], Any]:
    def callback(ctx: click.Context, param: click.Parameter, value: Any) -> Any:
        if value:
            setattr(_app(ctx), attribute, value)
        return value

    return callback


def common_options(function: F) -> F:
    """``-c/--config``, ``--env-file``, ``--backend``, ``--set`` and ``--debug``, on the root group and on each command."""
    options = [
        click.option(
            "-c",
            "--config",
            "config_file",
            cls=GlobalOption,
            metavar="FILE",
            envvar="FSDP_SDK_CONFIG",
            show_envvar=True,
            expose_value=False,
            callback=_store("config_file"),
            help="YAML configuration file (sections cluster, job, trainer, observability).",
        ),
        click.option(
            "--env-file",
            cls=GlobalOption,
            metavar="FILE",
            envvar="FSDP_SDK_ENV_FILE",
            show_envvar=True,
            expose_value=False,
            callback=_store("env_file"),
            help="A .env file with the original scripts' variables (NUM_WORKERS, INSTANCE_TYPE...). Default: ./.env if present.",
        ),
        setting_option(
            "--backend",
            cls=GlobalOption,
            metavar="NAME",
            shell_complete=complete_backends,
            path="cluster.backend",
            help="Cluster backend (cluster.backend; default: local). 'fsdp-sdk plugins' lists them.",
        ),
        click.option(
            "--set",
            "set_pairs",
            cls=GlobalOption,
            metavar="KEY=VALUE",
            multiple=True,
            expose_value=False,
            callback=_set_pairs,
            help="Set any field, e.g. --set job.num_workers=4 --set model.preset=tiny (trainer sections need no prefix). Repeatable.",
        ),
        click.option(
            "--debug",
            cls=GlobalOption,
            is_flag=True,
            envvar="FSDP_SDK_DEBUG",
            show_envvar=True,
            expose_value=False,
            callback=_store("debug"),
            help="Show tracebacks on errors.",
        ),
    ]
    for option in reversed(options):
        function = option(function)
    return function


def debug_option(function: F) -> F:
    """``--debug`` alone, for commands that read no configuration."""
    return click.option(
        "--debug",
        is_flag=True,
        envvar="FSDP_SDK_DEBUG",
        show_envvar=True,
        expose_value=False,
        callback=_store("debug"),
        help="Show tracebacks on errors.",
    )(function)


def setting_option(*flags: str, path: str, help: str, **kwargs: Any) -> Callable[[F], F]:
    """A flag that is a ``--set`` of one configuration setting (``path``): no parameter of its own."""
    return click.option(*flags, expose_value=False, callback=setting(path), help=help, **kwargs)


def trainer_options(steps_help: str = "Optimizer steps (trainer.train.steps).") -> Callable[[F], F]:
    """``--nproc-per-node``, ``--model`` (or ``--preset``) and ``--steps``: the trainer settings ``run`` and
    ``bench scale`` take as flags (each one a ``--set`` of its setting)."""

    def decorate(function: F) -> F:
        options = [
            setting_option(
                "--nproc-per-node",
                type=click.IntRange(min=1),
                path="job.nproc_per_node",
                help="Trainer processes per node (job.nproc_per_node; default: GPUs per node, 1 locally).",
            ),
            model_options(
                "Model preset (trainer.model.preset), e.g. tiny; 'fsdp-sdk estimate --model' names the same."
            ),
            setting_option(
                "--steps",
                type=click.IntRange(min=1),
                path="trainer.train.steps",
                help=steps_help,
            ),
        ]
        for option in reversed(options):
            function = option(function)
        return function

    return decorate


def gives_code(settings: list[tuple[str, Any, str, str]]) -> bool:
    """Whether the command line's settings name your own code (``--script``, ``--module``, ``--set code.*``)."""
    return any(path in ("code.script", "code.module") for path, *_ in settings)


def _trainer_settings(ctx: click.Context, param: click.Parameter, values: tuple[str, ...]) -> tuple[str, ...]:
    if values and not ctx.resilient_parsing:
        from fsdp_sdk.config import parse_trainer_args

        if gives_code(_app(ctx).settings):  # --script / --module: what follows -- is your code's
            _app(ctx).set("code.args", list(values), "-- ARGS")
            return values
        for each in parse_trainer_args(values):
            _app(ctx).set(each.path, each.value, each.origin.name, each.origin.source)
    return values


def trainer_args_argument(function: F) -> F:
    """``[-- TRAINER OPTIONS]`` for commands that pass them on as settings (``job render``, ``job submit``): each
    ``--section.field VALUE`` after ``--`` is the trainer setting ``section.field``, as ``run`` takes them."""
    return click.argument(
        "trainer_args",
        nargs=-1,
        type=click.UNPROCESSED,
        metavar="[-- TRAINER OPTIONS]",
        expose_value=False,
        callback=_trainer_settings,
    )(function)


def json_option(function: F) -> F:
    """``--json``: print the result as JSON on stdout."""
    return click.option("--json", "as_json", is_flag=True, help="Print the result as JSON on stdout.")(function)


def kube_options(function: F) -> F:
    """``--kubeconfig``, ``--context`` and ``-n/--namespace`` (job.namespace), for commands that reach a cluster."""
    options = [
        click.option(
            "--kubeconfig",
            metavar="FILE",
            expose_value=False,
            callback=_store("kubeconfig"),
            help="kubeconfig file; default: the backend's, then $KUBECONFIG, then ~/.kube/config.",
        ),
        click.option(
            "--context",
            metavar="NAME",
            expose_value=False,
            callback=_store("kube_context"),
            help="kubeconfig context (default: the current one).",
        ),
        setting_option(
            "-n",
            "--namespace",
            metavar="NS",
            path="job.namespace",
            help="Kubernetes namespace (job.namespace; default: default).",
        ),
    ]
    for option in reversed(options):
        function = option(function)
    return function


def dry_run_option(function: F) -> F:
    """``--dry-run``: show what would change, change nothing."""
    return click.option("--dry-run", is_flag=True, help="Show what would be done; change nothing.")(function)
