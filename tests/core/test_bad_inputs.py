"""Bad input corpus: each wrong value gives one line on stderr naming it, exit status 2, and nothing is started
or created (the state directory, where etcd's data and every run would go, does not appear)."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

from .conftest import run_cli

TRAINER = importlib.util.find_spec("fsdp_trainer") is not None
needs_trainer = pytest.mark.skipif(not TRAINER, reason="the trainer package (fsdp_trainer) is not installed")

# id, command line, files in the working directory, environment, what the error must name
CASES = [
    ("unknown-instance-type", ["up", "--instance-type", "p9.96xlarge"], {}, {}, "'p9.96xlarge'"),
    (
        "gpus-beyond-instance",
        ["up"],
        {".env": "GPU_PER_WORKER=16\nINSTANCE_TYPE=p5.48xlarge\n"},
        {},
        "GPU_PER_WORKER (from .env): 16 GPUs per worker but p5.48xlarge has 8",
    ),
    ("efa-beyond-instance", ["up"], {".env": "INSTANCE_TYPE=p5en.48xlarge\nEFA_PER_WORKER=32\n"}, {}, "EFA_PER_WORKER"),
    (
        "workers-not-a-number",
        ["up"],
        {".env": "NUM_WORKERS=two\n"},
        {},
        "NUM_WORKERS (from .env): 'two' is not an integer; set NUM_WORKERS to a whole number like 2",
    ),
    ("port-out-of-range", ["up"], {".env": "RDZV_PORT=70000\n"}, {}, "RDZV_PORT (from .env): 70000 is not a TCP port"),
    (
        "bad-job-name",
        ["up"],
        {".env": "JOB_NAME=My_Job\n"},
        {},
        "JOB_NAME (from .env): 'My_Job' is not a valid Kubernetes name",
    ),
    (
        "unknown-yaml-key",
        ["up", "-c", "c.yaml"],
        {"c.yaml": "cluster:\n  nodez: 2\n"},
        {},
        "cluster.nodez (from c.yaml, line 2): unknown setting; did you mean cluster.nodes?",
    ),
    (
        "unknown-yaml-section",
        ["up", "-c", "c.yaml"],
        {"c.yaml": "jobs:\n  name: x\n"},
        {},
        "jobs (from c.yaml, line 1): unknown setting",
    ),
    (
        "bad-yaml-choice",
        ["up", "-c", "c.yaml"],
        {"c.yaml": "job:\n  api: mpijob\n"},
        {},
        "job.api (from c.yaml): 'mpijob'",
    ),
    ("invalid-yaml", ["up", "-c", "c.yaml"], {"c.yaml": "cluster: [nodes\n"}, {}, "c.yaml: invalid YAML"),
    ("missing-config-file", ["up", "-c", "nowhere.yaml"], {}, {}, "--config: file 'nowhere.yaml' does not exist"),
    ("missing-config-file-from-env", ["up"], {}, {"FSDP_SDK_CONFIG": "gone.yaml"}, "'gone.yaml' does not exist"),
    ("missing-env-file", ["up", "--env-file", "nowhere.env"], {}, {}, "--env-file: file 'nowhere.env' does not exist"),
    ("bad-backend", ["up", "--backend", "gke"], {}, {}, "--backend (from command line): unknown backend 'gke'"),
    (
        "bad-backend-from-env",
        ["up"],
        {},
        {"FSDP_SDK_CLUSTER__BACKEND": "gke"},
        "FSDP_SDK_CLUSTER__BACKEND (from environment)",
    ),
    (
        "unknown-env-setting",
        ["up"],
        {},
        {"FSDP_SDK_JOB__NUM_WORKRS": "2"},
        "FSDP_SDK_JOB__NUM_WORKRS (from environment): is not a configuration setting; did you mean FSDP_SDK_JOB__NUM_WORKERS?",
    ),
    ("set-without-value", ["up", "--set", "job.num_workers"], {}, {}, "--set"),
    (
        "set-bad-boolean",
        ["up", "--set", "cluster.efa=maybe"],
        {},
        {},
        "cluster.efa (from --set): 'maybe' is not a boolean",
    ),
    ("negative-nodes", ["up", "--nodes", "-1"], {}, {}, "--nodes"),
    ("negative-steps", ["run", "--steps", "-5", "--preset", "tiny"], {}, {}, "--steps"),
    ("zero-workers", ["run", "--nodes", "0"], {}, {}, "--nodes"),
    ("unknown-command-option", ["up", "--nodse", "2"], {}, {}, "--nodse"),
    ("bad-trainer-argument", ["run", "--", "steps", "3"], {}, {}, "steps"),
    pytest.param(
        "negative-steps-to-trainer",
        ["run", "--set", "train.steps=-5"],
        {},
        {},
        "train.steps (from --set): must be positive",
        marks=needs_trainer,
    ),
    pytest.param(
        "unknown-trainer-option",
        ["run", "--", "--train.stepz", "3"],
        {},
        {},
        "--train.stepz (from trainer arguments): unknown option",
        marks=needs_trainer,
    ),
    pytest.param(
        "bad-trainer-choice-in-yaml",
        ["run", "-c", "t.yaml"],
        {"t.yaml": "trainer:\n  parallel:\n    api: fsdp3\n"},
        {},
        "trainer.parallel.api (from t.yaml): 'fsdp3' is not one of",
        marks=needs_trainer,
    ),
]


def _ids(case) -> str:
    return case.values[0] if hasattr(case, "values") else case[0]


@pytest.mark.parametrize("name, args, files, env, needle", CASES, ids=[_ids(c) for c in CASES])
def test_bad_input_is_one_line_naming_it_and_starts_nothing(
    name: str,
    args: list[str],
    files: dict[str, str],
    env: dict[str, str],
    needle: str,
    invoke,
    monkeypatch: pytest.MonkeyPatch,
    work_dir: Path,
    state_dir: Path,
) -> None:
    for filename, text in files.items():
        (work_dir / filename).write_text(text)
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    result = invoke(*args)
    assert result.exit_code == 2, (result.stdout, result.stderr)
    lines = result.stderr.splitlines()
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith("Error: ") and needle in lines[0]
    assert "Traceback" not in result.output
    assert not state_dir.exists(), "a refused command must not create any state"


def test_the_console_script_agrees(work_dir: Path, state_dir: Path) -> None:
    (work_dir / ".env").write_text("NUM_WORKERS=two\n")
    result = run_cli("run", "--preset", "tiny")
    assert result.returncode == 2
    assert result.stderr == (
        "Error: NUM_WORKERS (from .env): 'two' is not an integer; set NUM_WORKERS to a whole number like 2\n"
    )
    assert result.stdout == "" and not state_dir.exists()


def test_debug_adds_the_traceback(invoke) -> None:
    result = invoke("--debug", "up", "--instance-type", "p9.96xlarge")
    assert result.exit_code == 2
    assert "Traceback" in result.stderr and result.stderr.rstrip().splitlines()[-1].startswith("Error: ")


def test_failures_that_are_not_usage_errors_exit_1(invoke, state_dir: Path) -> None:
    result = invoke("scale", "3")  # nothing to scale yet
    assert result.exit_code == 1
    assert result.stderr == "Error: local: no local cluster to scale; run 'fsdp-sdk up --backend local' first\n"
