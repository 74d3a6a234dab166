"""``fsdp-sdk down``: delete the cluster (locally: stop etcd and remove its state)."""

from __future__ import annotations

import sys

import click

from fsdp_sdk.cli.application import Application
from fsdp_sdk.cli.options import common_options, dry_run_option, json_option
from fsdp_sdk.cli.output import echo_status
from fsdp_sdk.errors import ConfigError


@click.command(short_help="Delete the cluster (local backend: stop etcd).")
@common_options
@click.option("-y", "--yes", is_flag=True, help="Do not ask for confirmation before deleting a remote cluster.")
@dry_run_option
@json_option
@click.pass_obj
def down(app: Application, yes: bool, dry_run: bool, as_json: bool) -> None:
    """Delete the cluster and the state kept for it.

    Deleting a cluster that does not exist is not an error. Remote clusters need
    a confirmation (or --yes); the local backend stops etcd and removes
    state.json and etcd's data, keeping run outputs.
    """
    client = app.client
    backend = client.backend
    if not dry_run and not yes and not backend.runs_jobs:
        current = client.status()
        if current.state != "absent":
            if not sys.stdin.isatty():
                raise ConfigError(
                    "--yes",
                    f"deleting cluster {current.cluster!r} needs a confirmation",
                    "pass --yes to delete without a prompt",
                )
            click.confirm(f"Delete cluster {current.cluster!r} ({backend.name})?", abort=True, err=True)
    from fsdp_sdk.cli.run_display import live_progress

    with live_progress(app, "deleting the cluster", enabled=not (dry_run or as_json)):
        status = client.down(dry_run=dry_run)
    echo_status(status, as_json=as_json, dry_run=dry_run)
