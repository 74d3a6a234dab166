"""``fsdp-sdk plugins``: list plugins, what they provide, and what is wrong with them."""

from __future__ import annotations

from typing import Any

import click

from fsdp_sdk.cli.application import Application
from fsdp_sdk.cli.options import debug_option, json_option
from fsdp_sdk.cli.output import table
from fsdp_sdk.errors import PluginError


@click.command(short_help="List plugins, the backends they provide, and their problems.")
@json_option
@debug_option
@click.pass_obj
def plugins(app: Application, as_json: bool) -> None:
    """List the loaded plugins (built-in and from the 'fsdp_sdk' entry-point group) and the backends
    they register; then what is wrong: plugins that failed to load or to register, and backends,
    instance types or settings sections that two plugins both register (refused for both; a
    built-in one is kept), naming the distributions to uninstall.

    Exits with status 1 when a plugin is broken or two plugins conflict.
    """
    from fsdp_sdk.plugins import get_plugins

    loaded = get_plugins()
    conflicts = loaded.conflicts()
    infos = loaded.infos()
    backends: list[dict[str, str]] = []
    problems: list[str] = []
    for name in loaded.backends.names():
        try:
            cls = loaded.backends.get(name)
        except PluginError as exc:  # a lazily registered backend that does not import
            problems.append(str(exc))
            continue
        backends.append({"name": name, "plugin": loaded.backends.owner(name), "description": cls.description})
    described: list[dict[str, Any]] = []
    for conflict in conflicts:
        problem, fix = loaded.explain(conflict)
        described.append(
            {
                **conflict.to_dict(),
                "plugins": [_origin(infos, p) for p in conflict.plugins],
                "message": f"{problem}; {fix}",
            }
        )
    if as_json:
        app.echo_json({"plugins": [i.to_dict() for i in infos], "backends": backends, "conflicts": described})
    else:
        rows = [
            (
                i.name,
                "built-in" if i.builtin else (f"{i.distribution} {i.version}" if i.distribution else "registered"),
                "broken" if i.broken else "ok",
                i.error if i.broken else ", ".join(h.removeprefix("fsdp_sdk_") for h in i.hooks),
            )
            for i in infos
        ]
        click.echo(table(["plugin", "from", "status", "hooks / error"], rows))
        if backends:
            click.echo()
            click.echo(
                table(
                    ["backend", "plugin", "description"], [(b["name"], b["plugin"], b["description"]) for b in backends]
                )
            )
        if conflicts:
            conflict_rows = [
                (
                    f"{c.kind} {c.name}",
                    " and ".join(loaded.describe(p) for p in sorted(set(c.plugins))),
                    "fsdp-sdk's own is used" if c.kept else "refused for all of them",
                )
                for c in conflicts
            ]
            click.echo()
            click.echo(table(["conflict", "registered by", "outcome"], conflict_rows))
    for problem in problems:
        click.echo(f"Error: {problem}", err=True)
    broken = [i.name for i in infos if i.broken]
    if broken or described or problems:
        what = []
        if broken:
            what.append(f"{len(broken)} broken plugin{'s' if len(broken) > 1 else ''} ({', '.join(broken)})")
        if described:
            what += [d["message"] for d in described]
        if what:
            click.echo(f"Error: {'; '.join(what)}", err=True)
        raise click.exceptions.Exit(1)


def _origin(infos: list[Any], name: str) -> dict[str, str | None]:
    """A plugin's name with the distribution and version it comes from."""
    info = next((i for i in infos if i.name == name), None)
    return {
        "name": name,
        "distribution": info.distribution if info else None,
        "version": info.version if info else None,
    }
