""":class:`LocalBackend`: the local cluster (an etcd on 127.0.0.1) and runs on it (see the package docstring).

``up`` starts etcd as a daemon on free ports; ``run`` starts it too when needed and leaves it
running; ``down`` stops it (refusing while a run is going on) and removes everything but
``runs/``; a run that started etcd itself and then fails or is interrupted stops it again (unless
another run uses it). A pid in ``state.json`` is signalled only when the process still has the recorded
creation time and command line; a damaged state file, or an etcd that serves the data
directory without being recorded, is repaired by ``up`` and ``down``.

When ``etcd`` is not on PATH, or the ``python-etcd`` package that torch's etcd-v2 rendezvous
imports is missing, or ``job.rdzv_backend`` is ``c10d``, runs use torch's c10d rendezvous (a
TCPStore hosted by the first agent) on a fresh port instead, and ``up`` says so.
"""

from __future__ import annotations

import contextlib
import copy
import importlib.util
import json
import os
import secrets
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from fsdp_sdk import etcd
from fsdp_sdk.backends.base import ClusterBackend, ClusterStatus, Plan, ProgressCallback, no_progress
from fsdp_sdk.backends.local.plan import ClusterSnapshot, RunPlan, render_run
from fsdp_sdk.backends.local.records import RunLock, RunRecord, list_runs, read_record, require_existing
from fsdp_sdk.backends.local.state import LocalState, StateDamaged
from fsdp_sdk.errors import BackendError, ConfigError
from fsdp_sdk.preflight import PreflightResult
from fsdp_sdk.processes import stop_identified
from fsdp_sdk.runs import RunEvent

if TYPE_CHECKING:
    from fsdp_sdk.config import Config
    from fsdp_sdk.contracts import ResolvedConfig

__all__ = ["LocalBackend", "StateDamaged", "local_preflight", "new_run_id"]


