"""Faults on the local backend (real etcd, real torchrun with gloo on CPU, the tiny preset).

Each test breaks something while a run goes on (or around it) and checks that the run recovers or
ends with one line naming the cause within seconds, that no process of the run is left, and that
the state directory stays usable.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import signal
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from .conftest import (
    Outcome,
    Run,
    agent_processes,
    cli,
    last_line,
    need_etcd_and_trainer,
    processes_of,
    rank_process,
    state_file,
    wait_until,
)

pytestmark = [pytest.mark.slow, pytest.mark.timeout(600)]

TINY = ("--backend", "local", "--nodes", "2", "--nproc-per-node", "1", "--preset", "tiny")
STEPS = 8
EVERY_2 = ("--", "--checkpoint.every_steps", "2")


@pytest.fixture(autouse=True)
def _needs() -> None:
    need_etcd_and_trainer()


def _nothing_left(run_id: str, outcome: Outcome | None = None, timeout: float = 20) -> None:
    took = wait_until(lambda: not processes_of(run_id), timeout, f"processes of run {run_id} are gone")
    if outcome is not None:
        outcome.note("no process of the run left")
    assert took < timeout


def _etcd_pid() -> int:
    return int(state_file()["etcd"]["pid"])


def _down() -> None:
    result = cli("down", "--backend", "local")
    assert result.returncode == 0, result.stderr


@pytest.fixture(scope="module")
def baseline(tmp_path_factory: pytest.TempPathFactory) -> dict:
    """An uninterrupted run of the same seed: what interrupted runs must end with."""
    need_etcd_and_trainer()
    state = tmp_path_factory.mktemp("baseline")
    env = {**os.environ, "FSDP_SDK_STATE_DIR": str(state)}
    from .conftest import FSDP_SDK

    result = subprocess.run(
        [FSDP_SDK, "run", *TINY, "--steps", str(STEPS), "--json", *EVERY_2],
        capture_output=True,
        text=True,
        timeout=300,
        env=env,
    )
    subprocess.run([FSDP_SDK, "down"], capture_output=True, env=env, timeout=60)
    assert result.returncode == 0, result.stderr[-3000:]
    return json.loads(result.stdout)


@pytest.fixture
def cleanup() -> Iterator[list[Run]]:
    runs: list[Run] = []
    yield runs
    for run in runs:
        run.kill()
    with contextlib.suppress(Exception):
        _down()


def test_rank_sigkilled_mid_run_restarts_and_resumes(baseline: dict, outcome: Outcome, cleanup: list[Run]) -> None:
    """A trainer rank SIGKILLed mid-run (periodic checkpoints, job.max_restarts 3)."""
    run = Run(*TINY, "--steps", str(STEPS), "--name", "killed-rank", *EVERY_2)
    cleanup.append(run)
    run.wait_for(r'^\{"step": 4,')
    killed = time.monotonic()
    rank_process("killed-rank", 1).kill()
    line = run.wait_for(r"^restart: .*").group(0)
    outcome.saw(line)
    outcome.timed("run launched again", time.monotonic() - killed)
    code, out, err = run.finish()
    assert code == 0, err[-3000:]
    summary = json.loads(out)
    assert "was killed by SIGKILL" in line and "launching the run again from its latest checkpoint" in line
    assert summary["steps"] == STEPS and summary["steps_run"] < STEPS, "resumed from a checkpoint, not from step 0"
    assert summary["final_loss"] == pytest.approx(baseline["final_loss"], abs=1e-6)
    outcome.note(f"ended at step {STEPS} with the uninterrupted run's final loss ({summary['final_loss']:.6f})")
    _nothing_left("killed-rank", outcome)


def test_sigkill_during_a_checkpoint_save(baseline: dict, outcome: Outcome, cleanup: list[Run], monkeypatch) -> None:
    """Every rank SIGKILLed in the middle of a checkpoint save (no restart budget), then the run re-run by name."""
    monkeypatch.setenv("FSDP_TRAINER_FAULT_DURING_SAVE", "4")
    failed = cli("run", *TINY, "--steps", str(STEPS), "--name", "save-killed", "--set", "job.max_restarts=0", *EVERY_2)
    assert failed.returncode == 1, failed.stderr[-3000:]
    error = last_line(failed.stderr)
    assert re.match(r"^Error: run save-killed failed: .*; logs in ", error), error
    outcome.saw(error)
    assert "continue it with: fsdp-sdk run --resume save-killed" in failed.stderr
    monkeypatch.delenv("FSDP_TRAINER_FAULT_DURING_SAVE")
    again = cli("run", *TINY, "--steps", str(STEPS), "--name", "save-killed", "--json", *EVERY_2)
    assert again.returncode == 0, again.stderr[-3000:]
    assert "step_00000002 (step 2)" in again.stderr, "resumed from the previous complete checkpoint"
    summary = json.loads(again.stdout)
    assert summary["final_loss"] == pytest.approx(baseline["final_loss"], abs=1e-6)
    outcome.note("the re-run resumed from step 2 (the previous complete checkpoint) and matched the uninterrupted run")
    _nothing_left("save-killed")


@pytest.mark.parametrize("fault", ["killed", "frozen"])
def test_etcd_fails_mid_run(fault: str, outcome: Outcome, cleanup: list[Run]) -> None:
    """etcd SIGKILLed, or frozen with SIGSTOP (alive, not answering), in the middle of a run."""
    # long enough that etcd is restarted while the ranks still train (a few seconds on an idle machine)
    run = Run(*TINY, "--steps", "40", "--name", f"etcd-{fault}", "--", "--checkpoint.every_steps", "20")
    cleanup.append(run)
    run.wait_for(r'^\{"step": 2,')
    pid = _etcd_pid()
    hit = time.monotonic()
    os.kill(pid, signal.SIGKILL if fault == "killed" else signal.SIGSTOP)
    try:
        line = run.wait_for(r"^warning: etcd .*restarted it.*", timeout=60).group(0)
        outcome.saw(line)
        outcome.timed("etcd restarted", time.monotonic() - hit)
        code, out, err = run.finish()
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGCONT)
    assert code == 0, err[-3000:]
    assert json.loads(out)["steps"] == 40
    outcome.note("the run finished all its steps")
    from fsdp_sdk import etcd

    new = state_file()["etcd"]
    assert new["pid"] != pid and etcd.is_healthy(new["client_port"])
    assert not etcd.pid_alive(pid), "the frozen etcd was stopped, not left behind"
    _nothing_left(f"etcd-{fault}")


def test_etcd_killed_while_idle(outcome: Outcome, cleanup: list[Run]) -> None:
    """etcd SIGKILLed while no run is going on."""
    assert cli("up", "--backend", "local").returncode == 0
    pid = _etcd_pid()
    os.kill(pid, signal.SIGKILL)
    status = json.loads(cli("status", "--json").stdout)
    assert status["state"] == "degraded"
    start = time.monotonic()
    up = cli("up", "--backend", "local")
    assert up.returncode == 0, up.stderr
    outcome.saw(next(line for line in up.stderr.splitlines() if "starting it again" in line))
    outcome.timed("up repaired it", time.monotonic() - start)
    assert json.loads(cli("status", "--json").stdout)["state"] == "ready"


def test_etcd_port_taken_at_up(outcome: Outcome, monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """etcd's chosen port taken by another process when up starts it."""
    import socket

    from fsdp_sdk import Client, etcd

    squatter = socket.socket()
    squatter.bind(("127.0.0.1", 0))
    squatter.listen()
    taken = squatter.getsockname()[1]
    real = etcd.find_free_port
    ports = iter([taken, real()])
    monkeypatch.setattr(etcd, "find_free_port", lambda host=etcd.HOST: next(ports, None) or real())
    messages: list[str] = []
    client = Client.from_sources(progress=messages.append)
    start = time.monotonic()
    try:
        status = client.up()
        assert status.ready and status.endpoint != f"127.0.0.1:{taken}"
        outcome.note(f"up retried on fresh ports and came up at a free port in {time.monotonic() - start:.1f} s")
        # a restart on a recorded port that is taken fails with one line
        with pytest.raises(Exception, match=rf"etcd: port {taken} on 127\.0\.0\.1 is taken by another process"):
            etcd.start_etcd(tmp_path / "d", tmp_path / "l", ports=(taken, real()))
        outcome.saw(f"etcd: port {taken} on 127.0.0.1 is taken by another process; stop it, or run ...")
    finally:
        client.down()
        squatter.close()


