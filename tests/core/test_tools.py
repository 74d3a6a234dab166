"""The external-tool runner: argument lists only, streamed output, one-line errors, missing tools, stopping."""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path

import pytest

from fsdp_sdk.errors import ConfigError
from fsdp_sdk.tools import ToolError, ToolNotFoundError, run_tool

# A tool that prints its arguments as JSON, then the lines of $LINES, then exits with $CODE.
_SCRIPT = """#!{python}
import json, os, sys, time
print(json.dumps(sys.argv[1:]), flush=True)
for line in os.environ.get("LINES", "").split("|"):
    if line:
        print(line, file=sys.stderr if line.startswith("E:") else sys.stdout, flush=True)
if os.environ.get("HANG"):
    time.sleep(60)
sys.exit(int(os.environ.get("CODE", "0")))
"""


@pytest.fixture
def tool(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> str:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    path = bin_dir / "faketool"
    path.write_text(_SCRIPT.format(python=sys.executable))
    path.chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}:/usr/bin:/bin")
    return "faketool"


def test_arguments_reach_the_tool_one_by_one_and_lines_stream(tool: str, monkeypatch: pytest.MonkeyPatch) -> None:
    hostile = ["a b", "x; rm -rf /", "$(id)", "`id`", "line\nbreak", "'\"", "é ü 中", "*"]
    monkeypatch.setenv("LINES", "first|E:second on stderr")
    seen: list[str] = []
    result = run_tool([tool, *hostile], step="echo", progress=seen.append)
    assert json.loads(result.lines[0]) == hostile  # no shell: every value is one argument, untouched
    assert result.lines[1:] == ("first", "E:second on stderr")
    assert all(re.match(r"^\[faketool \d\d:\d\d\] ", line) for line in seen)
    assert seen[-1].endswith("E:second on stderr") and result.returncode == 0 and result.elapsed >= 0


def test_a_failure_names_the_tool_the_step_and_its_last_lines(tool: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("LINES", "|".join(f"line {i}" for i in range(20)) + "|E: boom: quota exceeded")
    monkeypatch.setenv("CODE", "3")
    with pytest.raises(ToolError) as info:
        run_tool([tool, "create"], step="create the cluster")
    message = str(info.value)
    assert message.startswith("faketool exited with status 3 while it tried to create the cluster: ")
    assert message.endswith("E: boom: quota exceeded") and "line 0 |" not in message and "\n" not in message
    assert info.value.exit_code == 1 and info.value.tail[-1] == "E: boom: quota exceeded"
    assert run_tool([tool], step="accept 3", ok_codes=(0, 3)).returncode == 3


def test_a_missing_tool_says_how_to_install_it(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PATH", str(tmp_path))
    with pytest.raises(ToolNotFoundError) as info:
        run_tool(["eksctl", "version"], step="check eksctl")
    assert info.value.exit_code == 2
    assert str(info.value) == (
        "eksctl: is not installed (not found on PATH); install eksctl: https://eksctl.io/installation/ "
        "(e.g. the release tarball for your platform)"
    )


def test_secrets_are_masked_and_commands_must_be_lists(tool: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("LINES", "token is hf_canary_secret_123")
    seen: list[str] = []
    result = run_tool(
        [tool, "hf_canary_secret_123"], step="echo", progress=seen.append, secrets=["hf_canary_secret_123"]
    )
    assert "hf_canary_secret_123" not in result.output + "".join(seen)
    assert "token is **********" in result.output
    with pytest.raises(TypeError, match="never a command string"):
        run_tool(f"{tool} --help", step="echo")  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match="NUL"):
        run_tool([tool, "a\x00b"], step="echo")


def test_a_tool_past_its_timeout_is_stopped(tool: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HANG", "1")
    with pytest.raises(ToolError, match=r"was killed by signal 15 .*stopped after 0.5s"):
        run_tool([tool], step="wait", timeout=0.5)
