"""``fsdp-sdk status``: show the cluster's state."""

from __future__ import annotations

from typing import TYPE_CHECKING

import click

from fsdp_sdk.cli.application import Application
from fsdp_sdk.cli.options import common_options, json_option
from fsdp_sdk.cli.output import echo_status

if TYPE_CHECKING:
    from fsdp_sdk.client import Client


@click.command(short_help="Show the cluster's state.")
@common_options
@json_option
@click.pass_obj
def status(app: Application, as_json: bool) -> None:
    """Show whether the cluster exists and is ready, its nodes and endpoint.

    Also shows what the cluster has cost since 'up' (GPU node-hours x the on-demand price the plan used, plus
    the control plane and system nodes) and what it costs per hour now. Exits with status 1 when the cluster
    exists but is degraded.
    """
    client = app.client
    result = client.status()
    local = client.backend.runs_jobs
    cost = (
        None if local or (result.state == "absent" and not _has_ledger(client)) else client.cost(nodes_now=result.nodes)
    )
    if as_json:
        data = result.to_dict()
        data["cost"] = {"local": True, "usd": 0.0} if local else cost.to_dict() if cost else None
        app.echo_json(data)
    else:
        echo_status(result)
        click.echo("cost: local ($0, this machine)" if local else cost.line() if cost else "cost: $0 (no cluster)")
    if result.state == "degraded":
        raise click.exceptions.Exit(1)


def _has_ledger(client: Client) -> bool:
    from fsdp_sdk.costs import read_ledger

    return bool(read_ledger(client.config.cluster.state_dir, client.config.cluster.name))
