"""Your own training code on the trainer's rails: a script (``--script PATH``), a module (``--module pkg.mod``)
or a Python function (:meth:`fsdp_sdk.Client.train`), run on every rank instead of the built-in trainer.

What it gets is what the trainer gets: the same torchrun agents, rendezvous (etcd, a fresh id per launch),
``nproc_per_node``, the instance type's EFA/NCCL environment, Guaranteed pods, restarts, logs, ``job stop``
and cost. Where things go is in the environment (:mod:`fsdp_sdk.code_entry` documents it):
``FSDP_SDK_OUTPUT_DIR`` (the run's output directory) and ``FSDP_SDK_CHECKPOINT_DIR`` (where to save and resume
checkpoints: the run's directory locally, ``s3://<checkpoint bucket>/<namespace>/<job>/checkpoints`` on an EKS
cluster with a checkpoint bucket, the pods having its access). :func:`fsdp_sdk.report` reports steps.

The code travels by content:

* locally it runs in place (nothing is copied);
* on a cluster its directory (``code.dir``: the current directory when the script is under it, else the
  script's own directory) becomes an image layer on top of the trainer image: the files that
  ``.fsdpignore`` (else ``.gitignore``) does not exclude, at most ``code.max_mib``, installed with the
  SDK's runtime (``fsdp_sdk.report``, ``fsdp_sdk.code_entry``) and ``requirements.txt`` when there is one
  (under the image's torch constraint: a requirement cannot swap torch). The layer is tagged
  ``code-<16 hex>``, a SHA-256 over its Dockerfile (which names the trainer image) and every file, in the
  trainer image's repository; it is built and pushed only when the registry does not hold that tag yet.

A function travels as its source only, as the Kubeflow SDK's ``CustomTrainer`` sends it
(``inspect.getsource``, dedented: kubeflow/sdk ``kubeflow/trainer/backends/kubernetes/utils.py``,
``get_command_using_train_func``, commit 0c2dacae185215cfa0f11c0c745dc0f78f0f3df1), and is called on every
rank with JSON keyword arguments. So it must import what it uses inside itself: a lambda, a closure over local
variables, or a function that reads a global of its module is refused, naming the reason.
"""

from __future__ import annotations

import fnmatch
import hashlib
import json
import os
import shutil
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from fsdp_sdk.errors import ConfigError

if TYPE_CHECKING:
    from fsdp_sdk.config import Config, Setting
    from fsdp_sdk.runs import JobRef, RunEvent

__all__ = [
    "CODE_COMMAND",
    "CODE_ROOT",
    "CodeBundle",
    "CodeSettings",
    "TrainHandle",
    "active",
    "code_args",
    "code_image_ref",
    "collect",
    "entry_arguments",
    "function_source",
    "prepare_context",
    "render_code_dockerfile",
    "settings_of",
    "train",
    "write_function",
]

#: What every worker runs for your code (with :func:`entry_arguments`); torchrun reads the PET_* rendezvous.
CODE_COMMAND = ["torchrun", "-m", "fsdp_sdk.code_entry"]
#: Where the code layer puts your directory in the image (the workers' working directory).
CODE_ROOT = "/workspace"
#: Files never sent, whatever the ignore file says.
ALWAYS_IGNORED = (".git", "__pycache__", "*.pyc", ".venv", ".mypy_cache", ".pytest_cache", ".ruff_cache")
#: Ignore files, the first found in the code directory wins.
IGNORE_FILES = (".fsdpignore", ".gitignore")


