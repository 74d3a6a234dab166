"""The CLI as a newcomer meets it: global options apart in help, shell completion, backends that are not installed."""

from __future__ import annotations

import os
import subprocess

import pytest

from .conftest import FSDP_SDK


def test_global_options_have_their_own_section(invoke) -> None:
    text = invoke("run", "--help").stdout
    own, _, shared = text.partition("Global options:")
    assert "--model NAME" in own and "--steps" in own and "--backend NAME" not in own
    assert "--backend NAME" in shared and "--env-file FILE" in shared and "--set KEY=VALUE" in shared
    assert "Global options:" in invoke("job", "submit", "--help").stdout


def _option_help(text: str, flag: str) -> str:
    """The help of ``flag`` in a command's ``--help``: its line and the indented lines that continue it."""
    lines = text.partition("\nOptions:\n")[2].splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith(f"  {flag} "))
    block = [lines[start]]
    for line in lines[start + 1 :]:
        if not line.startswith(" " * 10) or line.strip().startswith("-"):
            break
        block.append(line)
    return " ".join(" ".join(block).split())


#: Every command with --nodes; bench scale's takes a list of counts, each the same setting.
NODES_COMMANDS = [("up",), ("run",), ("estimate",), ("job", "render"), ("job", "submit"), ("bench", "scale")]


def test_every_commands_nodes_names_the_same_setting(invoke) -> None:
    for command in NODES_COMMANDS:
        text = _option_help(invoke(*command, "--help").stdout, "--nodes")
        assert "odes of the cluster the job runs on (cluster.nodes)" in text, (command, text)
        assert "one worker per node (job.num_workers)" in text, (command, text)


def test_model_and_preset_are_one_flag_documented_as_model(invoke) -> None:
    for command in (("run",), ("estimate",), ("bench", "scale")):
        text = invoke(*command, "--help").stdout
        assert "--model " in text and "--preset" not in text, command
    run = invoke("run", "--preset", "tiny", "--model", "tiny", "--dry-run", "--steps", "1")
    assert run.exit_code == 0, run.stderr  # both names given: the same setting, the last wins
    estimate = invoke("estimate", "--preset", "tiny", "--nodes", "1", "--json")
    assert estimate.exit_code == 0, estimate.stderr


@pytest.mark.parametrize(
    ("words", "expected"),
    [
        ("fsdp-sdk run --model llama2", ["llama2-13b", "llama2-70b", "llama2-7b"]),
        ("fsdp-sdk estimate --preset llama2", ["llama2-13b", "llama2-70b", "llama2-7b"]),
        ("fsdp-sdk up --instance-type p5", ["p5.48xlarge", "p5e.48xlarge", "p5en.48xlarge"]),
        ("fsdp-sdk status --backend lo", ["local"]),
    ],
)
def test_shell_completion_knows_presets_instance_types_and_backends(words: str, expected: list[str]) -> None:
    env = {
        **os.environ,
        "_FSDP_SDK_COMPLETE": "bash_complete",
        "COMP_WORDS": words,
        "COMP_CWORD": str(len(words.split()) - 1),
    }
    out = subprocess.run([FSDP_SDK], env=env, capture_output=True, text=True, timeout=60).stdout
    assert [line.split(",", 1)[1] for line in out.splitlines()] == expected


@pytest.mark.parametrize(
    ("backend", "message"),
    [
        (
            "eksctl",
            "backend 'eksctl' comes with the fsdp-sdk-eksctl package, which is not installed; pip install fsdp-sdk-eksctl",
        ),
        (
            "Terraform",
            "backend 'terraform' comes with the fsdp-sdk-terraform package, which is not installed; pip install fsdp-sdk-terraform",
        ),
        ("LOCAL", "unknown backend 'LOCAL'; did you mean local? (backend names are lower-case)"),
        ("locl", "unknown backend 'locl'; did you mean local? use one of: local (fsdp-sdk plugins lists them)"),
    ],
)
def test_a_backend_that_is_not_installed_names_its_package(invoke, monkeypatch, backend: str, message: str) -> None:
    monkeypatch.setenv("FSDP_SDK_DISABLE_PLUGIN_AUTOLOAD", "1")
    result = invoke("status", "--backend", backend)
    assert result.exit_code == 2
    assert result.stderr.strip() == f"Error: --backend (from command line): {message}"