def test_ten_runs_in_a_row_with_one_job_name(outcome: Outcome, cleanup: list[Run]) -> None:
    """10 runs in a row with the same job name on one etcd."""
    from fsdp_sdk.rendezvous import EtcdV2

    start = time.monotonic()
    for _ in range(10):
        result = cli("run", *TINY, "--steps", "1", "--json", "--", "--checkpoint.enabled", "false")
        assert result.returncode == 0, result.stderr[-3000:]
        assert "RendezvousClosedError" not in result.stderr
    port = state_file()["etcd"]["client_port"]
    left = EtcdV2.direct(f"http://127.0.0.1:{port}").leaves("/torch")
    assert left == [], left
    outcome.note("all 10 succeeded; no RendezvousClosedError; no rendezvous key left in etcd")
    outcome.timed("10 runs", time.monotonic() - start)


def test_two_runs_at_once_while_the_cluster_is_down(outcome: Outcome, cleanup: list[Run]) -> None:
    """Two fsdp-sdk run started together on one state directory while the local cluster is not up."""
    from fsdp_sdk import etcd

    runs = [Run(*TINY, "--steps", "2", "--name", f"twin-{i}", "--", "--checkpoint.enabled", "false") for i in (0, 1)]
    cleanup.extend(runs)
    results = [run.finish(timeout=300) for run in runs]
    for code, _, err in results:
        assert code == 0, err[-3000:]
    waited = [err for _, _, err in results if "waiting for another fsdp-sdk command" in err]
    state = state_file()
    serving = etcd.find_etcd_serving(Path(state["etcd"]["data_dir"]))
    assert [p.pid for p in serving] == [state["etcd"]["pid"]], "one etcd, the one recorded"
    outcome.note(
        "both succeeded; the state lock serialised the start of etcd"
        + (" (one waited for the other)" if waited else "")
        + "; one etcd, state.json valid"
    )


