"""Without AWS credentials and without the backends' tools: `launch --dry-run` shows its whole plan, marking what it
could not read (exit 1 when a check would stop it, as `up --dry-run`), `--json` always prints it, and `status` says
the same thing on both EKS backends."""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from fsdp_sdk.aws.session import reset_sessions
from fsdp_sdk.plugins import get_plugins, reset_plugins
from k8s.tools import cli

BACKENDS = ["eksctl", "terraform"]


@pytest.fixture
def no_aws(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """No credentials anywhere, nothing answering for AWS, no eksctl/terraform/kubectl/docker on PATH, the two EKS
    backends' plugins loaded; yields the state directory."""
    import fsdp_sdk_eksctl.plugin
    import fsdp_sdk_terraform.plugin

    for name in list(os.environ):
        if name.startswith(("AWS_", "FSDP_SDK_")) or name == "KUBECONFIG":
            monkeypatch.delenv(name)
    empty = tmp_path / "aws"
    empty.mkdir()
    monkeypatch.setenv("AWS_CONFIG_FILE", str(empty / "config"))
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(empty / "credentials"))
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")  # no instance-metadata lookups
    monkeypatch.setenv("AWS_ENDPOINT_URL", "http://127.0.0.1:9")  # were a call made, nothing would answer
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    tools = tmp_path / "bin"
    tools.mkdir()
    monkeypatch.setenv("PATH", str(tools))  # no backend tool, no container tool
    monkeypatch.setenv("FSDP_SDK_STATE_DIR", str(tmp_path / "state"))
    monkeypatch.setenv("FSDP_SDK_DISABLE_PLUGIN_AUTOLOAD", "1")
    monkeypatch.setenv("FSDP_SDK_JOB__REGISTRY", "123456789012.dkr.ecr.us-west-2.amazonaws.com")
    work = tmp_path / "work"
    work.mkdir(exist_ok=True)  # the core tests' autouse fixture makes it too
    monkeypatch.chdir(work)
    reset_sessions()
    reset_plugins()
    get_plugins().register(fsdp_sdk_eksctl.plugin, name="eksctl")
    get_plugins().register(fsdp_sdk_terraform.plugin, name="terraform")
    yield tmp_path / "state"
    reset_plugins()
    reset_sessions()


LAUNCH = ["launch", "--dry-run", "--preset", "tiny", "--steps", "20", "--nodes", "2"]


@pytest.mark.parametrize("backend", BACKENDS)
def test_launch_dry_run_json_prints_the_whole_plan_and_what_it_could_not_know(
    no_aws: Path, backend: str, capsys: pytest.CaptureFixture[str]
) -> None:
    code, out, err = cli(capsys, *LAUNCH, "--backend", backend, "--json")
    assert code == 1, err  # a check would stop it: no credentials
    plan = json.loads(out)
    assert plan["backend"] == backend and plan["cluster_plan"]["steps"], plan
    assert any("aws-credentials" in line for line in plan["blocked"]), plan["blocked"]
    assert plan["cluster_state"] == "absent"  # as 'status' says without credentials and state
    assert any("ECR" in line for line in plan["unknown"]), plan["unknown"]
    assert any(step.startswith("create the cluster") for step in plan["steps"])
    assert any(step.startswith("submit the job") for step in plan["steps"])
    assert not no_aws.exists() or not any(no_aws.rglob("*.tfstate")), "a dry run writes no state"


@pytest.mark.parametrize("backend", BACKENDS)
def test_launch_dry_run_prints_the_plan_marks_the_unknown_and_exits_1(
    no_aws: Path, backend: str, capsys: pytest.CaptureFixture[str]
) -> None:
    code, out, err = cli(capsys, *LAUNCH, "--backend", backend)
    assert code == 1, err
    lines = out.splitlines()
    assert lines[0].startswith(f"Launch fsdp on {backend} cluster")
    assert any("[error] aws-credentials" in line for line in lines), out
    assert any(line.strip().startswith("not known: whether ECR holds the image tag") for line in lines), out
    assert any("submit the job fsdp" in line for line in lines)
    assert "'fsdp-sdk launch' would stop:" in out and lines[-1] == "(dry run: nothing changed)"


def test_status_says_the_same_on_both_backends_without_credentials(
    no_aws: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    answers = {}
    for backend in BACKENDS:
        code, out, err = cli(capsys, "status", "--backend", backend, "--json")
        answers[backend] = (code, json.loads(out)["state"] if out.strip() else err)
        text_code, text, _ = cli(capsys, "status", "--backend", backend)
        assert text_code == code and "state: absent" in text.splitlines(), text
    assert answers == {"eksctl": (0, "absent"), "terraform": (0, "absent")}, answers
