"""The job runner contract (:mod:`fsdp_sdk.runner`), passed by every runner: the local one (real etcd, torchrun
and the tiny trainer), and the Kubernetes one for a PyTorchJob and a TrainJob (the loopback API server playing
the operator).

The contract: ``admit`` then ``dryrun`` decide, and change nothing; ``schedule`` starts exactly the dry run (the
objects applied are the dry run's, the local agents run the dry run's commands); ``wait``, ``status``, ``list``,
``logs`` and ``stop`` answer in the contract's types, by handle or by name. :class:`fsdp_sdk.Client` picks the
runner and calls nothing else.
"""

from __future__ import annotations

import importlib.util
import json
import shutil
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from fsdp_sdk.client import Client
from fsdp_sdk.config import Config
from fsdp_sdk.runner import DryRun, JobRunner, RunHandle, RunStatus, RunStopped
from fsdp_sdk.runs import RunResult

from .fake_apiserver import FakeApiServer
from .test_jobs import install_trainer_objects
from .tools import kubernetes_plugins

REGISTRY = "123456789012.dkr.ecr.us-west-2.amazonaws.com"
LEADER = "[rank0] 12:00:00 INFO fsdp_trainer.distributed: master_addr=fsdp-worker-0 host=fsdp-worker-0.fsdp"
TRAINER = {"model": {"preset": "tiny"}, "train": {"steps": 3}, "checkpoint": {"enabled": False}}
#: (apiVersion, kind, the label its pods carry, the condition that ends it well) of each Kubernetes job API.
KUBE = {
    "pytorchjob": ("kubeflow.org/v1", "PyTorchJob", "training.kubeflow.org/job-name", "Succeeded"),
    "trainjob": ("trainer.kubeflow.org/v1alpha1", "TrainJob", "jobset.sigs.k8s.io/jobset-name", "Complete"),
}


@dataclass
class Place:
    """Where a runner runs jobs, for the contract's tests."""

    kind: str
    client: Client
    apiserver: FakeApiServer | None = None

    @property
    def runner(self) -> JobRunner:
        return self.client.runner

    def sent(self) -> list[dict[str, Any]]:
        """What was written to the cluster (nothing for the local runner)."""
        return [r.body for r in self.apiserver.writes()] if self.apiserver is not None else []

    def started(self) -> list[Path]:
        """The run directories written on this machine (nothing for a cluster job)."""
        runs = Path(self.client.config.cluster.state_dir) / "local" / "runs"
        return sorted(runs.iterdir()) if runs.exists() else []

    def play(self, dryrun: DryRun) -> None:
        """Make the scheduled job run to its end: the local agents do it themselves; on the API server, play the
        operator and the trainer (pods, the leader's log, the conditions)."""
        if self.apiserver is None:
            return
        api_version, kind, label, done = KUBE[self.kind]
        name, server = dryrun.job.name, self.apiserver

        def operator() -> None:
            def submitted() -> bool:  # this dry run's job (a job it replaces carries another run id)
                job = server.get(api_version, kind, name)
                return job is not None and job["metadata"]["labels"].get("fsdp-sdk.io/run-id") == dryrun.run_id

            server.wait_for(submitted, timeout=20)
            server.add_pod(f"{name}-worker-0", labels={label: name}, log=f"{LEADER}\n", follow_open=True)
            server.set_status(api_version, kind, name, {"conditions": [{"type": "Running", "status": "True"}]})
            server.append_log(f"{name}-worker-0", '{"step": 3, "loss": 3.0}\n{"steps": 3, "final_loss": 3.0}\n')
            server.set_status(api_version, kind, name, {"conditions": [{"type": done, "status": "True"}]})
            server.close_log(f"{name}-worker-0")

        threading.Thread(target=operator, daemon=True).start()


@pytest.fixture(params=["local", "pytorchjob", "trainjob"])
def place(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Place]:
    if request.param == "local":
        if shutil.which("etcd") is None:
            pytest.skip("etcd is not on PATH (Debian/Ubuntu: apt-get install etcd-server)")
        if importlib.util.find_spec("fsdp_trainer") is None:
            pytest.skip("the trainer package (fsdp_trainer) is not installed: pip install -e packages/trainer")
        data = {
            "cluster": {"backend": "local", "state_dir": str(tmp_path / "state")},
            "job": {"num_workers": 1, "nproc_per_node": 1},
            "trainer": {**TRAINER, "train": {**TRAINER["train"], "output_dir": str(tmp_path / "out")}},
        }
        client = Client.from_dict(data)
        client.up()  # the dry run is made for the cluster as it is: its etcd port is known
        try:
            yield Place("local", client)
        finally:
            client.down()
        return
    pytorchjob_crd: Path = request.getfixturevalue("pytorchjob_crd")
    trainjob_crd: Path = request.getfixturevalue("trainjob_crd")
    from .fake_apiserver import schema_validators

    with FakeApiServer(schema_validators(pytorchjob_crd, trainjob_crd)) as server:
        if request.param == "trainjob":
            install_trainer_objects(server, trainjob_crd)
        plugins = kubernetes_plugins(server.write_kubeconfig(tmp_path / "kubeconfig"))
        data = {
            "cluster": {"backend": "fake-kube", "state_dir": str(tmp_path / "state")},
            "job": {"registry": REGISTRY, "api": request.param, "num_workers": 1},
            "trainer": TRAINER,
        }
        yield Place(request.param, Client(Config.from_dict(data), plugins=plugins), server)


