"""``fsdp-sdk runs``: the runs of the local backend, with their state and figures."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import click

from fsdp_sdk.cli.application import Application
from fsdp_sdk.cli.options import common_options, json_option
from fsdp_sdk.cli.output import table
from fsdp_sdk.cli.run_display import format_duration, format_started


@click.command(short_help="List the local runs: state, steps, loss, tokens/s, duration.")
@common_options
@json_option
@click.pass_obj
def runs(app: Application, as_json: bool) -> None:
    """List the runs of the local backend, oldest first.

    \b
    STATE is running, succeeded, failed, interrupted (Ctrl-C or SIGTERM), or lost
    (its fsdp-sdk process was killed). 'fsdp-sdk run --resume ID' continues a run
    from its latest checkpoint. COST is "local": runs on this machine are not billed.

    \b
    Figures are the whole run's, every segment of a continued run included, as
    'job report' and the run's summary give them: TOKENS/S the mean per process
    after the warm-up steps, STARTED its first start (UTC), DURATION every
    segment's time. With --json, a list of objects (run_id, state, steps,
    total_steps, final_loss, tokens_per_s, run_started_at, run_duration_s, and
    started_at and duration_s of the latest segment, output_dir, error, restarts,
    cost...). Below the table, one line per restart and per failure says why.
    """
    records = app.client.runs()
    if as_json:
        app.echo_json([{**r.to_dict(), "cost": {"usd": 0.0, "local": True}} for r in records])
        return
    if not records:
        click.echo("no runs yet ('fsdp-sdk run' starts one)")
        return
    rows = [
        (
            r.run_id,
            r.state,
            f"{r.steps if r.steps is not None else '-'}/{r.total_steps if r.total_steps is not None else '?'}",
            f"{r.final_loss:.4f}" if isinstance(r.final_loss, (int, float)) else None,
            f"{r.tokens_per_s:,.0f}" if isinstance(r.tokens_per_s, (int, float)) else None,
            format_started(getattr(r, "first_started_at", None)),
            format_duration(getattr(r, "run_duration_s", r.duration_s)),
            "local",
            r.output_dir,
        )
        for r in records
    ]
    headers = ["id", "state", "steps", "loss", "tokens/s", "started", "duration", "cost", "directory"]
    click.echo(table(headers, rows))
    for line in _causes(records):
        click.echo(line)


def _causes(records: Sequence[Any]) -> list[str]:
    """Below the table: why each run was restarted, and why a failed one failed (the record's own lines)."""
    lines = []
    for r in records:
        for number, restart in enumerate(getattr(r, "restarts", None) or [], 1):
            lines.append(f"{r.run_id}: restart {number}: {restart.get('cause')}")
        error = getattr(r, "error", None)
        if r.state == "failed" and error:
            lines.append(f"{r.run_id}: failed: {error}")
    return lines
