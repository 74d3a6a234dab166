"""The ``local`` backend: one machine, simulated nodes, a real etcd rendezvous.

``up`` starts etcd as a daemon on free 127.0.0.1 ports and records it in the
state directory::

    <cluster.state_dir>/local/
        state.json        # etcd pid and ports, rendezvous backend, simulated nodes, last run id
        etcd/             # etcd --data-dir
        etcd.log          # etcd's output
        runs/<run id>/    # one directory per run: the trainer's --train.output_dir
            logs/agent-<i>.log

``run_job`` starts one torchrun agent per simulated node (``job.num_workers``),
each with ``job.nproc_per_node`` processes (default 1), all joining the etcd-v2
rendezvous under a fresh rendezvous id, and streams the leader's output (the
agent whose workers print ``master_addr=``). If ``up`` was not run, ``run_job``
starts etcd itself, says so, and leaves it running for the next run;
``fsdp-sdk down`` stops it and removes ``state.json``, ``etcd/`` and
``etcd.log`` (run outputs under ``runs/`` are kept).

When ``etcd`` is not on PATH, or the ``python-etcd`` package that torch's
etcd-v2 rendezvous imports is missing, or ``job.rdzv_backend`` is ``c10d``,
runs use torch's c10d rendezvous (a TCPStore hosted by the first agent) on a
fresh port instead, and ``up`` says so.
"""

from __future__ import annotations

import contextlib
import copy
import importlib.util
import json
import os
import queue
import re
import shutil
import signal
import subprocess
import sys
import threading
from collections import deque
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from fsdp_sdk import etcd
from fsdp_sdk.backends.base import ClusterBackend, ClusterStatus, Plan, ProgressCallback, no_progress
from fsdp_sdk.config import trainer_arguments
from fsdp_sdk.errors import BackendError, ConfigError, RunError
from fsdp_sdk.preflight import PreflightResult
from fsdp_sdk.runs import JobRef, RunResult

if TYPE_CHECKING:
    from fsdp_sdk.config import Config

__all__ = ["LEADER_MARKER", "LocalBackend", "local_preflight"]

#: The trainer's leader prints this at start; the agent whose output contains it is streamed.
LEADER_MARKER = "master_addr="
#: Seconds agents wait for each other at the rendezvous.
RDZV_TIMEOUT_S = 300


