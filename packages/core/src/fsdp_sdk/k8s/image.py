"""The trainer's container image: Dockerfile, build context, build, and push to Amazon ECR.

The image is a CUDA devel base with the AWS EFA installer, which brings libfabric and the
aws-ofi-nccl plugin built for it (the image builds no plugin of its own), GDRCopy's library,
then PyTorch with the NCCL its wheel pins (the base image's own NCCL packages are removed, so
torch's is the only one), torchao (FP8 training), python-etcd (torch's etcd-v2 rendezvous client)
and the trainer package from ``packages/trainer``. A build step fails the build unless exactly one
NCCL network plugin is where NCCL looks for it (``libnccl-net-${NCCL_NET_PLUGIN}.so`` on
``LD_LIBRARY_PATH``), its libfabric resolves, and torch's NCCL is the one of the table.

The image sets only where things are (``NCCL_NET_PLUGIN``, ``LD_LIBRARY_PATH``); how NCCL and
libfabric run (``FI_PROVIDER``, ``FI_EFA_USE_DEVICE_RDMA``, ``FI_EFA_FORK_SAFE``,
``NCCL_SOCKET_IFNAME``, ``NCCL_DEBUG``) is set by the rendered job
(:func:`fsdp_sdk.k8s.render.worker_environment`), in one place.

Every version is a build argument whose default comes from the pins table
(:mod:`fsdp_sdk.pins`, :func:`build_args`); ``--build-arg NAME=VALUE`` overrides one. The image is
built for ``job.image_platform`` (``linux/amd64`` by default: an image built on an arm64 laptop must
still run on p5).

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
from fsdp_sdk.pins import pin
from fsdp_sdk.tools import ToolNotFoundError, run_tool

if TYPE_CHECKING:
    from fsdp_sdk.config import Config

__all__ = [
    "BUILD_ARGS",
    "BUILD_TOOLS",
    "NCCL_NET_PLUGIN_DIR",
    "TRAINER_EXTRAS",
    "ImageBuild",
    "ImagePush",
    "build_args",
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

#: The trainer's extras the image installs, each for something a rendered job asks of the trainer: ``s3`` for
#: ``--checkpoint.dir s3://...`` (every EKS job checkpoints to the cluster's bucket:
#: :func:`fsdp_sdk.k8s.render.checkpoint_dir`), ``prometheus`` for ``--metrics.prometheus_port``, ``hub`` for
#: ``--data.source hf``.
TRAINER_EXTRAS = ("hub", "prometheus", "s3")
#: Build tools, in order of preference.
BUILD_TOOLS = ("docker", "finch", "buildah")
#: Where the image links the EFA installer's NCCL plugin, first on ``LD_LIBRARY_PATH``.
NCCL_NET_PLUGIN_DIR = "/opt/fsdp-sdk/nccl-net"


def _cuda_wheel_tag(base: str) -> str:
    """``cu130`` for a ``13.0.2-devel-ubuntu24.04`` CUDA image tag: torch's wheel index of that CUDA minor."""
    major, minor = base.split(".")[:2]
    return f"cu{major}{minor}"


def build_args() -> dict[str, str]:
    """The build arguments and their defaults, every version from the pins table."""
    cuda = pin("cuda-base")
    return {
        "BASE_IMAGE": cuda.image_ref(),
        "EFA_INSTALLER_VERSION": pin("efa-installer").version,
        "AWS_OFI_NCCL_VERSION": pin("aws-ofi-nccl").version,
        "GDRCOPY_VERSION": pin("gdrcopy").version,
        "NCCL_VERSION": pin("nccl").version,
        "TORCH_VERSION": pin("torch").version,
        "TORCH_INDEX_URL": f"https://download.pytorch.org/whl/{_cuda_wheel_tag(cuda.version)}",
        "TORCHAO_VERSION": pin("torchao").version,
        "PYTHON_ETCD_VERSION": pin("python-etcd").version,
    }