def new_run_id(job_name: str) -> str:
    """A fresh, readable run id: ``<job name>-<yyyymmdd-hhmmss>-<4 hex>``."""
    prefix = "".join(c if c.isalnum() or c in "_.-" else "-" for c in job_name)[:30].strip("-.") or "run"
    return f"{prefix}-{time.strftime('%Y%m%d-%H%M%S')}-{secrets.token_hex(2)}"


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

    def state(self, config: Config) -> LocalState:
        """The state directory of ``config``'s local cluster."""
        return LocalState(self.root(config))

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

    @staticmethod
    def _server(state: dict[str, Any] | None) -> etcd.EtcdServer | None:
        data = (state or {}).get("etcd")
        if not data:
            return None
        try:
            return etcd.EtcdServer.from_dict(data)
        except ValueError:
            return None

    def _stop_etcd(self, local: LocalState, state: dict[str, Any] | None, progress: ProgressCallback) -> None:
        """Stop the recorded etcd when it is still that process, and any other etcd serving our data directory."""
        server = self._server(state)
        if server is not None:
            mismatch = server.identity.mismatch()
            if mismatch is None:
                stop_identified(server.identity)
                progress(f"stopped etcd (pid {server.pid})")
            elif "no process" not in mismatch:
                progress(f"state.json names etcd pid {server.pid}, but {mismatch}: left alone")
        for orphan in etcd.find_etcd_serving(local.etcd_dir):
            if server is not None and orphan.pid == server.pid and server.identity.is_running():
                continue
            stop_identified(orphan)
            progress(f"stopped etcd (pid {orphan.pid}) serving {local.etcd_dir}, which state.json did not record")

    # ------------------------------------------------------------------ ClusterBackend

    def plan(self, resolved: ResolvedConfig) -> Plan:
        return self._plan(resolved.config)

    def _plan(self, config: Config) -> Plan:
        """The plan of the simulated cluster: it needs the configuration alone (no instance type)."""
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
        details = {"rdzv_backend": rdzv, "rdzv_reason": why, "root": str(root), "nodes": max(config.cluster.nodes, 1)}
        return Plan(backend=self.name, cluster=config.cluster.name, steps=steps, hourly_cost_usd=0.0, details=details)

    def apply(self, config: Config, plan: Plan, *, progress: ProgressCallback = no_progress) -> ClusterStatus:
        local = LocalState(Path(plan.details["root"]))
        with local.locked(progress=progress):
            current = self.status(config)
            if current.ready:
                progress(f"local cluster already up ({current.endpoint or 'c10d rendezvous'})")
                return current
            state, damage = local.read_or_none()
            if damage is not None:
                progress(f"{local.path} is damaged ({damage.problem}): repairing it")
            elif current.state == "degraded":
                progress("local state found but etcd is not running; starting it again")
            self._stop_etcd(local, state, progress)
            rdzv, why = plan.details["rdzv_backend"], plan.details["rdzv_reason"]
            new: dict[str, Any] = {
                "cluster": plan.cluster,
                "rdzv_backend": rdzv,
                "nodes": int(plan.details["nodes"]),
                "etcd": None,
            }
            if rdzv == "etcd-v2":
                progress("starting etcd on 127.0.0.1 (free ports)")
                server = etcd.start_etcd(local.etcd_dir, local.etcd_log, name=plan.cluster)
                new["etcd"] = server.to_dict()
                progress(f"etcd is healthy at {server.endpoint} (pid {server.pid}, log {local.etcd_log})")
            else:
                local.root.mkdir(parents=True, exist_ok=True)
                progress(
                    f"{why}: local runs will use torch's c10d rendezvous instead of etcd"
                    if why
                    else "job.rdzv_backend is c10d: no etcd needed"
                )
            local.write(new)
            return self.status(config)

    def down(self, config: Config, *, dry_run: bool = False, progress: ProgressCallback = no_progress) -> ClusterStatus:
        local = self.state(config)
        current = self.status(config)
        orphans = etcd.find_etcd_serving(local.etcd_dir) if current.state == "absent" else []
        if dry_run or (current.state == "absent" and not orphans):
            if current.state == "absent" and not dry_run:
                progress("no local cluster to stop")
            return current
        with local.locked(progress=progress):
            running = [r for r in list_runs(local.runs_dir) if r.state == "running"]
            if running:
                names = ", ".join(r.run_id for r in running)
                raise BackendError(
                    f"local: {len(running)} run(s) in progress ({names}); stopping etcd now would end them. "
                    "Wait for them to finish or stop them (Ctrl-C), then run 'fsdp-sdk down' again"
                )
            state, damage = local.read_or_none()
            if damage is not None:
                progress(f"{local.path} is damaged ({damage.problem}): removing it")
            self._stop_etcd(local, state, progress)
            local.remove()
            progress(f"removed the local state in {local.root} (run outputs in {local.runs_dir} are kept)")
        return self.status(config)

    def scale(
        self, config: Config, nodes: int, *, dry_run: bool = False, progress: ProgressCallback = no_progress
    ) -> ClusterStatus:
        # Simulated nodes have no node-group bounds: any number from 1 up.
        if nodes < 1:
            raise ConfigError("nodes", f"{nodes} simulated nodes", "the local backend needs at least 1 node")
        local = self.state(config)
        with contextlib.nullcontext() if dry_run else local.locked(progress=progress):
            state = local.read()
            if state is None:
                raise BackendError("local: no local cluster to scale; run 'fsdp-sdk up --backend local' first")
            if not dry_run:
                state["nodes"] = nodes
                local.write(state)
                progress(f"local cluster now simulates {nodes} nodes")
        return self.status(config)

    def status(self, config: Config) -> ClusterStatus:
        local = self.state(config)
        state, damage = local.read_or_none()
        if damage is not None:
            details: dict[str, Any] = {
                "state_file": str(local.path),
                "problem": damage.problem,
                "fix": "fsdp-sdk down (or up) repairs it",
            }
            return ClusterStatus(self.name, config.cluster.name, "degraded", 0, None, details)
        if state is None:
            return ClusterStatus(self.name, config.cluster.name, "absent")
        details = {
            "state_file": str(local.path),
            "rdzv_backend": state.get("rdzv_backend"),
            "runs_dir": str(local.runs_dir),
        }
        nodes = int(state.get("nodes", 1))
        cluster = state.get("cluster", config.cluster.name)
        if not state.get("etcd"):
            return ClusterStatus(self.name, cluster, "ready", nodes, None, details)
        server = self._server(state)
        if server is None:
            details["problem"] = "the etcd record in state.json is damaged"
            return ClusterStatus(self.name, cluster, "degraded", nodes, None, details)
        details.update(etcd_pid=server.pid, etcd_log=server.log_path)
        mismatch = server.identity.mismatch() if server.create_time else None
        if mismatch is not None:
            details["problem"] = f"etcd is not running ({mismatch})"
        healthy = mismatch is None and etcd.pid_alive(server.pid) and etcd.is_healthy(server.client_port)
        return ClusterStatus(self.name, cluster, "ready" if healthy else "degraded", nodes, server.endpoint, details)

    def kubeconfig(self, config: Config) -> Path | None:
        return None

    # ------------------------------------------------------------------ runs

    def runs(self, config: Config) -> list[RunRecord]:
        """Every local run with a record, oldest first (see :mod:`~fsdp_sdk.backends.local.records`)."""
        return list_runs(self.state(config).runs_dir)

    def _resumed_config(self, config: Config, run_id: str, *, required: bool = True) -> Config:
        """``config`` continuing run ``run_id``: its recorded settings under what this command sets
        (:mod:`~fsdp_sdk.backends.local.continuation`); ``config`` itself when ``run_id`` has no record and is not
        ``required``.

        :raises ConfigError: ``required`` and there is no such run; or the settings would lose the run's progress.
        """
        from fsdp_sdk.backends.local.continuation import continued_config, refuse_lost_progress

        runs_dir = self.state(config).runs_dir
        record = require_existing(runs_dir, run_id) if required else read_record(runs_dir / run_id)
        if record is None:
            return config
        new = continued_config(config, record)
        refuse_lost_progress(record, new, runs_dir / run_id)
        return new

    def render(
        self,
        config: Config,
        *,
        run_id: str,
        state: dict[str, Any] | None,
        trainer_args: Sequence[str] = (),
        rdzv_id: str | None = None,
    ) -> RunPlan:
        """The plan of a run of ``config`` on the cluster ``state`` describes (pure but for choosing a c10d port).

        :param rdzv_id: the launch's rendezvous id (default: a fresh one, ``<run id>-<random>``).
        """
        rdzv = (state or {}).get("rdzv_backend") or self._rdzv_backend(config)[0]
        server = self._server(state)
        snapshot = ClusterSnapshot(rdzv, server.client_port if server else None, (state or {}).get("nodes"))
        return render_run(
            config,
            run_id=run_id,
            rdzv_id=rdzv_id or f"{run_id}-{secrets.token_hex(4)}",
            root=self.root(config),
            cluster=snapshot,
            trainer_args=trainer_args,
            c10d_port=etcd.find_free_port() if rdzv == "c10d" and state is not None else None,
            base_env=os.environ,
            cpu_count=os.cpu_count() or 1,
        )

    def _stop_what_the_run_started(self, config: Config, progress: ProgressCallback) -> None:
        """After a failed or interrupted run that brought the cluster up itself: stop etcd unless another run uses it."""
        with contextlib.suppress(BackendError):
            self.down(config, progress=lambda line: None)
            progress("stopped the local etcd this run had started (the next run starts it again)")

    def _register(
        self,
        config: Config,
        local: LocalState,
        run_id: str,
        run_lock: RunLock,
        trainer_args: Sequence[str],
        progress: ProgressCallback,
        draft: RunPlan | None = None,
    ) -> RunPlan:
        """Under the state lock: bring the cluster up when needed, take the run's lock, and return the final plan:
        ``draft`` (the dry run's) as it is when it was made for the cluster as it is now, else rendered again for
        it (the cluster was started here: its etcd port is known only now) with the draft's rendezvous id."""
        with local.locked(progress=progress):
            if not self.status(config).ready:
                progress(
                    "the local cluster is not up: starting it now (it stays up for later runs; 'fsdp-sdk down' stops it)"
                )
                bigger = _with_nodes(config, config.job.num_workers)
                self.apply(bigger, self._plan(bigger), progress=progress)
            state = local.read() or {}
            nodes = config.job.num_workers
            if nodes > int(state.get("nodes", nodes)):
                raise ConfigError(
                    "job.num_workers",
                    f"{nodes} workers but the local cluster simulates {state['nodes']} nodes",
                    f"run 'fsdp-sdk scale {nodes} --backend local' or use fewer workers",
                )
            self._forget_lost_runs(local, state)
            run_lock.acquire(run_id)
            if draft is not None and self._made_for(draft, state):
                return draft
            rdzv_id = draft.rdzv_id if draft is not None else None
            return self.render(config, run_id=run_id, state=state, trainer_args=trainer_args, rdzv_id=rdzv_id)

    def _made_for(self, draft: RunPlan, state: dict[str, Any]) -> bool:
        """Whether ``draft`` was rendered for the cluster ``state`` describes (its rendezvous backend and port)."""
        if "<" in draft.rdzv_endpoint or draft.rdzv_backend != state.get("rdzv_backend"):
            return False  # rendered before the cluster was up: its port was unknown
        server = self._server(state)
        return draft.rdzv_backend != "etcd-v2" or (
            server is not None and draft.rdzv_endpoint == f"127.0.0.1:{server.client_port}"
        )

    def _forget_lost_runs(self, local: LocalState, state: dict[str, Any]) -> None:
        """Clear the rendezvous keys of runs whose ``fsdp-sdk`` process died without cleaning up."""
        server = self._server(state)
        for record in list_runs(local.runs_dir):
            if record.state != "lost":
                continue
            if server is not None:
                for rdzv_id in record.settings.get("rdzv_ids", []):
                    with contextlib.suppress(BackendError, ValueError):
                        _clear_rendezvous(server.client_port, rdzv_id)
            record.ended_at = record.ended_at or time.time()
            with contextlib.suppress(OSError):
                record.save()

    def _start_record(self, config: Config, plan: RunPlan) -> RunRecord:
        previous = None
        with contextlib.suppress(OSError, ValueError):
            previous = json.loads((plan.run_dir / "run.json").read_text())
        from fsdp_sdk.backends.local.continuation import checkpoint_location, recorded_settings

        previous = previous if isinstance(previous, dict) else {}
        attempts = int(previous.get("attempts", 0)) + 1
        before = previous.get("settings") or {}
        rdzv_ids = [*before.get("rdzv_ids", []), plan.rdzv_id][-20:]
        here = checkpoint_location(plan.trainer, plan.run_dir)
        locations = [*dict.fromkeys([*before.get("checkpoint_locations", []), *([here] if here else [])])]
        now = time.time()
        record = RunRecord(
            run_id=plan.run_id,
            state="running",
            job_name=plan.job_name,
            run_dir=str(plan.run_dir),
            output_dir=str(plan.output_dir),
            nodes=plan.nodes,
            nproc_per_node=plan.nproc_per_node,
            total_steps=plan.total_steps,
            started_at=now,
            run_started_at=float(previous.get("run_started_at") or previous.get("started_at") or now),
            earlier_s=_earlier_s(previous),
            segments=_segments(previous),
            attempts=attempts,
            settings={
                **recorded_settings(config, plan.run_dir),
                "num_workers": plan.nodes,
                "nproc_per_node": plan.nproc_per_node,
                "rdzv_ids": rdzv_ids,
                "checkpoint_locations": locations[-10:],
            },
        )
        record.save()
        return record

    def _guard(self, config: Config, local: LocalState, plan: RunPlan, events: Callable[[RunEvent], None]) -> Any:
        from fsdp_sdk.backends.local.settings import LocalSettings
        from fsdp_sdk.backends.local.supervisor import EtcdGuard

        settings = config.sections.get("local") or LocalSettings()
        if plan.rdzv_backend != "etcd-v2" or not settings.etcd_restart:
            return None

        def read_server() -> etcd.EtcdServer | None:
            state, _ = local.read_or_none()
            return self._server(state)

        def restart(dead: etcd.EtcdServer) -> etcd.EtcdServer:
            with local.locked(timeout=30):
                state = local.read() or {}
                current = self._server(state)
                if current is not None and current.pid != dead.pid and etcd.is_healthy(current.client_port):
                    return current  # another run restarted it already
                stop_identified(dead.identity, timeout=2)
                server = etcd.start_etcd(
                    Path(dead.data_dir),
                    Path(dead.log_path),
                    name=state.get("cluster", config.cluster.name),
                    ports=(dead.client_port, dead.peer_port),
                )
                state["etcd"] = server.to_dict()
                local.write(state)
                return server

        return EtcdGuard(
            read_server,
            restart,
            unhealthy_s=settings.etcd_unhealthy_s,
            report=lambda line: events(RunEvent("warning", line, None, plan.total_steps)),
        )

    def _clear_keys(self, local: LocalState, plan: RunPlan) -> None:
        if plan.rdzv_backend != "etcd-v2":
            return
        state, _ = local.read_or_none()
        server = self._server(state)
        if server is not None and etcd.is_healthy(server.client_port, timeout=1.0):
            with contextlib.suppress(BackendError):
                _clear_rendezvous(server.client_port, plan.rdzv_id)


