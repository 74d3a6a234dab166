"""What each agent of a local run runs: torchrun, with a rendezvous that outlives an etcd outage.

``python -m fsdp_sdk.backends.local.agent <torchrun arguments>`` runs torchrun (``torch.distributed.run``)
in this process with two additions:

* the ``etcd-v2`` rendezvous handler (torch's own, built through its public ``create_backend`` and
  ``create_handler``, registered under another name that ``--rdzv-backend etcd-v2`` is mapped to) is wrapped so that etcd being down or frozen while the ranks
  train does not end the run: etcd is needed to form the group (and to form it again after a rank
  fails), not to train. torch's agent asks the rendezvous every 0.1 s whether nodes are waiting to
  join; when etcd does not answer, the wrapper answers "none" (and says so once) instead of raising,
  and the end-of-run shutdown tolerates it too;
* torch's agent reports what it does (a rank failed, the workers restart, the rendezvous
  completed) on stdout as ``@fsdp-sdk {json}`` lines, which ``fsdp-sdk run`` reads instead of
  parsing log text.

The parent sets this process's parent-death signal; the ranks set theirs (``rank.py``).
"""

from __future__ import annotations

import json
import logging
import sys
import threading
from typing import Any

#: Prefix of the event lines this agent prints for ``fsdp-sdk run``.
EVENT_PREFIX = "@fsdp-sdk "

_print_lock = threading.Lock()


def emit(event: str, **fields: Any) -> None:
    """Print one event line for the supervising ``fsdp-sdk run``."""
    line = EVENT_PREFIX + json.dumps({"event": event, **fields}, default=str)
    with _print_lock:
        print(line, flush=True)


class _AgentEvents(logging.Handler):
    """Turns torch's agent log records (format string and arguments) into event lines."""

    def emit(self, record: logging.LogRecord) -> None:
        msg, args = record.msg, record.args
        if not isinstance(msg, str) or not isinstance(args, tuple):
            return
        try:
            if msg.startswith("failed (exitcode: %s) local_rank: %s (pid: %s)"):
                emit("worker_failed", exitcode=args[0], local_rank=args[1], pid=args[2])
            elif "attempts left" in msg and "will restart worker group" in msg:
                emit("restart", state=str(args[1]), attempts_left=args[2], max_restarts=args[3])
        except (IndexError, TypeError):
            pass


def _tolerant(inner: Any) -> Any:
    from torch.distributed.elastic.rendezvous import RendezvousHandler

    class TolerantRendezvous(RendezvousHandler):
        """Delegates to torch's handler; while the group trains, etcd errors are reported, not raised."""

        def __init__(self) -> None:
            self._unreachable = False

        def _down(self, doing: str, exc: BaseException) -> None:
            if not self._unreachable:
                emit("etcd_unreachable", doing=doing, error=f"{type(exc).__name__}: {exc}"[:300])
            self._unreachable = True

        def _up(self) -> None:
            if self._unreachable:
                emit("etcd_reachable")
            self._unreachable = False

        def get_backend(self) -> str:
            return inner.get_backend()

        @property
        def use_agent_store(self) -> bool:
            return inner.use_agent_store

        def next_rendezvous(self) -> Any:
            info = inner.next_rendezvous()
            self._up()
            emit("rendezvous", rank=info.rank, world_size=info.world_size)
            return info

        def is_closed(self) -> bool:
            try:
                closed = inner.is_closed()
            except Exception as exc:
                self._down("checking the rendezvous", exc)
                return False
            self._up()
            return closed

        def set_closed(self) -> None:
            try:
                inner.set_closed()
            except Exception as exc:
                self._down("closing the rendezvous", exc)

        def num_nodes_waiting(self) -> int:
            try:
                waiting = inner.num_nodes_waiting()
            except Exception as exc:
                self._down("checking for nodes waiting to join", exc)
                return 0
            self._up()
            return waiting

        def get_run_id(self) -> str:
            return inner.get_run_id()

        def shutdown(self) -> bool:
            try:
                return inner.shutdown()
            except Exception as exc:
                self._down("leaving the rendezvous", exc)
                return False

    return TolerantRendezvous()


#: The name the wrapped handler is registered under; ``--rdzv-backend etcd-v2`` is mapped to it.
TOLERANT_ETCD_V2 = "fsdp-sdk-etcd-v2"


def _create_tolerant_etcd_v2(params: Any) -> Any:
    from torch.distributed.elastic.rendezvous.dynamic_rendezvous import create_handler
    from torch.distributed.elastic.rendezvous.etcd_rendezvous_backend import create_backend

    params.backend = "etcd-v2"  # torch's handler checks that the backend is the one it was asked for
    backend, store = create_backend(params)
    return _tolerant(create_handler(store, backend, params))


def _with_tolerant_rendezvous(argv: list[str]) -> list[str]:
    """``argv`` with ``--rdzv-backend etcd-v2`` replaced by the wrapped handler (registered here)."""
    from torch.distributed.elastic.rendezvous import rendezvous_handler_registry

    rendezvous_handler_registry.register(TOLERANT_ETCD_V2, _create_tolerant_etcd_v2)
    out = list(argv)
    end = out.index("-m") if "-m" in out else len(out)  # what follows -m is the training module's
    for i in range(end - 1):
        if out[i] in ("--rdzv-backend", "--rdzv_backend") and out[i + 1] == "etcd-v2":
            out[i + 1] = TOLERANT_ETCD_V2
    return out


def main(argv: list[str] | None = None) -> None:
    """Run torchrun with ``argv`` (default: this process's arguments)."""
    from torch.distributed import run as torchrun

    args = _with_tolerant_rendezvous(sys.argv[1:] if argv is None else argv)
    handler = _AgentEvents(level=logging.INFO)
    for name in ("torch.distributed.elastic.agent.server.api", "torch.distributed.elastic.multiprocessing.api"):
        logger = logging.getLogger(name)
        logger.addHandler(handler)
        if logger.getEffectiveLevel() > logging.INFO:
            logger.setLevel(logging.INFO)
            logger.propagate = False  # our handler sees INFO; the console keeps torchrun's own level
            console = logging.StreamHandler(sys.stderr)
            console.setLevel(logging.WARNING)
            console.setFormatter(logging.Formatter("[%(levelname)s] %(message)s"))
            logger.addHandler(console)
    torchrun.main(args)


if __name__ == "__main__":
    main()
