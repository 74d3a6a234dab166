"""Recording fake executables for tests: a script that appends its argv (and stdin when a password is piped) to a log."""

from __future__ import annotations

import json
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar

import pytest

if TYPE_CHECKING:
    from fsdp_sdk.config import Config
    from fsdp_sdk.plugins import Plugins
    from fsdp_sdk.resolved import Resolved

    from .fake_apiserver import FakeApiServer

_SCRIPT = """#!{python}
import json, os, sys
stdin = sys.stdin.read() if "--password-stdin" in sys.argv else None
with open({log!r}, "a") as log:
    log.write(json.dumps({{"tool": os.path.basename(sys.argv[0]), "argv": sys.argv[1:], "stdin": stdin}}) + "\\n")
code = int(os.environ.get("FAKE_TOOL_EXIT", "0"))
if code:
    print(f"error: {{os.path.basename(sys.argv[0])}} {{sys.argv[1] if len(sys.argv) > 1 else ''}} failed here", file=sys.stderr)
sys.exit(code)
"""


def install_fake_tools(bin_dir: Path, log: Path, *names: str) -> Path:
    """Write recording executables called ``names`` into ``bin_dir``; return ``bin_dir``."""
    bin_dir.mkdir(parents=True, exist_ok=True)
    for name in names:
        path = bin_dir / name
        path.write_text(_SCRIPT.format(python=sys.executable, log=str(log)))
        path.chmod(0o755)
    return bin_dir


def recorded(log: Path) -> list[dict]:
    """The calls recorded so far: ``{"tool", "argv", "stdin"}`` each."""
    if not log.exists():
        return []
    return [json.loads(line) for line in log.read_text().splitlines()]


def cli(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    """Run ``fsdp-sdk ARGS`` in this process; returns (exit code, stdout, stderr)."""
    from fsdp_sdk.cli import main

    with pytest.raises(SystemExit) as exit_info:
        main(list(args))
    out, err = capsys.readouterr()
    return int(exit_info.value.code or 0), out, err


class Lines:
    """Lines a follower writes from its own thread, with a wait for the ones a test expects (no sleeping)."""

    def __init__(self) -> None:
        self.items: list[str] = []
        self._changed = threading.Condition()

    def __call__(self, line: str) -> None:
        with self._changed:
            self.items.append(line)
            self._changed.notify_all()

    def wait_for(self, predicate: Callable[[list[str]], bool], timeout: float = 15) -> list[str]:
        """Block until ``predicate(lines)`` holds; fail the test after ``timeout`` seconds."""
        with self._changed:
            if not self._changed.wait_for(lambda: predicate(self.items), timeout=timeout):
                raise AssertionError(f"the expected lines did not come within {timeout}s; got {self.items}")
            return list(self.items)


def kubernetes_plugins(kubeconfig: Path) -> Plugins:
    """The built-in plugins plus a backend ``fake-kube`` whose cluster is the API server of ``kubeconfig``.

    With ``cluster.backend=fake-kube``, :meth:`fsdp_sdk.Client.run` goes through the Kubernetes job layer.
    """
    from fsdp_sdk.backends.base import ClusterBackend, ClusterStatus, Plan
    from fsdp_sdk.hookspecs import hookimpl
    from fsdp_sdk.plugins import build_plugins

    class KubeBackend(ClusterBackend):
        """A backend whose cluster is the loopback API server."""

        name: ClassVar[str] = "fake-kube"

        def plan(self, resolved: Resolved) -> Plan:
            return Plan(backend=self.name, cluster=resolved.config.cluster.name, steps=[])

        def apply(self, config: Config, plan: Plan, *, progress: Any = None) -> ClusterStatus:
            return self.status(config)

        def down(self, config: Config, *, dry_run: bool = False, progress: Any = None) -> ClusterStatus:
            return self.status(config)

        def scale(self, config: Config, nodes: int, *, dry_run: bool = False, progress: Any = None) -> ClusterStatus:
            return self.status(config)

        def status(self, config: Config) -> ClusterStatus:
            return ClusterStatus(backend=self.name, cluster=config.cluster.name, state="ready", nodes=2)

        def kubeconfig(self, config: Config) -> Path:
            return kubeconfig

    class Register:
        @hookimpl
        def fsdp_sdk_register_backends(self, registry: Any) -> None:
            registry.add(KubeBackend)

    plugins = build_plugins(autoload=False)
    plugins.register(Register(), name="fake-kube")
    return plugins


#: What the trainer's rank 0 logs at start (fsdp_trainer.logs format); it marks the leader pod.
LEADER_LINE = "[rank0] 12:00:00 INFO fsdp_trainer.distributed: master_addr=fsdp-worker-0 host=fsdp-worker-0.fsdp"


def play_two_worker_job(apiserver: FakeApiServer, name: str = "fsdp", run_id: str | None = None) -> None:
    """Play the Training Operator and the trainer for the PyTorchJob ``name`` (of ``run_id``, when given): two
    running pods, the leader's log, then -- once the client follows that log (its ``follow=true`` GET has come) --
    the trainer's last step and summary and the job Succeeded. Run it in a thread beside the client.

    Each step waits for what it depends on (the job's submission, the follow request), never for a time; if one does
    not come within 20 s, the job is marked Failed with the reason, so the client's run fails naming it.
    """
    started = time.monotonic()

    def submitted() -> bool:
        job = apiserver.get("kubeflow.org/v1", "PyTorchJob", name)
        return job is not None and run_id in (None, job["metadata"]["labels"].get("fsdp-sdk.io/run-id"))

    try:
        apiserver.wait_for(submitted, timeout=20)
        labels = {"training.kubeflow.org/job-name": name}
        apiserver.add_pod(f"{name}-worker-1", labels=labels, log="torchrun starting\n")
        apiserver.add_pod(f"{name}-worker-0", labels=labels, log=f"{LEADER_LINE}\n", follow_open=True)
        running = {"conditions": [{"type": "Running", "status": "True"}], "replicaStatuses": {"Worker": {"active": 2}}}
        apiserver.set_status("kubeflow.org/v1", "PyTorchJob", name, running)
        # the client found the leader and follows its log: what comes next reaches it through that stream
        apiserver.wait_for_request("GET", f"/pods/{name}-worker-0/log", since=started, query={"follow": "true"})
    except TimeoutError as error:
        if apiserver.get("kubeflow.org/v1", "PyTorchJob", name) is not None:
            failed = {"conditions": [{"type": "Failed", "status": "True", "message": f"operator stand-in: {error}"}]}
            apiserver.set_status("kubeflow.org/v1", "PyTorchJob", name, failed)
        raise
    apiserver.append_log(f"{name}-worker-0", '{"step": 5, "loss": 3.0}\n{"steps": 5, "final_loss": 3.0}\n')
    succeeded = {
        "conditions": [{"type": "Succeeded", "status": "True"}],
        "replicaStatuses": {"Worker": {"succeeded": 2}},
    }
    apiserver.set_status("kubeflow.org/v1", "PyTorchJob", name, succeeded)
    apiserver.close_log(f"{name}-worker-0")
