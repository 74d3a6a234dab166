"""The trainer image for the rehearsal: a virtual environment built by the Dockerfile's own install lines.

:func:`build_image_venv` writes the build context as ``fsdp-sdk image build`` does
(:func:`fsdp_sdk.k8s.image.prepare_context`), reads the Dockerfile it wrote, and runs its ``RUN`` lines from
``python -m venv /opt/venv`` to the trainer's install (the same requirement strings, build arguments, constraint
file and order) with the image's paths mapped to directories: ``/opt/venv`` to the environment,
``/opt/fsdp-sdk`` and ``/opt/fsdp-trainer`` beside it. What cannot be the same here: torch is the CPU build
(``TORCH_INDEX_URL`` is the machine's own index, where the pinned version's CPU wheel lies on disk: the CUDA
index is not reachable and there is no GPU), and pip may use its cache (``--no-cache-dir`` keeps the image
small; here it would only be slow). The system packages, EFA installer, GDRCopy and the NCCL plugin check are
the GPU image's and are not rehearsed.

Nothing of the developer's environment is in it: a missing requirement of the image is missing here too.

Images are cached by the build's content tag (:func:`fsdp_sdk.k8s.image.content_tag`: the Dockerfile and every
trainer file) under ``$FSDP_SDK_REHEARSAL_CACHE`` (default ``~/.cache/fsdp-sdk-rehearsal``), so a session, or the
next run with the same sources, builds nothing.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from collections.abc import Mapping
from pathlib import Path

#: The index the rehearsal's torch comes from (pip's own configuration adds the machine's wheels on disk).
CPU_TORCH_INDEX = os.environ.get("FSDP_SDK_REHEARSAL_TORCH_INDEX", "https://pypi.org/simple")


def cache_root() -> Path:
    return Path(os.environ.get("FSDP_SDK_REHEARSAL_CACHE", Path.home() / ".cache" / "fsdp-sdk-rehearsal"))


def install_commands(dockerfile: str, *, venv: Path, opt: Path) -> list[str]:
    """The shell commands of the Dockerfile's Python install lines, build arguments substituted, paths mapped.

    :param venv: where ``/opt/venv`` goes.
    :param opt: where the rest of ``/opt`` goes (``/opt/fsdp-sdk``, ``/opt/fsdp-trainer``).
    """
    args = dict(re.findall(r"^ARG (\w+)=(.*)$", dockerfile, flags=re.M))
    args["TORCH_INDEX_URL"] = CPU_TORCH_INDEX
    body = dockerfile.replace("\\\n", " ")
    runs = [line[len("RUN ") :] for line in body.splitlines() if line.startswith("RUN ")]
    start = next(i for i, run in enumerate(runs) if run.strip() == "python -m venv /opt/venv")
    end = next(i for i, run in enumerate(runs) if "/opt/fsdp-trainer[" in run)
    commands = []
    for run in runs[start : end + 1]:
        command = re.sub(r"\$\{(\w+)\}", lambda m: args.get(m.group(1), m.group(0)), run)
        command = command.replace("--no-cache-dir", "")
        command = command.replace("/opt/venv", str(venv)).replace("/opt/", f"{opt}/")
        commands.append(re.sub(r"\s+", " ", command).strip())
    return commands


def _run(commands: list[str], *, venv: Path, log: Path) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("VIRTUAL_ENV", "PYTHON", "PIP_CONSTRAINT"))}
    env["PATH"] = f"{venv}/bin:{os.environ.get('PATH', '')}"  # ENV PATH=/opt/venv/bin:${PATH}
    base = Path(getattr(sys, "_base_executable", sys.executable))
    with log.open("a") as out:
        for command in commands:
            command = command.replace("python -m venv", f"{base} -m venv", 1)
            out.write(f"+ {command}\n")
            out.flush()
            done = subprocess.run(["bash", "-c", command], env=env, stdout=out, stderr=subprocess.STDOUT, check=False)
            if done.returncode:
                tail = log.read_text().splitlines()[-20:]
                raise AssertionError(f"the image's install line failed: {command}\n" + "\n".join(tail))


def build_image_venv(trainer_src: Path, *, build_args: Mapping[str, str] | None = None) -> Path:
    """The image's environment for the trainer at ``trainer_src`` (built once per content tag); returns its root.

    Its ``bin/python`` is the image's ``python``. Like the image's layers, the lines before ``COPY trainer/`` are
    built once for their own text (``base-<hash>``) and each content tag starts from a copy of that layer (hard
    links: nothing of one build leaks into another), then runs the trainer's install line.
    """
    import hashlib

    from fsdp_sdk.k8s.image import content_tag, prepare_context

    tag = content_tag(trainer_src, build_args)
    root = cache_root() / tag
    if (root / "built").exists():
        return root / "venv"
    shutil.rmtree(root, ignore_errors=True)  # an unfinished build
    dockerfile = prepare_context(root / "context", trainer_src, build_args).read_text()
    layer_lines = install_commands(dockerfile, venv=Path("/opt/venv"), opt=Path("/opt"))[:-1]
    layer = cache_root() / ("base-" + hashlib.sha256("\n".join(layer_lines).encode()).hexdigest()[:16])
    if not (layer / "built").exists():
        shutil.rmtree(layer, ignore_errors=True)
        (layer / "opt").mkdir(parents=True)
        _run(
            install_commands(dockerfile, venv=layer / "venv", opt=layer / "opt")[:-1],
            venv=layer / "venv",
            log=layer / "build.log",
        )
        (layer / "built").write_text("\n".join(layer_lines) + "\n")
    subprocess.run(["cp", "-al", str(layer / "venv"), str(root / "venv")], check=True)
    shutil.copytree(layer / "opt", root / "opt")
    shutil.copytree(root / "context" / "trainer", root / "opt" / "fsdp-trainer")  # COPY trainer/ /opt/fsdp-trainer/
    _relocate(root / "venv", layer / "venv")
    (last,) = install_commands(dockerfile, venv=root / "venv", opt=root / "opt")[-1:]
    _run([last], venv=root / "venv", log=root / "build.log")
    (root / "built").write_text(tag + "\n")
    return root / "venv"


def _relocate(venv: Path, built_at: Path) -> None:
    """Point the copied environment's scripts and configuration at where it now lies (each file written anew: the
    copy's files are hard links to the layer's)."""
    paths = [*(venv / "bin").iterdir(), venv / "pyvenv.cfg"]
    paths += list((venv / "lib").glob("python*/site-packages/*.pth"))
    for path in paths:
        if not path.is_file() or path.is_symlink():
            continue
        try:
            text = path.read_text()
        except UnicodeDecodeError:
            continue
        if str(built_at) in text:
            mode = path.stat().st_mode
            path.unlink()
            path.write_text(text.replace(str(built_at), str(venv)))
            path.chmod(mode)