def test_down_during_a_run(outcome: Outcome, cleanup: list[Run]) -> None:
    """fsdp-sdk down while a run is going on."""
    run = Run(*TINY, "--steps", "6", "--name", "busy", "--", "--checkpoint.enabled", "false")
    cleanup.append(run)
    run.wait_for(r'^\{"step": 1,')
    down = cli("down", "--backend", "local")
    assert down.returncode == 1
    line = last_line(down.stderr)
    assert re.match(r"^Error: local: 1 run\(s\) in progress \(busy\); stopping etcd now would end them", line), line
    outcome.saw(line)
    code, out, err = run.finish()
    assert code == 0 and json.loads(out)["steps"] == 6, err[-3000:]
    outcome.note("the run finished; down works once it has")
    _down()


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM], ids=["SIGINT", "SIGTERM"])
def test_interrupting_run(sig: signal.Signals, baseline: dict, outcome: Outcome, cleanup: list[Run]) -> None:
    """fsdp-sdk run interrupted (Ctrl-C or SIGTERM), then continued by name."""
    name = f"stopped-{sig.name.lower()}"
    run = Run(*TINY, "--steps", str(STEPS), "--name", name, *EVERY_2)
    cleanup.append(run)
    run.wait_for(r'^\{"step": 3,')
    sent = time.monotonic()
    run.process.send_signal(sig)
    code, _, err = run.finish(timeout=60)
    outcome.timed("stopped", time.monotonic() - sent)
    assert code == 130, err[-3000:]
    hint = next(line for line in err.splitlines() if "continue it with" in line)
    said = re.fullmatch(
        rf"Run {name} interrupted: stopped at step (\d+); the last checkpoint is step (\d+) \((\S+)\): a resume "
        rf"continues from step (\d+); continue it with: fsdp-sdk run --resume {name}",
        hint,
    )
    assert said, hint
    stopped, saved, where, next_step = (said.group(i) for i in range(1, 5))
    assert int(stopped) >= 3 and int(saved) == int(next_step) - 1 and int(saved) % 2 == 0 and int(saved) <= int(stopped)
    assert where.endswith(f"/step_{int(saved):08d}") and Path(where, "COMPLETE").exists(), where
    assert "Aborted" not in err, "nothing after the hint"
    outcome.saw(hint)
    _nothing_left(name, outcome)
    listed = {r["run_id"]: r for r in json.loads(cli("runs", "--json").stdout)}
    assert listed[name]["state"] == "interrupted"
    resumed = cli("run", "--resume", name, "--json")
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    summary = json.loads(resumed.stdout)
    assert summary["steps"] == STEPS and summary["steps_run"] == STEPS - int(saved), "from the step it said"
    assert summary["final_loss"] == pytest.approx(baseline["final_loss"], abs=1e-6)
    outcome.note("'run --resume' continued from the checkpoint it named to the uninterrupted run's final loss")