class LocalBackend(ClusterBackend):
    """Runs the trainer on this machine under torchrun, one agent per simulated node, with an etcd rendezvous."""

    name = "local"
    description = "this machine: a local etcd and one torchrun agent per simulated node"
    runs_jobs = True

    # ------------------------------------------------------------------ state

    @staticmethod
    def root(config: Config) -> Path:
        """``<cluster.state_dir>/local``: everything this backend writes."""
        return Path(config.cluster.state_dir) / "local"

    def _state_path(self, config: Config) -> Path:
        return self.root(config) / "state.json"

    def _read_state(self, config: Config) -> dict[str, Any] | None:
        path = self._state_path(config)
        try:
            return json.loads(path.read_text())
        except FileNotFoundError:
            return None
        except (OSError, ValueError) as exc:
            raise BackendError(
                f"local: cannot read {path} ({exc}); run 'fsdp-sdk down --backend local' to reset it"
            ) from exc

    def _write_state(self, config: Config, state: dict[str, Any]) -> None:
        path = self._state_path(config)
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(".tmp")
        tmp.write_text(json.dumps(state, indent=2) + "\n")
        tmp.replace(path)

    @staticmethod
    def _rdzv_backend(config: Config) -> tuple[str, str | None]:
        """The rendezvous backend local runs will use, and why it differs from the configured one."""
        if config.job.rdzv_backend == "c10d":
            return "c10d", None
        if etcd.etcd_binary() is None:
            return "c10d", "etcd is not on PATH"
        if importlib.util.find_spec("etcd") is None:
            return "c10d", "the python-etcd package (needed by torch's etcd-v2 rendezvous) is not installed"
        return "etcd-v2", None

    # ------------------------------------------------------------------ ClusterBackend

    def plan(self, config: Config) -> Plan:
        rdzv, why = self._rdzv_backend(config)
        root = self.root(config)
        if rdzv == "etcd-v2":
            steps = [f"start etcd ({etcd.etcd_binary()}) on free 127.0.0.1 ports, data in {root / 'etcd'}"]
        else:
            steps = [f"use torch's c10d rendezvous, no etcd ({why or 'job.rdzv_backend is c10d'})"]
        steps += [
            f"record the state in {root / 'state.json'}",
            f"runs: {config.job.num_workers} torchrun agents x {config.job.nproc_per_node or 1} processes, "
            f"outputs in {root / 'runs'}",
        ]
        details = {
            "rdzv_backend": rdzv,
            "rdzv_reason": why,
            "root": str(root),
            "nodes": max(config.cluster.nodes, 1),
        }
        return Plan(backend=self.name, cluster=config.cluster.name, steps=steps, hourly_cost_usd=0.0, details=details)

    def apply(self, config: Config, plan: Plan, *, progress: ProgressCallback = no_progress) -> ClusterStatus:
        current = self.status(config)
        if current.ready:
            progress(f"local cluster already up ({current.endpoint or 'c10d rendezvous'})")
            return current
        if current.state == "degraded":
            progress("local state found but etcd is not running; starting it again")
            self._stop_etcd(config, progress)
        root = Path(plan.details["root"])
        rdzv, why = plan.details["rdzv_backend"], plan.details["rdzv_reason"]
        state: dict[str, Any] = {
            "cluster": plan.cluster,
            "rdzv_backend": rdzv,
            "nodes": int(plan.details["nodes"]),
            "etcd": None,
            "last_run_id": None,
        }
        if rdzv == "etcd-v2":
            progress("starting etcd on 127.0.0.1 (free ports)")
            server = etcd.start_etcd(root / "etcd", root / "etcd.log", name=plan.cluster)
            state["etcd"] = server.to_dict()
            progress(f"etcd is healthy at {server.endpoint} (pid {server.pid}, log {root / 'etcd.log'})")
        else:
            root.mkdir(parents=True, exist_ok=True)
            progress(
                f"{why}: local runs will use torch's c10d rendezvous instead of etcd"
                if why
                else "job.rdzv_backend is c10d: no etcd needed"
            )
        self._write_state(config, state)
        return self.status(config)

    def down(self, config: Config, *, dry_run: bool = False, progress: ProgressCallback = no_progress) -> ClusterStatus:
        current = self.status(config)
        if dry_run or current.state == "absent":
            if current.state == "absent":
                progress("no local cluster to stop")
            return current
        self._stop_etcd(config, progress)
        root = self.root(config)
        shutil.rmtree(root / "etcd", ignore_errors=True)
        for name in ("state.json", "etcd.log"):
            (root / name).unlink(missing_ok=True)
        progress(f"removed the local state in {root} (run outputs in {root / 'runs'} are kept)")
        return self.status(config)

    def scale(
        self, config: Config, nodes: int, *, dry_run: bool = False, progress: ProgressCallback = no_progress
    ) -> ClusterStatus:
        # Simulated nodes have no node-group bounds: any number from 1 up.
        if nodes < 1:
            raise ConfigError("nodes", f"{nodes} simulated nodes", "the local backend needs at least 1 node")
        state = self._read_state(config)
        if state is None:
            raise BackendError("local: no local cluster to scale; run 'fsdp-sdk up --backend local' first")
        if not dry_run:
            state["nodes"] = nodes
            self._write_state(config, state)
            progress(f"local cluster now simulates {nodes} nodes")
        return self.status(config)

    def status(self, config: Config) -> ClusterStatus:
        state = self._read_state(config)
        if state is None:
            return ClusterStatus(self.name, config.cluster.name, "absent")
        details: dict[str, Any] = {
            "state_file": str(self._state_path(config)),
            "rdzv_backend": state.get("rdzv_backend"),
            "runs_dir": str(self.root(config) / "runs"),
        }
        server = state.get("etcd")
        nodes = int(state.get("nodes", 1))
        if not server:
            return ClusterStatus(self.name, state.get("cluster", config.cluster.name), "ready", nodes, None, details)
        details.update(etcd_pid=server["pid"], etcd_log=server["log_path"])
        endpoint = f"127.0.0.1:{server['client_port']}"
        healthy = etcd.pid_alive(server["pid"]) and etcd.is_healthy(server["client_port"])
        return ClusterStatus(
            self.name,
            state.get("cluster", config.cluster.name),
            "ready" if healthy else "degraded",
            nodes,
            endpoint,
            details,
        )

    def kubeconfig(self, config: Config) -> Path | None:
        return None

    # ------------------------------------------------------------------ runs

    def run_job(
        self,
        config: Config,
        *,
        run_id: str,
        trainer_args: Sequence[str] = (),
        dry_run: bool = False,
        on_output: Callable[[str], None] | None = None,
        on_started: Callable[[JobRef], None] | None = None,
        progress: ProgressCallback = no_progress,
    ) -> RunResult:
        if not dry_run and importlib.util.find_spec("fsdp_trainer") is None:
            raise BackendError(
                "local: the trainer is not installed (no module fsdp_trainer); pip install -e packages/trainer"
            )
        status = self.status(config)
        if not status.ready and not dry_run:
            progress(
                "the local cluster is not up: starting it now (it stays up for later runs; 'fsdp-sdk down' stops it)"
            )
            status = self.up(_with_nodes(config, config.job.num_workers), progress=progress)
        state = self._read_state(config) or {}
        nodes, nproc = config.job.num_workers, config.job.nproc_per_node or 1
        if state and nodes > int(state.get("nodes", nodes)):
            raise ConfigError(
                "job.num_workers",
                f"{nodes} workers but the local cluster simulates {state['nodes']} nodes",
                f"run 'fsdp-sdk scale {nodes} --backend local' or use fewer workers",
            )

        rdzv = state.get("rdzv_backend") or self._rdzv_backend(config)[0]
        server = state.get("etcd")
        if rdzv == "etcd-v2":
            endpoint = f"127.0.0.1:{server['client_port']}" if server else "127.0.0.1:<etcd port>"
            rdzv_conf = f"timeout={RDZV_TIMEOUT_S}"
        else:
            endpoint = f"127.0.0.1:{etcd.find_free_port()}"
            rdzv_conf = f"join_timeout={RDZV_TIMEOUT_S}"

        run_dir = self.root(config) / "runs" / run_id
        trainer = json.loads(json.dumps(config.trainer))  # deep copy of plain data
        output_dir = Path(trainer.setdefault("train", {}).get("output_dir") or run_dir)
        trainer["train"]["output_dir"] = str(output_dir)
        log_dir = run_dir / "logs"

        command = [
            sys.executable,
            "-m",
            "torch.distributed.run",
            "--nnodes",
            str(nodes),
            "--nproc-per-node",
            str(nproc),
            "--rdzv-backend",
            rdzv,
            "--rdzv-endpoint",
            endpoint,
            "--rdzv-id",
            run_id,
            "--rdzv-conf",
            rdzv_conf,
            "--max-restarts",
            "0",
            "--local-addr",
            "127.0.0.1",
            "-m",
            "fsdp_trainer",
            *trainer_arguments(trainer),
            *trainer_args,
        ]
        job = JobRef(name=f"{config.job.name}-{run_id[:8]}", backend=self.name, run_id=run_id)
        commands = tuple(tuple(command) for _ in range(nodes))
        if dry_run:
            return RunResult(job, {}, output_dir, log_dir, commands, dry_run=True)

        if rdzv == "etcd-v2" and server:
            previous = state.get("last_run_id")
            if previous:
                _clear_rendezvous(server["client_port"], previous)
            state["last_run_id"] = run_id
            self._write_state(config, state)
        log_dir.mkdir(parents=True, exist_ok=True)
        env = self._environment(config, nodes * nproc)
        progress(
            f"run {run_id}: {nodes} agents x {nproc} processes, {rdzv} rendezvous at {endpoint}, outputs in {output_dir}"
        )

        def started() -> None:
            if on_started is not None:
                on_started(job)

        try:
            _Agents(command, nodes, env, log_dir, on_output, progress).run(on_started=started)
        finally:
            if rdzv == "etcd-v2" and server and etcd.is_healthy(server["client_port"]):
                _clear_rendezvous(server["client_port"], run_id)
        summary_path = output_dir / "summary.json"
        try:
            summary = json.loads(summary_path.read_text())
        except (OSError, ValueError) as exc:
            raise RunError(
                f"run {run_id}: the trainer exited successfully but {summary_path} is missing or invalid ({exc})"
            ) from exc
        return RunResult(
            job, summary, output_dir, log_dir, commands, extra={"rdzv_backend": rdzv, "endpoint": endpoint}
        )

    @staticmethod
    def _environment(config: Config, world_size: int) -> dict[str, str]:
        env = dict(os.environ)
        threads = max(1, (os.cpu_count() or 1) // max(world_size, 1))
        env.setdefault("OMP_NUM_THREADS", str(threads))  # torchrun would force 1 and warn
        env["PYTHONUNBUFFERED"] = "1"  # stream the leader's lines as they come
        env.update(config.job.env)
        if config.job.hf_token:
            env["HF_TOKEN"] = config.job.hf_token.get_secret_value()
        return env

    def _stop_etcd(self, config: Config, progress: ProgressCallback) -> None:
        state = self._read_state(config) or {}
        server = state.get("etcd")
        if server and etcd.stop_process(int(server["pid"])):
            progress(f"stopped etcd (pid {server['pid']})")


def _with_nodes(config: Config, nodes: int) -> Config:
    new = copy.deepcopy(config)
    new.cluster.nodes = max(new.cluster.nodes, nodes)
    return new


def _interrupt(signum: int, frame: object) -> None:
    raise KeyboardInterrupt(f"signal {signum}")


class _Agents:
    """The torchrun agents of one run: start, stream the leader, stop them all on failure or Ctrl-C."""

    def __init__(
        self,
        command: list[str],
        count: int,
        env: dict[str, str],
        log_dir: Path,
        on_output: Callable[[str], None] | None,
        progress: ProgressCallback,
    ) -> None:
        self.command, self.count, self.env, self.log_dir = command, count, env, log_dir
        self.on_output = on_output or (lambda line: None)
        self.progress = progress
        self.processes: list[subprocess.Popen[bytes]] = []
        self.lines: queue.Queue[tuple[int, str | None]] = queue.Queue()
        self.tails: list[deque[str]] = [deque(maxlen=80) for _ in range(count)]

    def _pump(self, index: int, process: subprocess.Popen[bytes]) -> None:
        assert process.stdout is not None
        with open(self.log_dir / f"agent-{index}.log", "w", encoding="utf-8") as log:
            for raw in process.stdout:
                line = raw.decode("utf-8", errors="replace").rstrip("\n")
                log.write(line + "\n")
                log.flush()
                self.lines.put((index, line))
        self.lines.put((index, None))

    def run(self, on_started: Callable[[], Any]) -> None:
        # SIGTERM (kill, a CI timeout) must stop the agents too, like Ctrl-C: turn it into KeyboardInterrupt.
        previous = None
        if threading.current_thread() is threading.main_thread():
            previous = signal.signal(signal.SIGTERM, _interrupt)
        try:
            for index in range(self.count):
                process = subprocess.Popen(
                    self.command,
                    stdin=subprocess.DEVNULL,
                    stdout=subprocess.PIPE,
                    stderr=subprocess.STDOUT,
                    env=self.env,
                    start_new_session=True,  # own process group: stopped as a unit
                )
                self.processes.append(process)
                threading.Thread(target=self._pump, args=(index, process), daemon=True).start()
            on_started()
            self._follow()
        finally:
            self.stop()
            if previous is not None:
                signal.signal(signal.SIGTERM, previous)

    def _follow(self) -> None:
        leader: int | None = None
        pending: list[list[str]] = [[] for _ in range(self.count)]
        open_streams = self.count
        while open_streams:
            try:
                index, line = self.lines.get(timeout=0.5)
            except queue.Empty:
                continue
            if line is None:
                open_streams -= 1
                code = self.processes[index].wait()
                if code != 0:
                    self._fail(index, code)
                continue
            self.tails[index].append(line)
            if leader is None and LEADER_MARKER in line:
                leader = index
                for earlier in pending[index]:
                    self.on_output(f"[agent{index}] {earlier}")
                pending = []
            if leader is None:
                pending[index].append(line)
            elif index == leader:
                self.on_output(f"[agent{index}] {line}")

    def _fail(self, index: int, code: int) -> None:
        self.stop()
        tail = [line for line in self.tails[index] if line.strip()]
        cause = _failure_cause(tail)
        for line in tail[-10:]:
            self.progress(f"[agent{index}] {line}")
        raise RunError(f"agent {index} exited with code {code}: {cause.strip()[:300]}; logs in {self.log_dir}")

    def stop(self, timeout: float = 10.0) -> None:
        """Stop every agent still running (SIGTERM to its process group, SIGKILL after ``timeout``)."""
        running = [p for p in self.processes if p.poll() is None]
        if running:
            self.progress(f"stopping {len(running)} agent(s)")
        for process in running:
            etcd.stop_process(process.pid, timeout=timeout)
        for process in self.processes:
            with contextlib.suppress(subprocess.TimeoutExpired):
                process.wait(timeout=timeout)


_EXCEPTION = re.compile(r"\b(\w*(?:Error|Exception)): ")
_LAUNCHER_EXCEPTIONS = ("ChildFailedError", "SignalException")


def _failure_cause(lines: list[str]) -> str:
    """The most telling line of a failed agent's output: the worker's exception, else torchrun's exit code line."""
    for line in reversed(lines):
        match = _EXCEPTION.search(line)
        if match and match.group(1) not in _LAUNCHER_EXCEPTIONS:
            return line.strip()
    for line in reversed(lines):
        if "error: " in line:
            return line.strip()
    for line in reversed(lines):
        if line.strip().startswith("exitcode"):
            return "worker " + " ".join(line.split())
    return lines[-1].strip() if lines else "no output"


def local_preflight(config: Config) -> list[PreflightResult]:
    """Check what local runs need: a writable state directory, etcd and python-etcd (else c10d), torch, the trainer."""
    results = []
    state_dir = Path(config.cluster.state_dir)
    existing = next((p for p in (state_dir, *state_dir.parents) if p.exists()), None)
    writable = existing is not None and os.access(existing, os.W_OK)
    results.append(
        PreflightResult(
            "state-dir",
            writable,
            f"{state_dir} is {'writable' if writable else 'not writable'}",
            "set cluster.state_dir (or FSDP_SDK_STATE_DIR) to a writable directory",
        )
    )
    rdzv, why = LocalBackend._rdzv_backend(config)
    results.append(
        PreflightResult(
            "rendezvous",
            rdzv == config.job.rdzv_backend,
            f"local runs use the {rdzv} rendezvous" + (f" ({why})" if why else ""),
            "install etcd and python-etcd for the etcd-v2 rendezvous",
            severity="warning",
        )
    )
    for module, what in (("torch", "PyTorch"), ("fsdp_trainer", "the fsdp-trainer package")):
        found = importlib.util.find_spec(module) is not None
        results.append(
            PreflightResult(
                module,
                found,
                f"{what} is {'installed' if found else 'not installed'}",
                f"install {what} to run jobs locally",
                severity="warning",
            )
        )
    return results


def _clear_rendezvous(client_port: int, run_id: str) -> list[str]:
    """Delete the etcd-v2 rendezvous keys of ``run_id`` from the local etcd; returns the keys deleted."""
    from fsdp_sdk.rendezvous import EtcdV2, clear_rendezvous

    return clear_rendezvous(EtcdV2.direct(f"http://{etcd.HOST}:{client_port}", timeout=5), "etcd-v2", run_id)
