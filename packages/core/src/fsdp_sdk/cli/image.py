"""``fsdp-sdk image``: build the trainer image and push it to Amazon ECR."""

from __future__ import annotations

import click

from fsdp_sdk.cli.application import Application
from fsdp_sdk.cli.options import F, common_options, setting

__all__ = ["image"]

_TOOL = click.option(
    "--tool",
    type=click.Choice(["docker", "finch", "buildah"]),
    default=None,
    help="Container tool (default: the first of docker, finch, buildah on PATH).",
)


def _image_options(function: F) -> F:
    """Add ``--tag`` and ``--image`` (``job.tag``, ``job.image``) to a command."""
    function = click.option(
        "--tag", metavar="TAG", expose_value=False, callback=setting("job.tag"), help="Image tag (job.tag)."
    )(function)
    return click.option(
        "--image",
        metavar="NAME",
        expose_value=False,
        callback=setting("job.image"),
        help="Image repository name (job.image).",
    )(function)


@click.group(short_help="Build the trainer image and push it to ECR.")
def image() -> None:
    """Build the trainer's container image (CUDA, EFA, aws-ofi-nccl, PyTorch, the trainer) and push it to ECR."""


@image.command(short_help="Write the Dockerfile and build the image.")
@common_options
@_image_options
@_TOOL
@click.option(
    "--context",
    "context_dir",
    type=click.Path(file_okay=False),
    default=".fsdp-sdk/image",
    show_default=True,
    help="Build context directory to write.",
)
@click.option(
    "--trainer-src",
    type=click.Path(file_okay=False),
    default=None,
    help="The trainer package directory (default: the installed fsdp_trainer's, or ./packages/trainer).",
)
@click.option(
    "--build-arg",
    "build_args",
    metavar="NAME=VALUE",
    multiple=True,
    help="Override a pinned version, e.g. --build-arg EFA_INSTALLER_VERSION=1.38.1. Repeatable.",
)
@click.option("--dry-run", is_flag=True, help="Print the Dockerfile and the build command; write and run nothing.")
@click.pass_obj
def build(
    app: Application,
    tool: str | None,
    context_dir: str,
    trainer_src: str | None,
    build_args: tuple[str, ...],
    dry_run: bool,
) -> None:
    """Write a Dockerfile and a copy of the trainer package into the build context, and build
    <job.image>:<job.tag> with docker, finch or buildah."""
    from pathlib import Path  # imported here: --help does not need it

    args = {}
    for item in build_args:
        name, sep, value = item.partition("=")
        if not sep or not name:
            raise click.BadParameter(f"{item!r} is not NAME=VALUE", param_hint="--build-arg")
        args[name] = value
    result = app.client.build_image(
        context=Path(context_dir),
        trainer_src=Path(trainer_src) if trainer_src else None,
        tool=tool,
        build_args=args,
        dry_run=dry_run,
    )
    if dry_run:
        click.echo(result.dockerfile, nl=False)
        import shlex

        click.echo(f"# would run: {shlex.join(result.command)}")
        return
    click.echo(f"built {result.image} with {result.tool} (context {result.context})")


@image.command(short_help="Push the image to Amazon ECR.")
@common_options
@_image_options
@_TOOL
@click.option("--dry-run", is_flag=True, help="Read ECR and print the commands; create and push nothing.")
@click.pass_obj
def push(app: Application, tool: str | None, dry_run: bool) -> None:
    """Log in to ECR (token from ecr:GetAuthorizationToken), create the repository if missing
    (scan on push), tag <job.image>:<job.tag> for the registry and push it.

    The registry is job.registry (REGISTRY in .env) when set, else the account's
    default ECR registry in cluster.region. AWS credentials come from the usual
    boto3 sources; AWS_ENDPOINT_URL is honoured.
    """
    result = app.client.push_image(tool=tool, dry_run=dry_run)
    if dry_run:
        if result.created_repository:
            click.echo(f"# would create ECR repository {result.repository} (scan on push)")
        for command in result.commands:
            stdin = " (password on stdin)" if "--password-stdin" in command else ""
            import shlex

            click.echo(f"# would run: {shlex.join(command)}{stdin}")
        return
    created = " (repository created)" if result.created_repository else ""
    click.echo(f"pushed {result.remote}{created}; set job.registry={result.registry} to run it")
