"""``fsdp-sdk plugins``: list plugins, what they provide, and the broken ones."""

from __future__ import annotations

import click

from fsdp_sdk.cli.application import Application
from fsdp_sdk.cli.options import debug_option, json_option
from fsdp_sdk.cli.output import table
from fsdp_sdk.errors import PluginError


@click.command(short_help="List plugins and the backends they provide.")
@json_option
@debug_option
@click.pass_obj
def plugins(app: Application, as_json: bool) -> None:
    """List the loaded plugins (built-in and from the 'fsdp_sdk' entry-point group), the backends
    they register, and plugins that failed to load.

    Exits with status 1 when a plugin is broken or two plugins conflict.
    """
    from fsdp_sdk.plugins import get_plugins

    loaded = get_plugins()
    infos = loaded.infos()
    backends: list[dict[str, str]] = []
    conflict = None
    try:
        backends = [
            {"name": cls.name, "plugin": loaded.backends.owner(cls.name), "description": cls.description}
            for cls in loaded.backends
        ]
    except PluginError as exc:
        conflict = str(exc)
    if as_json:
        app.echo_json({"plugins": [i.to_dict() for i in infos], "backends": backends, "conflict": conflict})
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
        if conflict:
            click.echo(f"\nError: {conflict}", err=True)
    if conflict or any(i.broken for i in infos):
        raise click.exceptions.Exit(1)
