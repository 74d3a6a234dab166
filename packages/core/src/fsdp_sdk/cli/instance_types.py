"""``fsdp-sdk instance-types``: the GPU instance types plugins provide."""

from __future__ import annotations

import click

from fsdp_sdk.cli.application import Application
from fsdp_sdk.cli.options import debug_option, json_option
from fsdp_sdk.cli.output import table


@click.command("instance-types", short_help="List the known GPU instance types.")
@json_option
@debug_option
@click.pass_obj
def instance_types(app: Application, as_json: bool) -> None:
    """List the instance types cluster.instance_type may name: GPUs, EFA, memory,
    dense BF16 peak, and on-demand price in us-east-1 (with the date it was read).
    """
    from fsdp_sdk.plugins import get_plugins

    loaded = get_plugins()
    registry = loaded.instance_types
    if as_json:
        app.echo_json([{**t.to_dict(), "plugin": registry.owner(t.name)} for t in registry])
        return
    rows = [
        (
            t.name,
            f"{t.gpu_count}x {t.gpu_model}",
            f"{t.gpu_memory_gib} GB",
            t.efa_interfaces,
            t.vcpus,
            f"{t.memory_gib} GiB",
            f"{t.bf16_tflops_per_gpu:g}",
            f"{t.on_demand_usd_per_hour:.2f}" if t.on_demand_usd_per_hour is not None else None,
            t.price_date,
            registry.owner(t.name),
        )
        for t in registry
    ]
    click.echo(
        table(
            [
                "name",
                "gpus",
                "gpu mem",
                "efa",
                "vcpus",
                "memory",
                "bf16 tflops/gpu",
                "usd/hour",
                "price date",
                "plugin",
            ],
            rows,
        )
    )