@dataclass
class CodeSettings:
    """Your own training code, run instead of the built-in trainer (``--script``, ``--module``, ``Client.train``)."""

    script: str | None = None
    """A Python script every rank runs (``--script PATH``), as ``torchrun PATH`` would; relative to the current
    directory."""
    module: str | None = None
    """A module every rank runs (``--module pkg.mod``), as ``torchrun -m pkg.mod`` would; found in ``code.dir``."""
    args: list[str] = field(default_factory=list)
    """Arguments of the script or module (what follows ``--`` on the command line)."""
    dir: str | None = None
    """The directory that travels to a cluster (the image layer's content). Default: the current directory when
    the script is under it (or for ``--module``), else the script's directory."""
    max_mib: float = 200.0
    """Most MiB of files the code directory may send to a cluster (``.fsdpignore`` / ``.gitignore`` leave out
    the rest)."""
    function: str | None = None
    """Set by ``Client.train``: the function of ``code.script`` every rank calls."""
    kwargs: str | None = None
    """Set by ``Client.train``: the function's keyword arguments, as a JSON object."""
    digest: str | None = None
    """Filled by fsdp-sdk for a cluster: the code layer's content tag (``code-<16 hex>``)."""

    def validate(self, config: Any) -> None:
        """Refuse what cannot run: both a script and a module, a missing script, trainer options with them."""
        if not (self.script or self.module):
            if self.args:
                raise ConfigError(
                    "code.args", "are given without --script or --module", "name the script or module they are for"
                )
            return

        def named(path: str) -> str:
            origin = config.origins.get(path)
            return origin.name if origin else path

        if self.script and self.module:
            raise ConfigError(named("code.module"), "is given with a script", "run either a script or a module")
        if self.script and not Path(self.script).is_file():
            what = "is a directory" if Path(self.script).is_dir() else "does not exist"
            raise ConfigError(
                named("code.script"), f"{self.script} {what}", "pass the path of your Python training script"
            )
        if self.module and not all(part.isidentifier() for part in self.module.split(".")):
            raise ConfigError(
                named("code.module"), f"{self.module!r} is not a module name", "use a dotted name like pkg.train"
            )
        if self.dir is not None and not Path(self.dir).is_dir():
            raise ConfigError("code.dir", f"{self.dir} is not a directory", "name the directory your code lives in")
        if config.job.command:
            raise ConfigError(
                named("job.command"),
                f"and {self.what()} both say what the workers run",
                "unset job.command (CMD in .env) to run your code, or drop --script/--module",
            )
        if self.max_mib <= 0:
            raise ConfigError("code.max_mib", f"{self.max_mib} is not positive", "use MiB, e.g. 200")
        for section, values in config.trainer.items():
            for key in values or {}:
                path = f"trainer.{section}.{key}"
                origin = config.origins.get(path)
                flag = origin.name if origin else path
                raise ConfigError(
                    flag,
                    f"is an option of the built-in trainer, and {self.what()} runs your own code",
                    "pass your code's own options after -- (fsdp-sdk run --script train.py -- --steps 100)",
                    source=origin.source if origin else None,
                )

    def what(self) -> str:
        """``--script train.py``, ``--module pkg.train`` or ``function train``: what runs, for messages."""
        if self.function:
            return f"function {self.function}"
        return f"--script {self.script}" if self.script else f"--module {self.module}"

    def root(self) -> Path:
        """The directory that travels (``code.dir``, or the default the field's docstring gives), absolute."""
        if self.dir:
            return Path(self.dir).resolve()
        cwd = Path.cwd().resolve()
        if self.module:
            return cwd
        script = Path(str(self.script)).resolve()
        return cwd if script.is_relative_to(cwd) else script.parent


def settings_of(config: Config) -> CodeSettings:
    """The ``code`` section of ``config`` (empty when the section is not registered)."""
    section = config.sections.get("code")
    return section if isinstance(section, CodeSettings) else CodeSettings()


def active(config: Config) -> CodeSettings | None:
    """The ``code`` section when it names code to run (a script or a module), else ``None``."""
    code = settings_of(config)
    return code if code.script or code.module else None


def entry_arguments(code: CodeSettings, *, in_image: bool) -> list[str]:
    """The arguments of :mod:`fsdp_sdk.code_entry` for ``code``: where the code is locally, or in the image."""
    root = code.root()
    args: list[str] = ["--dir", CODE_ROOT if in_image else str(root)]
    if code.script:
        script = Path(code.script).resolve()
        if in_image:
            args += ["--script", f"{CODE_ROOT}/{script.relative_to(root).as_posix()}"]
        else:
            args += ["--script", str(script)]
    else:
        args += ["--module", str(code.module)]
    if code.function:
        args += ["--function", code.function, "--kwargs", code.kwargs or "{}"]
    return [*args, "--", *code.args]


# --------------------------------------------------------------------------- what travels


@dataclass(frozen=True)
class CodeBundle:
    """The files of a code directory that go into the code layer, and its content tag.

    :param root: the code directory.
    :param files: the files, relative to ``root``, sorted.
    :param size: their bytes.
    :param base_image: the trainer image the layer goes on.
    :param dockerfile: the layer's Dockerfile.
    :param tag: ``code-<16 hex>``.
    """

    root: Path
    files: tuple[str, ...]
    size: int
    base_image: str
    dockerfile: str
    tag: str

    @property
    def requirements(self) -> bool:
        """Whether ``requirements.txt`` is installed in the layer."""
        return "requirements.txt" in self.files


def _ignore_patterns(root: Path) -> tuple[str, list[str]]:
    for name in IGNORE_FILES:
        path = root / name
        if path.is_file():
            lines = path.read_text(encoding="utf-8", errors="replace").splitlines()
            return name, [line.strip() for line in lines if line.strip() and not line.lstrip().startswith("#")]
    return "", []


