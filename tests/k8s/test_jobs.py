"""The job commands over real HTTP against the loopback API server."""

from __future__ import annotations

import base64
import json
import re
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
import uuid
from pathlib import Path

import pytest
import yaml

from fsdp_sdk.config import Config
from fsdp_sdk.k8s.jobs import JobClient, JobStatus
from fsdp_sdk.k8s.kube import Kube
from fsdp_sdk.plugins import build_plugins

from .fake_apiserver import FakeApiServer
from .tools import Lines, cli

REGISTRY = "123456789012.dkr.ecr.us-west-2.amazonaws.com"
TOKEN = "hf_NeverPrintThisToken42"
JOB_LABEL = "training.kubeflow.org/job-name"


@pytest.fixture(autouse=True)
def _isolated(isolated_cli: None, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("FSDP_SDK_JOB__REGISTRY", REGISTRY)


def client(kubeconfig: Path, **job: object) -> JobClient:
    config = Config.from_dict({"job": {"registry": REGISTRY, **job}, "trainer": {"model": {"preset": "tiny"}}})
    return JobClient(config, kubeconfig=kubeconfig, plugins=build_plugins(autoload=False))


def test_submit_applies_server_side(apiserver: FakeApiServer, kubeconfig: Path, capsys) -> None:
    code, out, err = cli(capsys, "job", "submit", "--rdzv-id", "fsdp-r1", "--json")
    assert code == 0, err
    assert json.loads(out)["rdzv_id"] == "fsdp-r1"
    writes = apiserver.writes()
    assert [(w.method, w.path) for w in writes] == [
        ("PATCH", "/apis/kubeflow.org/v1/namespaces/default/pytorchjobs/fsdp")
    ]
    assert writes[0].content_type == "application/apply-patch+yaml"
    assert writes[0].query["fieldManager"] == ["fsdp-sdk"] and writes[0].query["force"] == ["true"]
    stored = apiserver.get("kubeflow.org/v1", "PyTorchJob", "fsdp")
    assert stored["spec"]["elasticPolicy"]["rdzvId"] == "fsdp-r1"
    assert stored["metadata"]["managedFields"][0]["manager"] == "fsdp-sdk"
    # a second submit of the same name is refused before anything is written
    code, _, err = cli(capsys, "job", "submit")
    assert code == 1 and "already exists" in err and len(apiserver.writes()) == 1


def install_trainer_objects(apiserver: FakeApiServer, trainjob_crd: Path) -> list[dict]:
    """What 'prereqs install --api trainjob' leaves on a cluster: the TrainJob CRD, the controller, JobSet's controller,
    our runtime."""
    from fsdp_sdk.k8s.trainer_v2 import JOBSET_DEPLOYMENT, TRAINER_DEPLOYMENT, TRAINER_NAMESPACE, render_runtime

    labels = {"app.kubernetes.io/name": "trainer"}
    pod = {"metadata": {"labels": labels}, "spec": {"containers": [{"name": "manager", "image": "trainer:v2.3.0"}]}}
    objects = [
        yaml.safe_load(trainjob_crd.read_text()),
        *(
            {
                "apiVersion": "apps/v1",
                "kind": "Deployment",
                "metadata": {"name": name, "namespace": TRAINER_NAMESPACE},
                "spec": {"selector": {"matchLabels": labels}, "template": pod},
            }
            for name in (TRAINER_DEPLOYMENT, JOBSET_DEPLOYMENT)
        ),
        render_runtime(),
    ]
    return [apiserver.put(o) for o in objects]


def test_server_side_dry_run_stores_nothing(
    apiserver: FakeApiServer, kubeconfig: Path, trainjob_crd: Path, capsys
) -> None:
    installed = install_trainer_objects(apiserver, trainjob_crd)
    code, out, err = cli(capsys, "job", "submit", "--dry-run", "--api", "trainjob")
    assert code == 0, err
    assert "would submit" in out and "TrainJob" in out
    assert all(w.dry_run for w in apiserver.writes()) and apiserver.writes()
    assert len(apiserver.objects()) == len(installed)


def test_trainjob_on_a_cluster_without_the_trainer_is_refused_with_the_install_command(
    apiserver: FakeApiServer, kubeconfig: Path, trainjob_crd: Path, capsys
) -> None:
    code, _, err = cli(capsys, "job", "submit", "--api", "trainjob")
    assert code == 2 and err.count("\n") == 1, err
    assert "--api: trainjob needs Kubeflow Trainer v2 on the cluster, which has no TrainJob CRD" in err
    assert "run 'fsdp-sdk prereqs install --api trainjob' (Kubeflow Trainer v2.3.0)" in err
    installed = install_trainer_objects(apiserver, trainjob_crd)
    apiserver.delete("apps/v1", "Deployment", installed[1]["metadata"]["name"], installed[1]["metadata"]["namespace"])
    code, _, err = cli(capsys, "job", "submit", "--api", "trainjob")
    assert code == 2 and "no Kubeflow Trainer controller (deployment kubeflow-system/" in err
    apiserver.put(installed[1])
    apiserver.delete("apps/v1", "Deployment", installed[2]["metadata"]["name"], installed[2]["metadata"]["namespace"])
    code, _, err = cli(capsys, "job", "submit", "--api", "trainjob")
    assert code == 2 and err.count("\n") == 1, err
    assert (
        "which has no JobSet controller (deployment jobset-controller-manager in kubeflow-system or jobset-system)"
        in err
    )
    assert apiserver.writes() == []  # nothing sent


def test_secret_gets_its_data_only_at_apply_time(apiserver: FakeApiServer, kubeconfig: Path, capsys) -> None:
    jobs = client(kubeconfig, hf_token=TOKEN)
    jobs.submit(run_id="fsdp-s1")
    secret = apiserver.get("v1", "Secret", "hf-token")
    assert base64.b64decode(secret["data"]["token"]).decode() == TOKEN
    assert TOKEN not in yaml.safe_dump_all(jobs.last_objects)
    kinds = [w.body["kind"] for w in apiserver.writes()]
    assert kinds == ["Secret", "PyTorchJob"]  # the Secret exists before the job that needs it
    job_body = json.dumps(apiserver.writes()[1].body)
    assert TOKEN not in job_body
    # `job render` never shows it either
    code, out, _ = cli(capsys, "job", "render", "--set", f"job.hf_token={TOKEN}")
    assert code == 0 and TOKEN not in out and "kind: Secret" in out


def test_invalid_object_is_refused_with_422(apiserver: FakeApiServer, kubeconfig: Path) -> None:
    kube = Kube.from_kubeconfig(kubeconfig)
    bad = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "x", "namespace": "default"}, "data": {"a": 1}}
    with pytest.raises(Exception, match="422 Invalid"):
        kube.apply(bad)
    assert apiserver.objects() == []


