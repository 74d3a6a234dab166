"""``fsdp-sdk monitor``: install, remove and use the monitoring components plugins render.

The components (DCGM exporter, Prometheus, Grafana, htop/nvtop, CloudWatch) come from plugins
such as fsdp-sdk-observability through ``fsdp_sdk_monitoring_components``; these commands apply
them (server-side apply), read them back, and open what they serve.
"""

from __future__ import annotations

import sys

import click

from fsdp_sdk.cli.application import Application
from fsdp_sdk.cli.options import common_options, json_option, kube_options

__all__ = ["monitor"]


def _free_port() -> int:
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@click.group(short_help="Install and use GPU and training monitoring (DCGM, Prometheus, Grafana, CloudWatch).")
def monitor() -> None:
    """GPU and training metrics side by side: the NVIDIA DCGM exporter, Prometheus (or the cluster's Prometheus
    Operator), Grafana with the training dashboard, htop/nvtop on the nodes, and the CloudWatch Observability
    EKS add-on. The components come from plugins (pip install fsdp-sdk-observability).

    \b
    fsdp-sdk monitor install [COMPONENT...]   # every default component, or those named
    fsdp-sdk monitor status
    fsdp-sdk monitor open grafana             # port-forward and print the URL
    fsdp-sdk monitor top NODE [--nvtop]
    """


@monitor.command(short_help="Apply the monitoring components (idempotent).")
@common_options
@kube_options
@click.argument("components", nargs=-1, metavar="[COMPONENT...]")
@click.option("--dry-run", is_flag=True, help="Print the objects (and add-ons) that would be applied; apply nothing.")
@json_option
@click.pass_obj
def install(app: Application, components: tuple[str, ...], dry_run: bool, as_json: bool) -> None:
    """Server-side apply the components' objects in dependency order (namespaces, RBAC, configuration,
    services, workloads), generate Grafana's admin password into its Secret on the first install, and
    enable EKS add-ons (cloudwatch) with their IAM role. With no COMPONENT, every default component
    (cloudwatch only when named). Running it again changes nothing."""
    if dry_run:
        _print_plan(app, components, as_json)
        return
    monitoring = app.client.monitoring()
    selected = monitoring.select(components) if components else monitoring.defaults()
    applied = monitoring.install([c.name for c in selected], progress=app.progress)
    if as_json:
        app.echo_json(
            {
                "components": [c.name for c in selected],
                "applied": [f"{o.get('kind')}/{(o.get('metadata') or {}).get('name')}" for o in applied],
                "prometheus_operator": monitoring.config.observability.prometheus_operator,
            }
        )
        return
    click.echo(f"installed {', '.join(c.name for c in selected)}; 'fsdp-sdk monitor status' shows when they are ready")


def _print_plan(app: Application, components: tuple[str, ...], as_json: bool) -> None:

    monitoring = app.client.monitoring(connect=False)
    selected = monitoring.select(components) if components else monitoring.defaults()
    names = [c.name for c in selected]
    objects = [dict(o) for o in monitoring.objects(names)]
    addons = [c.eks_addon for c in selected if c.eks_addon is not None]
    if as_json:
        app.echo_json(
            {
                "components": names,
                "objects": objects,
                "eks_addons": [
                    {"name": a.name, "role": a.role_name, "policies": list(a.policy_arns), "needs": list(a.needs)}
                    for a in addons
                ],
            }
        )
        return
    for addon in addons:
        click.echo(
            f"# would enable the EKS add-on {addon.name} on {app.config.cluster.name} ({app.config.cluster.region}), "
            f"with IAM role {addon.role_name} ({', '.join(addon.policy_arns)}) for "
            f"{addon.namespace}/{addon.service_account} through EKS Pod Identity"
        )
    if objects:
        from fsdp_sdk.cli.output import to_yaml_documents

        click.echo(to_yaml_documents(objects), nl=False)


@monitor.command(short_help="Remove monitoring components.")
@common_options
@kube_options
@click.argument("components", nargs=-1, metavar="[COMPONENT...]")
@click.option("--dry-run", is_flag=True, help="Server-side dry run: say what would be deleted; delete nothing.")
@json_option
@click.pass_obj
def uninstall(app: Application, components: tuple[str, ...], dry_run: bool, as_json: bool) -> None:
    """Delete the components' objects in reverse order (the namespace is left: other software may use it)
    and disable their EKS add-ons (deleting the IAM role created for them). With no COMPONENT, every
    component but cloudwatch, which is removed only when named."""
    monitoring = app.client.monitoring()
    selected = monitoring.select(components) if components else monitoring.defaults()
    deleted = monitoring.uninstall([c.name for c in selected], dry_run=dry_run, progress=app.progress)
    if as_json:
        app.echo_json({"components": [c.name for c in selected], "deleted": deleted, "dry_run": dry_run})
        return
    verb = "would delete" if dry_run else "deleted"
    click.echo(f"{verb} {len(deleted)} object(s) of {', '.join(c.name for c in selected)}")