def _ignored(relative: str, is_dir: bool, patterns: Sequence[str]) -> bool:
    """Whether ``relative`` (a POSIX path under the root) is excluded by gitignore-style ``patterns``: the last
    matching pattern decides, ``!`` negates, a trailing ``/`` matches directories, a pattern with an inner ``/``
    is anchored at the root, one without matches the name at any depth."""
    name = relative.rsplit("/", 1)[-1]
    if any(fnmatch.fnmatch(name, p) for p in ALWAYS_IGNORED):
        return True
    excluded = False
    for raw in patterns:
        negate, pattern = raw.startswith("!"), raw.lstrip("!")
        if pattern.endswith("/"):
            if not is_dir:
                continue
            pattern = pattern.rstrip("/")
        if "/" in pattern:
            pattern = pattern.lstrip("/")
            hit = fnmatch.fnmatch(relative, pattern) or fnmatch.fnmatch(relative, pattern + "/*")
        else:
            hit = fnmatch.fnmatch(name, pattern)
        if hit:
            excluded = not negate
    return excluded


def _files(root: Path, limit: int) -> tuple[list[str], int]:
    """The files that travel, relative and sorted, and their size.

    :raises ConfigError: they are more than ``limit`` bytes (walking stops there: a home directory is not read).
    """
    source, patterns = _ignore_patterns(root)
    files: list[str] = []
    total = 0
    largest: tuple[int, str] = (0, "")
    for current, dirs, names in os.walk(root):
        base = Path(current).relative_to(root).as_posix()
        prefix = "" if base == "." else base + "/"
        dirs[:] = sorted(d for d in dirs if not _ignored(prefix + d, True, patterns))
        for name in sorted(names):
            relative = prefix + name
            path = Path(current) / name
            if _ignored(relative, False, patterns) or not path.is_file():
                continue
            size = path.stat().st_size
            total += size
            largest = max(largest, (size, relative))
            files.append(relative)
            if total > limit:
                told = f"{source} leaves out" if source else "add a .fsdpignore listing"
                raise ConfigError(
                    "code.dir",
                    f"{root} holds more than the {limit / 2**20:g} MiB of code a job may send (code.max_mib; "
                    f"the largest file so far: {largest[1]}, {largest[0] / 2**20:.1f} MiB)",
                    f"{told} data, checkpoints and environments, or run from a smaller directory (--set code.dir=DIR)"
                    if not source
                    else f"list data, checkpoints and environments in {source}, or raise code.max_mib",
                )
    return sorted(files), total


def _runtime_files() -> tuple[Path, list[Path]]:
    """The SDK package the layer installs (its runtime: ``fsdp_sdk.report``, ``fsdp_sdk.code_entry``), and its
    files: the directory holding ``pyproject.toml`` and ``src/fsdp_sdk``."""
    package = Path(__file__).resolve().parent
    project = package.parents[1]
    files = [project / "pyproject.toml", *(p for p in (project / "README.md",) if p.is_file())]
    for current, dirs, names in os.walk(package):
        dirs[:] = sorted(d for d in dirs if d != "__pycache__")
        files += [Path(current) / n for n in sorted(names) if not n.endswith(".pyc")]
    return project, files


def render_code_dockerfile(base_image: str, *, requirements: bool) -> str:
    """The code layer's Dockerfile: on ``base_image``, the SDK's runtime, ``requirements.txt`` (when there is
    one) and your files in :data:`CODE_ROOT`."""
    lines = [
        "# syntax=docker/dockerfile:1",
        "# Your code on top of the fsdp-sdk trainer image, written by fsdp-sdk; its tag is a hash of this file and",
        "# of the files it copies, so the same code is built once.",
        f"FROM {base_image}",
        "COPY fsdp-sdk/ /opt/fsdp-sdk-core/",
        "RUN PIP_CONSTRAINT=/opt/fsdp-sdk/constraints.txt python -m pip install --no-cache-dir --no-deps "
        "/opt/fsdp-sdk-core",
    ]
    if requirements:
        lines += [
            f"COPY code/requirements.txt {CODE_ROOT}/requirements.txt",
            "# under the image's constraint: a requirement cannot swap torch (and its NCCL) for another build",
            "RUN PIP_CONSTRAINT=/opt/fsdp-sdk/constraints.txt python -m pip install --no-cache-dir "
            f"-r {CODE_ROOT}/requirements.txt",
        ]
    lines += [f"COPY code/ {CODE_ROOT}/", f"WORKDIR {CODE_ROOT}", ""]
    return "\n".join(lines)


