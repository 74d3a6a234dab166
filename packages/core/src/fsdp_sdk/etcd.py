"""A local etcd server for torchrun's ``etcd-v2`` rendezvous: start it as a daemon, check it, stop it.

torch's ``etcd-v2`` rendezvous speaks etcd's v2 API, which etcd 3.4 serves only
with ``--enable-v2=true``. The server listens on 127.0.0.1 only, on free ports.
Clearing a run's rendezvous keys is :func:`fsdp_sdk.rendezvous.clear_rendezvous`,
shared with the Kubernetes job layer.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import socket
import subprocess
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from fsdp_sdk.errors import BackendError
from fsdp_sdk.processes import ProcessIdentity, find_processes

__all__ = [
    "EtcdServer",
    "etcd_binary",
    "find_etcd_serving",
    "find_free_port",
    "is_healthy",
    "pid_alive",
    "port_in_use",
    "start_etcd",
    "stop_process",
]

HOST = "127.0.0.1"


@dataclass(frozen=True)
class EtcdServer:
    """A running etcd daemon.

    :param pid: its process id.
    :param client_port: the client port on 127.0.0.1 (what ``--rdzv-endpoint`` names).
    :param peer_port: the peer port on 127.0.0.1.
    :param data_dir: its data directory.
    :param log_path: where its output goes.
    :param started_at: Unix time of the start.
    :param create_time: the process's creation time (with ``pid`` and ``cmdline``: its identity).
    :param cmdline: its arguments.
    """

    pid: int
    client_port: int
    peer_port: int
    data_dir: str
    log_path: str
    started_at: float
    create_time: float = 0.0
    cmdline: tuple[str, ...] = ()

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> EtcdServer:
        """Read what :meth:`to_dict` wrote.

        :raises ValueError: a field is missing or has the wrong type.
        """
        try:
            return cls(
                int(data["pid"]),
                int(data["client_port"]),
                int(data["peer_port"]),
                str(data["data_dir"]),
                str(data["log_path"]),
                float(data["started_at"]),
                float(data.get("create_time", 0.0)),
                tuple(str(a) for a in data.get("cmdline", ())),
            )
        except (KeyError, TypeError, ValueError) as exc:
            raise ValueError(f"not an etcd server record ({exc!r})") from exc

    @property
    def identity(self) -> ProcessIdentity:
        """The process's identity: a recorded pid is signalled only when it still matches."""
        return ProcessIdentity(self.pid, self.create_time, self.cmdline)

    @property
    def endpoint(self) -> str:
        """``127.0.0.1:<client port>``, the torchrun ``--rdzv-endpoint``."""
        return f"{HOST}:{self.client_port}"

    def to_dict(self) -> dict[str, object]:
        """A JSON-ready dict (what the local backend stores in ``state.json``)."""
        data = asdict(self)
        data["cmdline"] = list(self.cmdline)
        return data


def etcd_binary() -> str | None:
    """The ``etcd`` executable on PATH, or ``None``."""
    return shutil.which("etcd")


def find_free_port(host: str = HOST) -> int:
    """A TCP port nobody listens on right now (the OS picks it)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((host, 0))
        return int(sock.getsockname()[1])


def port_in_use(port: int, host: str = HOST) -> bool:
    """Whether something listens on ``host:port`` (binding it fails; connections of a dead server in TIME_WAIT
    do not count, as etcd itself binds with ``SO_REUSEADDR``)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind((host, port))
        except OSError:
            return True
    return False


def find_etcd_serving(data_dir: Path) -> list[ProcessIdentity]:
    """Running etcd processes whose ``--data-dir`` is ``data_dir`` (found by their arguments, not a state file)."""
    return [p for p in find_processes("--data-dir", str(data_dir)) if Path(p.cmdline[0]).name.startswith("etcd")]


def _request(port: int, method: str, path: str, timeout: float) -> tuple[int, bytes]:
    import http.client  # not at import time: the CLI imports this module on every start

    conn = http.client.HTTPConnection(HOST, port, timeout=timeout)
    try:
        conn.request(method, path)
        response = conn.getresponse()
        return response.status, response.read()
    finally:
        conn.close()


def _http_exception() -> type[Exception]:
    import http.client

    return http.client.HTTPException


def is_healthy(client_port: int, timeout: float = 1.0) -> bool:
    """Whether an etcd on ``127.0.0.1:<client_port>`` answers ``/health`` with ``true`` and serves the v2 API."""
    try:
        status, body = _request(client_port, "GET", "/health", timeout)
        if status != 200 or json.loads(body).get("health") != "true":
            return False
        status, _ = _request(client_port, "GET", "/v2/keys/", timeout)
        return status == 200
    except (OSError, ValueError, _http_exception()):
        return False


