"""``fsdp-sdk run``: run the trainer to completion and print its summary."""

from __future__ import annotations

import json
import shlex

import click

from fsdp_sdk.cli.application import Application
from fsdp_sdk.cli.options import common_options, complete_presets, dry_run_option, json_option, setting
from fsdp_sdk.cli.output import key_values


@click.command(short_help="Run the FSDP trainer and print its summary.")
@common_options
@click.option(
    "--nodes",
    type=click.IntRange(min=1),
    expose_value=False,
    callback=setting("job.num_workers"),
    help="Workers (nodes; locally, simulated nodes) for this run (job.num_workers).",
)
@click.option(
    "--nproc-per-node",
    type=click.IntRange(min=1),
    expose_value=False,
    callback=setting("job.nproc_per_node"),
    help="Trainer processes per node (job.nproc_per_node; default: GPUs per node, 1 locally).",
)
@click.option(
    "--preset",
    shell_complete=complete_presets,
    metavar="NAME",
    expose_value=False,
    callback=setting("trainer.model.preset"),
    help="Model preset (trainer.model.preset), e.g. tiny.",
)
@click.option(
    "--steps",
    type=click.IntRange(min=1),
    expose_value=False,
    callback=setting("trainer.train.steps"),
    help="Optimizer steps (trainer.train.steps).",
)
@click.option("--run-id", metavar="ID", help="Rendezvous/run id (default: a fresh one; never reuse one).")
@click.option("--force", is_flag=True, help="Run even when the estimate says the job will not fit in the GPUs' memory.")
@dry_run_option
@json_option
@click.argument("trainer_args", nargs=-1, type=click.UNPROCESSED, metavar="[-- TRAINER OPTIONS]")
@click.pass_obj
def run(
    app: Application, run_id: str | None, force: bool, dry_run: bool, as_json: bool, trainer_args: tuple[str, ...]
) -> None:
    """Run the trainer on the cluster, stream the leader's log, and print the trainer's summary.

    Trainer options go after '--' as on the trainer's command line
    (fsdp-sdk run -- --train.lr 1e-3 --parallel.api fsdp1) or through
    --set section.field=value.

    \b
    On the local backend, one torchrun agent per simulated node runs on this
    machine, all joining the local etcd (started if 'fsdp-sdk up' was not run,
    and left running). Ctrl-C or SIGTERM stops every agent (exit 130).

    With --json, stdout carries only the summary, as one JSON object; the log
    and progress go to stderr.

    On a cluster, a job the estimate says will not fit in its GPUs' memory is
    refused (see 'fsdp-sdk estimate'), unless --force.
    """
    client = app.client

    def show(line: str) -> None:
        click.echo(line, err=as_json)

    result = client.run(trainer_args=trainer_args, run_id=run_id, dry_run=dry_run, on_output=show, force=force)
    if dry_run:
        if as_json:
            app.echo_json(result.to_dict())
            return
        click.echo(f"Would run {result.job.name} (run id {result.run_id}) on backend {result.job.backend}:")
        for command in result.commands:
            click.echo("  " + shlex.join(command))
        return
    if as_json:
        click.echo(json.dumps(result.summary, separators=(",", ":"), default=str))
        return
    click.echo(f"Run {result.run_id} finished; outputs in {result.output_dir or '-'}")
    # The resolved trainer configuration is long: it stays in summary.json (and in --json output).
    click.echo(key_values({k: v for k, v in result.summary.items() if k != "config"}))
    if "config" in result.summary and result.output_dir:
        click.echo(f"resolved configuration: {result.output_dir}/summary.json")
