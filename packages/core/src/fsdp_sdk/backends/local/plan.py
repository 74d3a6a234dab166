"""Render a local run: configuration and cluster state in, the run's plan out (pure: no process, file or network).

:func:`render_run` decides everything a local run does before anything starts: one torchrun
agent command per simulated node, the environment they get, the run's directories, the
rendezvous (backend, endpoint, a fresh rendezvous id per launch), the restart budget, and the
trainer's arguments (its output directory and, unless set, a periodic checkpoint). ``run
--dry-run`` prints this plan; :class:`~fsdp_sdk.backends.local.supervisor.Supervisor` acts on it.
"""

from __future__ import annotations

import copy
import math
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from fsdp_sdk.config import trainer_arguments

if TYPE_CHECKING:
    from fsdp_sdk.config import Config

__all__ = ["AGENT_MODULE", "RANK_MODULE", "RDZV_TIMEOUT_S", "ClusterSnapshot", "RunPlan", "render_run"]

#: Seconds agents wait for each other at the rendezvous.
RDZV_TIMEOUT_S = 300
#: Seconds one etcd request of the rendezvous may take (a frozen etcd must not hold an agent for a minute).
ETCD_READ_TIMEOUT_S = 5
#: What each agent runs: torchrun with a rendezvous that outlives an etcd outage (``agent.py``).
AGENT_MODULE = "fsdp_sdk.backends.local.agent"
#: What torchrun starts for each rank: the trainer, dying with its agent (``rank.py``).
RANK_MODULE = "fsdp_sdk.backends.local.rank"
#: The trainer's module.
TRAINER_MODULE = "fsdp_trainer"
#: Environment variable names whose values are secrets (never printed).
SECRET_ENV = frozenset({"HF_TOKEN"})


@dataclass(frozen=True)
class ClusterSnapshot:
    """What the run needs to know about the local cluster (from ``state.json``).

    :param rdzv_backend: ``etcd-v2`` or ``c10d``.
    :param etcd_port: etcd's client port; ``None`` when etcd is not up yet (a dry run) or not used.
    :param nodes: simulated nodes of the cluster (``None``: no cluster yet).
    """

    rdzv_backend: str
    etcd_port: int | None = None
    nodes: int | None = None


