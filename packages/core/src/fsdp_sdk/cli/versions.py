"""``fsdp-sdk versions``: every version fsdp-sdk pins, when and where it was checked, and its state today."""

from __future__ import annotations

import click

from fsdp_sdk.cli.application import Application
from fsdp_sdk.cli.options import debug_option, json_option

__all__ = ["versions"]


@click.command(short_help="List every pinned version and its state today.")
@click.option(
    "--on",
    "on_day",
    metavar="YYYY-MM-DD",
    default=None,
    help="The day the states are for (default: today).",
)
@json_option
@debug_option
@click.pass_obj
def versions(app: Application, on_day: str | None, as_json: bool) -> None:
    """List the components fsdp-sdk pins (images, the job controllers and the APIs they speak, the image's
    network stack) with the date each was checked and where, and whether a newer release was seen; then the
    Kubernetes versions EKS offers, with their support state (current, newer available, in extended support,
    past end of life) and the control plane's price per hour on that day.
    """
    import datetime

    from fsdp_sdk import pins
    from fsdp_sdk.cli.output import table
    from fsdp_sdk.errors import ConfigError

    try:
        on = datetime.date.fromisoformat(on_day) if on_day else pins.today()
    except ValueError:
        raise ConfigError("--on", f"{on_day!r} is not a date", "write it as YYYY-MM-DD, like 2026-12-02") from None
    report = pins.versions_report(on)
    if as_json:
        app.echo_json(report)
        return
    components = [
        (
            c["name"],
            c["version"],
            c["state"] if c["state"] == "current" else f"{c['state']}: {c['latest']}",
            c["checked"],
            c["source"],
        )
        for c in report["components"]
    ]
    click.echo(table(["component", "version", "state", "checked", "source"], components))
    click.echo("")
    calendar = [
        (
            k["version"],
            _kubernetes_state(k),
            f"{k['control_plane_usd_per_hour']:.2f}" if k["control_plane_usd_per_hour"] is not None else "-",
            k["released"],
            k["end_of_standard_support"],
            k["end_of_extended_support"],
        )
        for k in report["kubernetes"]
    ]
    headers = ["kubernetes", "state", "usd/hour", "released", "end of standard", "end of extended"]
    click.echo(table(headers, calendar))
    click.echo(
        f"states on {report['on']}; default cluster.kubernetes_version {report['default_kubernetes_version']} "
        f"(the table was checked on {report['table_checked']}: 'fsdp-sdk versions --json' has each source's notes)"
    )


def _kubernetes_state(release: dict[str, object]) -> str:
    state = str(release["state"])
    if state in ("current", "newer available"):
        return f"{state}: standard support until {release['until']}"
    if state == "in extended support":
        return f"{state} until {release['until']}"
    return f"{state} since {release['end_of_extended_support']}"
