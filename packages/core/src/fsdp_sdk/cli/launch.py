"""``fsdp-sdk launch``: from zero to a running job in one command (cluster, prerequisites, image, job, logs)."""

from __future__ import annotations

import json
import sys
import time
from typing import TYPE_CHECKING

import click

from fsdp_sdk.cli.application import Application
from fsdp_sdk.cli.code_options import code_options
from fsdp_sdk.cli.options import common_options, json_option, setting, trainer_options
from fsdp_sdk.errors import ConfigError

if TYPE_CHECKING:
    from fsdp_sdk.launch import LaunchPlan
    from fsdp_sdk.runs import JobRef, RunResult

__all__ = ["launch"]


def confirm(what: str, plan_cost: float | None, *, yes: bool) -> None:
    """Ask before paid resources are created: ``--yes`` skips it; without a terminal it is refused (exit 2)."""
    if yes:
        return
    cost = f" (${plan_cost:,.2f}/hour)" if plan_cost is not None else ""
    if not sys.stdin.isatty():
        raise ConfigError("--yes", f"{what}{cost} needs a confirmation", "pass --yes to go ahead without a prompt")
    click.confirm(f"{what[0].upper()}{what[1:]}{cost}?", abort=True, err=True)


@click.command(short_help="Create what is missing, run the job and follow it (one command).")
@common_options
@click.option(
    "--nodes",
    type=click.IntRange(min=1),
    expose_value=False,
    callback=setting("job.num_workers"),
    help="Workers (nodes) of the job (job.num_workers).",
)
@trainer_options()
@code_options
@click.option("-y", "--yes", is_flag=True, help="Do not ask for confirmation (needed without a terminal).")
@click.option("--down", is_flag=True, help="Delete the cluster when the job ends, successful or not.")
@click.option("--force", is_flag=True, help="Launch even when the estimate says the job will not fit in GPU memory.")
@click.option(
    "--tokens",
    metavar="N",
    help="Show the time and cost of training N tokens (2e9, 500M, 1.5B) instead of the requested steps.",
)
@click.option(
    "--trainer-src",
    type=click.Path(file_okay=False),
    default=None,
    help="The trainer package the image is built from (default: the installed fsdp_trainer's).",
)
@click.option(
    "--build-arg",
    "build_args",
    metavar="NAME=VALUE",
    multiple=True,
    help="Override a pinned version of the image, e.g. --build-arg EFA_INSTALLER_VERSION=1.38.1. Repeatable.",
)
@click.option(
    "--tool",
    type=click.Choice(["docker", "finch", "buildah"]),
    default=None,
    help="Container tool (default: the first of docker, finch, buildah on PATH).",
)
@click.option(
    "--dry-run",
    is_flag=True,
    help="Print what would be done and what it costs, change nothing: the whole plan even without AWS credentials "
    "or tools (what it could not read is marked 'not known'; exit 1 when a preflight check would stop it).",
)
@json_option
@click.argument("trainer_args", nargs=-1, type=click.UNPROCESSED, metavar="[-- TRAINER OPTIONS]")
@click.pass_obj
def launch(
    app: Application,
    yes: bool,
    down: bool,
    force: bool,
    tokens: str | None,
    trainer_src: str | None,
    build_args: tuple[str, ...],
    tool: str | None,
    dry_run: bool,
    as_json: bool,
    trainer_args: tuple[str, ...],
) -> None:
    """Plan, confirm, then do everything a job needs and follow it to its summary.

    \b
    1. the plan: preflight checks, the cluster's hourly cost and the job's estimate
       (memory fit, time and cost to train the requested steps);
    2. a confirmation (--yes skips it; without a terminal --yes is required);
    3. 'up' when the cluster is absent, its GPU nodes scaled back up when they are
       at 0, the prerequisites installed when missing;
    4. the image built and pushed to ECR only when its content changed: its tag is
       a hash of the Dockerfile and the trainer package (src-<hash>);
    5. the job submitted, the leader's log followed with the progress display, and
       the summary; with --down the cluster is deleted after it.

    Ctrl-C detaches: the job keeps running; 'fsdp-sdk job logs -f NAME' follows it
    again and 'fsdp-sdk job stop NAME' stops it. With --backend local the job runs
    on this machine (like 'fsdp-sdk run') and costs nothing.
    """
    args: dict[str, str] = {}
    for item in build_args:
        name, sep, value = item.partition("=")
        if not sep or not name:
            raise click.BadParameter(f"{item!r} is not NAME=VALUE", param_hint="--build-arg")
        args[name] = value
    count = None
    if tokens is not None:
        from fsdp_sdk.estimate import parse_tokens

        count = parse_tokens(tokens)
    client = app.client
    plan = client.launch_plan(
        trainer_args=trainer_args,
        down=down,
        force=force,
        tokens=count,
        trainer_src=trainer_src,
        build_args=args,
        collect=dry_run,
    )
    if dry_run:
        blocked = plan.blocked
        if as_json:
            app.echo_json({**plan.to_dict(), "blocked": blocked})
        else:
            for line in plan.lines():
                click.echo(line)
            if blocked:
                click.echo(f"'fsdp-sdk launch' would stop: {len(blocked)} preflight check(s) failed")
            click.echo("(dry run: nothing changed)")
        if blocked:
            raise click.exceptions.Exit(1)  # as 'up --dry-run': a check would stop it
        return
    for line in plan.lines():
        click.echo(line, err=True)
    if plan.creates_paid_resources:
        confirm(f"launch {plan.job} on cluster {plan.cluster!r}", plan.hourly_cost_usd, yes=yes)
    _launch(app, plan, trainer_src=trainer_src, build_args=args, tool=tool, force=force, as_json=as_json)


