"""The trainer's container image: Dockerfile, build context, build, and push to Amazon ECR.

The image is a CUDA devel base with the AWS EFA installer (libfabric) and the
aws-ofi-nccl plugin built against it, as in the seed, then PyTorch, python-etcd
(torch's etcd-v2 rendezvous client) and the trainer package from
``packages/trainer``. Every version is a build argument with a pinned default
(:data:`BUILD_ARGS`); ``--build-arg NAME=VALUE`` overrides one.

The build tool is the first of ``docker``, ``finch``, ``buildah`` on ``PATH``
(or the one named). Pushing logs the tool in to ECR with a token from
``ecr.get_authorization_token`` (boto3; ``AWS_ENDPOINT_URL`` is honoured),
creates the repository with scan-on-push when it is missing, tags the local
image ``<image>:<tag>`` as ``<registry>/<image>:<tag>`` and pushes it.
"""

from __future__ import annotations

import base64
import os
import re
import shutil
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from fsdp_sdk.errors import ConfigError
from fsdp_sdk.tools import ToolNotFoundError, run_tool

if TYPE_CHECKING:
    from fsdp_sdk.config import Config

__all__ = [
    "BUILD_ARGS",
    "BUILD_TOOLS",
    "ImageBuild",
    "ImagePush",
    "build_image",
    "content_tag",
    "ecr_registry",
    "find_build_tool",
    "find_trainer_source",
    "image_in_ecr",
    "prepare_context",
    "push_image",
    "render_dockerfile",
]

#: Build tools, in order of preference.
BUILD_TOOLS = ("docker", "finch", "buildah")

#: Build arguments and their pinned defaults.
BUILD_ARGS: dict[str, str] = {
    "BASE_IMAGE": "nvidia/cuda:12.8.1-devel-ubuntu22.04",
    "EFA_INSTALLER_VERSION": "1.38.1",
    "AWS_OFI_NCCL_VERSION": "1.14.0",
    "TORCH_VERSION": "2.13.0",
    "TORCH_INDEX_URL": "https://download.pytorch.org/whl/cu128",
    "PYTHON_ETCD_VERSION": "0.4.5",
}

_BODY = """\
FROM ${BASE_IMAGE}
ARG EFA_INSTALLER_VERSION
ARG AWS_OFI_NCCL_VERSION
ARG TORCH_VERSION
ARG TORCH_INDEX_URL
ARG PYTHON_ETCD_VERSION

ENV DEBIAN_FRONTEND=noninteractive
RUN apt-get update \\
 && apt-get install -y --no-install-recommends \\
      autoconf automake ca-certificates curl git libhwloc-dev libtool make \\
      python3 python3-dev python3-pip python-is-python3 \\
 && rm -rf /var/lib/apt/lists/*

# libfabric with the EFA provider; no kernel module (the host has it), no MPI.
RUN cd /tmp \\
 && curl -fsSL https://efa-installer.amazonaws.com/aws-efa-installer-${EFA_INSTALLER_VERSION}.tar.gz | tar xz \\
 && cd aws-efa-installer \\
 && ./efa_installer.sh -y --skip-kmod --skip-limit-conf --no-verify \\
 && cd / && rm -rf /tmp/aws-efa-installer

# NCCL's network plugin for libfabric/EFA.
RUN cd /tmp \\
 && curl -fsSL https://github.com/aws/aws-ofi-nccl/releases/download/v${AWS_OFI_NCCL_VERSION}/aws-ofi-nccl-${AWS_OFI_NCCL_VERSION}.tar.gz | tar xz \\
 && cd aws-ofi-nccl-${AWS_OFI_NCCL_VERSION} \\
 && ./configure --prefix=/opt/aws-ofi-nccl --with-libfabric=/opt/amazon/efa --with-cuda=/usr/local/cuda \\
      --enable-platform-aws --disable-tests \\
 && make -j"$(nproc)" && make install \\
 && cd / && rm -rf /tmp/aws-ofi-nccl-${AWS_OFI_NCCL_VERSION}
ENV LD_LIBRARY_PATH=/opt/aws-ofi-nccl/lib:/opt/amazon/efa/lib:${LD_LIBRARY_PATH}
ENV PATH=/opt/amazon/efa/bin:${PATH}

RUN python -m pip install --no-cache-dir --upgrade pip \\
 && python -m pip install --no-cache-dir "torch==${TORCH_VERSION}" --index-url "${TORCH_INDEX_URL}" \\
 && python -m pip install --no-cache-dir "python-etcd==${PYTHON_ETCD_VERSION}"

COPY trainer/ /opt/fsdp-trainer/
RUN python -m pip install --no-cache-dir "/opt/fsdp-trainer[hub,prometheus]"

WORKDIR /workspace
CMD ["torchrun", "-m", "fsdp_trainer", "--help"]
"""


