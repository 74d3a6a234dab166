"""``fsdp-sdk down``: delete the cluster (locally: stop etcd and remove its state)."""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING

import click

from fsdp_sdk.cli.application import Application
from fsdp_sdk.cli.options import common_options, dry_run_option, json_option
from fsdp_sdk.cli.output import echo_status
from fsdp_sdk.errors import ConfigError

if TYPE_CHECKING:
    from fsdp_sdk.client import Client


@click.command(short_help="Delete the cluster (local backend: stop etcd).")
@common_options
@click.option("-y", "--yes", is_flag=True, help="Do not ask for confirmation before deleting a remote cluster.")
@click.option(
    "--delete-checkpoints",
    is_flag=True,
    help="Also delete the checkpoints: empty and delete the cluster's checkpoint bucket (of an adopted bucket, only "
    "the job namespace's objects). Lists what it holds and asks first, unless --yes.",
)
@dry_run_option
@json_option
@click.pass_obj
def down(app: Application, yes: bool, delete_checkpoints: bool, dry_run: bool, as_json: bool) -> None:
    """Delete the cluster and the state kept for it.

    Deleting a cluster that does not exist is not an error. Remote clusters need
    a confirmation (or --yes); the local backend stops etcd and removes
    state.json and etcd's data, keeping run outputs. On EKS backends the
    checkpoint bucket stays (jobs of a new cluster resume from it) unless
    --delete-checkpoints; the pods' IAM role goes with the cluster.
    """
    client = app.client
    backend = client.backend
    targets: list[str] = []
    if delete_checkpoints:
        targets += _checkpoints_to_delete(client)
    if not dry_run and not yes and not backend.runs_jobs:
        current = client.status()
        if current.state != "absent":
            targets.insert(0, f"cluster {current.cluster!r} ({backend.name})")
        if targets:
            if not sys.stdin.isatty():
                raise ConfigError(
                    "--yes",
                    f"deleting {' and '.join(targets)} needs a confirmation",
                    "pass --yes to delete without a prompt",
                )
            click.confirm(f"Delete {' and '.join(targets)}?", abort=True, err=True)
    from fsdp_sdk.cli.run_display import live_progress

    with live_progress(app, "deleting the cluster", enabled=not (dry_run or as_json)):
        status = client.down(dry_run=dry_run, delete_checkpoints=delete_checkpoints)
    echo_status(status, as_json=as_json, dry_run=dry_run)


def _checkpoints_to_delete(client: Client) -> list[str]:
    """Print what --delete-checkpoints deletes (objects and size per job prefix, on stderr); what the prompt names."""
    found = client.checkpoint_usage()
    if found is None:
        raise ConfigError(
            "--delete-checkpoints",
            f"backend {client.backend.name!r} keeps no checkpoint bucket",
            "leave --delete-checkpoints out",
        )
    store, usage = found
    if usage is None:
        click.echo(f"The checkpoint bucket s3://{store.bucket} does not exist: nothing to delete.", err=True)
        return []
    objects, size = sum(u.objects for u in usage), sum(u.bytes for u in usage)
    from fsdp_sdk.aws.checkpoint_bucket import BucketUsage

    where = (
        f"s3://{store.bucket}"
        if store.found == "ours"
        else f"s3://{store.bucket}/{store.prefix} (adopted bucket: kept)"
    )
    click.echo(f"--delete-checkpoints deletes {where}: {BucketUsage('', objects, size).summary()}", err=True)
    for entry in usage:
        click.echo(f"  {entry.line()}", err=True)
    if store.found == "ours":
        return [f"the checkpoint bucket s3://{store.bucket} ({objects} objects)"]
    return [f"the {objects} checkpoint objects under s3://{store.bucket}/{store.prefix}"]
