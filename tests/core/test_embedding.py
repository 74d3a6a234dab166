"""The library as a platform embeds it: a hermetic client from an in-memory configuration that reads nothing
around it, prints nothing and writes nothing where it runs; and the example of docs/embedding.md runs."""

from __future__ import annotations

import ast
import dataclasses
import functools
import importlib.util
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from fsdp_sdk import Client, ConfigError, hookimpl
from fsdp_sdk.config import DEFAULT_STATE_DIR
from fsdp_sdk.instance_types import BUILTIN_INSTANCE_TYPES, InstanceTypeRegistry
from fsdp_sdk.plugins import Plugins, build_plugins
from fsdp_sdk.preflight import PreflightResult
from fsdp_sdk.resolved import Resolved
from fsdp_sdk.testing import snapshot

from .conftest import ROOT, etcd_or_skip

GUIDE = ROOT / "docs" / "embedding.md"
REGISTRY = "123456789012.dkr.ecr.us-west-2.amazonaws.com"
#: What a tiny CPU run's leader must not print: library-load failures and deprecation noise (issue 28, item 7).
NOISE = re.compile(r"torchao|Failed to load|deprecat|FutureWarning|UserWarning", re.IGNORECASE)

needs_trainer = pytest.mark.skipif(
    importlib.util.find_spec("fsdp_trainer") is None,
    reason="the trainer package (fsdp_trainer) is not installed: pip install -e packages/trainer",
)


@pytest.fixture
def surroundings(work_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, example_plugin: Path) -> Path:
    """Everything a hermetic client must ignore: a ./.env, FSDP_SDK_* variables, $KUBECONFIG, and an installed
    entry-point plugin (the B200 example)."""
    (work_dir / ".env").write_text("NUM_WORKERS=7\nINSTANCE_TYPE=g5.48xlarge\n")
    monkeypatch.setenv("FSDP_SDK_JOB__NAME", "from-the-environment")
    monkeypatch.setenv("FSDP_SDK_STATE_DIR", str(tmp_path / "elsewhere"))
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text("apiVersion: v1\nkind: Config\n")
    monkeypatch.setenv("KUBECONFIG", str(kubeconfig))
    return work_dir


def test_a_hermetic_client_reads_nothing_around_it(surroundings: Path) -> None:
    client = Client.from_dict({"job": {"registry": REGISTRY}})
    config = client.config
    assert (config.job.num_workers, config.cluster.instance_type, config.job.name) == (2, "p5.48xlarge", "fsdp")
    assert config.cluster.state_dir == Path(DEFAULT_STATE_DIR).expanduser()
    assert "p6-b200.48xlarge" not in {t.name for t in client.instance_types()}  # installed, not loaded
    assert client.kubeconfig() is None
    with pytest.raises(ConfigError, match=r"^kubeconfig: this client is hermetic \(Client\.from_dict\)"):
        client.prereqs()  # would reach the cluster: $KUBECONFIG is not read, nor ~/.kube/config
    # the same surroundings do reach a client from_sources() makes
    assert Client.from_sources().config.job.num_workers == 7


def test_a_hermetic_client_uses_the_plugins_and_kubeconfig_it_is_given(surroundings: Path, tmp_path: Path) -> None:
    import fsdp_sdk_plugin_b200

    plugins = build_plugins(autoload=False)
    plugins.register(fsdp_sdk_plugin_b200, name="b200")
    kubeconfig = tmp_path / "team-a.kubeconfig"
    client = Client.from_dict(
        {"cluster": {"instance_type": "p6-b200.48xlarge"}, "job": {"registry": REGISTRY}},
        plugins=plugins,
        kubeconfig=kubeconfig,
    )
    assert client.kubeconfig() == kubeconfig
    (job,) = client.render_job()
    container = job["spec"]["pytorchReplicaSpecs"]["Worker"]["template"]["spec"]["containers"][0]
    limits = container["resources"]["limits"]
    assert (limits["nvidia.com/gpu"], limits["vpc.amazonaws.com/efa"]) == (8, 8) and {"cpu", "memory"} <= set(limits)
    env = {e["name"]: e.get("value") for e in container["env"]}
    assert env["FI_EFA_USE_DEVICE_RDMA"] == "1"


def test_from_dict_errors_name_the_key_as_given() -> None:
    with pytest.raises(ConfigError, match=r"^job\.num_workers \(from Client\.from_dict\): 'two' is not an integer"):
        Client.from_dict({"job": {"num_workers": "two"}})
    with pytest.raises(ConfigError, match=r"^job\.nodes \(from Client\.from_dict\): unknown setting"):
        Client.from_dict({"job": {"nodes": 2}})