def test_the_cli_sigkilled(outcome: Outcome, cleanup: list[Run]) -> None:
    """fsdp-sdk run itself SIGKILLed mid-run."""
    run = Run(*TINY, "--steps", "20", "--name", "cli-killed", "--", "--checkpoint.enabled", "false")
    cleanup.append(run)
    run.wait_for(r'^\{"step": 1,')
    assert len(processes_of("cli-killed")) >= 4, "agents and ranks are running"
    killed = time.monotonic()
    run.process.send_signal(signal.SIGKILL)
    run.process.wait()
    took = wait_until(lambda: not processes_of("cli-killed"), 20, "the run's processes are gone")
    outcome.timed("agents and trainers gone (parent-death signal)", took)
    listed = {r["run_id"]: r for r in json.loads(cli("runs", "--json").stdout)}
    assert listed["cli-killed"]["state"] == "lost"
    outcome.note("'fsdp-sdk runs' lists it as lost")
    assert time.monotonic() - killed < 30


def test_an_agent_sigkilled(outcome: Outcome, cleanup: list[Run]) -> None:
    """One torchrun agent SIGKILLed mid-run."""
    run = Run(*TINY, "--steps", "20", "--name", "agent-killed", "--", "--checkpoint.enabled", "false")
    cleanup.append(run)
    run.wait_for(r'^\{"step": 1,')
    agents = agent_processes("agent-killed")
    assert len(agents) == 2
    killed = time.monotonic()
    agents[1].kill()
    code, _, err = run.finish(timeout=60)
    outcome.timed("run ended", time.monotonic() - killed)
    assert code == 1
    line = last_line(err)
    assert re.match(
        rf"^Error: run agent-killed failed: agent \d \(pid {agents[1].pid}\) was killed by SIGKILL; its trainer processes",
        line,
    ), line
    outcome.saw(line)
    _nothing_left("agent-killed", outcome)


def test_a_rank_that_stops_making_progress(outcome: Outcome, cleanup: list[Run]) -> None:
    """A trainer rank frozen with SIGSTOP mid-run (local.stall_timeout_s 10)."""
    run = Run(
        *TINY,
        "--steps",
        "40",
        "--name",
        "hung",
        "--set",
        "local.stall_timeout_s=10",
        "--",
        "--checkpoint.enabled",
        "false",
    )
    cleanup.append(run)
    run.wait_for(r'^\{"step": 2,')
    rank = rank_process("hung", 1)
    frozen = time.monotonic()
    rank.suspend()
    code, _, err = run.finish(timeout=90)
    outcome.timed("detected and stopped", time.monotonic() - frozen)
    assert code == 1
    line = last_line(err)
    assert re.match(
        rf"^Error: run hung stopped making progress: no step finished for \d+ s after step \d+ "
        rf"\(local.stall_timeout_s\); rank 1 \(pid {rank.pid}\) is stopped",
        line,
    ), line
    outcome.saw(line)
    _nothing_left("hung", outcome)