@monitor.command(short_help="Show whether the components are installed and ready.")
@common_options
@kube_options
@click.argument("components", nargs=-1, metavar="[COMPONENT...]")
@json_option
@click.pass_obj
def status(app: Application, components: tuple[str, ...], as_json: bool) -> None:
    """Read each component's objects from the API server (workloads: ready pods) and EKS add-ons from the
    EKS API. Exits 1 when something is missing or not ready. With no COMPONENT, the default components."""
    from fsdp_sdk.cli.output import table

    monitoring = app.client.monitoring()
    names = components or tuple(c.name for c in monitoring.defaults())
    result = monitoring.status(names)
    if as_json:
        app.echo_json(result.to_dict())
    else:
        rows = []
        for component in result.components:
            workloads = [o for o in component.objects if "desired" in o]
            pods = ", ".join(f"{o['name']} {o['ready']}/{o['desired']}" for o in workloads) or (
                component.addon["status"] if component.addon else "-"
            )
            state = "ready" if component.ready else "installed" if component.installed else "missing"
            rows.append((component.name, state, pods))
        click.echo(table(["component", "state", "ready"], rows))
        if result.prometheus_operator:
            click.echo("the cluster runs the Prometheus Operator: its Prometheus scrapes (ServiceMonitor/PodMonitor)")
        for component in result.components:
            for problem in component.problems:
                click.echo(f"problem: {component.name}: {problem}")
    if not result.healthy:
        raise click.exceptions.Exit(1)


@monitor.command(short_help="Open htop (or nvtop) on a node, in its DaemonSet's pod.")
@common_options
@kube_options
@click.argument("node")
@click.option("--nvtop", "tool", flag_value="nvtop", help="nvtop (the node's GPUs) instead of htop.")
@click.option("--htop", "tool", flag_value="htop", default=True, help="htop (the node's processes; the default).")
@click.option("--print-command", is_flag=True, help="Print the kubectl command instead of running it.")
@click.pass_obj
def top(app: Application, node: str, tool: str, print_command: bool) -> None:
    """Run htop (or nvtop with --nvtop) interactively in the node-tools pod on NODE, through
    'kubectl exec -it'. The pods share the node's process namespace, so htop shows the trainer's processes.
    NODE is a node name as 'kubectl get nodes' prints it."""
    import shlex
    import subprocess

    command = app.client.monitoring().top_command(node, tool)
    if print_command:
        click.echo(shlex.join(command))
        return
    code = subprocess.call(command)  # interactive: the terminal goes to kubectl
    if code:
        raise click.exceptions.Exit(code)


@monitor.command("open", short_help="Port-forward to Grafana or Prometheus and print the URL.")
@common_options
@kube_options
@click.argument("name", metavar="grafana|prometheus")
@click.option("--port", type=click.IntRange(0, 65535), default=0, help="Local port (default: a free one).")
@click.pass_obj
def open_(app: Application, name: str, port: int) -> None:
    """Forward a local port to the component's Service with 'kubectl port-forward', print the URL to open,
    and keep forwarding until Ctrl-C. Grafana's admin password is never printed: the line below the URL
    says how to read it from its Secret."""
    from fsdp_sdk.k8s.monitoring import PortForward

    monitoring = app.client.monitoring()
    local = port or _free_port()
    argv, url = monitoring.port_forward_command(name, local)
    forward = PortForward(argv, local, url).start()
    click.echo(url)
    hint = monitoring.endpoints()[name][1].login  # the component's own (Grafana's: where its password is)
    if hint:
        click.echo(hint, err=True)
    click.echo("forwarding; Ctrl-C stops", err=True)
    sys.stdout.flush()
    code = forward.wait()
    if code:
        raise click.exceptions.Exit(code)


@monitor.group(short_help="The Grafana dashboards the components provision.")
def dashboard() -> None:
    """The Grafana dashboards of the monitoring components."""


@dashboard.command("export", short_help="Write the dashboard JSON files.")
@common_options
@click.option(
    "-o",
    "--out",
    "out",
    metavar="PATH",
    default=".",
    show_default=True,
    help="A directory (one <uid>.json per dashboard) or, for one dashboard, a .json file.",
)
@json_option
@click.pass_obj
def export(app: Application, out: str, as_json: bool) -> None:
    """Write the dashboards the components provision into Grafana (the ConfigMaps labelled
    fsdp-sdk.io/grafana-dashboard) as JSON files, ready for Grafana's import dialog or your own
    provisioning. Pure: no cluster is contacted."""
    from fsdp_sdk.errors import ConfigError

    monitoring = app.client.monitoring(connect=False)
    dashboards = {
        key: text
        for obj in monitoring.objects()
        if obj.get("kind") == "ConfigMap"
        and ((obj.get("metadata") or {}).get("labels") or {}).get("fsdp-sdk.io/grafana-dashboard") == "true"
        for key, text in (obj.get("data") or {}).items()
        if key.endswith(".json")
    }
    if not dashboards:
        raise ConfigError(
            "dashboard", "no monitoring component provisions a dashboard", "pip install fsdp-sdk-observability"
        )
    from pathlib import Path

    target = Path(out)
    if target.suffix == ".json":
        if len(dashboards) > 1:
            raise ConfigError("--out", f"{len(dashboards)} dashboards do not fit in one file", "pass a directory")
        files = {target: next(iter(dashboards.values()))}
    else:
        files = {target / key: text for key, text in dashboards.items()}
    for path, text in files.items():
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(text if text.endswith("\n") else text + "\n", encoding="utf-8")
        except OSError as error:
            raise ConfigError("--out", f"cannot write {path} ({error.strerror})", "choose a writable path") from None
    if as_json:
        app.echo_json({"files": [str(p) for p in files]})
    else:
        for path in files:
            click.echo(f"wrote {path}")
