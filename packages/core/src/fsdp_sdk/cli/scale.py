"""``fsdp-sdk scale``: change the number of nodes."""

from __future__ import annotations

import click

from fsdp_sdk.cli.application import Application
from fsdp_sdk.cli.options import common_options, dry_run_option, json_option
from fsdp_sdk.cli.output import echo_status


@click.command(short_help="Change the number of nodes.")
@common_options
@click.argument("nodes", type=click.IntRange(min=0))
@dry_run_option
@json_option
@click.pass_obj
def scale(app: Application, nodes: int, dry_run: bool, as_json: bool) -> None:
    """Scale the cluster to NODES nodes (cluster.nodes, within cluster.min_nodes..cluster.max_nodes; unless set,
    cluster.max_nodes follows NODES, and scaling to 0 keeps it).

    On the local backend this sets the number of simulated nodes runs may use.
    """
    from fsdp_sdk.cli.run_display import live_progress

    if nodes > 0:  # NODES is the cluster's node count; 0 keeps the node group's maximum (EKS needs 1 at least)
        app.set("cluster.nodes", nodes, "NODES")
    with live_progress(app, f"scaling to {nodes} nodes", enabled=not (dry_run or as_json)):
        status = app.client.scale(nodes, dry_run=dry_run)
    echo_status(status, as_json=as_json, dry_run=dry_run)
