"""``fsdp-sdk prereqs``: install and check what training jobs need on the cluster (etcd, Training Operator)."""

from __future__ import annotations

import click

from fsdp_sdk.cli.application import Application
from fsdp_sdk.cli.options import common_options, json_option, kube_options

__all__ = ["prereqs"]


@click.group(short_help="Install and check etcd and the Kubeflow job controller.")
def prereqs() -> None:
    """Prepare a cluster for training jobs: etcd (rendezvous) and the Kubeflow job controller (the Training
    Operator, or Kubeflow Trainer v2 with --api trainjob)."""


@prereqs.command(short_help="Install etcd and the Training Operator (idempotent).")
@common_options
@kube_options
@click.option("--skip-operator", is_flag=True, help="Do not install the Training Operator (it is already there).")
@click.option(
    "--operator-version",
    metavar="TAG",
    default=None,
    help="Training Operator release tag (default: the pinned one, see 'prereqs install --dry-run').",
)
@click.option(
    "--api",
    type=click.Choice(["pytorchjob", "trainjob"]),
    default=None,
    help="The job API to prepare for: pytorchjob (Training Operator v1.9) or trainjob (Kubeflow Trainer v2.3 with "
    "JobSet and fsdp-sdk's runtime). Default: job.api (pytorchjob).",
)
@click.option(
    "--queue",
    is_flag=True,
    help="Also install Kueue (pinned) with a ClusterQueue sized to the GPU node group and a LocalQueue in "
    "job.namespace: jobs then wait their turn instead of leaving Pending pods.",
)
@click.option(
    "--dry-run", is_flag=True, help="Print what would be applied as YAML (and the kubectl commands); apply nothing."
)
@click.pass_obj
def install(
    app: Application,
    skip_operator: bool,
    operator_version: str | None,
    api: str | None,
    queue: bool,
    dry_run: bool,
) -> None:
    """Apply etcd (Deployment and Service, v2 API on) with server-side apply, then install the
    Kubeflow Training Operator from its upstream kustomize overlay with 'kubectl apply --server-side -k'.

    Running it again changes nothing.
    """
    import shlex

    from fsdp_sdk.cli.output import to_yaml_documents

    api = api or app.client.config.job.api
    if dry_run:
        setup = app.client.prereqs(connect=False)
        prerequisites = setup.prerequisites(
            operator=not skip_operator, operator_version=operator_version, api=api, queue=queue
        )
        for prerequisite in prerequisites:
            for command in prerequisite.commands(kubeconfig=setup.kubeconfig, context=setup.context):
                click.echo(f"# would run: {shlex.join(command)}")
        if queue:
            from fsdp_sdk.k8s import queue as kueue

            click.echo(
                f"# then: enable Kueue's integrations {', '.join(kueue.FRAMEWORKS)} in {kueue.KUEUE_NAMESPACE}/"
                f"{kueue.KUEUE_CONFIGMAP} and restart deployment/{kueue.KUEUE_DEPLOYMENT} (when not enabled yet)"
            )
        click.echo(to_yaml_documents([dict(o) for p in prerequisites for o in (*p.objects, *p.after)]), nl=False)
        return
    app.client.install_prereqs(operator=not skip_operator, operator_version=operator_version, api=api, queue=queue)
    click.echo("prerequisites installed; 'fsdp-sdk prereqs status' shows when they are ready")


@prereqs.command(short_help="Show whether etcd and the job controller are installed and healthy.")
@common_options
@kube_options
@click.option(
    "--api",
    type=click.Choice(["pytorchjob", "trainjob"]),
    default=None,
    help="The job API to check for: pytorchjob (Training Operator) or trainjob (Kubeflow Trainer v2, JobSet and "
    "fsdp-sdk's runtime). Default: job.api (pytorchjob).",
)
@json_option
@click.pass_obj
def status(app: Application, api: str | None, as_json: bool) -> None:
    """Report the etcd deployment (ready replicas) and service, then the job controller of the job API: the
    Training Operator deployment in the kubeflow namespace and the PyTorchJob CRD; or, with --api trainjob, the
    Kubeflow Trainer controller in kubeflow-system, the TrainJob and ClusterTrainingRuntime CRDs, JobSet's
    controller and fsdp-sdk's ClusterTrainingRuntime (with the metrics port it declares).
    Exits 1 when something is missing or not ready."""
    from fsdp_sdk.cli.output import key_values

    result = app.client.prereq_status(api=api)
    if as_json:
        app.echo_json(result.to_dict())
    else:
        data = result.to_dict()
        problems = data.pop("problems")
        click.echo(key_values(data))
        for problem in problems:
            click.echo(f"problem: {problem}")
    if not result.healthy:
        raise click.exceptions.Exit(1)