def test_unique_submit_without_a_plugin_set_uses_the_installed_plugins(
    apiserver: FakeApiServer, kubeconfig: Path
) -> None:
    # JobClient(config) as the module docstring shows it: no plugins given, so a set of the installed plugins
    # (built on first use) resolves the renamed configuration.
    config = Config.from_dict({"job": {"registry": REGISTRY}, "trainer": {"model": {"preset": "tiny"}}})
    ref = JobClient(config, kubeconfig=kubeconfig).submit(unique=True)
    assert ref.name.startswith("fsdp-") and ref.name != "fsdp"
    assert apiserver.get("kubeflow.org/v1", "PyTorchJob", ref.name)["metadata"]["name"] == ref.name


def _conditions(*types: str) -> list[dict]:
    return [{"type": t, "status": "True", "reason": t, "message": f"job is {t.lower()}"} for t in types]


def test_status_list_and_wait(apiserver: FakeApiServer, kubeconfig: Path, capsys) -> None:
    jobs = client(kubeconfig)
    jobs.submit(run_id="fsdp-w1")
    assert jobs.status().phase == "Pending"
    apiserver.set_status(
        "kubeflow.org/v1",
        "PyTorchJob",
        "fsdp",
        {"conditions": _conditions("Created", "Running"), "replicaStatuses": {"Worker": {"active": 2}}},
    )
    code, out, _ = cli(capsys, "job", "status", "--json")
    data = json.loads(out)
    assert code == 0 and data["phase"] == "Running" and data["replicas"]["Worker"]["active"] == 2
    code, out, _ = cli(capsys, "job", "list")
    assert "fsdp" in out and "Running" in out and "fsdp-w1" in out

    code, out, err = cli(capsys, "job", "wait", "--timeout", "0.3")
    assert code == 3 and "timed out" in err

    since = time.monotonic()

    def finish() -> None:  # once `job wait` has read the job while it runs (it then says Running), it succeeds
        apiserver.wait_for_request("GET", "/pytorchjobs/fsdp", since=since, answered=True)
        apiserver.set_status(
            "kubeflow.org/v1",
            "PyTorchJob",
            "fsdp",
            {
                "conditions": _conditions("Created", "Running", "Succeeded"),
                "replicaStatuses": {"Worker": {"succeeded": 2}},
            },
        )

    threading.Thread(target=finish).start()
    code, out, err = cli(capsys, "job", "wait", "--timeout", "20", "--json")
    assert code == 0 and json.loads(out)["phase"] == "Succeeded" and "Running" in err

    apiserver.set_status("kubeflow.org/v1", "PyTorchJob", "fsdp", {"conditions": _conditions("Created", "Failed")})
    code, out, _ = cli(capsys, "job", "wait", "--timeout", "5")
    assert code == 1 and "Failed" in out


