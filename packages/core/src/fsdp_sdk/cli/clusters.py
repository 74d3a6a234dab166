"""``fsdp-sdk clusters``: every cluster the state directory knows, on every backend, at a glance."""

from __future__ import annotations

import datetime as dt
from typing import TYPE_CHECKING, Any

import click

from fsdp_sdk.cli.application import Application
from fsdp_sdk.cli.options import common_options, json_option

if TYPE_CHECKING:
    from fsdp_sdk.clusters import ClusterSnapshot


@click.command(short_help="List every known cluster: backend, region, nodes, cost, jobs.")
@common_options
@json_option
@click.option(
    "--offline", is_flag=True, help="Show what was last recorded of each cluster; ask no backend (no credentials)."
)
@click.option("--all", "show_all", is_flag=True, help="Also list EKS clusters that were torn down ('down').")
@click.pass_obj
def clusters(app: Application, as_json: bool, offline: bool, show_all: bool) -> None:
    """List every cluster the state directory knows, on every backend (local included).

    For each: its name, backend, region, Kubernetes version and when its EKS standard support ends, GPU type,
    nodes now / at most, state, what it costs per hour now and has cost since 'up', its idle policy, and its
    running and waiting jobs. Each cluster is read from the same source as 'fsdp-sdk status' (its backend, with
    the credentials and tools it needs); where that is not possible (no credentials, the backend's plugin not
    installed) it shows what was last recorded, and when. 'status', 'up', 'scale' and 'down' record it.
    """
    from fsdp_sdk.clusters import known_clusters, table_rows

    config = app.config
    state_dir = config.cluster.state_dir
    known = known_clusters(state_dir)
    if not any(snapshot.backend == "local" for snapshot in known) and (state_dir / "local").is_dir():
        known.append(_local_placeholder(config.cluster.name))
    shown: list[ClusterSnapshot] = []
    for index, snapshot in enumerate(known, 1):
        if not offline:
            if not as_json:
                app.progress(f"[{index}/{len(known)}] {snapshot.backend} {snapshot.region} {snapshot.name}")
            snapshot = _refresh(app, snapshot)
        if snapshot.state == "absent" and snapshot.backend != "local" and not show_all:  # this machine stays
            continue
        shown.append(snapshot)
    if as_json:
        app.echo_json({"state_dir": str(state_dir), "clusters": [snapshot.to_dict() for snapshot in shown]})
        return
    if not shown:
        hidden = len(known) - len(shown)
        more = f" ({hidden} torn down: --all lists them)" if hidden else ""
        click.echo(f"no clusters known in {state_dir}{more}; 'fsdp-sdk up' creates one")
        return
    _echo_table(table_rows(shown, now=dt.datetime.now(dt.timezone.utc)))
    for snapshot in shown:
        if snapshot.note:
            click.echo(f"{snapshot.name} ({snapshot.backend}): {snapshot.note}")


def _local_placeholder(name: str) -> ClusterSnapshot:
    from fsdp_sdk.clusters import ClusterSnapshot

    return ClusterSnapshot(name, "local", "local", "unknown", dt.datetime.now(dt.timezone.utc))


def _refresh(app: Application, snapshot: ClusterSnapshot) -> ClusterSnapshot:
    """The cluster read from its backend now, or the record with why it could not be."""
    import dataclasses

    from fsdp_sdk.client import Client
    from fsdp_sdk.errors import FsdpSdkError
    from fsdp_sdk.plugins import get_plugins

    plugins = get_plugins()
    if snapshot.backend not in plugins.backends:
        return dataclasses.replace(snapshot, note=f"backend {snapshot.backend!r} is not installed here")
    overrides: dict[str, Any] = {"cluster.backend": snapshot.backend, "cluster.name": snapshot.name}
    if snapshot.region not in {"local", "?"}:
        overrides["cluster.region"] = snapshot.region
    if snapshot.instance_type:
        overrides["cluster.instance_type"] = snapshot.instance_type
    if snapshot.idle_minutes:  # what 'up' installed, not this shell's configuration
        overrides["cluster.idle_scale_to_zero_minutes"] = snapshot.idle_minutes
    try:
        client = Client.from_sources(
            app.config_file, app.env_file, overrides, plugins=plugins, progress=lambda _line: None
        )
        if client.backend.eks_cluster and not _has_credentials(client.config.cluster.region):
            return dataclasses.replace(snapshot, note=snapshot.note or "no AWS credentials here: last recorded state")
        return client.job_workflow.observe()
    except FsdpSdkError as error:
        return dataclasses.replace(snapshot, note=f"could not read it now ({error}): last recorded state")


def _has_credentials(region: str) -> bool:
    from fsdp_sdk.aws.session import aws_session

    try:
        return aws_session(region).get_credentials() is not None
    except Exception:  # a broken profile is the same as none here
        return False


def _echo_table(rows: list[dict[str, str]]) -> None:
    columns = list(rows[0])
    widths = {column: max(len(column), *(len(row[column]) for row in rows)) for column in columns}
    click.echo("  ".join(column.ljust(widths[column]) for column in columns).rstrip())
    for row in rows:
        click.echo("  ".join(row[column].ljust(widths[column]) for column in columns).rstrip())