@dataclass(frozen=True)
class RunPlan:
    """Everything a local run will do, decided before it starts.

    :param run_id: the run's id (its directory; re-running it continues it).
    :param rdzv_id: this launch's rendezvous id (``<run id>-<random>``: never reused, so never a closed rendezvous).
    :param job_name: the job's name.
    :param nodes: agents (simulated nodes).
    :param nproc_per_node: trainer processes per agent.
    :param rdzv_backend: ``etcd-v2`` or ``c10d``.
    :param rdzv_endpoint: ``127.0.0.1:<port>``.
    :param max_restarts: launches of the run again after a rank fails (``job.max_restarts``; the supervisor's,
        torchrun itself gets 0).
    :param commands: one argument list per agent.
    :param env: variables added to this process's environment for the agents.
    :param run_dir: the run's directory (record, logs).
    :param output_dir: the trainer's output directory.
    :param log_dir: the agents' logs.
    :param checkpoint_dir: the local directory checkpoints go to (``None`` when checkpoints are off or on S3).
    :param trainer: the trainer settings the run passes (with its output directory and checkpoint period).
    :param trainer_args: the extra trainer arguments given on the command line.
    :param total_steps: ``train.steps`` (``None`` when the trainer is not importable to say).
    :param stall_timeout_s: seconds without a finished step before the run is declared stuck.
    """

    run_id: str
    rdzv_id: str
    job_name: str
    nodes: int
    nproc_per_node: int
    rdzv_backend: str
    rdzv_endpoint: str
    max_restarts: int
    commands: tuple[tuple[str, ...], ...]
    env: Mapping[str, str]
    run_dir: Path
    output_dir: Path
    log_dir: Path
    checkpoint_dir: Path | None
    trainer: Mapping[str, Any]
    trainer_args: tuple[str, ...] = ()
    total_steps: int | None = None
    stall_timeout_s: float = 600.0
    notes: tuple[str, ...] = field(default=())
    code: str | None = None
    """What runs instead of the trainer (``--script train.py``...; :mod:`fsdp_sdk.user_code`), or ``None``."""

    @property
    def world_size(self) -> int:
        """Trainer processes in all."""
        return self.nodes * self.nproc_per_node

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready dict; secret environment values are redacted."""
        return {
            "run_id": self.run_id,
            "rdzv_id": self.rdzv_id,
            "job_name": self.job_name,
            "nodes": self.nodes,
            "nproc_per_node": self.nproc_per_node,
            "rdzv_backend": self.rdzv_backend,
            "rdzv_endpoint": self.rdzv_endpoint,
            "max_restarts": self.max_restarts,
            "commands": [list(c) for c in self.commands],
            "env": {k: ("**********" if k in SECRET_ENV else v) for k, v in self.env.items()},
            "run_dir": str(self.run_dir),
            "output_dir": str(self.output_dir),
            "log_dir": str(self.log_dir),
            "checkpoint_dir": str(self.checkpoint_dir) if self.checkpoint_dir else None,
            "total_steps": self.total_steps,
            "stall_timeout_s": self.stall_timeout_s,
            "notes": list(self.notes),
            "code": self.code,
        }


def _trainer_config(trainer: Mapping[str, Any]) -> Any | None:
    """The trainer's resolved configuration (its defaults filled), or ``None`` without the trainer package."""
    try:
        from fsdp_trainer.config import TrainerConfig
    except ImportError:
        return None
    try:
        return TrainerConfig.from_dict(copy.deepcopy(dict(trainer)))
    except Exception:  # the trainer refuses it: resolving reported that already where it matters
        return None


def checkpoint_period(total_steps: int, configured: int | None) -> int:
    """The checkpoint period a local run uses when the trainer's is not set: ``configured``, or about ten a run."""
    if configured is not None:
        return configured
    return max(1, math.ceil(total_steps / 10))


