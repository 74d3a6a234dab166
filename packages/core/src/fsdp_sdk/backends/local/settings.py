"""The ``local`` settings section: how the local backend runs and watches a job.

Set in YAML (``local: {stall_timeout_s: 120}``), as ``FSDP_SDK_LOCAL__STALL_TIMEOUT_S=120``,
or ``--set local.stall_timeout_s=120``; ``fsdp-sdk config show`` lists them.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from fsdp_sdk.errors import ConfigError

__all__ = ["LocalSettings"]


@dataclass
class LocalSettings:
    """Settings of the ``local`` backend's runs."""

    checkpoint_every_steps: int | None = None
    """Checkpoint period of local runs that do not set trainer.checkpoint.every_steps: none saves about ten
    checkpoints a run (every ceil(steps / 10) steps), so an interrupted run resumes close to where it stopped;
    0 saves only at the end."""
    stall_timeout_s: float = 600.0
    """Seconds a run may go without finishing a step (counted from the trainers' start) before it is declared
    stuck, stopped, and the rank that stopped making progress named."""
    etcd_restart: bool = True
    """Restart the local etcd (same ports, same data) when it dies or stops answering during a run; agents
    wait for it instead of failing."""
    etcd_unhealthy_s: float = field(default=3.0)
    """Seconds etcd may fail its health check during a run before it is restarted."""
    memory_limit_gib: float | None = None
    """Host memory local runs may use, in GiB, for the memory check before a run starts; none: what the machine
    has available now (MemAvailable, capped by the cgroup's memory.max)."""

    def validate(self, config: Any) -> None:
        """Refuse values that cannot work (called when the configuration is resolved)."""
        if self.checkpoint_every_steps is not None and self.checkpoint_every_steps < 0:
            raise ConfigError(
                "local.checkpoint_every_steps",
                f"{self.checkpoint_every_steps} is negative",
                "use 0 (only at the end), a number of steps, or leave it unset",
            )
        if self.stall_timeout_s <= 0:
            raise ConfigError(
                "local.stall_timeout_s", f"{self.stall_timeout_s} is not positive", "use seconds, e.g. 600"
            )
        if self.memory_limit_gib is not None and self.memory_limit_gib <= 0:
            raise ConfigError(
                "local.memory_limit_gib", f"{self.memory_limit_gib} is not positive", "use GiB, e.g. 64, or unset it"
            )
        if self.etcd_unhealthy_s <= 0:
            raise ConfigError(
                "local.etcd_unhealthy_s", f"{self.etcd_unhealthy_s} is not positive", "use seconds, e.g. 3"
            )
