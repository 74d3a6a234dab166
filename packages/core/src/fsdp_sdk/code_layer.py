"""Your own code's layer on a cluster (``--script``, ``--module``, ``Client.train``): built and pushed when the
registry lacks its content tag (this module acts: the build tool, ECR). What travels and how it is named is pure,
in :mod:`fsdp_sdk.user_code`; the rendered jobs read only that."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from fsdp_sdk.user_code import CodeBundle, active, collect, prepare_context

if TYPE_CHECKING:
    from fsdp_sdk.config import Config
    from fsdp_sdk.resolved import Resolved

__all__ = ["ensure_code_image", "for_cluster"]


def for_cluster(
    resolved: Resolved,
    *,
    build: bool,
    dry_run: bool = False,
    progress: Callable[[str], None] | None = None,
    tool: str | None = None,
    ecr: Any = None,
) -> Resolved:
    """``resolved`` with the code layer's content tag in ``code.digest`` when it runs your code (unchanged
    otherwise); with ``build`` (and not ``dry_run``) the layer is built and pushed first unless the registry
    has it (:func:`ensure_code_image`).

    :raises ConfigError: the code directory is over ``code.max_mib``, no build tool, no ECR registry.
    """
    from fsdp_sdk.config import Setting

    code = active(resolved.config)
    if code is None:
        return resolved
    config = resolved.config
    bundle = collect(code, resolved.plugins.hooks.job_image(config))
    if build and not dry_run:
        context = Path(config.cluster.state_dir) / "code-layers" / bundle.tag
        ensure_code_image(config, bundle, context=context, tool=tool, ecr=ecr, progress=progress)
    return resolved.with_overrides([Setting("code.digest", bundle.tag, "code.digest", "fsdp-sdk")])


def ensure_code_image(
    config: Config,
    bundle: CodeBundle,
    *,
    context: Path,
    tool: str | None = None,
    ecr: Any = None,
    progress: Callable[[str], None] | None = None,
    dry_run: bool = False,
) -> bool:
    """Build and push the code layer unless the registry holds its tag already; whether it was built.

    The build goes through the same tool and ECR push as the trainer image
    (:func:`fsdp_sdk.k8s.image.push_image`), as ``<job.image>:<code tag>``.

    :raises ConfigError: no build tool, or ``job.registry`` is not an ECR registry.
    :raises ToolError: the build or the push failed.
    """
    from fsdp_sdk.k8s.image import find_build_tool, image_in_ecr, push_image
    from fsdp_sdk.tools import run_tool

    say = progress or (lambda line: None)
    tagged = dataclasses.replace(config.job, tag=bundle.tag)
    layer = _with_job(config, tagged)
    if image_in_ecr(layer, bundle.tag, ecr=ecr):
        say(f"code layer {config.job.image}:{bundle.tag} is in the registry: not built again")
        return False
    chosen = find_build_tool(tool)
    ref = f"{config.job.image}:{bundle.tag}"
    say(
        f"building the code layer {ref} ({len(bundle.files)} files, {bundle.size / 2**20:.1f} MiB) on {bundle.base_image}"
    )
    if dry_run:
        return True
    dockerfile = prepare_context(bundle, context)
    command = [chosen, "build"] if chosen != "buildah" else [chosen, "build", "--layers"]
    command += ["--platform", config.job.image_platform, "-t", ref, "-f", str(dockerfile), str(context)]
    run_tool(command, step=f"build the code layer {ref}", progress=progress)
    push_image(layer, tool=chosen, ecr=ecr, progress=progress)
    return True


def _with_job(config: Config, job: Any) -> Config:
    import copy

    new = copy.copy(config)
    new.job = job
    return new
