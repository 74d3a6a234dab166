"""``fsdp-sdk status``: show the cluster's state."""

from __future__ import annotations

import click

from fsdp_sdk.cli.application import Application
from fsdp_sdk.cli.options import common_options, json_option
from fsdp_sdk.cli.output import echo_status


@click.command(short_help="Show the cluster's state.")
@common_options
@json_option
@click.pass_obj
def status(app: Application, as_json: bool) -> None:
    """Show whether the cluster exists and is ready, its nodes and endpoint.

    Exits with status 1 when the cluster exists but is degraded.
    """
    result = app.client.status()
    echo_status(result, as_json=as_json)
    if result.state == "degraded":
        raise click.exceptions.Exit(1)
