"""The CLI as a newcomer meets it: global options apart in help, shell completion, backends that are not installed."""

from __future__ import annotations

import os
import subprocess

import pytest

from .conftest import FSDP_SDK


def test_global_options_have_their_own_section(invoke) -> None:
    text = invoke("run", "--help").stdout
    own, _, shared = text.partition("Global options:")
    assert "--preset NAME" in own and "--steps" in own and "--backend NAME" not in own
    assert "--backend NAME" in shared and "--env-file FILE" in shared and "--set KEY=VALUE" in shared
    assert "Global options:" in invoke("job", "submit", "--help").stdout


@pytest.mark.parametrize(
    ("words", "expected"),
    [
        ("fsdp-sdk run --preset llama2", ["llama2-13b", "llama2-70b", "llama2-7b"]),
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