def test_status_phases_from_conditions() -> None:
    def phase(*types: str) -> str:
        return JobStatus.from_object(
            {"kind": "PyTorchJob", "metadata": {"name": "j"}, "status": {"conditions": _conditions(*types)}}
        ).phase

    assert phase("Created") == "Created"
    assert phase("Created", "Running", "Restarting") == "Restarting"
    assert phase("Created", "Running", "Failed") == "Failed"
    assert phase("Created", "Complete") == "Succeeded"  # TrainJob
    assert JobStatus.from_object(
        {"kind": "TrainJob", "metadata": {"name": "t"}, "status": {"jobsStatus": [{"name": "node", "active": 3}]}}
    ).replicas == {"node": {"active": 3, "succeeded": 0, "failed": 0}}


def leader_line(host: str) -> str:
    """The line the trainer's rank 0 logs at start (fsdp_trainer.logs format), which marks the leader pod."""
    return f"[rank0] 12:00:00 INFO fsdp_trainer.distributed: master_addr={host} host={host}.fsdp"


def _add_workers(apiserver: FakeApiServer, *, follow_open: bool = False) -> None:
    labels = {JOB_LABEL: "fsdp"}
    # worker 0 is rank 1: its log has torchrun's rendezvous result (every pod's has, at LOGLEVEL=INFO), not the trainer's
    agent = "I1207 02:07:17.766000 19697 torch/distributed/elastic/agent/server/api.py:553]   master_addr=fsdp-worker-1"
    apiserver.add_pod(
        "fsdp-worker-0", labels=labels, log=f"{agent}\nwaiting for rendezvous\nstep 1\n", follow_open=follow_open
    )
    apiserver.add_pod(
        "fsdp-worker-1",
        labels=labels,
        follow_open=follow_open,
        log=f'{leader_line("fsdp-worker-1")}\n{{"step": 1, "loss": 2.5}}\n',
    )
    apiserver.add_pod("other-worker-0", labels={JOB_LABEL: "other"}, log=f"{leader_line('other')}\n")


def test_logs_show_the_leader(apiserver: FakeApiServer, kubeconfig: Path, capsys) -> None:
    _add_workers(apiserver)
    code, out, err = cli(capsys, "job", "logs")
    assert code == 0, err
    assert out.splitlines() == [leader_line("fsdp-worker-1"), '{"step": 1, "loss": 2.5}']
    pod_lists = [r for r in apiserver.requests if r.path.endswith("/pods") and r.method == "GET"]
    assert pod_lists[0].query["labelSelector"] == [f"{JOB_LABEL}=fsdp"]
    code, out, _ = cli(capsys, "job", "logs", "--all")
    assert "[fsdp-worker-0] step 1" in out and f"[fsdp-worker-1] {leader_line('fsdp-worker-1')}" in out
    assert "other" not in out