def render_dockerfile(build_args: Mapping[str, str] | None = None) -> str:
    """The trainer Dockerfile; ``build_args`` change the pinned defaults written in it."""
    args = {**BUILD_ARGS, **(build_args or {})}
    head = [
        "# syntax=docker/dockerfile:1",
        "# The fsdp-sdk trainer image, written by 'fsdp-sdk image build'. Versions are build arguments.",
    ]
    head += [f"ARG {name}={value}" for name, value in args.items()]
    return "\n".join(head) + "\n" + _BODY


def find_trainer_source(explicit: str | os.PathLike[str] | None = None) -> Path:
    """The trainer package directory (holding ``pyproject.toml`` and ``src/fsdp_trainer``).

    Looks at ``explicit``, then where the installed ``fsdp_trainer`` lives (an
    editable install from ``packages/trainer``), then ``./packages/trainer``.

    :raises ConfigError: none of them is the trainer package.
    """
    candidates: list[Path] = []
    if explicit:
        candidates.append(Path(explicit))
    else:
        import importlib.util

        spec = importlib.util.find_spec("fsdp_trainer")
        if spec is not None and spec.origin:
            candidates.append(Path(spec.origin).resolve().parents[2])
        candidates.append(Path.cwd() / "packages" / "trainer")
    for candidate in candidates:
        if (candidate / "pyproject.toml").is_file() and (candidate / "src" / "fsdp_trainer").is_dir():
            return candidate
    where = str(candidates[0]) if explicit else "the installed fsdp_trainer or ./packages/trainer"
    raise ConfigError(
        "--trainer-src",
        f"no trainer package found at {where}",
        "pass the directory that holds the trainer's pyproject.toml and src/fsdp_trainer",
    )


def prepare_context(context: Path, trainer_src: Path, build_args: Mapping[str, str] | None = None) -> Path:
    """Write the Dockerfile and a copy of the trainer package into ``context``; return the Dockerfile path."""
    context.mkdir(parents=True, exist_ok=True)
    target = context / "trainer"
    if target.exists():
        shutil.rmtree(target)
    ignore = shutil.ignore_patterns("__pycache__", "*.pyc", "*.egg-info", ".pytest_cache", "build", "dist")
    target.mkdir()
    for item in ("pyproject.toml", "README.md", "LICENSE"):
        if (trainer_src / item).is_file():
            shutil.copy2(trainer_src / item, target / item)
    shutil.copytree(trainer_src / "src", target / "src", ignore=ignore)
    dockerfile = context / "Dockerfile"
    dockerfile.write_text(render_dockerfile(build_args))
    (context / ".dockerignore").write_text("**/__pycache__\n**/*.pyc\n")
    return dockerfile


_CONTEXT_IGNORED = ("__pycache__", "*.pyc", "*.egg-info", ".pytest_cache", "build", "dist")


def _context_files(trainer_src: Path) -> list[Path]:
    """The trainer files :func:`prepare_context` copies, in a stable order."""
    import fnmatch

    files = [
        trainer_src / item for item in ("pyproject.toml", "README.md", "LICENSE") if (trainer_src / item).is_file()
    ]
    for root, dirs, names in os.walk(trainer_src / "src"):
        dirs[:] = sorted(d for d in dirs if not any(fnmatch.fnmatch(d, p) for p in _CONTEXT_IGNORED))
        files += [Path(root) / n for n in sorted(names) if not any(fnmatch.fnmatch(n, p) for p in _CONTEXT_IGNORED)]
    return files


