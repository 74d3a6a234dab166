"""Act on a local run's plan: start its agents, follow them, and leave no process behind.

:class:`Supervisor` starts one agent per command of a :class:`~fsdp_sdk.backends.local.plan.RunPlan`
(each in its own process group, dying with this process: ``prctl(PR_SET_PDEATHSIG)``), writes each
agent's output to ``logs/agent-<i>.log``, streams the leader's (the agent whose rank prints
``master_addr=``) as :class:`~fsdp_sdk.runs.RunEvent` s, and watches:

* the agents: one that exits with an error, or is killed, ends the run at once (every other agent
  and rank is stopped) with the root cause (:mod:`~fsdp_sdk.backends.local.cause`) in one line; so
  does a rank that exits 2 (the trainer refused its settings: a restart would fail the same way),
  and a rank killed by ``SIGKILL`` while an OOM counter rose (:mod:`~fsdp_sdk.backends.local.memory`):
  "out of memory", not restarted into the same death; and a launch that fails loading a checkpoint the previous
  launch failed to load too (the trainer marks one that does not load ``BROKEN``, so a restart takes the one
  before; where it could not mark it, a restart would fail the same way);
* hangs (:mod:`~fsdp_sdk.backends.local.hang`): a rank that stops making progress while its peers wait in a
  collective is named when the collective timeout (``--runtime.timeout_s``) ends the wait: which rank, in
  which step and phase, for how long, from the ranks' heartbeat files and process states; the run is
  launched again once, and a second hang ends it;
* progress: a run that finishes no step for ``stall_timeout_s`` (counted from the trainers' start)
  is stuck; the rank that stopped is named (a stopped process, one busy while the others wait);
* etcd (:class:`EtcdGuard`): dead or not answering for ``local.etcd_unhealthy_s``, it is restarted
  on the same ports with the same data, while the agents keep training;
* the end: once the leader has written its summary and every rank has exited, agents still
  running after :data:`FINISH_GRACE_S` are stopped (the run succeeded).

A rank that fails (other than by refusing its settings) makes its agent exit; every process of the
run is stopped and the run is launched again (a fresh rendezvous id, all agents together) up to
``job.max_restarts`` times, resuming from the latest checkpoint. Restarting here rather than in
torchrun keeps the agents in step: torchrun's own restarts race each other's rendezvous rounds.
Ctrl-C and SIGTERM stop everything (``KeyboardInterrupt``).
"""

from __future__ import annotations

import contextlib
import json
import queue
import re
import signal
import subprocess
import threading
import time
from collections import deque
from collections.abc import Callable
from pathlib import Path
from typing import Any

from fsdp_sdk import etcd
from fsdp_sdk.backends.local.agent import EVENT_PREFIX
from fsdp_sdk.backends.local.cause import ErrorLine, classify, describe, root_cause
from fsdp_sdk.backends.local.plan import RANK_MODULE, RunPlan
from fsdp_sdk.errors import BackendError, RunError
from fsdp_sdk.processes import die_with_parent, stop_tree
from fsdp_sdk.runs import RunEvent, is_leader_line, leader_line_event

#: Set for the ranks (``fsdp_trainer.heartbeat.ENV``): the directory of their heartbeat files.
HEARTBEAT_ENV = "FSDP_TRAINER_HEARTBEAT_DIR"

__all__ = ["FINISH_GRACE_S", "EtcdGuard", "Supervisor", "disk_check"]

#: The trainer's leader prints this at start; the agent whose output contains it is streamed.
#: The trainer's line for a checkpoint that failed to load (``fsdp_trainer.checkpoint.Checkpointer.load``).
LOAD_FAILED = re.compile(r"checkpoint: loading (\S+) failed")
#: Seconds agents may linger after the trainers finished (torch's exit barrier) before they are stopped.
FINISH_GRACE_S = 30.0

EventSink = Callable[[RunEvent], None]


def _interrupt(signum: int, frame: object) -> None:
    raise KeyboardInterrupt(f"signal {signum}")


def _signal_name(code: int) -> str:
    try:
        return signal.Signals(-code).name
    except ValueError:
        return f"signal {-code}"


