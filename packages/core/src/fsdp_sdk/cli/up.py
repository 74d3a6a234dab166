"""``fsdp-sdk up``: plan the cluster, then create it as planned (locally: start etcd)."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

import click

from fsdp_sdk.cli.application import Application
from fsdp_sdk.cli.options import (
    common_options,
    complete_instance_types,
    dry_run_option,
    json_option,
    nodes_option,
    setting,
)
from fsdp_sdk.cli.output import echo_status

if TYPE_CHECKING:
    from fsdp_sdk.backends.base import Plan


def _echo_plan(plan: Plan, echo: Callable[[str], None] = click.echo) -> None:
    echo(f"Plan for cluster {plan.cluster!r} on backend {plan.backend!r}:")
    for result in plan.preflight:
        echo(f"  {result.line()}")
    for path, value in plan.filled.items():
        shown = ",".join(value) if isinstance(value, list) else value
        echo(f"  chosen by the preflight checks: {path}={shown}")
    for number, step in enumerate(plan.steps, 1):
        echo(f"  {number}. {step}")
    if plan.hourly_cost_usd is not None:
        echo(f"On-demand cost: ${plan.hourly_cost_usd:,.2f}/hour")
    if plan.estimate is not None:
        from fsdp_sdk.estimate import summary_lines

        for line in summary_lines(plan.estimate):
            echo(line)
    if plan.resources or plan.kubernetes:
        echo(
            f"Documents: {len(plan.resources)} for the backend, {len(plan.kubernetes)} Kubernetes objects (--json shows them)"
        )


@click.command(short_help="Create the cluster (local backend: start etcd).")
@common_options
@nodes_option(minimum=0)
@click.option(
    "--instance-type",
    shell_complete=complete_instance_types,
    metavar="TYPE",
    expose_value=False,
    callback=setting("cluster.instance_type"),
    help="Instance type of the nodes (cluster.instance_type); see 'fsdp-sdk instance-types'.",
)
@click.option(
    "--update-kubeconfig",
    is_flag=True,
    help="Also add the cluster to ~/.kube/config and make it the current context (by default its kubeconfig "
    "stays under the state directory).",
)
@click.option(
    "--idle-scale-to-zero",
    type=click.IntRange(min=1),
    metavar="MINUTES",
    expose_value=False,
    callback=setting("cluster.idle_scale_to_zero_minutes"),
    help="Install a controller that scales the GPU nodes to 0 after MINUTES without a training pod "
    "(cluster.idle_scale_to_zero_minutes); 'launch' and 'run' scale them back up.",
)
@click.option("-y", "--yes", is_flag=True, help="Do not ask for confirmation before creating paid resources.")
@dry_run_option
@json_option
@click.pass_obj
def up(app: Application, update_kubeconfig: bool, yes: bool, dry_run: bool, as_json: bool) -> None:
    """Plan the cluster the configuration describes, then create it as planned, or confirm it is up.

    The preflight checks run first (credentials, quotas, zones, reservations: they read, never change).
    With --dry-run, prints every check on its own line and the whole plan (node groups, disks, placement,
    device plugins and their versions, hourly cost, the documents it would apply), even when a check fails
    (exit status 1 when one would stop 'up'), and changes nothing
    (backends with a planning tool of their own run it read-only: the terraform backend runs 'terraform plan');
    without, asks for a confirmation with the hourly cost before creating a cluster (--yes skips it; without a
    terminal --yes is required), then applies exactly that plan, then makes a Kubernetes cluster ready for jobs (kubeconfig, etcd,
    the Kubeflow Training Operator, monitoring when observability.enabled). On the local backend this
    starts etcd as a daemon and records it in <cluster.state_dir>/local/state.json.
    """
    client = app.client
    plan = client.plan(preview=dry_run, collect=dry_run)
    if dry_run:
        blocked = [r for r in plan.preflight if r.blocking]
        # the current state needs what the failed checks name (the backend's tool, credentials)
        status = None if blocked else client.up(plan, dry_run=True)
        if as_json:
            app.echo_json({"plan": plan.to_dict(), "status": status.to_dict() if status else None})
        else:
            _echo_plan(plan)
            if status is not None:
                click.echo(f"Current state: {status.state} (dry run: nothing changed)")
            else:
                click.echo(
                    f"'fsdp-sdk up' would stop: {len(blocked)} preflight check(s) failed (dry run: nothing changed)"
                )
        if blocked:
            raise click.exceptions.Exit(1)
        return
    from fsdp_sdk.cli.run_display import live_progress

    _echo_plan(plan, app.progress)
    if not yes and not client.backend.runs_jobs and client.status().state == "absent":
        from fsdp_sdk.cli.launch import confirm

        confirm(f"create cluster {plan.cluster!r} ({plan.backend})", plan.hourly_cost_usd, yes=yes)
    with live_progress(app, "creating the cluster", enabled=not as_json):
        status = client.up(plan)
        if update_kubeconfig:
            path = client.merge_kubeconfig()
            app.progress(f"added the cluster to {path} as the current context")
    echo_status(status, as_json=as_json)