def code_image_ref(base_image: str, tag: str) -> str:
    """``base_image`` (``registry/repository:tag``, perhaps ``@digest``) with ``tag`` instead of its tag."""
    repository = base_image.split("@", 1)[0]
    last = repository.rsplit("/", 1)[-1]
    if ":" in last:
        repository = repository[: repository.rfind(":")]
    return f"{repository}:{tag}"


def collect(code: CodeSettings, base_image: str) -> CodeBundle:
    """The files of ``code``'s directory that travel, its Dockerfile and content tag (reads the files).

    :raises ConfigError: the directory is over ``code.max_mib``, or the script is outside it.
    """
    root = code.root()
    if code.script and not Path(code.script).resolve().is_relative_to(root):
        raise ConfigError(
            "code.dir", f"{code.script} is outside {root}, the directory that travels", "set code.dir to one above it"
        )
    files, size = _files(root, int(code.max_mib * 2**20))
    dockerfile = render_code_dockerfile(base_image, requirements="requirements.txt" in files)
    digest = hashlib.sha256(dockerfile.encode())
    project, runtime = _runtime_files()
    for path in runtime:
        digest.update(b"\0sdk/" + path.relative_to(project).as_posix().encode() + b"\0")
        digest.update(path.read_bytes())
    for relative in files:
        digest.update(b"\0code/" + relative.encode() + b"\0")
        digest.update((root / relative).read_bytes())
    return CodeBundle(root, tuple(files), size, base_image, dockerfile, f"code-{digest.hexdigest()[:16]}")


def prepare_context(bundle: CodeBundle, context: Path) -> Path:
    """Write the layer's build context into ``context`` (``Dockerfile``, ``fsdp-sdk/``, ``code/``); the Dockerfile."""
    if context.exists():
        shutil.rmtree(context)
    (context / "code").mkdir(parents=True)
    for relative in bundle.files:
        target = context / "code" / relative
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(bundle.root / relative, target)
    project, runtime = _runtime_files()
    for path in runtime:
        target = context / "fsdp-sdk" / path.relative_to(project)
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(path, target)
    dockerfile = context / "Dockerfile"
    dockerfile.write_text(bundle.dockerfile)
    return dockerfile


# --------------------------------------------------------------------------- functions


def function_source(func: Callable[..., Any]) -> str:
    """The dedented source of ``func``, the only thing of it that travels.

    :raises ConfigError: ``func`` is not a plain function defined in a file, is a lambda, closes over local
        variables, or reads globals of its module (each would be missing on the workers).
    """
    import builtins
    import dis
    import inspect
    import textwrap
    import types

    name = getattr(func, "__qualname__", None) or repr(func)
    if not isinstance(func, types.FunctionType):
        raise ConfigError(
            "func", f"{name} is not a plain Python function", "pass a function defined with def at a module's top level"
        )
    if func.__name__ == "<lambda>":
        raise ConfigError(
            "func", "a lambda cannot travel (only a function's source is sent)", "define it with def, imports inside"
        )
    if func.__code__.co_freevars:
        free = ", ".join(func.__code__.co_freevars)
        raise ConfigError(
            "func",
            f"{func.__name__} is a closure over local variables ({free}) that would not exist on the workers",
            "define it at a module's top level and pass values as keyword arguments (kwargs=)",
        )
    try:
        source = textwrap.dedent(inspect.getsource(func))
    except (OSError, TypeError) as error:
        raise ConfigError(
            "func", f"the source of {func.__name__} cannot be read ({error})", "define it in a .py file"
        ) from None
    if source.lstrip().startswith("@"):
        raise ConfigError(
            "func",
            f"{func.__name__} is decorated; only its source would travel, without the decorator's effect",
            "remove the decorator, or call it inside the function",
        )
    known = set(dir(builtins))
    missing: set[str] = set()
    stack = [func.__code__]
    while stack:
        code = stack.pop()
        for instruction in dis.get_instructions(code):
            if instruction.opname in ("LOAD_GLOBAL", "LOAD_NAME") and instruction.argval not in known:
                missing.add(str(instruction.argval))
        stack += [c for c in code.co_consts if isinstance(c, types.CodeType)]
    missing.discard(func.__name__)  # a recursive call
    if missing:
        names = ", ".join(sorted(missing))
        raise ConfigError(
            "func",
            f"{func.__name__} uses {names} from outside itself, which would not exist on the workers (only its source "
            "travels)",
            "import or define it inside the function, or pass the value as a keyword argument",
        )
    return source


