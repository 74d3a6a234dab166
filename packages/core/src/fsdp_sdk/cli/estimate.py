"""``fsdp-sdk estimate``: memory per GPU, speed, cost and scaling of a training job, before it runs."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any, TypeVar

import click

from fsdp_sdk.cli.application import Application
from fsdp_sdk.cli.options import (
    common_options,
    complete_instance_types,
    json_option,
    model_options,
    nodes_option,
    setting,
    setting_option,
)

if TYPE_CHECKING:
    from fsdp_sdk.estimate import Estimate

F = TypeVar("F", bound=Callable[..., Any])


def _both(*paths: str) -> Callable[[click.Context, click.Parameter, Any], Any]:
    """An option callback storing one value at several configuration paths."""
    callbacks = [setting(path) for path in paths]

    def callback(ctx: click.Context, param: click.Parameter, value: Any) -> Any:
        for each in callbacks:
            each(ctx, param, value)
        return value

    return callback


def _job_options(function: F) -> F:
    options = [
        model_options(
            "Preset (llama2-70b...) or a Hugging Face config.json / model directory; default: "
            "trainer.model.preset or trainer.model.name_or_path ('fsdp-sdk run --model' names the same presets).",
            metavar="NAME|PATH",
            path=None,
        ),
        setting_option(
            "--instance-type",
            metavar="TYPE",
            shell_complete=complete_instance_types,
            path="cluster.instance_type",
            help="Instance type of the nodes (cluster.instance_type); any registered one.",
        ),
        nodes_option(),
        setting_option(
            "--gpus-per-node",
            type=click.IntRange(min=1),
            path="job.nproc_per_node",
            help="GPUs (trainer processes) per node (job.nproc_per_node; default: all of the type's).",
        ),
        setting_option(
            "--api",
            type=click.Choice(["fsdp2", "fsdp1"]),
            path="trainer.parallel.api",
            help="FSDP API (trainer parallel.api).",
        ),
        setting_option(
            "--sharding",
            type=click.Choice(["full_shard", "hybrid_shard", "shard_grad_op", "no_shard"], case_sensitive=False),
            path="trainer.parallel.sharding",
            help="Sharding strategy (trainer parallel.sharding).",
        ),
        setting_option(
            "--precision",
            type=click.Choice(["bf16", "fp16", "fp32"]),
            path="trainer.precision.mode",
            help="Training precision (trainer precision.mode).",
        ),
        setting_option(
            "--reduce-dtype",
            type=click.Choice(["bf16", "fp32"]),
            path="trainer.precision.reduce_dtype",
            help="Gradient reduction dtype (trainer precision.reduce_dtype; default fp32).",
        ),
        setting_option(
            "--ac",
            type=click.Choice(["none", "selective", "full"]),
            path="trainer.ac.mode",
            help="Activation checkpointing (trainer ac.mode).",
        ),
        setting_option(
            "--ac-every",
            type=click.IntRange(min=1),
            path="trainer.ac.every",
            help="selective: one block in N is checkpointed (trainer ac.every).",
        ),
        setting_option(
            "--micro-batch",
            type=click.IntRange(min=1),
            path="trainer.train.micro_batch_size",
            help="Sequences per GPU per forward (trainer train.micro_batch_size).",
        ),
        setting_option(
            "--grad-accum",
            type=click.IntRange(min=1),
            path="trainer.train.grad_accum_steps",
            help="Micro-batches per optimizer step (trainer train.grad_accum_steps).",
        ),
        setting_option(
            "--seq-len",
            type=click.IntRange(min=1),
            path="trainer.data.seq_len",
            help="Tokens per sequence (trainer data.seq_len).",
        ),
        click.option(
            "--compile/--no-compile",
            default=None,
            expose_value=False,
            callback=_both("trainer.compile.enabled", "trainer.compile.loss"),
            help="Compiled blocks and loss (trainer compile.enabled and compile.loss).",
        ),
        setting_option(
            "--fp8/--no-fp8",
            default=None,
            path="trainer.fp8.enabled",
            help="Float8 linears (trainer fp8.enabled; Hopper-class GPUs).",
        ),
        setting_option(
            "--auto",
            "auto",
            is_flag=True,
            default=None,
            path="trainer.auto.enabled",
            help="Let the trainer's --auto choose micro-batch, checkpointing and compile, as it would here.",
        ),
        click.option(
            "--mfu",
            type=float,
            metavar="FRACTION",
            help="MFU the compute runs at (default: the trainer's measured one for the GPU model, scaled to "
            "these settings).",
        ),
        click.option(
            "--network-efficiency",
            type=float,
            metavar="FRACTION",
            help="Share of the instance's nominal network bandwidth collectives reach (default 0.8); fit it to a "
            "measured 'fsdp-sdk bench scale'.",
        ),
        click.option(
            "--tokens",
            metavar="COUNT",
            default="1B",
            show_default=True,
            help="Tokens to train, for the time and cost to train them (1e9, 300B, 2T).",
        ),
    ]
    for option in reversed(options):
        function = option(function)
    return function


@click.command(short_help="Estimate memory per GPU, speed and cost of a training job.")
@common_options
@_job_options
@click.option(
    "--recommend",
    is_flag=True,
    help="Rank the sharding / checkpointing / micro-batch combinations that fit, fastest first.",
)
@click.option("--top", type=click.IntRange(min=1), default=10, show_default=True, help="Rows --recommend shows.")
@json_option
@click.argument("trainer_args", nargs=-1, type=click.UNPROCESSED, metavar="[-- TRAINER OPTIONS]")
@click.pass_obj
def estimate(
    app: Application,
    model: str | None,
    mfu: float | None,
    network_efficiency: float | None,
    tokens: str,
    recommend: bool,
    top: int,
    as_json: bool,
    trainer_args: tuple[str, ...],
) -> None:
    """Estimate a training job before paying for it: per GPU the parameter, gradient and optimizer-state shards,
    the unsharded blocks in flight, activations and the total against the GPU's memory; a step's time from compute
    at an MFU and from FSDP's all-gathers and reduce-scatters over NVLink and EFA; tokens/s, time and cost to train,
    and weak scaling from 1 node to --nodes. Nothing is started; the model is the trainer's own (its --auto uses it).

    Settings come from the configuration (-c, --set, trainer options after --) and these flags, e.g.

    \b
      fsdp-sdk estimate --model llama2-70b --instance-type p4de.24xlarge --nodes 4 --ac full --seq-len 4096
      fsdp-sdk estimate --model ./Llama-3.2-3B/config.json --instance-type p5.48xlarge --recommend
    """
    from fsdp_sdk.config import parse_trainer_args
    from fsdp_sdk.estimate import parse_tokens

    count = parse_tokens(tokens)
    overrides = {s.path.removeprefix("trainer."): s.value for s in parse_trainer_args(trainer_args)}
    client = app.client
    if recommend:
        found = client.recommend(
            model=model, trainer_overrides=overrides, mfu=mfu, tokens=count, network_efficiency=network_efficiency
        )
        if as_json:
            candidates = [{**e.to_dict(), "trainer_args": recommended_trainer_args(e)} for e in found[:top]]
            app.echo_json({"candidates": candidates, "fitting": len(found)})
        else:
            _echo_recommendations(found[:top], len(found))
        if not found:
            raise click.exceptions.Exit(1)
        return
    est = client.estimate(
        model=model, trainer_overrides=overrides, mfu=mfu, tokens=count, network_efficiency=network_efficiency
    )
    if as_json:
        app.echo_json(est.to_dict())
        return
    _echo_estimate(est)


def recommended_trainer_args(est: Estimate) -> list[str]:
    """The trainer options that apply the combination ``est`` of ``--recommend`` (the other settings stay as
    configured): sharding, activation checkpointing, micro-batch and, for compiled runs, the memory budget."""
    s = est.settings
    args = ["--parallel.sharding", str(s["sharding"]), "--ac.mode", str(s["ac_mode"])]
    if s["ac_mode"] == "selective":
        args += ["--ac.every", str(s["ac_every"])]
    args += ["--train.micro_batch_size", str(s["micro_batch_size"])]
    if s["compile"]:
        args += ["--compile.memory_budget", f"{s['memory_budget']:g}"]
    return args


def _gib(value: float | None) -> str:
    return "-" if value is None else f"{value:,.1f}"


def _count(tokens: float) -> str:
    for scale, unit in ((1e12, "T"), (1e9, "B"), (1e6, "M")):
        if tokens >= scale:
            return f"{tokens / scale:,.4g}{unit}"
    return f"{tokens:,.0f}"


def _duration(hours: float) -> str:
    if hours < 1:
        return f"{hours * 60:.0f} min"
    if hours < 48:
        return f"{hours:.1f} h"
    return f"{hours / 24:.1f} days"


def _echo_estimate(est: Estimate) -> None:
    from fsdp_sdk.cli.output import table

    m, sp, cost = est.memory, est.speed, est.cost
    click.echo(est.describe())
    click.echo()
    rows = [
        ("parameters (shard)", _gib(m.parameters_gib), _gib(m.parameters_gib)),
        ("gradients (shard)", "-", _gib(m.gradients_gib)),
        ("optimizer state (shard)", _gib(m.optimizer_gib), _gib(m.optimizer_gib)),
        ("unsharded blocks in flight", _gib(m.gathered_gib), _gib(m.step_buffers_gib)),
        ("activations", _gib(m.activations_gib), "-"),
        ("loss and hidden-state buffers", _gib(m.buffers_gib), "-"),
        ("total", _gib(m.forward_peak_gib), _gib(m.step_peak_gib)),
    ]
    click.echo(table(["memory per GPU, GiB", "forward/backward", "optimizer step"], rows))
    verdict = (
        f"fits, {m.headroom_gib:.1f} GiB to spare"
        if m.fits
        else f"DOES NOT FIT: {-m.headroom_gib:.1f} GiB over (try --recommend)"
    )
    click.echo(
        f"peak {m.peak_gib:.1f} GiB ({m.peak_phase}) of {m.usable_gib:.1f} GiB usable "
        f"({m.memory_fraction:.0%} of {m.device_gib:g} GiB): {verdict}"
    )
    if est.auto is not None:
        click.echo(f"--auto: {est.auto.get('error') or est.auto.get('chosen')}")
    click.echo()
    if sp is None:
        click.echo(f"speed: not estimated ({est.speed_note})")
    else:
        click.echo(
            f"step {sp.step_s:.3g} s: compute {sp.compute_s:.3g} s + exposed communication "
            f"{sp.exposed_communication_s:.3g} s (the collectives alone take {sp.communication_s:.3g} s)"
        )
        click.echo(
            f"{sp.tokens_per_s:,.0f} tokens/s ({sp.tokens_per_s_per_gpu:,.0f} per GPU, {sp.tokens_per_step:,} per step); "
            f"MFU {sp.mfu:.1%} (compute at {sp.compute_mfu:.1%})"
        )
        comms = "; ".join(
            f"{c['kind']} {c['phase']} {c['gib_per_gpu']:,.1f} GiB {c['seconds']:.3g} s" for c in sp.collectives
        )
        if comms:
            click.echo(f"collectives per step and GPU: {comms}")
        if cost.hours_to_train is not None:
            click.echo(f"time to train {_count(cost.tokens)} tokens: {_duration(cost.hours_to_train)}")
    if cost.usd_per_hour is None:
        click.echo(f"cost: no price ({cost.price_note})")
    else:
        nodes = f"{est.nodes} node{'s' if est.nodes != 1 else ''}"
        line = f"cost: ${cost.usd_per_hour:,.2f}/hour for {nodes} ({cost.price_note})"
        if cost.usd_per_billion_tokens is not None and cost.usd_to_train is not None:
            line += (
                f"; ${cost.usd_per_billion_tokens:,.2f} per billion tokens, ${cost.usd_to_train:,.0f} to train "
                f"{est.model.name} on {_count(cost.tokens)} tokens (--tokens)"
            )
        click.echo(line)
    plane = cost.control_plane
    if plane is not None and plane.support != "standard":
        click.echo(
            f"warning: Kubernetes {plane.kubernetes_version} is in EKS {plane.support} support until {plane.until}: "
            f"its control plane costs ${plane.usd_per_hour:.2f}/h ('fsdp-sdk versions' lists the versions in "
            "standard support)",
            err=True,
        )
    if len(est.scaling) > 1:
        click.echo()
        scaling_rows = [
            (
                p.nodes,
                p.gpus,
                "yes" if p.fits else "no",
                _gib(p.peak_gib),
                None if p.tokens_per_s is None else f"{p.tokens_per_s:,.0f}",
                None if p.tokens_per_s_per_gpu is None else f"{p.tokens_per_s_per_gpu:,.0f}",
                None if p.efficiency is None else f"{p.efficiency:.1%}",
                None if p.usd_per_billion_tokens is None else f"{p.usd_per_billion_tokens:,.2f}",
            )
            for p in est.scaling
        ]
        headers = ["nodes", "gpus", "fits", "peak GiB", "tokens/s", "per GPU", "efficiency", "$/B tokens"]
        click.echo("weak scaling (the same per-GPU batch):")
        click.echo(table(headers, scaling_rows))
    click.echo()
    click.echo("assumptions:")
    for line in est.assumptions:
        click.echo(f"  - {line}")


def _echo_recommendations(found: list[Estimate], fitting: int) -> None:
    from fsdp_sdk.cli.output import table

    if not found:
        click.echo(
            "nothing fits: no sharding / checkpointing / micro-batch combination stays within the usable memory;"
            " use more nodes or GPUs with more memory"
        )
        return
    click.echo(f"{found[0].where()}: {fitting} combinations fit, fastest first")
    rows = []
    for rank, est in enumerate(found, 1):
        s, sp = est.settings, est.speed
        ac = s["ac_mode"] if s["ac_mode"] != "selective" else f"selective/{s['ac_every']}"
        rows.append(
            (
                rank,
                s["sharding"],
                ac,
                s["micro_batch_size"],
                f"{s['memory_budget']:g}",
                _gib(est.memory.peak_gib),
                f"{sp.step_s:.3g}" if sp else None,
                f"{sp.tokens_per_s:,.0f}" if sp else None,
                f"{sp.tokens_per_s_per_gpu:,.0f}" if sp else None,
                f"{sp.mfu:.1%}" if sp else None,
                None if est.cost.usd_per_billion_tokens is None else f"{est.cost.usd_per_billion_tokens:,.2f}",
            )
        )
    headers = [
        "#",
        "sharding",
        "ac",
        "micro batch",
        "budget",
        "peak GiB",
        "step s",
        "tokens/s",
        "per GPU",
        "MFU",
        "$/B tokens",
    ]
    click.echo(table(headers, rows))
    click.echo(
        "budget: compile.memory_budget, the share of activation memory compiled blocks keep for backward "
        "(1: all of it; below 1 the cheapest operations are recomputed to make room for a larger micro batch)"
    )
    import shlex

    args = recommended_trainer_args(found[0])
    click.echo(f"apply #1: fsdp-sdk run [options] -- {shlex.join(args)}")
    sets = " ".join(f"--set {key[2:]}={value}" for key, value in zip(args[::2], args[1::2], strict=True))
    click.echo(f"  (on any command, e.g. job submit: {sets})")