def content_tag(trainer_src: str | os.PathLike[str] | None = None, build_args: Mapping[str, str] | None = None) -> str:
    """The image tag that names the build's content: ``src-`` and 16 hex digits of a SHA-256 over the Dockerfile
    (with its build arguments) and every file of the trainer package that goes into the build context.

    The same sources give the same tag, so an image already in the registry under it need not be built again.

    :raises ConfigError: no trainer package (see :func:`find_trainer_source`).
    """
    import hashlib

    source = find_trainer_source(trainer_src)
    digest = hashlib.sha256(render_dockerfile(build_args).encode())
    for path in _context_files(source):
        digest.update(b"\0" + path.relative_to(source).as_posix().encode() + b"\0")
        digest.update(path.read_bytes())
    return f"src-{digest.hexdigest()[:16]}"


def find_build_tool(name: str | None = None) -> str:
    """The container tool to use: ``name`` if given, else the first of :data:`BUILD_TOOLS` on ``PATH``.

    :raises ConfigError: the tool (or every known tool) is missing.
    """
    for tool in (name,) if name else BUILD_TOOLS:
        if shutil.which(tool):
            return tool
    if name:
        raise ToolNotFoundError(name)
    raise ConfigError(
        "image build",
        f"no container build tool found on PATH (looked for {', '.join(BUILD_TOOLS)})",
        "install Docker, Finch or Buildah",
    )


def _local_ref(config: Config) -> str:
    return f"{config.job.image}:{config.job.tag}"


def _build_command(tool: str, context: Path, dockerfile: Path, ref: str, build_args: Mapping[str, str]) -> list[str]:
    command = [tool, "build"] if tool != "buildah" else [tool, "build", "--layers"]
    command += ["-t", ref, "-f", str(dockerfile)]
    for name, value in build_args.items():
        command += ["--build-arg", f"{name}={value}"]
    return [*command, str(context)]


@dataclass
class ImageBuild:
    """What :func:`build_image` did (or would do)."""

    tool: str
    context: Path
    dockerfile: str
    command: list[str]
    image: str
    dry_run: bool = False


def build_image(
    config: Config,
    *,
    context: Path,
    trainer_src: str | os.PathLike[str] | None = None,
    tool: str | None = None,
    build_args: Mapping[str, str] | None = None,
    dry_run: bool = False,
    progress: Callable[[str], None] | None = None,
) -> ImageBuild:
    """Write the build context and build ``<job.image>:<job.tag>``, streaming the tool's output to ``progress``.

    With ``dry_run`` nothing is written or run: the result holds the Dockerfile and the command.

    :raises ConfigError: no build tool, or no trainer package.
    :raises ToolError: the build failed (the message holds the tool's last lines).
    """
    chosen = find_build_tool(tool)
    source = find_trainer_source(trainer_src)
    overrides = dict(build_args or {})
    unknown = sorted(set(overrides) - set(BUILD_ARGS))
    if unknown:
        raise ConfigError("--build-arg", f"unknown build argument {unknown[0]}", f"use one of {', '.join(BUILD_ARGS)}")
    dockerfile_text = render_dockerfile(overrides)
    ref = _local_ref(config)
    command = _build_command(chosen, context, context / "Dockerfile", ref, overrides)
    result = ImageBuild(
        tool=chosen, context=context, dockerfile=dockerfile_text, command=command, image=ref, dry_run=dry_run
    )
    if dry_run:
        return result
    prepare_context(context, source, overrides)
    run_tool(command, step=f"build the image {ref}", progress=progress)
    return result


# --------------------------------------------------------------------------- push

_ECR_HOST = re.compile(r"^(\d{12})\.dkr\.ecr\.([a-z0-9-]+)\.amazonaws\.com(\.cn)?$")


@dataclass
class ImagePush:
    """What :func:`push_image` did (or would do)."""

    registry: str
    repository: str
    remote: str
    created_repository: bool
    commands: list[list[str]] = field(default_factory=list)
    dry_run: bool = False