class _EventRouter:
    """Sends run events to ``on_event`` and the leader's lines (steps included, as printed) to ``on_output``."""

    def __init__(self, on_event: Callable[[RunEvent], None] | None, on_output: Callable[[str], None] | None) -> None:
        self.on_event, self.on_output = on_event, on_output

    def __call__(self, event: RunEvent) -> None:
        if self.on_event is not None:
            self.on_event(event)
        if self.on_output is not None and event.kind in ("output", "step"):
            self.on_output(event.message)


def _earlier_s(previous: dict[str, Any]) -> float:
    """Seconds the run's segments before this one ran (the previous record's, and the ones before it)."""
    earlier = float(previous.get("earlier_s") or 0.0)
    started, ended = previous.get("started_at"), previous.get("ended_at")
    if isinstance(started, (int, float)) and isinstance(ended, (int, float)) and ended >= started:
        earlier += ended - started
    return earlier


def _segments(previous: dict[str, Any]) -> list[list[float]]:
    """``[start, end]`` of the run's segments before this one (the previous record's, and the ones before it)."""
    segments = [list(s) for s in previous.get("segments") or []]
    started, ended = previous.get("started_at"), previous.get("ended_at")
    if isinstance(started, (int, float)) and isinstance(ended, (int, float)) and ended >= started:
        segments.append([float(started), float(ended)])
    return segments