#: Build arguments and their pinned defaults (:func:`build_args`, read once).
BUILD_ARGS: dict[str, str] = build_args()

_BODY = """\
FROM ${BASE_IMAGE}
ARG EFA_INSTALLER_VERSION
ARG AWS_OFI_NCCL_VERSION
ARG GDRCOPY_VERSION
ARG NCCL_VERSION
ARG TORCH_VERSION
ARG TORCH_INDEX_URL
ARG TORCHAO_VERSION
ARG PYTHON_ETCD_VERSION

ENV DEBIAN_FRONTEND=noninteractive
# The base's NCCL packages go: torch loads the NCCL its wheel pins, and one NCCL in the image is one to check.
RUN apt-get update \\
 && apt-get install -y --no-install-recommends \\
      build-essential ca-certificates curl git libhwloc-dev pkg-config \\
      python3 python3-dev python3-venv python-is-python3 \\
 && nccl="$(dpkg-query -W -f '${db:Status-Abbrev} ${Package}\\n' 'libnccl*' 2>/dev/null | awk '$1 == "ii" {print $2}')" \\
 && if [ -n "$nccl" ]; then apt-get purge -y --allow-change-held-packages $nccl; fi \\
 && rm -rf /var/lib/apt/lists/*

# libfabric with the EFA provider, and the aws-ofi-nccl plugin the installer bundles (the one NCCL plugin of
# the image; /opt/amazon/ofi-nccl/lib/<arch> in recent installers, its place and name vary, so the next step
# finds it). The flags are AWS's for containers (EC2 user guide, efa-installer-containers): no kernel module
# (--skip-kmod: the host's), no limits file (--skip-limit-conf: the container runtime sets ulimits), no device
# check (--no-verify: lspci finds no EFA while building).
RUN cd /tmp \\
 && curl -fsSL "https://efa-installer.amazonaws.com/aws-efa-installer-${EFA_INSTALLER_VERSION}.tar.gz" | tar xz \\
 && cd aws-efa-installer \\
 && ./efa_installer.sh -y --skip-kmod --skip-limit-conf --no-verify \\
 && cd / && rm -rf /tmp/aws-efa-installer

# NCCL opens libnccl-net-${NCCL_NET_PLUGIN}.so from the library path: link the installer's plugin there.
ENV NCCL_NET_PLUGIN=ofi
ENV LD_LIBRARY_PATH=__PLUGIN_DIR__:/opt/amazon/efa/lib:/opt/gdrcopy/lib:${LD_LIBRARY_PATH}
ENV PATH=/opt/amazon/efa/bin:${PATH}
RUN set -eu; \\
    found="$(find /opt/amazon -name 'libnccl-net*.so' -exec readlink -f {} \\; | sort -u)"; \\
    count="$(printf '%s' "$found" | grep -c . || true)"; \\
    if [ "$count" != 1 ]; then \\
      echo "expected one NCCL net plugin from EFA installer ${EFA_INSTALLER_VERSION} under /opt/amazon, found ${count}: ${found}" >&2; \\
      exit 1; \\
    fi; \\
    mkdir -p __PLUGIN_DIR__ && ln -sf "$found" "__PLUGIN_DIR__/libnccl-net-${NCCL_NET_PLUGIN}.so"

# GDRCopy's user-space library (the gdrdrv module belongs to the host).
RUN cd /tmp \\
 && curl -fsSL "https://github.com/NVIDIA/gdrcopy/archive/refs/tags/v${GDRCOPY_VERSION}.tar.gz" | tar xz \\
 && cd "gdrcopy-${GDRCOPY_VERSION}" \\
 && make -j"$(nproc)" prefix=/opt/gdrcopy CUDA=/usr/local/cuda lib lib_install \\
 && cd / && rm -rf "/tmp/gdrcopy-${GDRCOPY_VERSION}"

# torch with the NCCL its wheel pins (nvidia-nccl-cu13): the NCCL torch was built and tested with.
# Later installs run under a constraint on torch, so none can swap it (and its NCCL) for a PyPI build.
RUN python -m venv /opt/venv
ENV PATH=/opt/venv/bin:${PATH}
RUN python -m pip install --no-cache-dir --upgrade pip \\
 && python -m pip install --no-cache-dir "torch==${TORCH_VERSION}" --index-url "${TORCH_INDEX_URL}" \\
 && mkdir -p /opt/fsdp-sdk && echo "torch==${TORCH_VERSION}" > /opt/fsdp-sdk/constraints.txt \\
 && PIP_CONSTRAINT=/opt/fsdp-sdk/constraints.txt python -m pip install --no-cache-dir \\
      "torchao==${TORCHAO_VERSION}" "python-etcd==${PYTHON_ETCD_VERSION}"

COPY trainer/ /opt/fsdp-trainer/
RUN PIP_CONSTRAINT=/opt/fsdp-sdk/constraints.txt python -m pip install --no-cache-dir "/opt/fsdp-trainer[__TRAINER_EXTRAS__]"

# Fail the build unless NCCL will find its network plugin, with its libfabric, and torch's NCCL is the table's.
RUN set -eu; \\
    plugin=""; \\
    for dir in $(printf '%s' "$LD_LIBRARY_PATH" | tr ':' ' '); do \\
      if [ -e "$dir/libnccl-net-${NCCL_NET_PLUGIN}.so" ]; then plugin="$dir/libnccl-net-${NCCL_NET_PLUGIN}.so"; break; fi; \\
    done; \\
    if [ -z "$plugin" ]; then \\
      echo "libnccl-net-${NCCL_NET_PLUGIN}.so (NCCL_NET_PLUGIN=${NCCL_NET_PLUGIN}) is not on LD_LIBRARY_PATH=${LD_LIBRARY_PATH}" >&2; \\
      exit 1; \\
    fi; \\
    if ldd "$plugin" | grep -E 'libfabric.*not found'; then echo "$plugin cannot load libfabric" >&2; exit 1; fi; \\
    echo "NCCL net plugin: $(readlink -f "$plugin") (aws-ofi-nccl ${AWS_OFI_NCCL_VERSION} expected)"; \\
    python -m pip check; \\
    python -c "import importlib.metadata as m, sys; v = m.version('nvidia-nccl-cu13'); \\
req = [r for r in m.requires('torch') or [] if r.replace(' ', '').startswith('nvidia-nccl-cu13==')]; \\
sys.exit(0 if v == '${NCCL_VERSION}' and req else 'torch ${TORCH_VERSION} brings nvidia-nccl-cu13 ' + v + \\
' (' + ', '.join(req or ['no pin']) + '), the table says ${NCCL_VERSION}: set NCCL_VERSION to the one torch pins')"; \\
    if ls /usr/lib/*-linux-gnu/libnccl.so* >/dev/null 2>&1; then echo "a second NCCL is in /usr/lib" >&2; exit 1; fi

WORKDIR /workspace
CMD ["torchrun", "-m", "fsdp_trainer", "--help"]
""".replace("__PLUGIN_DIR__", NCCL_NET_PLUGIN_DIR).replace("__TRAINER_EXTRAS__", ",".join(TRAINER_EXTRAS))


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


def _build_command(
    tool: str, context: Path, dockerfile: Path, ref: str, build_args: Mapping[str, str], platform: str
) -> list[str]:
    command = [tool, "build"] if tool != "buildah" else [tool, "build", "--layers"]
    command += ["--platform", platform, "-t", ref, "-f", str(dockerfile)]
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
    """Write the build context and build ``<job.image>:<job.tag>`` for ``job.image_platform``, streaming the
    tool's output to ``progress``.

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
    command = _build_command(chosen, context, context / "Dockerfile", ref, overrides, config.job.image_platform)
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