def write_function(func: Callable[..., Any], directory: Path) -> tuple[Path, str]:
    """Write ``func``'s source into its own file under ``directory`` (named by the source's hash); the file and
    the function's name. The file holds the source alone: nothing of the caller's module goes with it."""
    source = function_source(func)
    digest = hashlib.sha256(source.encode()).hexdigest()[:16]
    folder = directory / f"{func.__name__}-{digest}"
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"{func.__name__}.py"
    if not path.is_file() or path.read_text() != source:
        path.write_text(source)
    return path, func.__name__


def function_kwargs(kwargs: Mapping[str, Any] | None) -> str:
    """``kwargs`` as the JSON object that travels with the function.

    :raises ConfigError: a value is not JSON (numbers, strings, booleans, None, lists and dicts of them).
    """
    try:
        return json.dumps(dict(kwargs or {}), sort_keys=True, allow_nan=False)
    except (TypeError, ValueError) as error:
        raise ConfigError(
            "kwargs", f"cannot travel as JSON ({error})", "pass numbers, strings, booleans, None, lists and dicts"
        ) from None


# --------------------------------------------------------------------------- the client's side


def code_args(config: Config, args: Sequence[str]) -> list[Setting]:
    """The settings of what follows ``--`` when ``config`` runs your code: ``code.args``; none otherwise (then
    they are trainer options)."""
    from fsdp_sdk.config import Setting

    if active(config) is None or not args:
        return []
    return [Setting("code.args", list(args), "-- ARGS", "command line")]


@dataclass
class TrainHandle:
    """The job :meth:`fsdp_sdk.Client.train` started.

    :param job: what identifies it (``client.jobs.status(handle.job)``, ``job logs``, ``job stop`` take it).
    :param client: the client that runs it (with the function's settings).
    :param summary: the run's summary once it ended (a local run has ended when ``train`` returns).
    :param output_dir: a local run's output directory.
    """

    job: JobRef
    client: Any = field(repr=False)
    summary: dict[str, Any] | None = None
    output_dir: Path | None = None

    def wait(self, *, on_output: Callable[[str], None] | None = None, timeout: float | None = None) -> dict[str, Any]:
        """The run's summary, once it ended (a cluster job is followed to its end).

        :raises RunError: the job failed.
        """
        if self.summary is None:
            self.summary = self.client.jobs.wait(self.job, on_output=on_output, timeout=timeout)
        return self.summary

    def result(self) -> Any:
        """What the function returned on rank 0 (waits for the end).

        :raises RunError: the job failed, or the value was not JSON (the summary's ``result_repr`` shows it).
        """
        from fsdp_sdk.errors import RunError

        summary = self.wait()
        if "result" not in summary:
            shown = summary.get("result_repr")
            raise RunError(
                f"job {self.job.name}: the function's return value did not travel back"
                + (f" (not JSON: {shown})" if shown else "")
            )
        return summary["result"]


def train(
    client: Any,
    func: Callable[..., Any],
    *,
    nodes: int | None = None,
    nproc_per_node: int | None = None,
    kwargs: Mapping[str, Any] | None = None,
    run_id: str | None = None,
    on_event: Callable[[RunEvent], None] | None = None,
    on_output: Callable[[str], None] | None = None,
) -> TrainHandle:
    """What :meth:`fsdp_sdk.Client.train` does (see there)."""
    from fsdp_sdk.config import Setting

    arguments = function_kwargs(kwargs)
    path, name = write_function(func, Path(client.config.cluster.state_dir) / "functions")
    where = "Client.train()"
    settings = [
        Setting("code.script", str(path), "func", where),
        Setting("code.dir", str(path.parent), "func", where),
        Setting("code.function", name, "func", where),
        Setting("code.kwargs", arguments, "kwargs", where),
    ]
    if nodes is not None:
        settings.append(Setting("job.num_workers", nodes, "nodes", where))
    if nproc_per_node is not None:
        settings.append(Setting("job.nproc_per_node", nproc_per_node, "nproc_per_node", where))
    resolved = client.resolved.with_overrides(settings)
    bound = type(client)(
        resolved.config,
        plugins=client.loaded_plugins,
        progress=client.progress,
        kubeconfig=client.context.given_kubeconfig,
        kube_context=client.kube_context,
        hermetic=client.hermetic,
    )
    if (
        bound.backend.runs_jobs and client.context.given_kubeconfig is None
    ):  # given a kubeconfig, jobs go to that cluster
        result = bound.run(run_id=run_id, on_event=on_event, on_output=on_output)
        return TrainHandle(result.job, bound, dict(result.summary), result.output_dir)
    job = bound.submit_job(run_id=run_id)
    return TrainHandle(job, bound)