def _with_nodes(config: Config, nodes: int) -> Config:
    new = copy.deepcopy(config)
    new.cluster.nodes = max(new.cluster.nodes, nodes)
    return new


#: Settings that do nothing on the local backend, and why (a one-line warning each where one is set).
IGNORED_LOCALLY: dict[str, str] = {
    "job.command": "local runs start the trainer (python -m fsdp_trainer) themselves",
    "cluster.idle_scale_to_zero_minutes": "this machine has no GPU nodes to scale to zero",
    "cluster.capacity_reservation_id": "no EC2 capacity is used",
    "job.shared_storage_claim": "local runs write to this machine's disk",
}


def ignored_settings(config: Config) -> list[PreflightResult]:
    """A warning for each setting given (in a file, the environment or on the command line) that the local backend
    does not use, naming it as given and saying why."""
    results = []
    for path, why in IGNORED_LOCALLY.items():
        origin = config.origins.get(path)
        if origin is None:
            continue
        given = origin.name if origin.name == path else f"{origin.name} ({path})"
        results.append(
            PreflightResult(
                given,
                False,
                f"given ({origin.source}) but does nothing on the local backend: {why}",
                "leave it out, or use it with a cluster backend (--backend eksctl|terraform)",
                severity="warning",
            )
        )
    return results


def local_preflight(config: Config) -> list[PreflightResult]:
    """Check what local runs need: a writable state directory, etcd and python-etcd (else c10d), torch, the trainer;
    and warn of settings given that do nothing here (:func:`ignored_settings`)."""
    results = ignored_settings(config)
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


def _clear_rendezvous(client_port: int, rdzv_id: str) -> list[str]:
    """Delete the etcd-v2 rendezvous keys of ``rdzv_id`` from the local etcd; returns the keys deleted."""
    from fsdp_sdk.rendezvous import EtcdV2, clear_rendezvous

    return clear_rendezvous(EtcdV2.direct(f"http://{etcd.HOST}:{client_port}", timeout=5), "etcd-v2", rdzv_id)