def test_a_rank_that_hangs_in_a_collective(outcome: Outcome, cleanup: list[Run]) -> None:
    """A trainer rank frozen with SIGSTOP while its peer waits in a collective (runtime.timeout_s 10), twice."""
    timeout_s = 10
    run = Run(
        *TINY,
        "--steps",
        "100000",
        "--name",
        "hang",
        "--set",
        "job.max_restarts=3",
        "--",
        "--runtime.timeout_s",
        str(timeout_s),
        "--checkpoint.every_steps",
        "5",
    )
    cleanup.append(run)
    run.wait_for(r"checkpoint: saved .*step_00000005")
    rank = rank_process("hang", 1)
    frozen = time.monotonic()
    rank.suspend()
    line = run.wait_for(r"^restart: .*", timeout=timeout_s + 60).group(0)
    took = time.monotonic() - frozen
    outcome.saw(line)
    outcome.timed("hang named", took)
    assert re.match(
        rf"^restart: rank 1 \(pid {rank.pid}\) hung: stopped \(SIGSTOP\) in step \d+ \(\w+\), silent for \d+ s; "
        rf"rank 0 waited for it in step \d+ \(\w+.*\) until the collective timeout \(runtime.timeout_s {timeout_s}\) "
        r"ended the run; launching the run again from its latest checkpoint \(restart 1 of 3, 2 left\)$",
        line,
    ), line
    assert took < timeout_s + 15, f"the hang was named {took:.0f} s after the rank stopped"
    record_file = Path(os.environ["FSDP_SDK_STATE_DIR"]) / "local" / "runs" / "hang" / "run.json"
    wait_until(lambda: json.loads(record_file.read_text())["restarts"], 30, "the restart in run.json")
    record = json.loads(record_file.read_text())
    assert [r["hang"]["rank"] for r in record["restarts"]] == [1]
    assert record["restarts"][0]["cause"] in line

    # the relaunched run resumes; its rank 1 hangs again: the run ends instead of burning the restarts left
    run.wait_for(r"resumed from .*step_")
    run.wait_for(r'^\{"step": \d+,')  # training again
    again = rank_process("hang", 1)
    assert again.pid != rank.pid
    again.suspend()
    code, _, err = run.finish(timeout=timeout_s + 90)
    assert code == 1
    line = last_line(err)
    assert re.match(
        rf"^Error: run hang failed: rank 1 \(pid {again.pid}\) hung: stopped \(SIGSTOP\) in step \d+ .*"
        r"until the collective timeout \(runtime.timeout_s 10\) ended the run; it hung again after the restart "
        r"\(the first time in step \d+ \(\w+\)\): not restarted again.* \(after 1 restart\); logs in ",
        line,
    ), line
    outcome.saw(line)
    assert err.count("restart: ") == 1
    runs = cli("runs")
    assert "hang: restart 1: rank 1" in runs.stdout and "hang: failed: run hang failed: rank 1" in runs.stdout
    record = json.loads(cli("runs", "--json").stdout)[-1]
    assert record["state"] == "failed" and "hung again" in record["error"] and len(record["restarts"]) == 1
    outcome.note("the same cause in the restart line, `runs` and run.json; the second hang ended the run")
    _nothing_left("hang", outcome)


