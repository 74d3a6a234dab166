"""Canary secrets given through every source never leave the process: not in rendered objects, ``config show``
(text and JSON), error messages (also when the refused value holds the secret), or the output of the tools run."""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from pathlib import Path

import pytest
from click.testing import CliRunner

from fsdp_sdk import secrets
from fsdp_sdk.cli import cli
from fsdp_sdk.plugins import reset_plugins

HF = "hf_CANARYtoken5b8e0c1d2f3a4b5c6d7e"
AWS_KEY_ID = "AKIACANARY0123456789"
AWS_SECRET = "canarySecretKey/0123456789abcdefGHIJKLMNOP"
CANARIES = (HF, AWS_KEY_ID, AWS_SECRET)
REGISTRY = "123456789012.dkr.ecr.us-west-2.amazonaws.com"


@pytest.fixture
def work(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    for name in list(os.environ):
        if name.startswith(("FSDP_SDK_", "AWS_")):
            monkeypatch.delenv(name)
    monkeypatch.setenv("FSDP_SDK_STATE_DIR", str(tmp_path / "state"))
    monkeypatch.setenv("FSDP_SDK_DISABLE_PLUGIN_AUTOLOAD", "1")
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", AWS_KEY_ID)
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", AWS_SECRET)
    work = tmp_path / "work"
    work.mkdir(exist_ok=True)
    monkeypatch.chdir(work)
    reset_plugins()
    secrets.forget_all()
    yield work
    secrets.forget_all()
    reset_plugins()


def _cli(*args: str) -> tuple[int, str]:
    result = CliRunner().invoke(cli, list(args), prog_name="fsdp-sdk")
    return result.exit_code, result.output


SOURCES = {
    "yaml": ({"c.yaml": f"job:\n  hf_token: {HF}\n  registry: {REGISTRY}\n"}, {}, ("-c", "c.yaml")),
    "dotenv": ({".env": f"HF_TOKEN={HF}\nREGISTRY={REGISTRY}\n"}, {}, ()),
    "environment": ({}, {"FSDP_SDK_JOB__HF_TOKEN": HF, "FSDP_SDK_JOB__REGISTRY": REGISTRY}, ()),
    "flag": ({}, {}, ("--set", f"job.hf_token={HF}", "--set", f"job.registry={REGISTRY}")),
    "inside-cmd": (
        {".env": f'HF_TOKEN={HF}\nREGISTRY={REGISTRY}\nCMD="huggingface-cli login --token {HF} && torchrun x.py"\n'},
        {},
        (),
    ),
}


@pytest.mark.parametrize("source", list(SOURCES))
def test_canaries_never_appear_in_any_output(source: str, work: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    files, environ, flags = SOURCES[source]
    for name, text in files.items():
        (work / name).write_text(text)
    for name, value in environ.items():
        monkeypatch.setenv(name, value)
    outputs = []
    for args in (
        ("config", "show"),
        ("config", "show", "--json"),
        ("config", "show", "--origins"),
        ("job", "render"),
        ("up", "--dry-run", "--json"),
    ):
        code, output = _cli(*args, *flags)
        outputs.append((args, code, output))
    for args, _, output in outputs:
        for canary in CANARIES:
            assert canary not in output, (source, args)
    shown = json.loads(outputs[1][2])
    assert shown["job"]["hf_token"] == "**********"
    render_code, render_output = outputs[3][1], outputs[3][2]
    if source == "inside-cmd":  # the token written into the command is refused, without being printed
        assert render_code == 2 and "job.hf_token: the token's value would appear in plain text" in render_output
    else:
        assert render_code == 0 and "secretKeyRef" in render_output


def test_a_refused_value_that_holds_a_secret_is_not_printed(work: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    cases = [
        ("--set", f"job.env=HF_TOKEN={HF},BAD NAME=1"),
        ("--set", f"job.hf_token={HF} trailing"),
        ("--set", f"job.env=API_KEY={AWS_SECRET}"),
    ]
    for flags in cases:
        _, output = _cli("config", "show", *flags)
        assert all(c not in output for c in CANARIES), output
    code, output = _cli("job", "render", "--set", f"job.registry={REGISTRY}", "--set", f"job.env=API_KEY={AWS_SECRET}")
    assert code == 2 and "job.env.API_KEY: looks like a secret" in output and AWS_SECRET not in output
    (work / ".env").write_text(f"HF_TOKEN={HF}\nNUM_WORKERS {HF}\n")
    code, output = _cli("config", "show")
    assert code == 2 and ".env line 2:" in output and HF not in output


def test_tools_never_echo_a_secret(work: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import sys

    from fsdp_sdk.tools import ToolError, run_tool

    tool = tmp_path / "bin" / "leaky"
    tool.parent.mkdir()
    tool.write_text(
        f"#!{sys.executable}\nimport os, sys\nprint('key', os.environ['AWS_SECRET_ACCESS_KEY'])\nsys.exit(1)\n"
    )
    tool.chmod(0o755)
    secrets.register_named("AWS_SECRET_ACCESS_KEY", AWS_SECRET)
    seen: list[str] = []
    with pytest.raises(ToolError) as info:
        run_tool([str(tool)], step="leak", progress=seen.append)
    assert AWS_SECRET not in str(info.value) + "".join(seen) and "key **********" in str(info.value)


#: Canaries no source registers before the line that holds them is refused (the malformed line is the first one).
FRESH_HF = "hf_FRESHcanary9Qw8Er7Ty6Ui5Op4As3Df"
FRESH_KEY_ID = "AKIAFRESHCANARY98765"
FRESH_SECRET = "fRESHcanary/Secret+Key0123456789abcdEFGH"  # 40 characters, mixed-case base64 like AWS's
FRESH = (FRESH_HF, FRESH_KEY_ID, FRESH_SECRET)


@pytest.mark.parametrize(
    "line",
    [
        f"HF_TOKEN {FRESH_HF}",  # the '=' forgotten
        f"export AWS_SECRET_ACCESS_KEY {FRESH_SECRET}",
        f"AWS_ACCESS_KEY_ID: {FRESH_KEY_ID}",  # YAML habits
        f"MODEL_NAME {FRESH_HF}",  # a token under a name that holds none
        f"BAD LINE {FRESH_KEY_ID} {FRESH_SECRET}",
        f'HF_TOKEN="{FRESH_HF}',  # a quote never closed
        f"HF_TOKEN='{FRESH_HF}' trailing",  # text after the closing quote
        f"CMD=$(echo {FRESH_HF})",  # a command substitution, named in the error
    ],
)
def test_a_refused_env_line_masks_what_looks_like_a_secret(work: Path, line: str) -> None:
    (work / ".env").write_text(f"{line}\nNUM_WORKERS=2\n")
    code, output = _cli("config", "show")
    assert code == 2 and (".env line 1" in output or "command substitution" in output), output
    assert all(c not in output for c in FRESH), output
    assert "**********" in output


def test_a_refused_set_pair_masks_a_token(work: Path) -> None:
    code, output = _cli("config", "show", "--set", f"job.hf_token {FRESH_HF}")
    assert code == 2 and "is not KEY=VALUE" in output and FRESH_HF not in output
    code, output = _cli("config", "show", "--set", f"HF_TOKEN:{FRESH_HF}")
    assert code == 2 and FRESH_HF not in output


def test_masking_keeps_ordinary_values() -> None:
    line = "MODEL_NAME meta-llama/Llama-2-7b-hf d3b07384d113edec49eaa6238ad5ff00d3b07384 p5.48xlarge"
    assert secrets.mask_refused(line) == line  # a commit hash is no AWS secret key
    path = "/Users/Ann1/Projects2/fsdp/Config3/run/x"  # 40 characters, mixed case and digits
    assert secrets.mask_error(f"cannot read {path!r}") == f"cannot read {path!r}"  # nor a path
    assert secrets.mask_refused(f"export HF_TOKEN {FRESH_HF}") == "export HF_TOKEN **********"
    assert secrets.mask_refused("HF_TOKEN_SECRET hf-token") == "HF_TOKEN_SECRET hf-token"  # a Secret's name


@pytest.mark.parametrize(
    ("files", "flags"),
    [
        ({"c.yaml": f"job:\n  env:\n    HF_TOKEN {FRESH_HF}\n"}, ("-c", "c.yaml")),  # YAML: a string, not a mapping
        ({"c.yaml": f"job:\n  registry: {FRESH_KEY_ID} x\n"}, ("-c", "c.yaml")),
        ({}, ("--set", f"job.env=HF_TOKEN {FRESH_SECRET}")),
        ({}, ("--set", f"job.num_workers={FRESH_HF}")),  # a token pasted into the wrong setting
        ({}, ("--set", "job.env=API_KEY my-own-value")),  # a value under a name that holds secrets
    ],
)
def test_a_refused_value_from_yaml_or_set_is_masked(work: Path, files: dict[str, str], flags: tuple[str, ...]) -> None:
    for name, text in files.items():
        (work / name).write_text(text)
    code, output = _cli("config", "show", *flags)
    assert code == 2 and output.startswith("Error: ") and "**********" in output, output
    assert all(c not in output for c in (*FRESH, "my-own-value")), output
