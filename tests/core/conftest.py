"""Fixtures of the core tests: an isolated state directory and working directory per test, the CLI in
process (click's CliRunner) and as the installed console script, and the example plugin installed."""

from __future__ import annotations

import importlib
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import textwrap
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from click.testing import CliRunner, Result

from fsdp_sdk.cli import cli
from fsdp_sdk.plugins import reset_plugins

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE_PLUGIN = ROOT / "examples" / "fsdp-sdk-plugin-b200"
#: The console script installed next to this interpreter (the virtualenv's bin/).
FSDP_SDK = str(Path(sys.executable).with_name("fsdp-sdk"))


@pytest.fixture(autouse=True)
def isolated(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """Every test gets its own state directory, a working directory without a .env, no FSDP_SDK_* variables
    from the outer environment, and a fresh plugin set."""
    for name in list(os.environ):
        if name.startswith("FSDP_SDK_"):
            monkeypatch.delenv(name)
    monkeypatch.setenv("FSDP_SDK_STATE_DIR", str(tmp_path / "state"))
    work = tmp_path / "work"
    work.mkdir()
    monkeypatch.chdir(work)
    reset_plugins()
    cli._plugin_commands = None
    yield
    reset_plugins()
    cli._plugin_commands = None


@pytest.fixture
def state_dir(tmp_path: Path) -> Path:
    """``cluster.state_dir`` of the test (``$FSDP_SDK_STATE_DIR``); not created until something writes state."""
    return tmp_path / "state"


@pytest.fixture
def work_dir(tmp_path: Path) -> Path:
    """The current directory of the test (where a default ``.env`` would be read)."""
    return tmp_path / "work"


@pytest.fixture
def invoke() -> Callable[..., Result]:
    """Run the CLI in process: ``invoke("up", "--dry-run")`` returns click's Result (exit_code, stdout, stderr)."""
    runner = CliRunner()

    def run(*args: str) -> Result:
        return runner.invoke(cli, list(args), prog_name="fsdp-sdk")

    return run


def run_cli(*args: str, env: dict[str, str] | None = None, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    """Run the installed ``fsdp-sdk`` console script in a subprocess (environment and cwd of the test)."""
    return subprocess.run(
        [FSDP_SDK, *args], capture_output=True, text=True, timeout=timeout, env={**os.environ, **(env or {})}
    )


@pytest.fixture(scope="session")
def example_plugin() -> Path:
    """The example plugin distribution, installed (editable) in this environment.

    ``scripts/setup.sh`` installs it; when a checkout skipped that, it is installed here, once.
    """
    from fsdp_sdk.entry_points import entry_points

    if not any(ep.name == "b200" for ep in entry_points("fsdp_sdk")):
        subprocess.run(
            [
                sys.executable,
                "-m",
                "pip",
                "install",
                "--quiet",
                "--no-deps",
                "--no-build-isolation",
                "-e",
                str(EXAMPLE_PLUGIN),
            ],
            check=True,
        )
        sys.path.append(str(EXAMPLE_PLUGIN / "src"))  # what the editable install's .pth adds at start-up
        importlib.invalidate_caches()
    return EXAMPLE_PLUGIN


def etcd_or_skip() -> str:
    """The etcd binary, or skip the test saying why."""
    binary = shutil.which("etcd")
    if binary is None:
        pytest.skip("etcd is not on PATH (Debian/Ubuntu: apt-get install etcd-server); the local etcd tests need it")
    return binary


TRAINIUM_PLUGIN = ROOT / "examples" / "fsdp-sdk-plugin-trainium"

#: Two more distributions an outside user might have next to the Trainium plugin: one whose module cannot be
#: imported, and a fork that registers trn1.32xlarge again (and trn1.2xlarge of its own).
OUTSIDE_EXTRAS = {
    ("fsdp-sdk-plugin-neuronx", "fsdp_sdk_plugin_neuronx", "neuronx"): "import neuronx_distributed  # not installed\n",
    ("fsdp-sdk-plugin-trainium-fork", "fsdp_sdk_plugin_trainium_fork", "trainium-fork"): """
from fsdp_sdk import hookimpl
from fsdp_sdk.instance_types import InstanceType

COMMON = dict(
    gpu_model="Trainium",
    gpu_memory_gib=32,
    bf16_tflops_per_gpu=190.0,
    on_demand_usd_per_hour=None,
    accelerator_resource="aws.amazon.com/neuron",
)


@hookimpl
def fsdp_sdk_register_instance_types(registry):
    registry.add(InstanceType(name="trn1.32xlarge", gpu_count=16, efa_interfaces=8, vcpus=128, memory_gib=512, **COMMON))
    registry.add(InstanceType(name="trn1.2xlarge", gpu_count=1, efa_interfaces=0, vcpus=8, memory_gib=32, **COMMON))
""",
}

# Creates the venv and pip-installs into it, in a process of its own: on a cold cache the install takes minutes
# of index look-ups, which then overlap the tests that run before the ones needing it.
_BUILD_VENV = """
import subprocess, sys
venv, *sources = sys.argv[1:]
subprocess.run([sys.executable, "-m", "venv", venv], check=True)
subprocess.run([venv + "/bin/python", "-m", "pip", "install", "--disable-pip-version-check", *sources], check=True)
"""


def install_distribution(
    site: Path, name: str, module: str, source: str, entry_point: str, version: str = "1.0"
) -> None:
    """Put ``module`` and a ``<name>-<version>.dist-info`` declaring it as ``entry_point`` in the ``fsdp_sdk`` group
    into ``site``: what ``pip install --target site`` leaves, for entry-point discovery, without a build."""
    (site / module).mkdir(parents=True)
    (site / module / "__init__.py").write_text(textwrap.dedent(source))
    dist = site / f"{name.replace('-', '_')}-{version}.dist-info"
    dist.mkdir()
    (dist / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n")
    (dist / "entry_points.txt").write_text(f"[fsdp_sdk]\n{entry_point} = {module}\n")


class _OutsideVenvBuild:
    """The fresh virtual environment of :func:`outside_venv`, built in the background from collection on.

    pip builds from copies of the source trees, so nothing (``build/``, ``*.egg-info``) is written into the checkout.
    """

    def __init__(self) -> None:
        self.root: Path | None = None
        self.process: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        if self.process is not None:
            return
        self.root = root = Path(tempfile.mkdtemp(prefix="fsdp-sdk-outside-"))
        ignore = shutil.ignore_patterns("build", "dist", "*.egg-info", "__pycache__")
        sources = [
            shutil.copytree(tree, root / "src" / tree.name, ignore=ignore)
            for tree in (ROOT / "packages" / "core", TRAINIUM_PLUGIN)
        ]
        for (name, module, entry_point), code in OUTSIDE_EXTRAS.items():
            install_distribution(root / "extras", name, module, code, entry_point, version="0.1.0")
        with open(root / "install.log", "wb") as log:
            self.process = subprocess.Popen(
                [sys.executable, "-c", _BUILD_VENV, str(root / "venv"), *map(str, sources)],
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,  # its own process group: close() stops pip with it
            )

    def wait(self) -> Path:
        self.start()
        assert self.process is not None and self.root is not None
        if self.process.wait(timeout=900) != 0:
            log = (self.root / "install.log").read_text(errors="replace")
            pytest.fail(f"pip could not install fsdp-sdk and the plugins into a fresh venv:\n{log[-3000:]}")
        return self.root

    def close(self) -> None:
        if self.process is not None and self.process.poll() is None:
            os.killpg(self.process.pid, signal.SIGKILL)
            self.process.wait()
        if self.root is not None:
            shutil.rmtree(self.root, ignore_errors=True)


_OUTSIDE_VENV = _OutsideVenvBuild()


@pytest.hookimpl(trylast=True)  # after -m and -k have deselected what will not run
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Start building the fresh venv as soon as a selected test needs it."""
    if any("outside_venv" in getattr(item, "fixturenames", ()) for item in items):
        _OUTSIDE_VENV.start()


def pytest_sessionfinish() -> None:
    _OUTSIDE_VENV.close()


@pytest.fixture(scope="session")
def outside_venv() -> Path:
    """A fresh virtual environment where an outside user installed fsdp-sdk and the Trainium example plugin with
    pip (from copies of their source trees, not editable), without torch; one per test session. Returns its
    ``bin/``; the distributions of :data:`OUTSIDE_EXTRAS` are installed beside it, in :func:`outside_extras`."""
    return _OUTSIDE_VENV.wait() / "venv" / "bin"


@pytest.fixture(scope="session")
def outside_extras(outside_venv: Path) -> Path:
    """The directory holding :data:`OUTSIDE_EXTRAS` as installed distributions: put it on PYTHONPATH to have them."""
    return outside_venv.parents[1] / "extras"