def _launch(
    app: Application,
    plan: LaunchPlan,
    *,
    trainer_src: str | None,
    build_args: dict[str, str],
    tool: str | None,
    force: bool,
    as_json: bool,
) -> None:
    from fsdp_sdk.cli.run_display import PlainDisplay, TerminalDisplay, summary_lines

    terminal = not as_json and sys.stdout.isatty()
    display = TerminalDisplay() if terminal else PlainDisplay(output_to_stderr=as_json)
    app.progress_sink = display.progress
    submitted: list[JobRef] = []
    began: list[float] = []

    def on_submitted(job: JobRef) -> None:
        submitted.append(job)
        began.append(time.monotonic())

    def on_finished(result: RunResult | None, error: BaseException | None) -> None:
        display.close()
        if result is None:
            return
        if as_json:
            output = str(result.output_dir) if result.output_dir else None
            click.echo(json.dumps({"run_id": result.run_id, "output_dir": output, **result.summary}, default=str))
            return
        wall = result.summary.get("wall_time_s")
        elapsed = wall if isinstance(wall, float) else time.monotonic() - (began[0] if began else time.monotonic())
        for line in summary_lines(result.run_id, result.summary, result.output_dir or "-", elapsed):
            click.echo(line)

    client = app.client
    try:
        outcome = client.launch(
            plan,
            trainer_src=trainer_src,
            build_args=build_args,
            tool=tool,
            force=force,
            on_event=display.event,
            on_submitted=on_submitted,
            on_finished=on_finished,
        )
    except KeyboardInterrupt:
        display.close()
        if submitted and not plan.local:
            name = submitted[0].name
            cost = f", at ${plan.hourly_cost_usd:,.2f}/hour" if plan.hourly_cost_usd is not None else ""
            click.echo(
                f"Detached from job {name}: it keeps running on cluster {plan.cluster!r}{cost}.\n"
                f"  follow it again:  fsdp-sdk job logs -f {name}\n"
                f"  stop it:          fsdp-sdk job stop {name}"
                + ("\n  the cluster was kept (--down applies when launch sees the job end)" if plan.down else ""),
                err=True,
            )
            raise click.exceptions.Exit(130) from None
        if submitted:
            run_id = submitted[0].run_id
            click.echo(f"Run {run_id} interrupted; continue it with: fsdp-sdk run --resume {run_id}", err=True)
        raise
    finally:
        display.close()
        app.progress_sink = None
    if outcome.deleted_cluster:
        click.echo(f"Deleted cluster {plan.cluster!r} (--down).", err=True)