def test_admit_and_dryrun_decide_and_change_nothing(place: Place) -> None:
    writes_before = len(place.sent())
    runner = place.runner
    resolved = runner.admit(place.client.resolved, dry_run=True)
    dryrun = runner.dryrun(resolved, run_id="conform1")
    assert isinstance(dryrun, DryRun) and dryrun.run_id == "conform1"
    assert dryrun.backend == place.client.config.cluster.backend
    assert dryrun.config is not None and dryrun.config.job.num_workers == 1
    assert dryrun.commands or dryrun.objects  # the local run's commands, or the job's objects
    json.dumps(dryrun.to_dict(), default=str)
    assert dryrun.lines()[0].startswith(f"Would run {dryrun.job.name} (run id conform1)")
    assert len(place.sent()) == writes_before and place.started() == []
    # the same dry run from the client: its resolved configuration, admitted and dry-run by this runner
    assert place.client.dryrun(run_id="conform1").config.to_dict() == dryrun.config.to_dict()  # type: ignore[union-attr]


def test_schedule_starts_exactly_the_dry_run_and_the_rest_is_typed(place: Place) -> None:
    runner = place.runner
    dryrun = runner.dryrun(runner.admit(place.client.resolved), run_id="conform2")
    writes_before = len(place.sent())
    place.play(dryrun)
    handle = runner.schedule(dryrun)
    assert isinstance(handle, RunHandle) and handle.job == dryrun.job and handle.dryrun is dryrun
    if place.apiserver is not None:
        applied = place.sent()[writes_before:]
        assert applied == [dict(o) for o in dryrun.objects]  # the dry run's objects, as they are
    else:
        assert handle.state.plan is dryrun.plan  # the dry run's own plan: its commands, its rendezvous id
        assert handle.state.plan.commands == dryrun.commands
    result = runner.wait(handle)
    assert isinstance(result, RunResult) and result.summary["steps"] == 3
    assert result.job == dryrun.job

    name = dryrun.job.name
    status = runner.status(name)
    assert isinstance(status, RunStatus) and status.succeeded and status.finished
    assert runner.status(handle).phase == status.phase
    listed = runner.list()
    assert all(isinstance(s, RunStatus) for s in listed)
    (mine,) = [s for s in listed if s.name in (name, dryrun.run_id)]  # local runs are listed by their run id
    assert runner.status(mine.name).phase == status.phase
    ended = runner.wait_for(name, timeout=5)
    assert isinstance(ended, RunStatus) and ended.finished
    lines: list[str] = []
    runner.logs(name, out=lines.append)
    assert any('"final_loss"' in line for line in lines), lines
    stopped = runner.stop(name)
    assert isinstance(stopped, RunStopped) and stopped.name == mine.name and str(stopped) == stopped.message
    json.dumps(stopped.to_dict(), default=str)


def test_release_leaves_nothing_followed_behind(place: Place) -> None:
    """A run given up before it is followed (a hook raised): the local one's processes end with it; a cluster job
    stays on the cluster."""
    runner = place.runner
    dryrun = runner.dryrun(runner.admit(place.client.resolved), run_id="conform3")
    handle = runner.schedule(dryrun)
    runner.release(handle)
    status = runner.status(dryrun.job.name)
    if place.apiserver is not None:
        assert not status.finished  # still there, Pending: nobody plays the operator
    else:
        assert status.phase == "Interrupted"


@pytest.mark.parametrize("api", ["pytorchjob", "trainjob"])
def test_what_the_dry_run_shows_is_what_run_submits_at_every_size(
    api: str, apiserver: FakeApiServer, trainjob_crd: Path, tmp_path: Path
) -> None:
    """Walking ``job.num_workers``: ``Client.dryrun`` (what ``run --dry-run`` prints) and the objects ``Client.run``
    then sends are the same, object for object."""
    if api == "trainjob":
        install_trainer_objects(apiserver, trainjob_crd)
    plugins = kubernetes_plugins(apiserver.write_kubeconfig(tmp_path / "kubeconfig"))
    for nodes in (1, 2):
        data = {
            "cluster": {"backend": "fake-kube", "state_dir": str(tmp_path / "state")},
            "job": {"registry": REGISTRY, "api": api, "num_workers": nodes, "name": f"walk{nodes}"},
            "trainer": TRAINER,
        }
        client = Client(Config.from_dict(data), plugins=plugins)
        shown = client.dryrun(run_id=f"walk{nodes}-id")
        assert client.run(dry_run=True, run_id=f"walk{nodes}-id").plan == shown  # 'run --dry-run' prints this
        before = len(apiserver.writes())
        Place(api, client, apiserver).play(shown)
        result = client.run(run_id=f"walk{nodes}-id")
        assert result.summary["steps"] == 3
        sent = [r.body for r in apiserver.writes()[before:]]
        assert sent == [dict(o) for o in shown.objects]
        replicas = sent[0]["spec"].get("pytorchReplicaSpecs", {}).get("Worker", {}).get("replicas")
        assert (replicas if api == "pytorchjob" else sent[0]["spec"]["trainer"]["numNodes"]) == nodes
    # 'run --resume old' at 2 nodes: the dry run names the job 'old' too, and replaces the failed one there
    from fsdp_sdk.k8s.render import render_job

    old = Config.from_dict({**data, "job": {**data["job"], "name": "old"}})
    api_version, kind, _, _ = KUBE[api]
    apiserver.put(render_job(old, rdzv_id="old-first", plugins=plugins)[0])
    apiserver.set_status(api_version, kind, "old", {"conditions": [{"type": "Failed", "status": "True"}]})
    shown = client.dryrun(run_id="again", resume="old")
    assert shown.job.name == "old" and shown.replace
    before = len(apiserver.writes())
    Place(api, client, apiserver).play(shown)
    client.run(run_id="again", resume="old")
    sent = [r.body for r in apiserver.writes()[before:] if r.method != "DELETE"]
    assert sent == [dict(o) for o in shown.objects]