class EtcdGuard:
    """Keeps the local etcd answering during a run: restarts it (same ports, same data) when it dies or freezes.

    :param read_server: returns the current etcd record (re-read from the state under its lock).
    :param restart: restarts etcd and returns the new record; raises :class:`BackendError` when it cannot.
    :param unhealthy_s: seconds of failed health checks before a restart.
    :param report: receives a warning line per incident.
    """

    def __init__(
        self,
        read_server: Callable[[], etcd.EtcdServer | None],
        restart: Callable[[etcd.EtcdServer], etcd.EtcdServer],
        *,
        unhealthy_s: float,
        report: Callable[[str], None],
    ) -> None:
        self.read_server, self.restart, self.unhealthy_s, self.report = read_server, restart, unhealthy_s, report
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._watch, name="etcd-guard", daemon=True)

    def start(self) -> None:
        """Start watching in a background thread."""
        self._thread.start()

    def stop(self) -> None:
        """Stop watching."""
        self._stop.set()
        self._thread.join(timeout=10)

    def _watch(self) -> None:
        failing_since: float | None = None
        gave_up_until = 0.0
        while not self._stop.wait(0.5):
            server = self.read_server()
            if server is None:
                return
            if etcd.is_healthy(server.client_port, timeout=1.0):
                failing_since = None
                continue
            now = time.monotonic()
            failing_since = failing_since or now
            if now - failing_since < self.unhealthy_s or now < gave_up_until:
                continue
            alive = server.identity.is_running()
            what = (
                f"etcd (pid {server.pid}) at {server.endpoint} stopped answering for {now - failing_since:.0f} s"
                if alive
                else f"etcd (pid {server.pid}) at {server.endpoint} died"
            )
            try:
                new = self.restart(server)
            except BackendError as exc:
                self.report(
                    f"{what}; restarting it failed ({exc}); the ranks train on, but a restart of the workers needs etcd"
                )
                gave_up_until = now + 10
                continue
            failing_since = None
            self.report(f"{what}; restarted it (pid {new.pid}, same port and data); training went on meanwhile")


class _RankFailed(RunError):
    """A rank failed (not refused its settings, not killed with its agent): the run may be launched again."""

    def __init__(self, message: str, cause: str, hang: Any = None) -> None:
        super().__init__(message)
        self.cause, self.hang = cause, hang


