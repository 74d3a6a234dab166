"""Faults of the eksctl backend against moto: ``up`` twice, ``down`` twice, ``down`` after a failed
``up``, ``up`` interrupted by SIGINT; each leaves no stray resource and a state from which ``up`` or ``down``
continues. Also: two commands on one cluster at once are refused, not interleaved."""

from __future__ import annotations

import os
import signal
import threading
import time
from pathlib import Path

import pytest

from eksctl.helpers import AwsAnswers, Tools, aws_resources
from fsdp_sdk_eksctl.state import StateDir
from k8s.fake_apiserver import FakeApiServer
from k8s.tools import cli

pytestmark = pytest.mark.usefixtures("eksctl_env", "answers")

NOTHING = {"clusters": [], "nodegroups": [], "stacks": []}
UP = {
    "clusters": ["fsdp-sdk"],
    "nodegroups": ["fsdp-sdk/gpu", "fsdp-sdk/system"],
    "stacks": ["eksctl-fsdp-sdk-cluster", "eksctl-fsdp-sdk-nodegroup-gpu", "eksctl-fsdp-sdk-nodegroup-system"],
}
DELETE = ["delete", "cluster", "--name", "fsdp-sdk", "--region", "us-west-2", "--wait"]


@pytest.fixture
def flags(apiserver: FakeApiServer, tmp_path: Path) -> tuple[str, ...]:
    loopback = apiserver.write_kubeconfig(tmp_path / "loopback")
    return ("--backend", "eksctl", "--set", f"cluster.kubeconfig={loopback}")


def phase(state_dir: Path) -> str | None:
    record = StateDir.of(state_dir, "fsdp-sdk").read()
    return None if record is None else record["phase"]


