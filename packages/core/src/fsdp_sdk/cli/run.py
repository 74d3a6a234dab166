"""``fsdp-sdk run``: run the trainer to completion and print its summary."""

from __future__ import annotations

import json
import sys
import time

import click

from fsdp_sdk.cli.application import Application
from fsdp_sdk.cli.code_options import code_options
from fsdp_sdk.cli.options import (
    common_options,
    complete_run_names,
    dry_run_option,
    json_option,
    nodes_option,
    trainer_options,
    workers_option,
)


@click.command(short_help="Run the FSDP trainer and print its summary.")
@common_options
@nodes_option("; locally, simulated nodes")
@workers_option
@click.option(
    "--scale",
    "scale_first",
    is_flag=True,
    help="On a cluster with fewer nodes than the job needs, scale it to --nodes first (without: refused).",
)
@trainer_options()
@code_options
@click.option(
    "--name",
    "--run-id",
    "run_id",
    metavar="NAME",
    shell_complete=complete_run_names,
    help="Name of the run (local: its directory under runs/). Running a name again continues that run from its "
    "latest checkpoint. Default: a fresh <job.name>-<date>-<time>-<hex>.",
)
@click.option(
    "--resume",
    metavar="RUN_ID",
    shell_complete=complete_run_names,
    help="Continue local run RUN_ID from its latest checkpoint with the settings it was started with "
    "(settings given here win); 'fsdp-sdk runs' lists the runs. On a cluster: submit the job named RUN_ID again, "
    "replacing it; it resumes from its latest checkpoint (the checkpoint bucket, job.shared_storage_claim).",
)
@click.option(
    "--force",
    is_flag=True,
    help="Run even when the estimate says the job will not fit in the GPUs' memory (locally: this machine's).",
)
@dry_run_option
@json_option
@click.argument("trainer_args", nargs=-1, type=click.UNPROCESSED, metavar="[-- TRAINER OPTIONS | SCRIPT ARGS]")
@click.pass_obj
def run(
    app: Application,
    run_id: str | None,
    resume: str | None,
    scale_first: bool,
    force: bool,
    dry_run: bool,
    as_json: bool,
    trainer_args: tuple[str, ...],
) -> None:
    """Run the trainer on the cluster, show its progress, and print the trainer's summary.

    Trainer options go after '--' as on the trainer's command line
    (fsdp-sdk run -- --train.lr 1e-3 --parallel.api fsdp1) or through
    --set section.field=value. With --script PATH (or --module PKG.MOD) your
    own code runs on every rank instead, with what follows '--' as its
    arguments (fsdp-sdk run --script train.py -- --epochs 3); it reports its
    steps with fsdp_sdk.report(step=, loss=, tokens=) (docs/your-code.md).

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
    stdout carries only the trainer's per-step JSON lines, as they come, and
    everything else (progress, the trainer's log, the summary) goes to stderr.
    With --json, stdout carries only the summary, one JSON object with run_id
    and output_dir added.

    \b
    Running a finished named run again starts nothing and keeps its record;
    a larger --steps continues it. Locally, a run the estimate says will not
    fit in this machine's memory (host RAM, or each GPU's) is refused unless
    --force.

    On a cluster, a job the estimate says will not fit in its GPUs' memory is
    refused (see 'fsdp-sdk estimate'), unless --force; so is a job that needs
    more nodes than the cluster has now, unless --scale, which scales the
    cluster to --nodes first.
    """
    from fsdp_sdk.cli.run_display import PlainDisplay, TerminalDisplay, summary_lines
    from fsdp_sdk.errors import RunError

    if run_id is not None and resume is not None and run_id != resume:
        raise click.UsageError("--name and --resume name different runs; give one of them")
    terminal = not as_json and not dry_run and sys.stdout.isatty()
    display = TerminalDisplay() if terminal else PlainDisplay(output_to_stderr=as_json)
    app.progress_sink = display.progress
    client = app.client  # a cluster scaled to 0 by the idle controller: Client.run scales it back
    started: list[str] = []
    began = time.monotonic()
    try:
        result = client.run(
            trainer_args=trainer_args,
            run_id=run_id,
            resume=resume,
            force=force,
            scale=scale_first,
            dry_run=dry_run,
            on_event=display.event,
            on_started=lambda job: started.append(job.run_id if client.backend.runs_jobs else job.name),
        )
    except (KeyboardInterrupt, RunError) as exc:
        display.close()
        if not started:
            raise
        from fsdp_sdk.cli.run_display import stopped_lines

        for line in stopped_lines(client, started[0], exc):
            click.echo(line, err=True)
        if isinstance(exc, KeyboardInterrupt):
            sys.exit(130)  # said all there is: no "Aborted." after the hint
        raise  # the error, one line, last
    finally:
        display.close()
        app.progress_sink = None
    if dry_run:
        plan = result.plan
        if as_json:
            app.echo_json(plan.to_dict() if plan is not None else result.to_dict())
            return
        for line in plan.lines() if plan is not None else []:
            click.echo(line)
        return
    if as_json:
        summary = {"run_id": result.run_id, "output_dir": str(result.output_dir) if result.output_dir else None}
        click.echo(json.dumps({**summary, **result.summary}, separators=(",", ":"), default=str))
        return
    # the run's one duration: its record's, every segment's (what 'fsdp-sdk runs' shows), else the time waited
    duration = result.extra.get("duration_s")
    if not isinstance(duration, (int, float)):
        duration = time.monotonic() - began
    lines = summary_lines(
        result.run_id,
        result.summary,
        result.output_dir or "-",
        float(duration),
        segment_s=result.extra.get("segment_duration_s"),
        run_tokens_per_s=result.extra.get("run_tokens_per_s"),
        local=client.backend.runs_jobs,
    )
    for line in lines:
        click.echo(line, err=not terminal)  # piped, stdout holds only the per-step JSON lines