class Supervisor:
    """Runs the agents of one plan to their end (see the module docstring).

    :param plan: the run's plan.
    :param env: the agents' full environment.
    :param on_event: receives :class:`~fsdp_sdk.runs.RunEvent` s.
    :param relaunch: returns the plan of the next launch (a fresh rendezvous id) after a rank failed; the run is
        launched again, resuming from its latest checkpoint, up to ``plan.max_restarts`` times.
    :param poll_s: how often processes are checked.
    """

    #: The memory estimate beside the limit, said with an out-of-memory failure (set by the runner that checked it).
    memory_estimate: str | None = None

    def __init__(
        self,
        plan: RunPlan,
        env: dict[str, str],
        on_event: EventSink,
        *,
        relaunch: Callable[[], RunPlan] | None = None,
        poll_s: float = 0.2,
    ) -> None:
        self.plan, self.env, self.on_event, self.poll_s, self.relaunch = plan, env, on_event, poll_s, relaunch
        self.restarts = 0
        #: Checkpoints a launch failed to load (the trainer's "checkpoint: loading X failed"): never restarted into.
        self.failed_loads: set[str] = set()
        self.hangs: list[Any] = []  # every hang named (hang.Hang), across launches
        self.restart_causes: list[dict[str, Any]] = []  # why each restart happened, for the run's record
        self._reset()

    def _reset(self) -> None:
        """Forget the previous launch's processes and what they printed."""
        plan = self.plan
        self.processes: list[subprocess.Popen[bytes]] = []
        self.lines: queue.Queue[tuple[int, str | None, float]] = queue.Queue()
        self.tails: list[deque[str]] = [deque(maxlen=80) for _ in plan.commands]
        self.errors: list[ErrorLine] = []
        self.leader: int | None = None
        self.pending: list[list[str]] = [[] for _ in plan.commands]
        self.summary_seen = False
        self.rendezvous_joined = 0
        self.last_failure: str | None = None
        self._failure_was_signal = False
        self._failure_code = 0
        self.last_progress: float | None = None
        self.last_step = 0
        self.finished_at: float | None = None
        self.done = False
        self.refused: int | None = None  # agent whose rank exited 2: the trainer refused its settings
        self.load_failed: str | None = None  # the checkpoint this launch failed to load
        self.hang_snapshot: Any = None  # what every rank was doing when the first rank failed (hang.Snapshot)

    # ------------------------------------------------------------------ output

    def _emit(self, kind: str, message: str = "", record: dict[str, Any] | None = None) -> None:
        self.on_event(RunEvent(kind, message, record, self.plan.total_steps))

    def _pump(self, index: int, process: subprocess.Popen[bytes], lines: queue.Queue[Any]) -> None:
        assert process.stdout is not None
        with open(self.plan.log_dir / f"agent-{index}.log", "a", encoding="utf-8") as log:
            for raw in process.stdout:
                line = raw.decode("utf-8", errors="replace").rstrip("\n")
                log.write(line + "\n")
                log.flush()
                lines.put((index, line, time.monotonic()))
        lines.put((index, None, time.monotonic()))

    def _agent_event(self, index: int, data: dict[str, Any]) -> None:
        event = data.get("event")
        if event == "rendezvous":
            self.rendezvous_joined += 1
            if self.rendezvous_joined == self.plan.nodes:
                self._emit(
                    "phase",
                    f"rendezvous complete: {self.plan.nodes} agents; starting {self.plan.world_size} trainer processes",
                )
        elif event == "worker_failed":
            code = int(data.get("exitcode") or 0)
            how = f"was killed by {_signal_name(code)}" if code < 0 else f"exited with code {code}"
            failure = f"agent {index}'s local rank {data.get('local_rank')} (pid {data.get('pid')}) {how}"
            # A rank killed by a signal is the cause; its peers exit 1 moments later, having lost it.
            if self.last_failure is None or (code < 0 and not self._failure_was_signal):
                self.last_failure, self._failure_was_signal, self._failure_code = failure, code < 0, code
            if code == 2:  # the trainer's exit code for settings it refuses: a restart would fail the same way
                self.refused = index
            self._snap_hang()
        elif event == "restart":
            self.restarts += 1
            self.rendezvous_joined = 0
            self.last_progress = time.monotonic()
            left = data.get("attempts_left")
            why = self.last_failure or "a rank failed"
            self._emit(
                "restart",
                f"{why}; restarting the workers from the latest checkpoint ({left} of "
                f"{data.get('max_restarts')} restarts left)",
            )
        elif event == "etcd_unreachable":
            self._emit("warning", f"agent {index}: etcd does not answer ({data.get('doing')}); training goes on")

    def _handle(self, index: int, line: str, at: float) -> None:
        self.tails[index].append(line)
        if line.startswith(EVENT_PREFIX):
            with contextlib.suppress(ValueError):
                self._agent_event(index, json.loads(line[len(EVENT_PREFIX) :]))
            return
        failed_load = LOAD_FAILED.search(line)
        if failed_load:
            self.load_failed = failed_load.group(1)
        primary = classify(line)
        if primary is not None:
            self.errors.append(ErrorLine(at, f"agent {index}", line, primary))
        if is_leader_line(line) and self.leader != index:
            self.leader = index
            self.last_progress = at
            for earlier in self.pending[index]:
                self._leader_line(earlier, at)
            self.pending = [[] for _ in self.plan.commands]
            if self.plan.code:
                self._emit("phase", f"your code started on {self.plan.world_size} ranks ({self.plan.code})")
            else:
                self._emit("phase", f"trainers started; loading the model ({self._model_name()})")
        if self.leader is None:
            self.pending[index].append(line)
        elif index == self.leader:
            self._leader_line(line, at)

    def _model_name(self) -> str:
        model = self.plan.trainer.get("model", {})
        return str(model.get("name_or_path") or model.get("preset") or "default preset")

    def _leader_line(self, line: str, at: float) -> None:
        event = leader_line_event(line, self.plan.total_steps)
        if event is None:
            self.summary_seen = True  # the summary: returned by the runner's wait, not streamed
            return
        if event.kind == "step" and event.record is not None:
            self.last_step = event.record["step"]
            self.last_progress = at
        self.on_event(event)

    # ------------------------------------------------------------------ run

    def start(self) -> None:
        """Start the agents of the first launch (:meth:`run` follows them); at most once."""
        if not self.processes:
            self._launch()

    def run(self, on_started: Callable[[], Any] | None = None) -> None:
        """Start the agents (unless :meth:`start` did) and follow them to the end.

        :raises RunError: an agent failed, was killed, or the run stopped making progress.
        :raises KeyboardInterrupt: Ctrl-C or SIGTERM (every process of the run is stopped first).
        """
        previous = None
        if threading.current_thread() is threading.main_thread():
            previous = signal.signal(signal.SIGTERM, _interrupt)  # SIGTERM stops the agents too, like Ctrl-C
        try:
            while True:
                self.start()
                if on_started is not None:
                    on_started()
                    on_started = None
                try:
                    self._follow()
                    return
                except _RankFailed as failure:
                    if self.relaunch is None or self.restarts >= self.plan.max_restarts:
                        raise RunError(str(failure)) from None
                    self.stop()
                    self.restart_causes.append(
                        {
                            "at": time.time(),
                            "cause": failure.cause,
                            "hang": failure.hang.to_dict() if failure.hang else None,
                        }
                    )
                    self.restarts += 1
                    left = self.plan.max_restarts - self.restarts
                    self._emit(
                        "restart",
                        f"{failure.cause}; launching the run again from its latest checkpoint "
                        f"(restart {self.restarts} of {self.plan.max_restarts}, {left} left)",
                    )
                    self.plan = self.relaunch()
                    self._reset()
        finally:
            self.stop()
            if previous is not None:
                signal.signal(signal.SIGTERM, previous)

    def _launch(self) -> None:
        from fsdp_sdk.backends.local.memory import oom_counters

        self.plan.log_dir.mkdir(parents=True, exist_ok=True)
        self.oom_before = oom_counters()
        env = {**self.env, **self._heartbeat_env()}
        for index, command in enumerate(self.plan.commands):
            process = subprocess.Popen(
                list(command),
                stdin=subprocess.DEVNULL,
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
                env=env,
                start_new_session=True,  # Ctrl-C reaches this process only; it stops the agents itself
                preexec_fn=die_with_parent,
            )
            self.processes.append(process)
            threading.Thread(target=self._pump, args=(index, process, self.lines), daemon=True).start()
        self._emit("phase", f"waiting for {self.plan.nodes} agents at the {self.plan.rdzv_backend} rendezvous")

    def _follow(self) -> None:
        open_streams = len(self.processes)
        while not self.done and (open_streams or any(p.poll() is None for p in self.processes)):
            try:
                index, line, at = self.lines.get(timeout=self.poll_s)
            except queue.Empty:
                pass
            else:
                if line is None:
                    open_streams -= 1
                else:
                    self._handle(index, line, at)
                    continue  # drain the queue before judging the processes
            if self.refused is not None:
                self._fail(self.refused, 2)
            self._check_agents()
            self._check_progress()

    def _check_agents(self) -> None:
        codes = [p.poll() for p in self.processes]
        failed = [(i, c) for i, c in enumerate(codes) if c not in (None, 0)]
        if failed:
            self._drain(1.0)
            codes = [p.poll() for p in self.processes]
            failed = [(i, c) for i, c in enumerate(codes) if c not in (None, 0)]
            index, code = min(failed, key=lambda f: (f[1] >= 0, f[0]))  # an agent killed by a signal first
            self._fail(index, code)
        if self.summary_seen and any(c == 0 for c in codes) and any(c is None for c in codes):
            self.finished_at = self.finished_at or time.monotonic()
            if time.monotonic() - self.finished_at > FINISH_GRACE_S:
                self._emit("warning", f"agents still running {FINISH_GRACE_S:.0f} s after training finished: stopped")
                self.stop()
                self.done = True

    def _drain(self, seconds: float) -> None:
        """Read what the agents printed while dying (their last error lines) for up to ``seconds``."""
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            try:
                index, line, at = self.lines.get(timeout=0.05)
            except queue.Empty:
                if all(p.poll() is not None for p in self.processes):
                    break
                continue
            if line is not None:
                self._handle(index, line, at)

    def _fail(self, index: int, code: int) -> None:
        pid = self.processes[index].pid
        self._snap_hang()  # before the processes are stopped: which rank hung, and how
        self.stop()
        self._drain(0.5)
        directories = [self.plan.output_dir, *(d for d in [self.plan.checkpoint_dir] if d)]
        first = root_cause(self.errors, directories)
        if code < 0:
            cause = f"agent {index} (pid {pid}) was killed by {_signal_name(code)}"
            if first is not None and first.primary:
                cause = f"{first.source}: {describe(first, directories)} ({cause})"
            else:
                cause += "; its trainer processes were stopped with it"
        elif first is not None and first.primary:
            cause = f"{first.source}: {describe(first, directories)}"
        elif self.last_failure:
            cause = self.last_failure  # torchrun's own account of the first rank to fail (exit code or signal)
        elif first is not None:
            cause = f"{first.source}: {describe(first, directories)}"
        else:
            tail = [line for line in self.tails[index] if line.strip() and not line.startswith(EVENT_PREFIX)]
            cause = f"agent {index} exited with code {code}: {tail[-1].strip()[:300] if tail else 'no output'}"
        restartable = code > 0 and code != 2 and self.last_failure is not None and not self.summary_seen
        from fsdp_sdk.backends.local.memory import gpu_out_of_memory, oom_rose, out_of_memory

        gpu = gpu_out_of_memory(first.text) if first is not None and first.primary else None
        if gpu is not None:  # CUDA out of memory: a restart would run out again
            cause = out_of_memory("GPU", first.source if first else f"agent {index}", gpu, self.memory_estimate)
            restartable = False
        elif code == -signal.SIGKILL or (self._failure_was_signal and self._failure_code == -signal.SIGKILL):
            rose = oom_rose(getattr(self, "oom_before", {}))
            if rose is not None:  # the kernel's OOM killer: a restart would die the same death
                killed = self.last_failure if self._failure_code == -signal.SIGKILL else None
                killed = killed or f"agent {index} (pid {pid}) was killed by SIGKILL"
                cause = out_of_memory("host", killed, f"the kernel's OOM killer: {rose}", self.memory_estimate)
                restartable = False
        if self.load_failed is not None:
            if self.load_failed in self.failed_loads:  # the trainer could not mark it BROKEN: it would fail again
                cause += f"; not restarted: {self.load_failed} failed to load in the previous launch too"
                restartable = False
            self.failed_loads.add(self.load_failed)
        hang = self._named_hang(code)
        if hang is not None:
            cause, restartable = self._hang_cause(hang, restartable)
        if self.restarts:
            cause += f" (after {self.restarts} restart{'s' if self.restarts > 1 else ''})"
        message = f"run {self.plan.run_id} failed: {cause}; logs in {self.plan.log_dir}"
        if restartable:
            raise _RankFailed(message, cause, hang)
        raise RunError(message)

    # ------------------------------------------------------------------ hangs

    @property
    def heartbeat_dir(self) -> Path:
        """Where the ranks of this launch write their heartbeats (``fsdp_trainer.heartbeat``)."""
        return self.plan.run_dir / "heartbeat"

    def _heartbeat_env(self) -> dict[str, str]:
        """The variable that makes every rank of the launch write its heartbeat; the previous launch's are removed."""
        directory = self.heartbeat_dir
        with contextlib.suppress(OSError):
            directory.mkdir(parents=True, exist_ok=True)
            for old in directory.glob("rank-*.json*"):
                old.unlink(missing_ok=True)
        return {HEARTBEAT_ENV: str(directory)}

    def _snap_hang(self) -> None:
        """Record what every rank is doing now (once per launch: at the first failure, before anything is stopped)."""
        if self.hang_snapshot is not None:
            return
        from fsdp_sdk.backends.local import hang

        lines = [e.text for e in self.errors] + [line for tail in self.tails for line in tail]
        with contextlib.suppress(Exception):  # naming a hang must never hide the failure itself
            self.hang_snapshot = hang.snapshot(self._ranks(), self.heartbeat_dir, lines)

    def _named_hang(self, code: int) -> Any:
        """The hang behind this failure (``hang.Hang``), or ``None`` when it was no hang."""
        from fsdp_sdk.backends.local import hang

        if code == 2 or self.summary_seen:
            return None
        if self.hang_snapshot is not None and not self.hang_snapshot.timed_out:
            lines = [e.text for e in self.errors] + [line for tail in self.tails for line in tail]
            self.hang_snapshot.timed_out = any(hang.COLLECTIVE_TIMEOUT.search(line) for line in lines)
        named = hang.diagnose(self.hang_snapshot)
        if named is None or not named.timed_out:
            return None  # a rank that is merely slow or stopped while nothing waited for it is not this failure
        return named

    def _hang_cause(self, named: Any, restartable: bool) -> tuple[str, bool]:
        """The failure's cause line for a hang, and whether to launch again: once, not after a second hang."""
        cause = named.describe()
        if self.hangs:
            first = self.hangs[0]
            again = "hung again" if first.rank == named.rank else f"hung after rank {first.rank} did"
            cause += (
                f"; it {again} after the restart (the first time in {first.where()}): not restarted again, "
                "a third launch would hang the same way; check that rank's GPU, mounts and data"
            )
            restartable = False
        self.hangs.append(named)
        return cause, restartable

    def _check_progress(self) -> None:
        if self.last_progress is None or self.summary_seen or (self.plan.code and not self.last_step):
            return  # your code is watched for stalls once it reports steps (fsdp_sdk.report)
        idle = time.monotonic() - self.last_progress
        if idle < self.plan.stall_timeout_s:
            return
        culprit = self._stalled_rank()
        where = f"after step {self.last_step}" if self.last_step else "before its first step"
        self.stop()
        raise RunError(
            f"run {self.plan.run_id} stopped making progress: no step finished for {idle:.0f} s {where} "
            f"(local.stall_timeout_s); {culprit}; logs in {self.plan.log_dir}"
        )

    def _ranks(self) -> list[tuple[int, Any]]:
        import psutil

        ranks = []
        for agent in self.processes:
            try:
                children = psutil.Process(agent.pid).children(recursive=True)
            except psutil.Error:
                continue
            for child in children:
                try:
                    if RANK_MODULE not in child.cmdline():
                        continue
                    ranks.append((int(child.environ().get("RANK", "-1")), child))
                except (psutil.Error, ValueError):
                    continue
        return sorted(ranks, key=lambda r: r[0])

    def _stalled_rank(self) -> str:
        """Which rank stopped making progress, and how it looks."""
        import psutil

        ranks = self._ranks()
        if not ranks:
            return "no trainer process is running"
        for rank, process in ranks:
            with contextlib.suppress(psutil.Error):
                status = process.status()
                if status == psutil.STATUS_STOPPED:
                    return f"rank {rank} (pid {process.pid}) is stopped (SIGSTOP); the others wait for it"
                if status == psutil.STATUS_DISK_SLEEP:
                    return f"rank {rank} (pid {process.pid}) is blocked on I/O; the others wait for it"
        before = {}
        for rank, process in ranks:
            with contextlib.suppress(psutil.Error):
                before[rank] = sum(process.cpu_times()[:2])
        time.sleep(1.0)
        busy = []
        for rank, process in ranks:
            with contextlib.suppress(psutil.Error, KeyError):
                if sum(process.cpu_times()[:2]) - before[rank] > 0.5:
                    busy.append((rank, process.pid))
        if busy and len(busy) < len(ranks):
            named = ", ".join(f"rank {r} (pid {p})" for r, p in busy)
            return f"{named} keeps computing while the others wait for it"
        pids = ", ".join(f"rank {r} pid {p.pid}" for r, p in ranks)
        return f"every rank waits on the others ({pids})"

    def stop(self, timeout: float = 10.0) -> None:
        """Stop every agent and trainer of the run that is still running (SIGTERM, then SIGKILL)."""
        running = [p for p in self.processes if p.poll() is None]
        if running:
            self._emit("phase", f"stopping {len(running)} agent(s) and their trainer processes")
        stop_tree([p.pid for p in self.processes if p.returncode is None or p.poll() is None], timeout=timeout)
        for process in self.processes:
            with contextlib.suppress(subprocess.TimeoutExpired):
                process.wait(timeout=timeout)


def disk_check(directories: list[Path]) -> str | None:
    """A disk problem with the run's output directories before anything starts (see :func:`cause.writable_problem`)."""
    from fsdp_sdk.backends.local.cause import writable_problem

    for directory in directories:
        problem = writable_problem(directory)
        if problem:
            return problem
    return None