@pytest.mark.slow
@needs_trainer
def test_a_platform_drives_render_run_and_down_silently(
    surroundings: Path, tmp_path: Path, capfd: pytest.CaptureFixture[str]
) -> None:
    etcd_or_skip()
    state_dir = tmp_path / "platform-state"
    before = snapshot(surroundings)
    data = {
        "cluster": {"backend": "local", "state_dir": str(state_dir)},
        "job": {"name": "embedded", "num_workers": 2, "registry": REGISTRY},
        "trainer": {"model": {"preset": "tiny"}, "data": {"seq_len": 128}, "train": {"steps": 2}},
    }
    client = Client.from_dict(data)

    (job,) = client.render_job(rdzv_id="embedded-1")
    assert job["kind"] == "PyTorchJob" and job["spec"]["elasticPolicy"]["rdzvId"] == "embedded-1"
    estimate = client.estimate(scaling=False)
    assert estimate.model.name == "tiny" and json.dumps(estimate.to_dict())

    lines: list[str] = []
    try:
        result = client.run(on_output=lines.append)
    finally:
        gone = client.down()
    assert gone.state == "absent"
    assert result.summary["steps_run"] == 2 and result.output_dir is not None
    assert Path(result.output_dir).is_relative_to(state_dir)
    assert any("master_addr=" in line for line in lines)
    noise = [line for line in lines if NOISE.search(line)]
    assert not noise, f"the leader's output carries noise: {noise[:3]}"

    out, err = capfd.readouterr()
    assert (out, err) == ("", ""), "the library printed something"
    assert snapshot(surroundings) == before, "the library wrote into the working directory"


def _guide_example() -> str:
    text = GUIDE.read_text()
    marker = "<!-- example: run by tests/core/test_embedding.py -->"
    assert marker in text, f"{GUIDE} lost its tested example"
    match = re.search(r"```python\n(.*?)```", text.split(marker, 1)[1], re.DOTALL)
    assert match, "no python block after the marker"
    return match.group(1)


@pytest.mark.slow
@needs_trainer
def test_the_guides_example_runs(tmp_path: Path) -> None:
    script = tmp_path / "example.py"
    script.write_text(_guide_example())
    cwd = tmp_path / "cwd"
    cwd.mkdir()
    env = {k: v for k, v in os.environ.items() if not k.startswith("FSDP_SDK_")}
    result = subprocess.run(
        [sys.executable, str(script)], cwd=cwd, env=env, capture_output=True, text=True, timeout=240
    )
    assert result.returncode == 0, result.stderr[-3000:]
    assert result.stderr == ""
    first, second = result.stdout.splitlines()
    assert first == "PyTorchJob demo: 2 workers x 8 GPUs"
    assert re.fullmatch(r"trained 3 steps, final loss \d+\.\d\d", second), second
    assert not any(cwd.iterdir())


# ------------------------------------------------------------------ a platform's own instance type

#: An instance type only the platform's plugin set registers: the process-wide set has never heard of it.
PLATFORM_TYPE = "p5x.48xlarge"


class PlatformTypes:
    """A platform's plugin: its own instance type (a P5 under another name), and a preflight check and a render
    hook that read the instance type from ``resolved``."""

    def __init__(self) -> None:
        self.seen: list[tuple[str, str]] = []

    @hookimpl
    def fsdp_sdk_register_instance_types(self, registry: InstanceTypeRegistry) -> None:
        p5 = next(t for t in BUILTIN_INSTANCE_TYPES if t.name == "p5.48xlarge")
        registry.add(dataclasses.replace(p5, name=PLATFORM_TYPE))

    @hookimpl
    def fsdp_sdk_preflight(self, action: str, resolved: Resolved) -> list[PreflightResult]:
        self.seen.append(("preflight", resolved.instance.name))
        return []

    @hookimpl
    def fsdp_sdk_render_job(self, objects: list[dict], resolved: Resolved) -> None:
        self.seen.append(("render", resolved.instance.name))
        objects[0]["metadata"].setdefault("annotations", {})["platform.example.com/gpus"] = str(
            resolved.instance.gpu_count
        )


@pytest.fixture
def platform(monkeypatch: pytest.MonkeyPatch) -> tuple[Plugins, PlatformTypes]:
    """The platform's plugin set (built-in plugins, both cluster backends and its own types, no autoload), with the
    process-wide set made unreachable: building it fails the test."""
    import fsdp_sdk.plugins
    import fsdp_sdk_eksctl.plugin
    import fsdp_sdk_terraform.plugin

    @functools.cache  # reset_plugins() clears it after the test, as it clears the real one
    def no_process_wide_set() -> Plugins:
        raise AssertionError("the process-wide plugin set was asked for")

    assert fsdp_sdk.plugins.get_plugins.cache_info().currsize == 0  # not built yet (conftest resets it)
    monkeypatch.setattr(fsdp_sdk.plugins, "get_plugins", no_process_wide_set)
    plugins = build_plugins(autoload=False)
    plugins.register(fsdp_sdk_eksctl.plugin, name="eksctl")
    plugins.register(fsdp_sdk_terraform.plugin, name="terraform")
    types = PlatformTypes()
    plugins.register(types, name="platform")
    return plugins, types


