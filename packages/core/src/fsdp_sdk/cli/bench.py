"""``fsdp-sdk bench``: measurements of the configured job on the cluster (``bench scale``: a node-count sweep)."""

from __future__ import annotations

import click

from fsdp_sdk.cli.application import Application
from fsdp_sdk.cli.options import NODES_HELP, common_options, json_option, trainer_options

__all__ = ["bench"]


@click.group(short_help="Measure the configured job: a node-count scaling sweep.")
def bench() -> None:
    """Measure the configured training job on the cluster."""


@bench.command(short_help="Weak-scaling sweep over node counts, with CSV, JSON and a chart.")
@common_options
@click.option(
    "--nodes",
    "nodes",
    required=True,
    metavar="N,N,...",
    help=f"Node counts to measure, e.g. 1,2,4,8,16: at each, the {NODES_HELP[0].lower()}{NODES_HELP[1:]}.",
)
@click.option(
    "--out",
    required=True,
    type=click.Path(file_okay=False),
    help="Directory of the results (scaling.json, scaling.csv, scaling.png); a sweep recorded there is continued.",
)
@trainer_options("Optimizer steps per point (trainer.train.steps).")
@click.option("--restart", is_flag=True, help="Discard the points recorded in --out and measure every count again.")
@click.option("--retry-failed", is_flag=True, help="Run the recorded failed points again.")
@click.option("--force", is_flag=True, help="Run points the estimate says will not fit in the GPUs' memory.")
@json_option
@click.argument("trainer_args", nargs=-1, type=click.UNPROCESSED, metavar="[-- TRAINER OPTIONS]")
@click.pass_obj
def scale(
    app: Application,
    nodes: str,
    out: str,
    restart: bool,
    retry_failed: bool,
    force: bool,
    as_json: bool,
    trainer_args: tuple[str, ...],
) -> None:
    """Run the configured job at each node count with the same per-GPU batch (weak scaling) and record tokens/s
    (total and per GPU), MFU, step time, peak memory and efficiency against the smallest count, beside the estimate.

    On a cluster backend each point scales the GPU node group, submits the job, waits for it and reads the
    trainer's summary; on the local backend each point runs that many simulated nodes. Results are written after
    every point; run the same command again to continue an interrupted sweep. A failed point is recorded and the
    sweep goes on (exit 1 at the end).

    \b
      fsdp-sdk bench scale --nodes 1,2,4,8,16 --out results/llama2-7b-p5 -- --model.preset llama2-7b
    """
    from fsdp_sdk.scaling import parse_node_counts, run_sweep

    counts = parse_node_counts(nodes)
    client = app.client

    def show(line: str) -> None:
        click.echo(line, err=True)

    sweep = run_sweep(
        client,
        counts,
        out,
        trainer_args=trainer_args,
        restart=restart,
        retry_failed=retry_failed,
        force=force,
        on_output=show,
    )
    warnings = sweep.warnings
    for warning in warnings:
        app.progress(warning)
    wanted = [p for p in sweep.points if p["nodes"] in counts]
    if as_json:
        app.echo_json(sweep.to_dict())
    else:
        _echo_points(wanted)
        click.echo(f"results: {sweep.json_path}, {sweep.csv_path}" + ("" if warnings else f", {sweep.chart_path}"))
    if any(p["status"] != "ok" for p in wanted):
        raise click.exceptions.Exit(1)


def _echo_points(points: list[dict]) -> None:
    from fsdp_sdk.cli.output import table

    def num(value: float | None, fmt: str) -> str | None:
        return None if value is None else format(value, fmt)

    rows = [
        (
            p["nodes"],
            p["gpus"],
            p["status"],
            num(p.get("tokens_per_s"), ",.0f"),
            num(p.get("tokens_per_s_per_gpu"), ",.0f"),
            num(p.get("mfu"), ".1%"),
            num(p.get("step_time_s"), ".3g"),
            num(p.get("peak_mem_gib"), ".1f"),
            num(p.get("efficiency"), ".1%"),
            num(p.get("estimated_tokens_per_s_per_gpu"), ",.0f"),
            num(p.get("estimated_efficiency"), ".1%"),
        )
        for p in points
    ]
    headers = [
        "nodes",
        "gpus",
        "status",
        "tokens/s",
        "per GPU",
        "MFU",
        "step s",
        "peak GiB",
        "efficiency",
        "est. per GPU",
        "est. efficiency",
    ]
    click.echo(table(headers, rows))