def ecr_registry(config: Config) -> tuple[str | None, str]:
    """``(registry id, region)`` of ``job.registry``: ``(None, cluster.region)`` when it is unset (the account's).

    :raises ConfigError: ``job.registry`` is not an Amazon ECR registry.
    """
    if not config.job.registry:
        return None, config.cluster.region
    match = _ECR_HOST.match(config.job.registry.strip().rstrip("/"))
    if not match:
        raise ConfigError(
            "job.registry",
            f"{config.job.registry!r} is not an Amazon ECR registry",
            "use <account>.dkr.ecr.<region>.amazonaws.com, or push with your own tool",
        )
    return match.group(1), match.group(2)


def image_in_ecr(config: Config, tag: str, *, ecr: Any = None) -> bool:
    """Whether ECR holds ``<job.image>:<tag>`` in the registry :func:`push_image` would push to (read only).

    A repository that does not exist yet holds nothing.

    :raises ConfigError: ``job.registry`` is not an ECR registry.
    :raises AwsError: ECR refused the request (access denied names the IAM action).
    """
    from fsdp_sdk.aws.session import aws_client, aws_errors, error_code

    registry_id, region = ecr_registry(config)
    ecr = ecr or aws_client("ecr", region)
    request: dict[str, Any] = {"repositoryName": config.job.image, "imageIds": [{"imageTag": tag}]}
    if registry_id:
        request["registryId"] = registry_id
    with aws_errors("ecr", f"look up the image {config.job.image}:{tag}"):
        try:
            found = ecr.describe_images(**request)
        except Exception as error:
            if error_code(error) in ("ImageNotFoundException", "RepositoryNotFoundException"):
                return False
            raise
    return bool(found.get("imageDetails"))


def push_image(
    config: Config,
    *,
    tool: str | None = None,
    dry_run: bool = False,
    ecr: Any = None,
    progress: Callable[[str], None] | None = None,
) -> ImagePush:
    """Log in to ECR, create the repository if missing (scan on push), tag and push the image.

    The registry is ``job.registry`` when set (it must be an ECR registry), else
    the one ECR's authorization token names for the account. With ``dry_run``
    ECR is only read (token, repository lookup) and no command runs.

    :param ecr: a boto3 ECR client (default: the shared one for the registry's region).
    :raises ConfigError: no tool, ``job.registry`` is not an ECR registry, or no AWS credentials.
    :raises AwsError: ECR refused a request (the message names the IAM action when access was denied).
    :raises ToolError: a tool command failed.
    """
    from fsdp_sdk.aws.session import aws_client, aws_errors, error_code

    chosen = find_build_tool(tool)
    registry_id, region = ecr_registry(config)
    ecr = ecr or aws_client("ecr", region)
    repository = config.job.image
    with aws_errors("ecr", f"log in to ECR and find the repository {repository}"):
        auth = ecr.get_authorization_token(**({"registryIds": [registry_id]} if registry_id else {}))
        data = auth["authorizationData"][0]
        user, _, password = base64.b64decode(data["authorizationToken"]).decode().partition(":")
        registry = (
            config.job.registry.strip().rstrip("/")
            if config.job.registry
            else re.sub(r"^https?://", "", data["proxyEndpoint"]).rstrip("/")
        )
        created = False
        try:
            ecr.describe_repositories(repositoryNames=[repository])
        except Exception as error:
            if error_code(error) != "RepositoryNotFoundException":
                raise
            created = True
            if not dry_run:
                ecr.create_repository(
                    repositoryName=repository,
                    imageScanningConfiguration={"scanOnPush": True},
                    imageTagMutability="MUTABLE",
                )
    remote = f"{registry}/{repository}:{config.job.tag}"
    commands = [
        [chosen, "login", "--username", user or "AWS", "--password-stdin", registry],
        [chosen, "tag", _local_ref(config), remote],
        [chosen, "push", remote],
    ]
    result = ImagePush(
        registry=registry,
        repository=repository,
        remote=remote,
        created_repository=created,
        commands=commands,
        dry_run=dry_run,
    )
    if dry_run:
        return result
    login, tag, push = commands
    run_tool(login, step=f"log in to {registry}", progress=progress, input=password, secrets=[password])
    run_tool(tag, step=f"tag the image as {remote}", progress=progress)
    run_tool(push, step=f"push {remote}", progress=progress)
    return result