@pytest.mark.parametrize("backend", ["eksctl", "terraform"])
def test_a_platforms_own_instance_type_plans_renders_and_estimates_without_the_process_wide_set(
    platform: tuple[Plugins, PlatformTypes], backend: str, tmp_path: Path
) -> None:
    plugins, types = platform
    assert PLATFORM_TYPE not in build_plugins(autoload=False).instance_types  # only the platform's set has it
    data = {
        "cluster": {
            "backend": backend,
            "instance_type": PLATFORM_TYPE,
            "availability_zones": ["us-west-2a", "us-west-2b"],
            "state_dir": str(tmp_path / "state"),
            "checkpoint_bucket": "platform-checkpoints",  # named: nothing asks the account for the derived name
        },
        "job": {"registry": REGISTRY},
        "trainer": {"model": {"preset": "llama2-7b"}},
    }
    client = Client.from_dict(data, plugins=plugins)
    assert client.resolved.instance.name == PLATFORM_TYPE and client.resolved.plugins is plugins

    plan = client.plan(preflight=False)
    assert plan.backend == backend and plan.hourly_cost_usd is not None
    assert PLATFORM_TYPE in json.dumps(plan.to_dict())
    assert plan.estimate is not None and plan.estimate["instance_type"] == PLATFORM_TYPE

    (job,) = client.render_job(rdzv_id="platform-1")
    worker = job["spec"]["pytorchReplicaSpecs"]["Worker"]["template"]["spec"]
    assert worker["nodeSelector"]["node.kubernetes.io/instance-type"] == PLATFORM_TYPE
    assert job["metadata"]["annotations"]["platform.example.com/gpus"] == "8"

    estimate = client.estimate(scaling=False)
    assert estimate.instance_type == PLATFORM_TYPE and estimate.gpus_per_node == 8

    assert plugins.hooks.preflight(client.resolved, "submit") == []
    assert ("render", PLATFORM_TYPE) in types.seen and ("preflight", PLATFORM_TYPE) in types.seen
    types.seen.clear()  # a configuration alone: a hook asking for `resolved` gets it resolved in the hook's own set
    assert plugins.hooks.preflight(client.config, "submit") == [] and types.seen == [("preflight", PLATFORM_TYPE)]


#: Where a plugin set may be built outside the CLI, each a default for a caller that gave none (a Client, a
#: Resolved or a plugin set passed in is used instead): file -> how many calls.
BUILDS_ALLOWED = {
    "packages/core/src/fsdp_sdk/plugins.py": 3,  # build_plugins itself (PluginManager, Plugins), get_plugins's set
    "packages/core/src/fsdp_sdk/client.py": 3,  # Client(...)/from_sources without plugins=; from_dict's built-ins
    "packages/core/src/fsdp_sdk/testing.py": 3,  # the conformance kit's own sets (autoload=False)
    "packages/core/src/fsdp_sdk/k8s/render.py": 1,  # render_job(config) without plugins= or a Resolved
    "packages/core/src/fsdp_sdk/k8s/jobs.py": 1,  # JobClient(config) without plugins= or a Resolved
    "packages/backend-terraform/src/fsdp_sdk_terraform/backend.py": 1,  # backend.down(config) alone (Client: delete)
}


def test_no_module_outside_the_cli_builds_a_plugin_set_of_its_own() -> None:
    # Backends, hooks, renderers and the estimate get the plugin set they are to use (a Resolved, a Client's);
    # only the command line, which is the process, reaches for the process-wide one (get_plugins()), and a plugin
    # set is built (build_plugins(), Plugins(...)) only where a caller gave none (BUILDS_ALLOWED).
    offenders, builds = [], {}
    for source in sorted((ROOT / "packages").glob("*/src/**/*.py")):
        relative = source.relative_to(ROOT).as_posix()
        if "/fsdp_sdk/cli/" in relative:
            continue
        for node in ast.walk(ast.parse(source.read_text(), filename=relative)):
            if isinstance(node, ast.Call):
                called = node.func.id if isinstance(node.func, ast.Name) else getattr(node.func, "attr", None)
                if called == "get_plugins":
                    offenders.append(f"{relative}:{node.lineno}")
                if called in ("build_plugins", "Plugins", "PluginManager"):
                    builds.setdefault(relative, []).append(node.lineno)
    assert not offenders, f"get_plugins() called outside fsdp_sdk/cli/: {offenders}"
    counts = {relative: len(lines) for relative, lines in builds.items()}
    assert counts == BUILDS_ALLOWED, f"a plugin set built outside fsdp_sdk/cli/: {builds}"


def test_client_down_hands_the_backend_its_resolved_configuration(tmp_path: Path) -> None:
    """``Client.down`` calls the backend's ``delete`` with the client's own resolved value (terraform with its state
    in S3 renders again from it instead of building the installed plugin set)."""
    from fsdp_sdk.backends.base import ClusterStatus

    client = Client.from_dict({"cluster": {"backend": "local", "state_dir": str(tmp_path / "state")}})
    seen = []
    backend = client.backend

    def delete(resolved, *, dry_run=False, progress=None):
        seen.append(resolved)
        return ClusterStatus(backend="local", cluster=resolved.config.cluster.name, state="absent")

    backend.delete = delete  # type: ignore[method-assign]
    client.down()
    assert seen == [client.resolved]
