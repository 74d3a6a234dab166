"""The container runtime's part of the kubelet stand-ins: a container's processes live and die together.

On a node a container is a PID namespace and a cgroup. Its command is the namespace's init, and when that
process exits the kernel SIGKILLs every other process in the namespace (pid_namespaces(7)); the kubelet stops a
container (pod deleted, node drained) by asking the runtime to send the stop signal, SIGTERM, to the main process
and, once the grace period has passed, SIGKILL to everything still in it (kubernetes/kubernetes@fbba6b47
``pkg/kubelet/kuberuntime/kuberuntime_container.go`` ``killContainer``: the grace period is the pod's
``deletionGracePeriodSeconds``, else ``terminationGracePeriodSeconds``, default 30, then
``runtimeService.StopContainer(id, gracePeriod)``).

A process group is not that: torchrun starts every worker in a session of its own (pytorch/pytorch@cf30153c,
v2.13.0, ``torch/distributed/elastic/multiprocessing/subprocess_handler/subprocess_handler.py`` ``_popen``:
``start_new_session=True``), so killing the agent's group leaves the trainers running, still in the job's
collectives, as no real pod deletion does.

Run as ``python container_init.py COMMAND...``, this module is the container's init: a child subreaper
(``prctl(PR_SET_CHILD_SUBREAPER)``: every orphan of the container is reparented to it, so the whole container
stays its process tree), which passes SIGTERM and SIGINT to the command, and when the command exits kills
whatever of the container is left, reaps it and exits with the command's status. :func:`kill_container` is the
runtime's SIGKILL after the grace period: the whole tree at once; :func:`container_pids` what a container still
holds.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import signal
import subprocess
import sys

PR_SET_CHILD_SUBREAPER = 36


def _children() -> dict[int, list[int]]:
    """parent pid -> its children's pids, for every process of this machine (``/proc/<pid>/stat``)."""
    tree: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as f:
                stat = f.read()
        except OSError:
            continue  # gone meanwhile
        fields = stat.rpartition(")")[2].split()  # after "pid (comm)": state, ppid, ...
        if fields[0] != "Z":  # a zombie is dead already: its parent only has to reap it
            tree.setdefault(int(fields[1]), []).append(int(entry))
    return tree


def container_pids(init: int) -> set[int]:
    """The live processes of the container whose init is ``init`` (itself included while it lives)."""
    tree = _children()
    found: set[int] = set()
    todo = [init] if os.path.exists(f"/proc/{init}") else []
    while todo:
        pid = todo.pop()
        if pid not in found:
            found.add(pid)
            todo.extend(tree.get(pid, []))
    return {pid for pid in found if _alive(pid)}


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rpartition(")")[2].split()[0] != "Z"
    except OSError:
        return False


def kill_container(init: int) -> set[int]:
    """SIGKILL every process of the container at once, as the runtime does past the grace period; return them.

    The tree is frozen first (SIGSTOP, repeated until no new process appears), so nothing forks out of it
    meanwhile. The init is not killed but let go on (SIGCONT): its command is dead, so it reaps the others (its
    children, or orphans reparented to it) and exits 137 as a killed container does, leaving no zombie to the
    machine's init.
    """
    frozen: set[int] = set()
    while True:
        new = container_pids(init) - frozen
        if not new:
            break
        for pid in new:
            _signal(pid, signal.SIGSTOP)
        frozen |= new
    for pid in frozen - {init}:
        _signal(pid, signal.SIGKILL)
    _signal(init, signal.SIGCONT)
    return frozen


def _signal(pid: int, sig: signal.Signals) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, sig)


def main(argv: list[str]) -> int:
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) != 0:
        raise OSError(ctypes.get_errno(), "prctl(PR_SET_CHILD_SUBREAPER)")
    command = subprocess.Popen(argv)
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda number, _frame: command.send_signal(number))
    code = command.wait()
    # the main process is gone: the namespace goes with it (whatever it left, reparented here, is killed and reaped)
    for pid in container_pids(os.getpid()) - {os.getpid()}:
        _signal(pid, signal.SIGKILL)
    while True:
        try:
            os.waitpid(-1, 0)
        except ChildProcessError:
            break
    return code if code >= 0 else 128 - code


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