def test_logs_follow_all_workers(apiserver: FakeApiServer, kubeconfig: Path) -> None:
    jobs = client(kubeconfig)
    jobs.submit(run_id="fsdp-f1")
    _add_workers(apiserver, follow_open=True)
    lines = Lines()
    follower = threading.Thread(target=jobs.logs, kwargs={"follow": True, "all_workers": True, "out": lines})
    follower.start()
    lines.wait_for(lambda got: len(got) == 5)  # what the two workers had written
    apiserver.append_log("fsdp-worker-0", "step 2\n")
    apiserver.append_log("fsdp-worker-1", '{"step": 2, "loss": 2.1}\n')
    lines.wait_for(lambda got: "[fsdp-worker-0] step 2" in got and '[fsdp-worker-1] {"step": 2, "loss": 2.1}' in got)
    assert follower.is_alive()  # still following
    apiserver.set_status("kubeflow.org/v1", "PyTorchJob", "fsdp", {"conditions": _conditions("Succeeded")})
    apiserver.close_log("fsdp-worker-0")
    apiserver.close_log("fsdp-worker-1")
    follower.join(timeout=15)
    assert not follower.is_alive()
    assert len(lines.items) == 7 and not any("other" in line for line in lines.items)
    follows = [r for r in apiserver.requests if r.path.endswith("/log") and r.query.get("follow") == ["true"]]
    assert {r.path.split("/")[-2] for r in follows} == {"fsdp-worker-0", "fsdp-worker-1"}


def test_wait_returns_the_summary_for_client_run(apiserver: FakeApiServer, kubeconfig: Path) -> None:
    jobs = client(kubeconfig)
    ref = jobs.submit(run_id="fsdp-c1")
    apiserver.add_pod("fsdp-worker-0", labels={JOB_LABEL: "fsdp"}, log=f"{leader_line('fsdp-worker-0')}\n")
    apiserver.set_status("kubeflow.org/v1", "PyTorchJob", "fsdp", {"conditions": _conditions("Created", "Running")})
    apiserver.append_log("fsdp-worker-0", '{"step": 1}\n{"steps": 20, "final_loss": 1.5}\n')

    since = time.monotonic()

    def finish() -> None:  # once the wait follows the leader's log, the job succeeds
        apiserver.wait_for_request("GET", "/pods/fsdp-worker-0/log", since=since, query={"follow": "true"})
        apiserver.set_status(
            "kubeflow.org/v1", "PyTorchJob", "fsdp", {"conditions": _conditions("Created", "Running", "Succeeded")}
        )

    threading.Thread(target=finish).start()
    seen: list[str] = []
    summary = jobs.wait(ref, on_output=seen.append)
    assert summary == {"steps": 20, "final_loss": 1.5}
    assert seen[0] == leader_line("fsdp-worker-0")


def test_stop_deletes_and_clears_the_rendezvous(
    apiserver: FakeApiServer, kubeconfig: Path, etcd_endpoint: str, capsys
) -> None:
    run_id, other = f"fsdp-{uuid.uuid4().hex[:8]}", f"fsdp-{uuid.uuid4().hex[:8]}"
    for rid in (run_id, other):
        data = urllib.parse.urlencode({"value": "state"}).encode()
        urllib.request.urlopen(
            urllib.request.Request(f"{etcd_endpoint}/v2/keys/torch/elastic/rendezvous/{rid}", data=data, method="PUT"),
            timeout=5,
        ).close()
    apiserver.proxy_service("default", "etcd", "2379", etcd_endpoint)
    client(kubeconfig).submit(run_id=run_id)

    code, out, err = cli(capsys, "job", "stop", "--json")
    assert code == 0, err
    result = json.loads(out)
    assert result["deleted"] is True and result["rendezvous_keys"] == [f"/torch/elastic/rendezvous/{run_id}"]
    assert apiserver.get("kubeflow.org/v1", "PyTorchJob", "fsdp") is None
    delete = [w for w in apiserver.writes() if w.method == "DELETE"]
    assert delete[0].query["propagationPolicy"] == ["Background"]
    with pytest.raises(urllib.error.HTTPError):
        urllib.request.urlopen(f"{etcd_endpoint}/v2/keys/torch/elastic/rendezvous/{run_id}", timeout=5)
    urllib.request.urlopen(f"{etcd_endpoint}/v2/keys/torch/elastic/rendezvous/{other}", timeout=5).close()
    # stopping again: nothing to stop, not an error
    code, out, _ = cli(capsys, "job", "stop")
    assert code == 0 and "does not exist" in out


def test_stop_reports_an_unreachable_etcd_but_still_deletes(apiserver: FakeApiServer, kubeconfig: Path, capsys) -> None:
    client(kubeconfig).submit(run_id="fsdp-x1")
    code, out, err = cli(capsys, "job", "stop")
    assert code == 0 and "deleted job default/fsdp" in out
    assert "rendezvous keys were not cleared" in err and "503" in err


