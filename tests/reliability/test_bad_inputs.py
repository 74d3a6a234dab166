"""Bad input from every source: a one-line error naming the problem, exit status 2, nothing created.

Each case is a YAML file, a ``.env`` file, ``FSDP_SDK_*`` variables, command-line flags or trainer flags (or a
plugin that misbehaves), given to the real CLI in this process. After each one the state directory does not exist,
the working directory holds only the files the case wrote, and no process was started.
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from fsdp_sdk.cli import cli
from fsdp_sdk.hookspecs import hookimpl
from fsdp_sdk.instance_types import InstanceType
from fsdp_sdk.monitoring import MonitoringComponent
from fsdp_sdk.plugins import get_plugins, reset_plugins

from .conftest import Outcome


# Misbehaving plugins, registered as "misbehaving" for the cases that name them.
class BackendsHookRaises:
    @hookimpl
    def fsdp_sdk_register_backends(self, registry: Any) -> None:
        raise RuntimeError("cannot import the cloud's SDK")


class RegistersAnInvalidInstanceType:
    @hookimpl
    def fsdp_sdk_register_instance_types(self, registry: Any) -> None:
        registry.add(
            InstanceType(
                name="x9.big",
                gpu_count=0,
                gpu_model="X",
                gpu_memory_gib=80,
                efa_interfaces=0,
                vcpus=8,
                memory_gib=64,
                bf16_tflops_per_gpu=100,
                on_demand_usd_per_hour=1.0,
            )
        )


class SettingsWithoutDefaults:
    @hookimpl
    def fsdp_sdk_register_settings(self, registry: Any) -> None:
        @dataclasses.dataclass
        class Section:
            endpoint: str

        registry.add("misbehaving", Section)


class RenderHookRaises:
    @hookimpl
    def fsdp_sdk_render_job(self, config: Any, objects: list[dict[str, Any]]) -> None:
        raise KeyError("spec")


class RendersAnObjectWithoutKind:
    @hookimpl
    def fsdp_sdk_render_job(self, config: Any, objects: list[dict[str, Any]]) -> None:
        objects.append({"metadata": {"name": "x"}})


class PreflightHookRaises:
    @hookimpl
    def fsdp_sdk_preflight(self, config: Any, action: str) -> None:
        raise RuntimeError("the quota API is down")


class MonitoringComponentWithoutName:
    @hookimpl
    def fsdp_sdk_monitoring_components(self, config: Any) -> list[MonitoringComponent]:
        objects = [{"apiVersion": "v1", "kind": "ConfigMap", "metadata": {}}]
        return [MonitoringComponent(name="exporter", description="an exporter", objects=objects)]


@dataclass(frozen=True)
class Case:
    """One bad input: where it comes from, the command, and the start of the error line it must give."""

    id: str
    args: tuple[str, ...]
    expected: str
    files: dict[str, str] = field(default_factory=dict)
    environ: dict[str, str] = field(default_factory=dict)
    plugin: type | None = None
    #: warning lines about the misbehaving plugin allowed before the error line
    warnings: int = 0

    @property
    def report_fault(self) -> str:
        """The case as docs/RELIABILITY.md lists it: the input and the command."""
        given = [f"{name}: {' '.join(text.split())}" for name, text in self.files.items()]
        given += [f"{name}={value}".encode("unicode_escape").decode() for name, value in self.environ.items()]
        if self.plugin is not None:
            given.append(f"plugin {self.plugin.__name__}")
        command = " ".join(self.args).encode("unicode_escape").decode()  # a newline in a value stays on the row
        return f"{self.id}: `{command}`" + (f" with `{'; '.join(given)}`" if given else "")


YAML = "c.yaml"
CASES = [
    # YAML files (-c)
    Case(
        "yaml-unknown-section",
        ("config", "show", "-c", YAML),
        "clustr (from c.yaml, line 1): unknown setting; did you mean cluster?",
        {YAML: "clustr:\n  name: x\n"},
    ),
    Case(
        "yaml-unknown-key",
        ("config", "show", "-c", YAML),
        "cluster.nodez (from c.yaml, line 2): unknown setting; did you mean cluster.nodes?",
        {YAML: "cluster:\n  nodez: 2\n"},
    ),
    Case(
        "yaml-wrong-type",
        ("config", "show", "-c", YAML),
        "job.num_workers (from c.yaml): 'two' is not an integer",
        {YAML: "job:\n  num_workers: two\n"},
    ),
    Case(
        "yaml-section-not-mapping",
        ("config", "show", "-c", YAML),
        "job (from c.yaml): must be a mapping of settings",
        {YAML: "job: [1, 2]\n"},
    ),
    Case(
        "yaml-syntax",
        ("config", "show", "-c", YAML),
        "c.yaml: invalid YAML at line 3: expected ',' or ']'",
        {YAML: "job:\n  name: [unclosed\n"},
    ),
    Case(
        "yaml-top-level-list",
        ("config", "show", "-c", YAML),
        "c.yaml: the top level must be a mapping",
        {YAML: "- a\n- b\n"},
    ),
    Case(
        "yaml-region",
        ("config", "show", "-c", YAML),
        "cluster.region (from c.yaml): 'us west 2' is not an AWS region name",
        {YAML: "cluster:\n  region: us west 2\n"},
    ),
    Case(
        "yaml-zone-of-another-region",
        ("config", "show", "-c", YAML),
        "cluster.availability_zones (from c.yaml): zone us-east-1a is not in region us-west-2",
        {YAML: "cluster:\n  availability_zones: [us-east-1a]\n"},
    ),
    Case(
        "yaml-zone-grammar",
        ("config", "show", "-c", YAML),
        "cluster.availability_zones (from c.yaml): ['us-west-2'] is not a list of availability zone names",
        {YAML: "cluster:\n  availability_zones: [us-west-2]\n"},
    ),
    Case(
        "yaml-k8s-name",
        ("config", "show", "-c", YAML),
        "job.name (from c.yaml): 'Bad_Name' is not a valid Kubernetes name",
        {YAML: "job:\n  name: Bad_Name\n"},
    ),
    Case(
        "yaml-env-name",
        ("config", "show", "-c", YAML),
        "job.env (from c.yaml): the value has 'A=B', which is not an environment variable name",
        {YAML: "job:\n  env:\n    A=B: x\n"},
    ),
    Case(
        "yaml-reservation-id",
        ("config", "show", "-c", YAML),
        "cluster.capacity_reservation_id (from c.yaml): 'abc' is not a capacity reservation id",
        {YAML: "cluster:\n  capacity_reservation_id: abc\n"},
    ),
    Case(
        "yaml-block-without-id",
        ("config", "show", "-c", YAML),
        "cluster.capacity_type (from c.yaml): is capacity-block but no cluster.capacity_reservation_id is set",
        {YAML: "cluster:\n  capacity_type: capacity-block\n"},
    ),
    Case(
        "yaml-k8s-version",
        ("config", "show", "-c", YAML),
        "cluster.kubernetes_version (from c.yaml): '1.3x' is not a Kubernetes minor version",
        {YAML: "cluster:\n  kubernetes_version: '1.3x'\n"},
    ),
    Case(
        "yaml-port",
        ("config", "show", "-c", YAML),
        "job.rdzv_port (from c.yaml): 70000 is not a TCP port",
        {YAML: "job:\n  rdzv_port: 70000\n"},
    ),
    Case(
        "yaml-node-bounds",
        ("config", "show", "-c", YAML),
        "cluster.nodes (from c.yaml): 3 is outside min_nodes..max_nodes (0..2)",
        {YAML: "cluster:\n  nodes: 3\n  max_nodes: 2\n"},
    ),
    Case(
        "yaml-trainer-value",
        ("config", "show", "-c", YAML),
        "trainer.train.steps (from c.yaml): must be positive (got -1)",
        {YAML: "trainer:\n  train:\n    steps: -1\n"},
    ),
    Case(
        "yaml-capacity-type",
        ("config", "show", "-c", YAML),
        "cluster.capacity_type (from c.yaml): 'reserved' is not one of on-demand, capacity-reservation, capacity-block, spot",
        {YAML: "cluster:\n  capacity_type: reserved\n"},
    ),
    # .env files
    Case(
        "env-unreadable-line",
        ("config", "show"),
        ".env line 2: 'NUM_WORKERS two' is not NAME=VALUE",
        {".env": "JOB_NAME=a\nNUM_WORKERS two\n"},
    ),
    Case(
        "env-command-substitution",
        ("config", "show"),
        "REGISTRY (from .env line 1): is a command substitution",
        {".env": "REGISTRY=$(aws sts get-caller-identity)\n"},
    ),
    Case(
        "env-unset-variable",
        ("config", "show"),
        "IMAGE (from .env line 1): uses $NOPE_NOT_SET",
        {".env": "IMAGE=$NOPE_NOT_SET\n"},
    ),
    Case(
        "env-zero-workers",
        ("config", "show"),
        "NUM_WORKERS (from .env): 0 must be at least 1",
        {".env": "NUM_WORKERS=0\n"},
    ),
    Case(
        "env-unknown-instance-type",
        ("config", "show"),
        "INSTANCE_TYPE (from .env): unknown instance type 'p9.48xlarge'",
        {".env": "INSTANCE_TYPE=p9.48xlarge\n"},
    ),
    Case(
        "env-tag-with-space", ("config", "show"), "TAG (from .env): 'a b' contains whitespace", {".env": 'TAG="a b"\n'}
    ),
    Case(
        "env-registry-injection",
        ("config", "show"),
        "REGISTRY (from .env): 'ecr;id' is not a registry host",
        {".env": "REGISTRY=ecr;id\n"},
    ),
    Case(
        "env-fi-provider",
        ("config", "show"),
        "FI_PROVIDER (from .env): 'bogus' names an unknown libfabric provider",
        {".env": "FI_PROVIDER=bogus\n"},
    ),
    Case(
        "env-nanogpt-model",
        ("config", "show"),
        "MODEL_NAME (from .env line 1): '124M' is a nanoGPT size",
        {".env": "MODEL_NAME=124M\n"},
    ),
    Case(
        "env-prefixed-unknown",
        ("config", "show"),
        "FSDP_SDK_JOB__NOPE (from .env): is not a configuration setting",
        {".env": "FSDP_SDK_JOB__NOPE=1\n"},
    ),
    Case(
        "env-too-many-gpus",
        ("config", "show"),
        "GPU_PER_WORKER (from .env): 16 GPUs per worker but p5.48xlarge has 8",
        {".env": "GPU_PER_WORKER=16\n"},
    ),
    Case(
        "env-too-many-efa",
        ("config", "show"),
        "EFA_PER_WORKER (from .env): 64 EFA interfaces per worker but p5.48xlarge has 32",
        {".env": "EFA_PER_WORKER=64\n"},
    ),
    Case(
        "env-unclosed-quote",
        ("config", "show"),
        ".env line 1: 'CMD=\"torchrun' has a \" quote that is never closed",
        {".env": 'CMD="torchrun\n'},
    ),
    # FSDP_SDK_* environment variables
    Case(
        "environ-wrong-type",
        ("config", "show"),
        "FSDP_SDK_JOB__NUM_WORKERS (from environment): 'abc' is not an integer",
        environ={"FSDP_SDK_JOB__NUM_WORKERS": "abc"},
    ),
    Case(
        "environ-unknown-section",
        ("config", "show"),
        "FSDP_SDK_CLUSTR__NAME (from environment): is not a configuration setting; did you mean FSDP_SDK_CLUSTER__NAME?",
        environ={"FSDP_SDK_CLUSTR__NAME": "x"},
    ),
    Case(
        "environ-trainer-without-field",
        ("config", "show"),
        "FSDP_SDK_TRAINER__TRAIN (from environment): is not a configuration setting",
        environ={"FSDP_SDK_TRAINER__TRAIN": "1"},
    ),
    Case(
        "environ-plugin-not-installed",
        ("config", "show"),
        "eksctl.ami_family (from environment): is a setting of the fsdp-sdk-eksctl plugin, which is not installed",
        environ={"FSDP_SDK_EKSCTL__AMI_FAMILY": "x"},
    ),
    Case(
        "environ-region-injection",
        ("config", "show"),
        "FSDP_SDK_CLUSTER__REGION (from environment): 'us-west-2; rm -rf /' is not an AWS region name",
        environ={"FSDP_SDK_CLUSTER__REGION": "us-west-2; rm -rf /"},
    ),
    Case(
        "environ-bool",
        ("config", "show"),
        "FSDP_SDK_CLUSTER__EFA (from environment): 'maybe' is not a boolean",
        environ={"FSDP_SDK_CLUSTER__EFA": "maybe"},
    ),
    # command-line flags
    Case(
        "flag-negative-nodes",
        ("up", "--nodes", "-1", "--dry-run"),
        "Invalid value for '--nodes': -1 is not in the range x>=0.",
    ),
    Case(
        "flag-set-without-value",
        ("config", "show", "--set", "nokey"),
        "Invalid value for '--set': 'nokey' is not KEY=VALUE",
    ),
    Case(
        "flag-set-float-for-int",
        ("config", "show", "--set", "job.num_workers=1.5"),
        "job.num_workers (from --set): '1.5' is not an integer",
    ),
    Case(
        "flag-unknown-backend", ("status", "--backend", "nope"), "--backend (from command line): unknown backend 'nope'"
    ),
    Case(
        "flag-missing-config-file",
        ("config", "show", "-c", "missing.yaml"),
        "--config: file 'missing.yaml' does not exist",
    ),
    Case(
        "flag-missing-env-file",
        ("config", "show", "--env-file", "missing.env"),
        "--env-file: file 'missing.env' does not exist",
    ),
    Case(
        "flag-zero-steps",
        ("run", "--steps", "0", "--dry-run"),
        "Invalid value for '--steps': 0 is not in the range x>=1.",
    ),
    Case(
        "flag-image-upper-case",
        ("config", "show", "--set", "job.image=UPPER"),
        "job.image (from --set): 'UPPER' is not an image name",
    ),
    Case(
        "flag-tag-newline",
        ("config", "show", "--set", "job.tag=v1\nv2"),
        "job.tag (from --set): 'v1\\nv2' contains a control character",
    ),
    Case(
        "flag-rdzv-host-injection",
        ("config", "show", "--set", "job.rdzv_host=etcd;id"),
        "job.rdzv_host (from --set): 'etcd;id' is not a host name",
    ),
    Case(
        "flag-cluster-name",
        ("config", "show", "--set", "cluster.name=1bad"),
        "cluster.name (from --set): '1bad' is not a valid cluster name",
    ),
    Case(
        "flag-nccl-debug",
        ("config", "show", "--set", "job.nccl_debug=LOUD"),
        "job.nccl_debug (from --set): 'LOUD' is not one of VERSION, WARN, INFO, TRACE, ABORT",
    ),
    Case(
        "flag-job-api",
        ("job", "render", "--api", "bogus"),
        "Invalid value for '--api': 'bogus' is not one of 'pytorchjob', 'trainjob'.",
    ),
    Case(
        "flag-unbalanced-command",
        ("config", "show", "--set", "job.command=torchrun 'x"),
        'job.command (from --set): "torchrun \'x" cannot be split into words',
    ),
    Case(
        "flag-kubernetes-version",
        ("config", "show", "--set", "cluster.kubernetes_version=latest"),
        "cluster.kubernetes_version (from --set): 'latest' is not a Kubernetes minor version",
    ),
    # misbehaving plugins
    Case(
        "plugin-backends-hook-raises",
        ("up", "--backend", "broken", "--dry-run"),
        "--backend (from command line): unknown backend 'broken'; use one of: local (fsdp-sdk plugins lists them); "
        "plugin misbehaving failed to register its backends (fsdp-sdk plugins says why)",
        plugin=BackendsHookRaises,
        warnings=1,
    ),
    Case(
        "plugin-invalid-instance-type",
        ("up", "--dry-run", "--set", "cluster.instance_type=x9.big"),
        "cluster.instance_type (from --set): unknown instance type 'x9.big'",
        plugin=RegistersAnInvalidInstanceType,
        warnings=1,
    ),
    Case(
        "plugin-settings-without-defaults",
        ("config", "show", "-c", YAML),
        "misbehaving (from c.yaml, line 1): unknown setting",
        {YAML: "misbehaving:\n  endpoint: x\n"},
        plugin=SettingsWithoutDefaults,
        warnings=1,
    ),
    Case(
        "plugin-render-hook-raises",
        ("job", "render"),
        "plugin 'misbehaving': fsdp_sdk_render_job failed: KeyError: 'spec' (a bug in the plugin: report it to its "
        "author, or uninstall the plugin)",
        plugin=RenderHookRaises,
    ),
    Case(
        "plugin-renders-object-without-kind",
        ("job", "render"),
        "plugin 'misbehaving': fsdp_sdk_render_job left objects[1] without apiVersion or kind",
        plugin=RendersAnObjectWithoutKind,
    ),
    Case(
        "plugin-preflight-hook-raises",
        ("up", "--dry-run"),
        "plugin 'misbehaving': fsdp_sdk_preflight failed: RuntimeError: the quota API is down",
        plugin=PreflightHookRaises,
    ),
    Case(
        "plugin-monitoring-component-without-name",
        ("monitor", "install", "--dry-run"),
        "plugin 'misbehaving': fsdp_sdk_monitoring_components: monitoring component 'exporter': a ConfigMap has no "
        "metadata.name",
        plugin=MonitoringComponentWithoutName,
    ),
    # trainer flags (after --)
    Case(
        "trainer-flag-missing-value",
        ("run", "--dry-run", "--", "--train.steps"),
        "--train.steps: needs a value; give one: --train.steps VALUE (or --train.steps=VALUE)",
    ),
    Case("trainer-flag-not-an-option", ("run", "--dry-run", "--", "steps", "3"), "steps: is not a trainer option"),
    Case(
        "trainer-flag-wrong-type",
        ("run", "--dry-run", "--", "--train.steps", "abc"),
        "--train.steps (from trainer arguments): 'abc' is not an integer",
    ),
    Case(
        "trainer-flag-unknown-section",
        ("run", "--dry-run", "--", "--nope.x", "1"),
        "--nope.x (from trainer arguments): unknown option (the sections are ac,",
    ),
]


@pytest.fixture
def isolated(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    for name in list(os.environ):
        if name.startswith("FSDP_SDK_"):
            monkeypatch.delenv(name)
    monkeypatch.setenv("FSDP_SDK_STATE_DIR", str(tmp_path / "state"))
    monkeypatch.setenv("FSDP_SDK_DISABLE_PLUGIN_AUTOLOAD", "1")
    work = tmp_path / "work"
    work.mkdir(exist_ok=True)
    monkeypatch.chdir(work)
    reset_plugins()
    cli._plugin_commands = None
    yield work
    reset_plugins()
    cli._plugin_commands = None


def _processes() -> set[int]:
    return {int(p) for p in os.listdir("/proc") if p.isdigit()} if os.path.isdir("/proc") else set()


def _children() -> set[int]:
    me = str(os.getpid())
    found = set()
    for pid in _processes():
        try:
            stat = Path(f"/proc/{pid}/stat").read_text()
        except OSError:
            continue
        if stat.rsplit(")", 1)[-1].split()[1] == me:
            found.add(pid)
    return found


@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_bad_input_is_one_line_exit_2_and_creates_nothing(
    case: Case, isolated: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, outcome: Outcome
) -> None:
    for name, text in case.files.items():
        (isolated / name).write_text(text)
    for name, value in case.environ.items():
        monkeypatch.setenv(name, value)
    if case.plugin is not None:
        get_plugins().register(case.plugin(), name="misbehaving")
    before = _children()
    result = CliRunner().invoke(cli, list(case.args), prog_name="fsdp-sdk")
    lines = result.stderr.strip().splitlines()
    assert result.exit_code == 2, (result.exit_code, result.output)
    assert len(lines) == 1 + case.warnings and lines[-1].startswith(f"Error: {case.expected}"), result.stderr
    assert all(line.startswith("fsdp-sdk: warning: plugin 'misbehaving': ") for line in lines[:-1]), result.stderr
    assert not (tmp_path / "state").exists(), "a refused input must not create the state directory"
    assert sorted(p.name for p in isolated.iterdir()) == sorted(case.files), "a refused input must not write files"
    assert _children() <= before, "a refused input must not start processes"
    outcome.saw(lines[-1])
    outcome.note("exit 2; no state directory, file or process")


def test_there_are_at_least_fifty_cases_from_every_source() -> None:
    prefixes = {c.id.split("-", 1)[0] for c in CASES}
    assert len(CASES) >= 50 and {"yaml", "env", "environ", "flag", "trainer", "plugin"} <= prefixes
