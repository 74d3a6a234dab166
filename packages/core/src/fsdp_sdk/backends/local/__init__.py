"""The ``local`` backend: one machine, simulated nodes, a real etcd rendezvous.

``up`` starts etcd as a daemon on free 127.0.0.1 ports and records it in the
state directory::

    <cluster.state_dir>/local/
        state.json        # etcd (pid, creation time, command line, ports), rendezvous backend, simulated nodes
        .lock             # held while a command changes the state (up, down, scale, a run starting)
        etcd/             # etcd --data-dir
        etcd.log          # etcd's output
        runs/<run id>/    # one directory per run: run.json, logs/agent-<i>.log, the trainer's outputs
                          # (summary.json, metrics.jsonl, checkpoints/) unless train.output_dir is set

A run is rendered, then acted on: :func:`~fsdp_sdk.backends.local.plan.render_run` turns the
configuration and the cluster's state into a :class:`~fsdp_sdk.backends.local.plan.RunPlan`
(commands, environment, directories, rendezvous; pure), and
:class:`~fsdp_sdk.backends.local.supervisor.Supervisor` starts the agents of that plan,
follows them and stops every process of the run on any failure. Modules:

* ``backend``: :class:`LocalBackend` (plan/apply/down/scale/status and the run records);
* ``runner``: the local job runner (:mod:`fsdp_sdk.runner`'s shape: dryrun, schedule, wait; status, logs
  and stop by run id from any process);
* ``memory``: the memory check before a run, and the OOM counters that tell an OOM kill;
* ``state``: ``state.json`` (atomic writes, repair of a damaged file) and the lock;
* ``plan``: the run's plan (render);
* ``supervisor``: start, follow and stop the agents (act); ``cause``: the root cause of a failure;
* ``records``: ``run.json`` of each run, the runs ``fsdp-sdk runs`` lists;
* ``agent`` and ``rank``: what the agents and the trainer ranks run (torchrun with a rendezvous
  that outlives an etcd outage; each process dies with its parent);
* ``settings``: the ``local`` settings section.

Importing this package imports only ``settings``; the backend is imported when first used.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from fsdp_sdk.backends.local.settings import LocalSettings

if TYPE_CHECKING:
    from fsdp_sdk.backends.local.backend import LocalBackend, local_preflight

__all__ = ["LocalBackend", "LocalSettings", "local_preflight"]


def __getattr__(name: str) -> Any:
    if name in ("LocalBackend", "local_preflight"):
        from fsdp_sdk.backends.local import backend

        return getattr(backend, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