def test_no_kubeconfig_is_a_config_error(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys) -> None:
    monkeypatch.setenv("KUBECONFIG", str(tmp_path / "missing"))
    code, _, err = cli(capsys, "job", "status")
    assert code == 2 and "--kubeconfig" in err and "does not exist" in err


def test_job_render_is_the_same_for_the_same_input(capsys) -> None:
    """The rendezvous id of `job render` is derived from the configuration: same input, same objects."""
    first = cli(capsys, "job", "render")
    second = cli(capsys, "job", "render")
    assert first[0] == 0 and first[1] == second[1]
    rdzv = yaml.safe_load(first[1])["spec"]["elasticPolicy"]["rdzvId"]
    assert re.fullmatch(r"fsdp-[0-9a-f]{8}", rdzv)
    other = yaml.safe_load(cli(capsys, "job", "render", "--set", "train.steps=7")[1])
    assert other["spec"]["elasticPolicy"]["rdzvId"] != rdzv, "another input, another id"
    fresh = [yaml.safe_load(cli(capsys, "job", "render", "--fresh-id")[1]) for _ in range(2)]
    ids = {f["spec"]["elasticPolicy"]["rdzvId"] for f in fresh}
    assert len(ids) == 2 and rdzv not in ids, "unique only when asked"


def test_run_dry_run_is_the_runners_dryrun_and_sends_nothing(apiserver: FakeApiServer, kubeconfig: Path) -> None:
    """On a cluster backend, run(dry_run=True) is the Kubernetes runner's dryrun: the objects, rendered here."""
    from fsdp_sdk import Client

    from .tools import kubernetes_plugins

    plugins = kubernetes_plugins(kubeconfig)
    config = Config.from_dict({"cluster": {"backend": "fake-kube"}, "job": {"registry": REGISTRY}})
    client = Client(config, plugins=plugins)
    result = client.run(trainer_overrides={"model.preset": "tiny"}, run_id="fsdp-r9", dry_run=True)
    plan = client.dryrun(trainer_overrides={"model.preset": "tiny"}, run_id="fsdp-r9")
    assert result.dry_run and result.plan.lines() == plan.lines() and result.plan.to_dict() == plan.to_dict()
    lines = plan.lines()
    assert lines[0] == "Would run fsdp (run id fsdp-r9) on backend fake-kube in namespace default:"
    assert "kind: PyTorchJob" in lines and "    rdzvId: fsdp-r9" in lines
    assert apiserver.writes() == [], "a dry run is rendered here, not sent"


def test_the_kubernetes_runner_follows_jobs_by_name(apiserver: FakeApiServer, kubeconfig: Path) -> None:
    """What `job status|wait|list|stop` call on a cluster backend: the runner's methods over the job layer."""
    from fsdp_sdk import Client

    from .tools import kubernetes_plugins

    config = Config.from_dict({"cluster": {"backend": "fake-kube"}, "job": {"registry": REGISTRY}})
    client = Client(config, plugins=kubernetes_plugins(kubeconfig))
    runner = client.runner
    assert runner.kind == "kubernetes"
    client.submit_job(run_id="fsdp-k1", force=True)
    apiserver.set_status("kubeflow.org/v1", "PyTorchJob", "fsdp", {"conditions": _conditions("Created", "Running")})
    status = runner.status("fsdp")
    assert (status.phase, status.finished, status.label) == ("Running", False, "PyTorchJob default/fsdp")
    assert [(s.name, s.details["rdzv_id"]) for s in runner.list()] == [("fsdp", "fsdp-k1")]
    seen: list[str] = []
    waited = runner.wait_for("fsdp", timeout=0.2, on_change=lambda s: seen.append(s.phase))
    assert not waited.finished and seen == ["Running"], "a timeout is not an end"
    apiserver.set_status("kubeflow.org/v1", "PyTorchJob", "fsdp", {"conditions": _conditions("Created", "Suspended")})
    assert not runner.status().finished, "a suspended job has not ended"
    stopped = runner.stop("fsdp", keep_rendezvous=True)
    assert stopped.stopped and stopped.details["rendezvous_keys"] == [] and stopped.warning is None
    assert str(stopped) == "deleted job default/fsdp; cleared 0 rendezvous key(s)"
    again = runner.stop("fsdp")
    assert not again.stopped and again.message == "job default/fsdp does not exist; nothing to stop"
