"""``fsdp-sdk up``: create the cluster (locally: start etcd)."""

from __future__ import annotations

import click

from fsdp_sdk.cli.application import Application
from fsdp_sdk.cli.options import common_options, dry_run_option, json_option, setting
from fsdp_sdk.cli.output import echo_status


@click.command(short_help="Create the cluster (local backend: start etcd).")
@common_options
@click.option(
    "--nodes",
    type=click.IntRange(min=0),
    expose_value=False,
    callback=setting("cluster.nodes"),
    help="Number of nodes (cluster.nodes).",
)
@click.option(
    "--instance-type",
    metavar="TYPE",
    expose_value=False,
    callback=setting("cluster.instance_type"),
    help="Instance type of the nodes (cluster.instance_type); see 'fsdp-sdk instance-types'.",
)
@dry_run_option
@json_option
@click.pass_obj
def up(app: Application, dry_run: bool, as_json: bool) -> None:
    """Create the cluster the configuration describes, or confirm it is up.

    Runs the preflight checks first. With --dry-run, prints the plan and changes
    nothing. On the local backend this starts etcd as a daemon and records it in
    <cluster.state_dir>/local/state.json.
    """
    client = app.client
    if dry_run:
        plan = client.plan()
        status = client.up(dry_run=True)
        if as_json:
            app.echo_json({"plan": plan.to_dict(), "status": status.to_dict()})
            return
        click.echo(f"Plan for cluster {plan.cluster!r} on backend {plan.backend!r}:")
        for number, step in enumerate(plan.steps, 1):
            click.echo(f"  {number}. {step}")
        if plan.hourly_cost_usd is not None:
            click.echo(f"On-demand cost: ${plan.hourly_cost_usd:,.2f}/hour")
        click.echo(f"Current state: {status.state} (dry run: nothing changed)")
        return
    echo_status(client.up(), as_json=as_json)