@pytest.mark.parametrize("damage", ["empty", "truncated", "deleted"])
def test_a_damaged_state_file(damage: str, outcome: Outcome, tmp_path: Path) -> None:
    """state.json emptied, truncated, or deleted while etcd runs."""
    from fsdp_sdk import etcd

    assert cli("up", "--backend", "local").returncode == 0
    state = state_file()
    path = Path(os.environ["FSDP_SDK_STATE_DIR"]) / "local" / "state.json"
    text = path.read_text()
    if damage == "deleted":
        path.unlink()
        up = cli("up", "--backend", "local")
        assert up.returncode == 0, up.stderr
        line = next(line for line in up.stderr.splitlines() if "which state.json did not record" in line)
        outcome.saw(line)
        new = state_file()["etcd"]
        assert not etcd.pid_alive(state["etcd"]["pid"]) and etcd.is_healthy(new["client_port"])
        assert [p.pid for p in etcd.find_etcd_serving(Path(new["data_dir"]))] == [new["pid"]]
        outcome.note("up stopped the unrecorded etcd holding the data directory and started a fresh one")
        _down()
        return
    path.write_text("" if damage == "empty" else text[: len(text) // 2])
    status = json.loads(cli("status", "--json").stdout)
    assert status["state"] == "degraded" and "fix" in status["details"]
    down = cli("down", "--backend", "local")
    assert down.returncode == 0, down.stderr
    outcome.saw(next(line for line in down.stderr.splitlines() if "is damaged" in line))
    assert not etcd.pid_alive(state["etcd"]["pid"]) and not path.exists()
    outcome.note("status said degraded with the fix; down stopped the etcd found by its data directory")


def test_a_stale_pid_in_the_state_file(outcome: Outcome) -> None:
    """state.json naming a pid that now belongs to an unrelated process."""
    from fsdp_sdk import etcd

    assert cli("up", "--backend", "local").returncode == 0
    path = Path(os.environ["FSDP_SDK_STATE_DIR"]) / "local" / "state.json"
    state = json.loads(path.read_text())
    real_pid = state["etcd"]["pid"]
    bystander = subprocess.Popen(["sleep", "300"])
    try:
        state["etcd"]["pid"] = bystander.pid
        path.write_text(json.dumps(state))
        down = cli("down", "--backend", "local")
        assert down.returncode == 0, down.stderr
        assert bystander.poll() is None, "the unrelated process was not signalled"
        outcome.saw(next(line for line in down.stderr.splitlines() if "left alone" in line))
        assert not etcd.pid_alive(real_pid), "the real etcd (found by its data directory) was stopped"
        outcome.note("the unrelated process lives; the real etcd, found by its data directory, was stopped")
    finally:
        bystander.kill()
        bystander.wait()


@contextlib.contextmanager
def _tmpfs(path: Path, options: str) -> Iterator[Path]:
    path.mkdir(parents=True)
    mounted = subprocess.run(["mount", "-t", "tmpfs", "-o", options, "tmpfs", str(path)], capture_output=True)
    if mounted.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here ({mounted.stderr.decode().strip()}); needs root")
    try:
        yield path
    finally:
        subprocess.run(["umount", "-l", str(path)], capture_output=True)


def test_a_read_only_output_directory(outcome: Outcome, tmp_path: Path) -> None:
    """train.output_dir on a read-only filesystem."""
    with _tmpfs(tmp_path / "ro", "ro,size=1m") as ro:
        result = cli("run", *TINY, "--steps", "2", "--set", f"trainer.train.output_dir={ro}/out")
    assert result.returncode == 2
    line = last_line(result.stderr)
    assert line == (
        f"Error: train.output_dir: {ro} is on a read-only filesystem; choose a writable directory with free space"
    ), line
    outcome.saw(line)
    assert not (Path(os.environ["FSDP_SDK_STATE_DIR"]) / "local" / "state.json").exists(), "nothing started"
    outcome.note("nothing started")


def test_a_disk_that_fills_up_during_a_run(outcome: Outcome, tmp_path: Path, cleanup: list[Run]) -> None:
    """The output directory's disk filling up during a checkpoint save."""
    with _tmpfs(tmp_path / "small", "size=3m") as small:
        result = cli(
            "run",
            *TINY,
            "--steps",
            "4",
            "--set",
            f"trainer.train.output_dir={small}/out",
            "--set",
            "job.max_restarts=0",
            "--",
            "--checkpoint.every_steps",
            "1",
        )
        assert result.returncode == 1, result.stderr[-3000:]
        line = last_line(result.stderr)
        assert re.match(
            rf"^Error: run \S+ failed: agent \d: no space left on device writing {small}/out\S* "
            rf"\(.* free on the filesystem of {small}\S*\)",
            line,
        ), line
        outcome.saw(line)
        assert (small / "out" / "checkpoints" / "step_00000001" / "COMPLETE").is_file(), "the previous one is intact"
        outcome.note("the previous checkpoint stayed complete")