def render_run(
    config: Config,
    *,
    run_id: str,
    rdzv_id: str,
    root: Path,
    cluster: ClusterSnapshot,
    trainer_args: Sequence[str] = (),
    c10d_port: int | None = None,
    base_env: Mapping[str, str] | None = None,
    cpu_count: int = 1,
    python: str = sys.executable,
) -> RunPlan:
    """The plan of one local run.

    :param config: the resolved configuration (``trainer`` holds the trainer settings; the ``local`` section the
        checkpoint period and stall timeout).
    :param run_id: the run's id.
    :param rdzv_id: a fresh rendezvous id for this launch.
    :param root: ``<cluster.state_dir>/local``.
    :param cluster: the cluster's state.
    :param trainer_args: extra trainer arguments.
    :param c10d_port: the port of the c10d rendezvous (c10d only; chosen by the caller).
    :param base_env: the environment the agents would inherit (to leave ``OMP_NUM_THREADS`` alone when set).
    :param cpu_count: CPUs of this machine (threads per trainer process).
    :param python: the interpreter that runs the agents.
    """
    from fsdp_sdk.backends.local.settings import LocalSettings
    from fsdp_sdk.user_code import active

    local = config.sections.get("local") or LocalSettings()
    nodes, nproc = config.job.num_workers, config.job.nproc_per_node or 1
    run_dir = root / "runs" / run_id
    code = active(config)
    trainer: dict[str, Any] = copy.deepcopy(dict(config.trainer))
    train = trainer.setdefault("train", {})
    output_dir = Path(train.get("output_dir") or run_dir)
    train["output_dir"] = str(output_dir)
    notes: list[str] = []

    resolved = _trainer_config(trainer) if code is None else None
    total_steps = resolved.train.steps if resolved is not None else _int_or_none(train.get("steps"))
    checkpoint = trainer.get("checkpoint", {})
    checkpoint_dir: Path | None = None
    if resolved is not None and resolved.checkpoint.enabled:
        if not (resolved.checkpoint.dir or "").startswith("s3://"):  # an S3 prefix has no local disk to check
            checkpoint_dir = Path(resolved.checkpoint.dir or output_dir / "checkpoints")
        if "every_steps" not in checkpoint:
            every = checkpoint_period(resolved.train.steps, local.checkpoint_every_steps)
            trainer.setdefault("checkpoint", {})["every_steps"] = every
            if every:
                notes.append(f"checkpoint every {every} steps (local.checkpoint_every_steps; 0: only at the end)")

    if cluster.rdzv_backend == "etcd-v2":
        endpoint = f"127.0.0.1:{cluster.etcd_port}" if cluster.etcd_port else "127.0.0.1:<etcd port>"
        rdzv_conf = f"timeout={RDZV_TIMEOUT_S},read_timeout={ETCD_READ_TIMEOUT_S}"
    else:
        endpoint = f"127.0.0.1:{c10d_port or '<free port>'}"
        rdzv_conf = f"join_timeout={RDZV_TIMEOUT_S}"

    command = (
        python,
        "-m",
        AGENT_MODULE,
        "--nnodes",
        str(nodes),
        "--nproc-per-node",
        str(nproc),
        "--rdzv-backend",
        cluster.rdzv_backend,
        "--rdzv-endpoint",
        endpoint,
        "--rdzv-id",
        rdzv_id,
        "--rdzv-conf",
        rdzv_conf,
        "--max-restarts",
        "0",  # restarts are the supervisor's: all agents launched again together (supervisor.py)
        "--local-addr",
        "127.0.0.1",
        "-m",
        RANK_MODULE,
        *_what_runs(config, trainer, trainer_args),
    )

    env: dict[str, str] = {"PYTHONUNBUFFERED": "1"}  # stream the leader's lines as they come
    if "OMP_NUM_THREADS" not in (base_env or {}):
        env["OMP_NUM_THREADS"] = str(max(1, cpu_count // max(nodes * nproc, 1)))  # torchrun would force 1 and warn
    if code is not None:  # where your code writes (fsdp_sdk.code_entry); the trainer gets them as options
        checkpoint_dir = output_dir / "checkpoints"
        env.update({"FSDP_SDK_OUTPUT_DIR": str(output_dir), "FSDP_SDK_CHECKPOINT_DIR": str(checkpoint_dir)})
    env.update(config.job.env)
    if config.job.hf_token:
        env["HF_TOKEN"] = config.job.hf_token.get_secret_value()

    return RunPlan(
        run_id=run_id,
        rdzv_id=rdzv_id,
        job_name=config.job.name,
        nodes=nodes,
        nproc_per_node=nproc,
        rdzv_backend=cluster.rdzv_backend,
        rdzv_endpoint=endpoint,
        max_restarts=config.job.max_restarts,
        commands=tuple(command for _ in range(nodes)),
        env=env,
        run_dir=run_dir,
        output_dir=output_dir,
        log_dir=run_dir / "logs",
        checkpoint_dir=checkpoint_dir,
        trainer=trainer,
        trainer_args=tuple(trainer_args),
        total_steps=total_steps,
        stall_timeout_s=local.stall_timeout_s,
        notes=tuple(notes),
        code=code.what() if code is not None else None,
    )


def _what_runs(config: Config, trainer: Mapping[str, Any], trainer_args: Sequence[str]) -> list[str]:
    """The module each rank runs and its arguments: the trainer with its settings, or your code in place."""
    from fsdp_sdk.user_code import active, entry_arguments

    code = active(config)
    if code is not None:
        return ["fsdp_sdk.code_entry", *entry_arguments(code, in_image=False)]
    return [TRAINER_MODULE, *trainer_arguments(trainer), *trainer_args]


def _int_or_none(value: Any) -> int | None:
    try:
        return int(value)
    except (TypeError, ValueError):
        return None
