"""``fsdp-sdk config``: inspect the resolved configuration."""

from __future__ import annotations

import click

from fsdp_sdk.cli.application import Application
from fsdp_sdk.cli.options import common_options, json_option
from fsdp_sdk.cli.output import to_yaml


@click.group(short_help="Inspect the configuration.")
def config() -> None:
    """Inspect the configuration assembled from defaults, the YAML file, .env,
    FSDP_SDK_* variables and flags."""


@config.command(short_help="Print the resolved configuration (secrets redacted).")
@common_options
@json_option
@click.option("--origins", is_flag=True, help="Also list where each non-default value came from.")
@click.pass_obj
def show(app: Application, as_json: bool, origins: bool) -> None:
    """Print the resolved configuration as YAML (or JSON), with derived values
    filled in (GPU and EFA counts from the instance type) and secrets redacted."""
    resolved = app.client.config
    data = resolved.to_dict()
    if origins:
        data["origins"] = {path: f"{o.name} ({o.source})" for path, o in sorted(resolved.origins.items())}
    if as_json:
        app.echo_json(data)
        return
    click.echo(to_yaml(data))