def alive(pid: int) -> bool:
    """Whether ``pid`` runs (a zombie waiting for its parent to reap it does not)."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().split(") ", 1)[1][0] != "Z"
    except (FileNotFoundError, IndexError):
        return False


def test_up_twice_changes_nothing_the_second_time(
    eksctl_env: Path, tools: Tools, flags: tuple[str, ...], capsys: pytest.CaptureFixture[str]
) -> None:
    assert cli(capsys, "up", "--yes", *flags)[0] == 0
    code, out, err = cli(capsys, "up", "--yes", *flags)
    assert code == 0, err
    assert "EKS cluster fsdp-sdk exists and matches the plan: nothing to change" in err
    assert "state: ready" in out.splitlines()
    assert [argv[:2] for argv in tools.eksctl()] == [["create", "cluster"]]
    assert aws_resources() == UP and phase(eksctl_env) == "ready"


def test_down_twice_is_not_an_error(
    eksctl_env: Path, tools: Tools, flags: tuple[str, ...], capsys: pytest.CaptureFixture[str]
) -> None:
    assert cli(capsys, "up", "--yes", *flags)[0] == 0
    code, out, err = cli(capsys, "down", "--dry-run", *flags)
    assert code == 0 and "dry run: nothing changed" in out
    assert f"would delete EKS cluster fsdp-sdk in us-west-2: eksctl {' '.join(DELETE)} --timeout 40m" in err
    assert len(tools.eksctl()) == 1 and aws_resources() == UP
    code, _, err = cli(capsys, "down", "--yes", *flags)
    assert code == 0, err
    code, out, err = cli(capsys, "down", "--yes", *flags)
    assert code == 0, err
    assert "no EKS cluster fsdp-sdk in us-west-2: nothing to delete" in err and "state: absent" in out
    assert tools.eksctl()[1:] == [[*DELETE, "--timeout", "40m"]]
    assert aws_resources() == NOTHING and not (eksctl_env / "eksctl" / "fsdp-sdk").exists()


def test_down_after_a_failed_up_deletes_what_it_left(
    eksctl_env: Path,
    tools: Tools,
    flags: tuple[str, ...],
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("FAKE_EKSCTL_FAULT", "create-fails")
    code, _, err = cli(capsys, "up", "--yes", *flags)
    error = err.strip().splitlines()[-1]  # stderr also carries the plan and eksctl's streamed output
    assert code == 1 and error.startswith("Error: eksctl exited with status 1 while it tried to create the EKS cluster")
    assert aws_resources() == {"clusters": [], "nodegroups": [], "stacks": ["eksctl-fsdp-sdk-cluster"]}
    assert phase(eksctl_env) == "failed"
    code, out, _ = cli(capsys, "status", *flags)
    assert code == 1 and "state: degraded" in out
    assert "eksctl-fsdp-sdk-cluster (CREATE_COMPLETE) left by an interrupted or failed 'up'" in out

    code, _, err = cli(capsys, "down", "--yes", *flags)
    assert code == 0, err
    assert tools.eksctl()[-1] == [*DELETE, "--force", "--timeout", "40m"]
    assert aws_resources() == NOTHING and not (eksctl_env / "eksctl" / "fsdp-sdk").exists()


def test_up_after_a_failed_up_cleans_up_then_creates(
    eksctl_env: Path,
    tools: Tools,
    flags: tuple[str, ...],
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("FAKE_EKSCTL_FAULT", "create-fails")
    assert cli(capsys, "up", "--yes", *flags)[0] == 1
    monkeypatch.delenv("FAKE_EKSCTL_FAULT")
    code, _, err = cli(capsys, "up", "--yes", *flags)
    assert code == 0, err
    assert "an earlier 'up' of fsdp-sdk stopped half-way and left eksctl-fsdp-sdk-cluster (CREATE_COMPLETE)" in err
    assert [argv[:2] for argv in tools.eksctl()] == [
        ["create", "cluster"],
        ["delete", "cluster"],
        ["create", "cluster"],
    ]
    assert tools.eksctl()[1] == [*DELETE, "--force", "--timeout", "40m"]
    assert aws_resources() == UP and phase(eksctl_env) == "ready"


def test_up_waits_while_cloudformation_still_works_on_a_stack(
    eksctl_env: Path,
    tools: Tools,
    answers: AwsAnswers,
    flags: tuple[str, ...],
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from fsdp_sdk_eksctl.backend import EksctlBackend

    monkeypatch.setattr(EksctlBackend, "poll_s", 0.0)
    monkeypatch.setenv("FAKE_EKSCTL_FAULT", "create-fails")
    assert cli(capsys, "up", "--yes", *flags)[0] == 1
    monkeypatch.delenv("FAKE_EKSCTL_FAULT")
    # the stack of the interrupted run is still rolling back for two more looks
    answers.stack_states = [{"eksctl-fsdp-sdk-cluster": "ROLLBACK_IN_PROGRESS"}] * 2
    code, _, err = cli(capsys, "up", "--yes", *flags)
    assert code == 0, err
    assert err.count("waiting for eksctl-fsdp-sdk-cluster ROLLBACK_IN_PROGRESS to finish") == 2
    assert [argv[:2] for argv in tools.eksctl()] == [
        ["create", "cluster"],
        ["delete", "cluster"],
        ["create", "cluster"],
    ]
    assert aws_resources() == UP


def _interrupt_up(tools: Tools, flags: tuple[str, ...], capsys: pytest.CaptureFixture[str]) -> tuple[int, str]:
    """Run ``up`` while the fake eksctl hangs after its first stack; press Ctrl-C (SIGINT to this process)."""

    def press_ctrl_c() -> None:
        deadline = time.monotonic() + 60
        while not tools.pids() and time.monotonic() < deadline:
            time.sleep(0.02)
        os.kill(os.getpid(), signal.SIGINT)

    presser = threading.Thread(target=press_ctrl_c, daemon=True)
    presser.start()
    code, _, err = cli(capsys, "up", "--yes", *flags)
    presser.join(timeout=10)
    return code, err


@pytest.mark.parametrize("then", ["up", "down"])
def test_up_interrupted_by_sigint_stops_eksctl_and_leaves_a_state_to_continue_from(
    then: str,
    eksctl_env: Path,
    tools: Tools,
    flags: tuple[str, ...],
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("FAKE_EKSCTL_FAULT", "create-hangs")
    code, err = _interrupt_up(tools, flags, capsys)
    assert code == 130, err
    assert "interrupted: 'fsdp-sdk up' picks up from here, 'fsdp-sdk down' deletes what eksctl created" in err
    eksctl_pid, child_pid = tools.pids()
    assert not alive(eksctl_pid) and not alive(child_pid), "eksctl and its child must be stopped with the CLI"
    assert phase(eksctl_env) == "interrupted"
    assert aws_resources() == {"clusters": [], "nodegroups": [], "stacks": ["eksctl-fsdp-sdk-cluster"]}

    monkeypatch.delenv("FAKE_EKSCTL_FAULT")
    code, _, err = cli(capsys, then, *flags, *(["--yes"] if then == "down" else []))
    assert code == 0, err
    assert tools.eksctl()[1] == [*DELETE, "--force", "--timeout", "40m"]
    if then == "up":
        assert aws_resources() == UP and phase(eksctl_env) == "ready"
    else:
        assert aws_resources() == NOTHING and not (eksctl_env / "eksctl" / "fsdp-sdk").exists()


def test_a_second_command_on_a_busy_cluster_is_refused(
    eksctl_env: Path, tools: Tools, flags: tuple[str, ...], capsys: pytest.CaptureFixture[str]
) -> None:
    with StateDir.of(eksctl_env, "fsdp-sdk").lock("up"):
        code, _, err = cli(capsys, "up", "--yes", *flags)
    assert code == 1
    assert err.strip().splitlines()[-1] == (
        f"Error: eksctl: cluster fsdp-sdk is busy ('fsdp-sdk up' in pid {os.getpid()}); wait for it to finish, "
        "then run up again"
    )
    assert tools.eksctl() == [] and aws_resources() == NOTHING
    assert phase(eksctl_env) is None