def pid_alive(pid: int) -> bool:
    """Whether process ``pid`` exists and is not a zombie."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return True  # no /proc (macOS): kill(0) is all we know
    return stat.rsplit(")", 1)[-1].split()[0] != "Z"


def _reap(pid: int) -> None:
    with contextlib.suppress(ChildProcessError):  # not our child: init reaps it
        os.waitpid(pid, os.WNOHANG)


def start_etcd(
    data_dir: Path,
    log_path: Path,
    *,
    binary: str | None = None,
    name: str = "fsdp-sdk",
    timeout: float = 20.0,
    attempts: int = 3,
    ports: tuple[int, int] | None = None,
) -> EtcdServer:
    """Start etcd as a daemon (its own session, outliving this process) on free ports and wait until it is healthy.

    :param data_dir: etcd's ``--data-dir`` (created if missing).
    :param log_path: file that receives etcd's output.
    :param binary: the etcd executable; defaults to the one on PATH.
    :param name: etcd member name.
    :param timeout: seconds to wait for health per attempt.
    :param attempts: tries with fresh ports (another process may grab a port between choice and bind).
    :param ports: (client, peer) ports to use instead of free ones (a restart keeps the endpoint agents know);
        one try only.
    :raises BackendError: etcd is not installed, a given port is taken, or etcd did not become healthy.
    """
    binary = binary or etcd_binary()
    if binary is None:
        raise BackendError(
            "etcd: not found on PATH; install etcd (e.g. apt-get install etcd-server) or use --set job.rdzv_backend=c10d"
        )
    data_dir.mkdir(parents=True, exist_ok=True)
    log_path.parent.mkdir(parents=True, exist_ok=True)
    last_error = ""
    if ports is not None:
        taken = [port for port in ports if port_in_use(port)]
        if taken:
            raise BackendError(
                f"etcd: port {taken[0]} on {HOST} is taken by another process; "
                "stop it, or run 'fsdp-sdk down' then 'fsdp-sdk up' to move etcd to free ports"
            )
        attempts = 1
    for _ in range(attempts):
        client_port, peer_port = ports or (find_free_port(), find_free_port())
        if client_port == peer_port:
            continue
        client_url, peer_url = f"http://{HOST}:{client_port}", f"http://{HOST}:{peer_port}"
        command = [
            binary,
            "--name",
            name,
            "--data-dir",
            str(data_dir),
            "--enable-v2=true",
            "--listen-client-urls",
            client_url,
            "--advertise-client-urls",
            client_url,
            "--listen-peer-urls",
            peer_url,
            "--initial-advertise-peer-urls",
            peer_url,
            "--initial-cluster",
            f"{name}={peer_url}",
        ]
        with open(log_path, "ab") as log:
            process = subprocess.Popen(
                command, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT, start_new_session=True
            )
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if process.poll() is not None:
                break
            if is_healthy(client_port, timeout=0.5):
                identity = ProcessIdentity.of(process.pid)
                return EtcdServer(
                    process.pid,
                    client_port,
                    peer_port,
                    str(data_dir),
                    str(log_path),
                    time.time(),
                    identity.create_time if identity else 0.0,
                    tuple(command),
                )
            time.sleep(0.1)
        if process.poll() is None:
            stop_process(process.pid)
        process.wait()
        last_error = _last_line(log_path)
    raise BackendError(f"etcd: did not become healthy after {attempts} attempts ({last_error}); see {log_path}")


def _last_line(path: Path) -> str:
    try:
        lines = [line for line in path.read_text(errors="replace").splitlines() if line.strip()]
    except OSError:
        return "no log"
    return lines[-1][-300:] if lines else "no output"


def stop_process(pid: int, timeout: float = 10.0) -> bool:
    """Stop a process (and its process group when it leads one): SIGTERM, then SIGKILL after ``timeout``.

    :return: True if it was running.
    """
    if not pid_alive(pid):
        _reap(pid)
        return False
    try:
        target_group = os.getpgid(pid) == pid
    except ProcessLookupError:
        return False
    kill = os.killpg if target_group else os.kill
    for sig, wait in ((signal.SIGTERM, timeout), (signal.SIGKILL, 5.0)):
        try:
            kill(pid, sig)
        except ProcessLookupError:
            break
        deadline = time.monotonic() + wait
        while time.monotonic() < deadline:
            _reap(pid)
            if not pid_alive(pid):
                return True
            time.sleep(0.05)
    return True
