"""``fsdp-sdk run``: run the trainer to completion and print its summary."""

from __future__ import annotations

import json
import sys
import time

import click

from fsdp_sdk.cli.application import Application
from fsdp_sdk.cli.options import common_options, dry_run_option, json_option, setting, trainer_options


@click.command(short_help="Run the FSDP trainer and print its summary.")
@common_options
@click.option(
    "--nodes",
    type=click.IntRange(min=1),
    expose_value=False,
    callback=setting("job.num_workers"),
    help="Workers (nodes; locally, simulated nodes) for this run (job.num_workers).",
)
@trainer_options()
@click.option(
    "--name",
    "--run-id",
    "run_id",
    metavar="NAME",
    help="Name of the run (local: its directory under runs/). Running a name again continues that run from its "
    "latest checkpoint. Default: a fresh <job.name>-<date>-<time>-<hex>.",
)
@click.option(
    "--resume",
    metavar="RUN_ID",
    help="Continue local run RUN_ID from its latest checkpoint with the settings it was started with "
    "(settings given here win); 'fsdp-sdk runs' lists the runs. On a cluster: submit the job named RUN_ID again, "
    "replacing it; it resumes from its latest checkpoint (the checkpoint bucket, job.shared_storage_claim).",
)
@click.option("--force", is_flag=True, help="Run even when the estimate says the job will not fit in the GPUs' memory.")
@dry_run_option
@json_option
@click.argument("trainer_args", nargs=-1, type=click.UNPROCESSED, metavar="[-- TRAINER OPTIONS]")
@click.pass_obj
def run(
    app: Application,
    run_id: str | None,
    resume: str | None,
    force: bool,
    dry_run: bool,
    as_json: bool,
    trainer_args: tuple[str, ...],
) -> None:
    """Run the trainer on the cluster, show its progress, and print the trainer's summary.

    Trainer options go after '--' as on the trainer's command line
    (fsdp-sdk run -- --train.lr 1e-3 --parallel.api fsdp1) or through
    --set section.field=value.

    \b
    On the local backend, one torchrun agent per simulated node runs on this
    machine, all joining the local etcd (started if 'fsdp-sdk up' was not run,
    and left running). Checkpoints are saved about ten times a run unless
    trainer.checkpoint.every_steps says otherwise (local.checkpoint_every_steps);
    a rank that fails is restarted from the latest one within job.max_restarts.
    Ctrl-C or SIGTERM stops every agent (exit 130) and prints the command that
    continues the run.

    \b
    On a terminal the run shows what it is doing and one line per step; piped,
    the trainer's lines (per-step JSON) are printed as they come. With --json,
    stdout carries only the summary, one JSON object with run_id and output_dir
    added; the log and progress go to stderr.

    On a cluster, a job the estimate says will not fit in its GPUs' memory is
    refused (see 'fsdp-sdk estimate'), unless --force.
    """
    from fsdp_sdk.cli.run_display import PlainDisplay, TerminalDisplay, summary_lines
    from fsdp_sdk.errors import RunError

    if run_id is not None and resume is not None and run_id != resume:
        raise click.UsageError("--name and --resume name different runs; give one of them")
    terminal = not as_json and not dry_run and sys.stdout.isatty()
    display = TerminalDisplay() if terminal else PlainDisplay(output_to_stderr=as_json)
    app.progress_sink = display.progress
    client = app.client
    started: list[str] = []
    began = time.monotonic()
    try:
        result = client.run(
            trainer_args=trainer_args,
            run_id=run_id,
            resume=resume,
            force=force,
            dry_run=dry_run,
            on_event=display.event,
            on_started=lambda job: started.append(job.run_id if client.backend.runs_jobs else job.name),
        )
    except (KeyboardInterrupt, RunError) as exc:
        display.close()
        if started:
            what = "interrupted" if isinstance(exc, KeyboardInterrupt) else "failed"
            click.echo(f"Run {started[0]} {what}; continue it with: fsdp-sdk run --resume {started[0]}", err=True)
        raise
    finally:
        display.close()
        app.progress_sink = None
    if dry_run:
        if as_json:
            app.echo_json(result.to_dict())
            return
        click.echo(f"Would run {result.job.name} (run id {result.run_id}) on backend {result.job.backend}:")
        import shlex

        for command in result.commands:
            click.echo("  " + shlex.join(command))
        for note in (result.extra.get("plan") or {}).get("notes", []):
            click.echo(f"  ({note})")
        return
    if as_json:
        summary = {"run_id": result.run_id, "output_dir": str(result.output_dir) if result.output_dir else None}
        click.echo(json.dumps({**summary, **result.summary}, separators=(",", ":"), default=str))
        return
    wall = result.summary.get("wall_time_s")
    for line in summary_lines(
        result.run_id,
        result.summary,
        result.output_dir or "-",
        wall if isinstance(wall, float) else time.monotonic() - began,
    ):
        click.echo(line)
