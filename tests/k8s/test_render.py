"""Rendering: every object validates against the real schemas, and carries what the job needs."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest
import yaml

from fsdp_sdk.cli import main
from fsdp_sdk.config import Config
from fsdp_sdk.hookspecs import hookimpl
from fsdp_sdk.k8s.prereqs import render_etcd
from fsdp_sdk.k8s.render import JOB_NAME_LABEL, RUN_ID_LABEL, render_job, worker_pods
from fsdp_sdk.k8s.validate import CRD_URLS, DEFAULT_KUBERNETES_VERSION, validate_objects, validate_pod_template
from fsdp_sdk.plugins import Plugins, build_plugins, reset_plugins

REGISTRY = "123456789012.dkr.ecr.us-west-2.amazonaws.com"
TOKEN = "hf_SuperSecretTokenValue123"


@pytest.fixture
def plugins() -> Plugins:
    return build_plugins(autoload=False)


def make_config(**job: Any) -> Config:
    data = {
        "job": {"registry": REGISTRY, "num_workers": 4, **job},
        "trainer": {
            "model": {"preset": "llama2-7b"},
            "train": {"steps": 100, "output_dir": "/local/out"},
            "parallel": {"sharding": "full_shard"},
        },
    }
    return Config.from_dict(data)


def worker(job: dict) -> dict:
    return job["spec"]["pytorchReplicaSpecs"]["Worker"]


def env_of(container: dict) -> dict[str, Any]:
    return {e["name"]: e.get("value", e.get("valueFrom")) for e in container["env"]}


def test_pytorchjob_validates_and_has_the_job(plugins: Plugins, pytorchjob_crd: Path) -> None:
    config = make_config(hf_token=TOKEN)
    objects = render_job(config, rdzv_id="fsdp-abc123", plugins=plugins)
    report = validate_objects(objects, crd_paths=[pytorchjob_crd])
    assert report.ok, report.errors
    assert report.validated == ["PyTorchJob/fsdp", "Secret/hf-token"] and not report.skipped

    job = objects[0]
    assert (job["apiVersion"], job["kind"]) == ("kubeflow.org/v1", "PyTorchJob")
    spec = job["spec"]
    assert spec["nprocPerNode"] == "8"  # p5.48xlarge, a string as the CRD types it
    assert spec["elasticPolicy"] == {
        "rdzvBackend": "etcd-v2",
        "rdzvHost": "etcd",
        "rdzvPort": 2379,
        "rdzvId": "fsdp-abc123",
        "minReplicas": 4,
        "maxReplicas": 4,
        "maxRestarts": 3,
    }
    assert spec["runPolicy"]["cleanPodPolicy"] == "None"
    assert worker(job)["replicas"] == 4
    pod = worker(job)["template"]["spec"]
    assert pod["nodeSelector"] == {"node.kubernetes.io/instance-type": "p5.48xlarge"}
    container = pod["containers"][0]
    assert container["name"] == "pytorch"
    assert container["image"] == f"{REGISTRY}/fsdp-sdk-trainer:latest"
    # the whole node's share: Guaranteed (requests = limits), never BestEffort
    assert container["resources"]["limits"] == {
        "cpu": "189",
        "memory": "1938Gi",
        "nvidia.com/gpu": 8,
        "vpc.amazonaws.com/efa": 32,
    }
    assert container["resources"]["requests"] == container["resources"]["limits"]
    assert container["command"] == ["torchrun", "-m", "fsdp_trainer"]
    args = container["args"]
    assert args[args.index("--model.preset") + 1] == "llama2-7b"
    assert args[args.index("--train.steps") + 1] == "100"
    assert args[args.index("--parallel.sharding") + 1] == "full_shard"
    volumes = {v["name"]: v for v in pod["volumes"]}
    assert volumes["shm"]["emptyDir"] == {"medium": "Memory"}
    assert volumes["local"]["hostPath"]["path"] == "/mnt/k8s-disks/0"
    assert {m["mountPath"] for m in container["volumeMounts"]} == {"/dev/shm", "/local"}
    env = env_of(container)
    assert env["FI_PROVIDER"] == "efa" and env["FI_EFA_USE_HUGE_PAGE"] == "0" and env["FI_EFA_USE_DEVICE_RDMA"] == "1"
    assert env["NCCL_DEBUG"] == "WARN" and env["NCCL_SOCKET_IFNAME"].startswith("^lo")
    for name in (
        "TORCH_NCCL_TRACE_BUFFER_SIZE",
        "TORCH_NCCL_DUMP_ON_TIMEOUT",
        "TORCH_NCCL_ASYNC_ERROR_HANDLING",
        "TORCH_DISTRIBUTED_DEBUG",
        "LOGLEVEL",
    ):
        assert env[name]
    assert env["PYTORCH_CUDA_ALLOC_CONF"] == "expandable_segments:True"
    # every rendezvous round publishes its own store, so a replaced worker pod can join (tests/rehearsal/test_launch.py)
    assert env["TORCH_DISABLE_SHARE_RDZV_TCP_STORE"] == "1"
    assert env["HF_TOKEN"] == {"secretKeyRef": {"name": "hf-token", "key": "token", "optional": False}}
    for obj in (job, worker(job)["template"]):
        labels = obj["metadata"]["labels"]
        assert labels["app.kubernetes.io/managed-by"] == "fsdp-sdk"
        assert labels["app.kubernetes.io/part-of"] == "fsdp-sdk"
        assert labels["app.kubernetes.io/instance"] == "fsdp"
        assert {"app.kubernetes.io/name", "app.kubernetes.io/component"} <= labels.keys()
        assert labels[RUN_ID_LABEL] == "fsdp-abc123"
    assert JOB_NAME_LABEL == "training.kubeflow.org/job-name"


def test_the_token_never_appears_in_rendered_output(plugins: Plugins) -> None:
    objects = render_job(make_config(hf_token=TOKEN), plugins=plugins)
    text = yaml.safe_dump_all(objects)
    assert TOKEN not in text
    secret = objects[1]
    assert secret["kind"] == "Secret" and "data" not in secret and "stringData" not in secret


def test_secret_only_when_requested(plugins: Plugins) -> None:
    assert [o["kind"] for o in render_job(make_config(), plugins=plugins)] == ["PyTorchJob"]
    assert [o["kind"] for o in render_job(make_config(), plugins=plugins, create_secret=True)] == [
        "PyTorchJob",
        "Secret",
    ]
    assert [o["kind"] for o in render_job(make_config(hf_token=TOKEN), plugins=plugins, create_secret=False)] == [
        "PyTorchJob"
    ]
    env = env_of(worker(render_job(make_config(), plugins=plugins)[0])["template"]["spec"]["containers"][0])
    assert env["HF_TOKEN"]["secretKeyRef"]["optional"] is True  # public models work without the Secret


def test_each_submission_gets_its_own_rdzv_id(plugins: Plugins) -> None:
    ids = {render_job(make_config(), plugins=plugins)[0]["spec"]["elasticPolicy"]["rdzvId"] for _ in range(3)}
    assert len(ids) == 3 and all(i.startswith("fsdp-") for i in ids)


def test_command_from_config_replaces_the_trainer(plugins: Plugins) -> None:
    config = make_config(command="torchrun --nproc_per_node=8 /fsdp/train.py --max_steps=10")
    container = worker(render_job(config, plugins=plugins)[0])["template"]["spec"]["containers"][0]
    assert container["command"] == ["torchrun", "--nproc_per_node=8", "/fsdp/train.py", "--max_steps=10"]
    assert "args" not in container


def test_instance_without_rdma_and_c10d(plugins: Plugins, pytorchjob_crd: Path) -> None:
    config = make_config(rdzv_backend="c10d", gpu_per_worker=4, efa_per_worker=0)
    config.cluster.instance_type = "g5.48xlarge"
    job = render_job(config, plugins=plugins)[0]
    assert validate_objects([job], crd_paths=[pytorchjob_crd]).ok
    container = worker(job)["template"]["spec"]["containers"][0]
    assert container["resources"]["limits"] == {"cpu": "94", "memory": "361Gi", "nvidia.com/gpu": 4}
    env = env_of(container)
    assert "FI_PROVIDER" not in env and "FI_EFA_USE_DEVICE_RDMA" not in env
    assert job["spec"]["elasticPolicy"]["rdzvBackend"] == "c10d" and job["spec"]["nprocPerNode"] == "4"
    # c10d does not use etcd: without an explicit endpoint the operator points torchrun at worker 0's service
    assert "rdzvHost" not in job["spec"]["elasticPolicy"] and "rdzvPort" not in job["spec"]["elasticPolicy"]
    explicit = make_config(rdzv_backend="c10d", rdzv_host="rdzv.example", rdzv_port=29400)
    elastic = render_job(explicit, plugins=plugins)[0]["spec"]["elasticPolicy"]
    assert (elastic["rdzvHost"], elastic["rdzvPort"]) == ("rdzv.example", 29400)
    # set explicitly to the defaults' values still counts as set
    explicit = make_config(rdzv_backend="c10d", rdzv_host="etcd")
    elastic = render_job(explicit, plugins=plugins)[0]["spec"]["elasticPolicy"]
    assert elastic["rdzvHost"] == "etcd" and "rdzvPort" not in elastic


def test_trainjob_validates(plugins: Plugins, trainjob_crd: Path) -> None:
    config = make_config(api="trainjob", hf_token=TOKEN)
    objects = render_job(config, rdzv_id="fsdp-t1", plugins=plugins)
    assert validate_objects(objects, crd_paths=[trainjob_crd]).ok
    job = objects[0]
    assert (job["apiVersion"], job["kind"]) == ("trainer.kubeflow.org/v1alpha1", "TrainJob")
    trainer = job["spec"]["trainer"]
    assert job["spec"]["runtimeRef"] == {
        "apiGroup": "trainer.kubeflow.org",
        "kind": "ClusterTrainingRuntime",
        "name": "fsdp-sdk-torch-distributed",
    }
    ((patch,),) = [job["spec"]["runtimePatches"]]
    assert patch["manager"] == "fsdp-sdk.io/render" and "labels" not in job["spec"]
    (node,) = patch["trainingRuntimeSpec"]["template"]["spec"]["replicatedJobs"]
    pod = node["template"]["spec"]["template"]
    assert node["name"] == "node" and pod["metadata"]["labels"]["fsdp-sdk.io/run-id"] == "fsdp-t1"
    assert pod["spec"]["nodeSelector"] == {"node.kubernetes.io/instance-type": "p5.48xlarge"}
    assert {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"} in pod["spec"]["tolerations"]
    assert {"name": "shm", "emptyDir": {"medium": "Memory"}} in pod["spec"]["volumes"]
    assert pod["spec"]["containers"] == [
        {
            "name": "node",
            "volumeMounts": [{"name": "shm", "mountPath": "/dev/shm"}, {"name": "local", "mountPath": "/local"}],
        }
    ]
    assert trainer["numNodes"] == 4 and trainer["numProcPerNode"] == 8
    assert trainer["resourcesPerNode"]["limits"]["nvidia.com/gpu"] == 8
    assert trainer["command"] == ["torchrun", "-m", "fsdp_trainer"] and "--model.preset" in trainer["args"]
    assert TOKEN not in yaml.safe_dump_all(objects)
    # the --api argument wins over job.api
    assert render_job(make_config(), api="trainjob", plugins=plugins)[0]["kind"] == "TrainJob"


def test_validation_catches_a_broken_object(plugins: Plugins, pytorchjob_crd: Path, trainjob_crd: Path) -> None:
    job = render_job(make_config(), plugins=plugins)[0]
    job["spec"]["elasticPolicy"]["rdzvPort"] = "2379"  # an int32 in the CRD
    container = worker(job)["template"]["spec"]["containers"][0]
    container["volumeMount"] = container.pop("volumeMounts")  # a typo the CRD schema does not see
    errors = validate_objects([job], crd_paths=[pytorchjob_crd]).errors
    assert any("elasticPolicy.rdzvPort" in e for e in errors)
    assert any("pod template" in e and "volumeMount" in e for e in errors)
    trainjob = render_job(make_config(), api="trainjob", plugins=plugins)[0]
    del trainjob["spec"]["runtimeRef"]["name"]
    assert any("runtimeRef" in e for e in validate_objects([trainjob], crd_paths=[trainjob_crd]).errors)
    # without the CRD, the custom resource is reported as skipped, not as valid
    report = validate_objects([trainjob])
    assert report.skipped == ["TrainJob/fsdp"] and report.ok and report.checks == []
    assert validate_pod_template({"spec": {"containers": [{"name": "x"}]}}, owner="t") == []
    # ... but a PyTorchJob's pod template is still checked against the Kubernetes OpenAPI
    report = validate_objects([job])
    assert report.skipped == ["PyTorchJob/fsdp"] and report.validated == []
    assert [(c.subject, c.schema, c.ok) for c in report.checks] == [
        (
            "PyTorchJob/fsdp Worker pod template",
            f"the Kubernetes {DEFAULT_KUBERNETES_VERSION} OpenAPI (as a Pod)",
            False,
        )
    ]
    assert any("pod template" in e and "volumeMount" in e for e in report.errors)
    report = validate_objects([job], crd_paths=[pytorchjob_crd])
    assert [c.schema for c in report.checks] == [
        "the CRD kubeflow.org_pytorchjobs.yaml",
        f"the Kubernetes {DEFAULT_KUBERNETES_VERSION} OpenAPI (as a Pod)",
    ]


def test_render_validate_says_what_was_checked_against_what(
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
    tmp_path: Path,
    pytorchjob_crd: Path,
) -> None:
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("FSDP_SDK_DISABLE_PLUGIN_AUTOLOAD", "1")
    reset_plugins()
    base = ["job", "render", "--validate", "--set", f"job.registry={REGISTRY}", "--set", f"job.hf_token={TOKEN}"]
    try:
        with pytest.raises(SystemExit) as exit_info:
            main(base)
        err = capsys.readouterr().err.splitlines()
        assert exit_info.value.code == 0
        assert err == [
            "warning: the checkpoints of the 2 workers would be split across their nodes' disks, so restarted pods "
            "start again from step 0; set cluster.checkpoint_bucket (an S3 bucket: 'up' on an EKS backend fills it) "
            "or job.shared_storage_claim (a ReadWriteMany claim: FSx for Lustre, EFS) to resume them",
            "valid: PyTorchJob/fsdp Worker pod template, checked against the Kubernetes "
            f"{DEFAULT_KUBERNETES_VERSION} OpenAPI (as a Pod)",
            f"valid: Secret/hf-token, checked against the Kubernetes {DEFAULT_KUBERNETES_VERSION} OpenAPI",
            "not validated offline: PyTorchJob/fsdp itself (fsdp-sdk ships no CRD); 'fsdp-sdk job submit --dry-run' "
            "has the cluster validate it against the CRD it runs, or pass --crd " + CRD_URLS["PyTorchJob"],
        ]
        with pytest.raises(SystemExit) as exit_info:
            main([*base, "--crd", str(pytorchjob_crd)])
        err = capsys.readouterr().err.splitlines()
        assert exit_info.value.code == 0
        assert err[1] == "valid: PyTorchJob/fsdp, checked against the CRD kubeflow.org_pytorchjobs.yaml"
        assert not any(line.startswith("not validated") for line in err)
    finally:
        reset_plugins()


def test_plugins_adjust_the_rendered_objects(plugins: Plugins, pytorchjob_crd: Path) -> None:
    class AddConfigMap:
        @hookimpl
        def fsdp_sdk_render_job(self, config: Config, objects: list[dict]) -> None:
            objects[0]["metadata"]["labels"]["team"] = "ml"
            objects.append(
                {
                    "apiVersion": "v1",
                    "kind": "ConfigMap",
                    "metadata": {"name": f"{config.job.name}-extra", "namespace": config.job.namespace},
                    "data": {"a": "b"},
                }
            )

    plugins.register(AddConfigMap(), name="add-configmap")
    objects = render_job(make_config(), plugins=plugins)
    assert [o["kind"] for o in objects] == ["PyTorchJob", "ConfigMap"]
    assert objects[0]["metadata"]["labels"]["team"] == "ml"
    assert validate_objects(objects, crd_paths=[pytorchjob_crd]).ok


def test_etcd_objects_validate() -> None:
    objects = render_etcd(Config())
    report = validate_objects(objects)
    assert report.ok and report.validated == ["Service/etcd", "Deployment/etcd"], report.errors
    container = objects[1]["spec"]["template"]["spec"]["containers"][0]
    assert "--enable-v2=true" in container["command"]
    assert container["image"].startswith("quay.io/coreos/etcd:v3.5.")
    assert container["readinessProbe"]["httpGet"]["path"] == "/health"
    assert container["livenessProbe"]["httpGet"]["path"] == "/health"
    assert container["resources"]["requests"] and container["resources"]["limits"]


def test_a_plugin_can_choose_the_image(plugins: Plugins) -> None:
    class PinImage:
        @hookimpl
        def fsdp_sdk_job_image(self, config: Config) -> str:
            return "myorg/trainer@sha256:" + "a" * 64

    plugins.register(PinImage(), name="pin-image")
    config = make_config()
    config.job.registry = None
    job = render_job(config, plugins=plugins)[0]
    assert worker(job)["template"]["spec"]["containers"][0]["image"] == "myorg/trainer@sha256:" + "a" * 64


# --------------------------------------------------------------------------- CRD pruning

SHARED_SCHEMAS = Path(__file__).resolve().parents[2].parent / "shared" / "schemas"


def _shared_crds() -> dict[str, Path]:
    """kind -> CRD file of ../shared/schemas; for TrainJob the v2.3.0 file (the release rendered for)."""
    found: dict[str, Path] = {}
    for path in sorted(SHARED_SCHEMAS.glob("*.yaml")):
        crd = yaml.safe_load(path.read_text())
        if isinstance(crd, dict) and crd.get("kind") == "CustomResourceDefinition":
            kind = crd["spec"]["names"]["kind"]
            if kind not in found or path.name.startswith("trainer-v2.3.0."):
                found[kind] = path
    return found


def test_no_rendered_custom_resource_loses_a_field_to_pruning(
    pytorchjob_crd: Path, trainjob_crd: Path, clustertrainingruntime_crd: Path
) -> None:
    from fsdp_sdk.k8s.trainer_v2 import render_runtime
    from fsdp_sdk.k8s.validate import load_crd_schema

    crds = _shared_crds()
    assert crds["PyTorchJob"] == pytorchjob_crd and crds["TrainJob"] == trainjob_crd
    assert crds["ClusterTrainingRuntime"] == clustertrainingruntime_crd
    all_plugins = build_plugins()  # the installed plugins' render hooks too (observability's trainer endpoint)
    config = Config.from_dict(
        {
            "job": {"registry": REGISTRY, "num_workers": 2, "hf_token": TOKEN, "shared_storage_claim": "fsx"},
            "observability": {"enabled": True},
        }
    )
    objects = [render_runtime()]
    for api in ("pytorchjob", "trainjob"):
        objects += render_job(config, api=api, rdzv_id="fsdp-p1", plugins=all_plugins)
    walked = set()
    for obj in objects:
        path = crds.get(obj["kind"])
        if path is None:
            continue
        crd = load_crd_schema(path)
        walked.add(obj["kind"])
        assert crd.pruned(obj) == [], obj["kind"]
        assert crd.errors(obj) == [], obj["kind"]
    assert walked == {"PyTorchJob", "TrainJob", "ClusterTrainingRuntime"}
    trainjob = next(o for o in objects if o["kind"] == "TrainJob")
    (pod,) = worker_pods([trainjob])
    assert pod.annotations["prometheus.io/port"] == "9464"  # the trainer endpoint, on the pods


def test_the_v2_0_trainjob_passed_its_schema_but_a_v2_3_server_would_prune_its_pod_settings(
    plugins: Plugins, trainjob_crd: Path, trainjob_v2_0_crd: Path
) -> None:
    from fsdp_sdk.k8s.validate import load_crd_schema, pruned_fields

    job = render_job(make_config(api="trainjob"), rdzv_id="fsdp-old", plugins=plugins)[0]
    (pod,) = worker_pods([job])
    old = {**job, "spec": {k: v for k, v in job["spec"].items() if k != "runtimePatches"}}
    old["spec"]["labels"] = dict(pod.labels)  # what fsdp-sdk rendered for Trainer v2.0
    old["spec"]["podSpecOverrides"] = [{"targetJobs": [{"name": "node"}], **pod.spec}]
    assert load_crd_schema(trainjob_v2_0_crd).errors(old) == []  # the schema check of the time passed it
    assert load_crd_schema(trainjob_v2_0_crd).pruned(old) == []
    v2_3 = load_crd_schema(trainjob_crd)
    assert pruned_fields(old, v2_3.structural["v1alpha1"]) == ["spec.labels", "spec.podSpecOverrides"]
    lines = v2_3.pruned(old)
    assert lines[0] == (
        "TrainJob/fsdp: spec.labels: not in the TrainJob schema of trainer.kubeflow.org/v1alpha1; "
        "the API server would prune it"
    )
    report = validate_objects([old], crd_paths=[trainjob_crd])
    assert not report.ok and any("spec.podSpecOverrides" in e and "prune" in e for e in report.errors)


def test_pruning_follows_the_structural_schema() -> None:
    from fsdp_sdk.k8s.validate import pruned_fields

    schema = {
        "type": "object",
        "properties": {
            "spec": {
                "type": "object",
                "properties": {
                    "known": {"type": "string"},
                    "free": {"type": "object", "x-kubernetes-preserve-unknown-fields": True},
                    "map": {"type": "object", "additionalProperties": {"type": "object", "properties": {"a": {}}}},
                    "list": {"type": "array", "items": {"type": "object", "properties": {"name": {"type": "string"}}}},
                    "opaque": {"type": "object"},
                },
            }
        },
    }
    value = {
        "apiVersion": "x/v1",
        "kind": "X",
        "metadata": {"name": "x", "anything": 1},
        "spec": {
            "known": "k",
            "free": {"whatever": {"deep": 1}},
            "map": {"k": {"a": 1, "b": 2}},
            "list": [{"name": "n"}, {"name": "m", "extra": True}],
            "opaque": {"gone": 1},
            "unknown": 1,
        },
        "status": {},
    }
    assert pruned_fields(value, schema) == [
        "spec.map.k.b",
        "spec.list[1].extra",
        "spec.opaque.gone",
        "spec.unknown",
        "status",
    ]


# ---------------------------------------------------------------------------------------------- checkpoint bucket

BUCKET = "fsdp-sdk-123456789012-us-west-2-demo"


def bucket_config(*, api: str = "pytorchjob", trainer: dict[str, Any] | None = None, **job: Any) -> Config:
    data = {
        "cluster": {"checkpoint_bucket": BUCKET, "region": "us-west-2"},
        "job": {"registry": REGISTRY, "num_workers": 2, "api": api, **job},
        "trainer": {"model": {"preset": "tiny"}, "train": {"steps": 10}, **(trainer or {})},
    }
    return Config.from_dict(data)


def _no_aws_credentials(objects: list[dict]) -> None:
    text = yaml.safe_dump_all(objects)
    for name in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN", "AWS_WEB_IDENTITY_TOKEN_FILE"):
        assert name not in text
    assert "AKIA" not in text and "ASIA" not in text


def test_workers_checkpoint_to_the_bucket_under_its_service_account(
    plugins: Plugins, pytorchjob_crd: Path, recwarn: pytest.WarningsRecorder
) -> None:
    objects = render_job(bucket_config(), rdzv_id="fsdp-s3", plugins=plugins)
    report = validate_objects(objects, crd_paths=[pytorchjob_crd])
    assert report.ok, report.errors
    pod = worker(objects[0])["template"]["spec"]
    assert pod["serviceAccountName"] == "fsdp-trainer"  # EKS Pod Identity gives its pods the bucket's role
    container = pod["containers"][0]
    args = container["args"]
    assert args[args.index("--checkpoint.dir") + 1] == f"s3://{BUCKET}/default/fsdp/checkpoints"
    assert "--checkpoint.resume" not in args  # a restarted pod resumes (resume: auto), nothing turns it off
    assert env_of(container)["AWS_REGION"] == "us-west-2"
    _no_aws_credentials(objects)
    assert not [w for w in recwarn if "split across" in str(w.message)]


def test_an_output_dir_in_the_container_is_no_worry_with_the_bucket(
    plugins: Plugins, recwarn: pytest.WarningsRecorder
) -> None:
    render_job(bucket_config(trainer={"train": {"output_dir": "/tmp/out"}}), plugins=plugins)
    assert not [w for w in recwarn if "inside the container" in str(w.message)]
    without = {"job": {"registry": REGISTRY, "num_workers": 1}, "trainer": {"train": {"output_dir": "/tmp/out"}}}
    render_job(Config.from_dict(without), plugins=plugins)
    assert [w for w in recwarn if "inside the container" in str(w.message)]  # without it, the warning stays


def test_one_worker_checkpoints_to_the_bucket_too(plugins: Plugins) -> None:
    """A replaced node takes its disk with it: one worker's checkpoints go to the bucket as well."""
    container = worker(render_job(bucket_config(num_workers=1), plugins=plugins)[0])["template"]["spec"]
    args = container["containers"][0]["args"]
    assert args[args.index("--checkpoint.dir") + 1] == f"s3://{BUCKET}/default/fsdp/checkpoints"


def test_trainjob_checkpoints_to_the_bucket(plugins: Plugins, trainjob_crd: Path) -> None:
    objects = render_job(bucket_config(api="trainjob", namespace="team-a", name="llm"), plugins=plugins)
    assert validate_objects(objects, crd_paths=[trainjob_crd]).ok
    spec = objects[0]["spec"]
    (patch,) = spec["runtimePatches"]
    (job,) = patch["trainingRuntimeSpec"]["template"]["spec"]["replicatedJobs"]
    assert job["template"]["spec"]["template"]["spec"]["serviceAccountName"] == "fsdp-trainer"
    args = spec["trainer"]["args"]
    assert args[args.index("--checkpoint.dir") + 1] == f"s3://{BUCKET}/team-a/llm/checkpoints"
    assert {"name": "AWS_REGION", "value": "us-west-2"} in spec["trainer"]["env"]
    _no_aws_credentials(objects)


def test_the_shared_claim_wins_over_the_bucket(plugins: Plugins) -> None:
    pod = worker(render_job(bucket_config(shared_storage_claim="fsx"), plugins=plugins)[0])["template"]["spec"]
    args = pod["containers"][0]["args"]
    assert "--checkpoint.dir" not in args and "serviceAccountName" not in pod
    assert "AWS_REGION" not in env_of(pod["containers"][0])


def test_a_checkpoint_dir_the_user_gave_is_kept(plugins: Plugins) -> None:
    given = f"s3://{BUCKET}/default/experiments/run-7"
    pod = worker(render_job(bucket_config(trainer={"checkpoint": {"dir": given}}), plugins=plugins)[0])["template"][
        "spec"
    ]
    args = pod["containers"][0]["args"]
    assert args[args.index("--checkpoint.dir") + 1] == given and pod["serviceAccountName"] == "fsdp-trainer"
    local = worker(render_job(bucket_config(trainer={"checkpoint": {"enabled": False}}), plugins=plugins)[0])
    assert "serviceAccountName" not in local["template"]["spec"]  # no checkpoints, no bucket


@pytest.mark.parametrize(
    ("trainer", "job", "message"),
    [
        (
            {"checkpoint": {"dir": f"s3://{BUCKET}/other-team/x"}},
            {},
            rf"^trainer.checkpoint.dir: s3://{BUCKET}/other-team/x is outside s3://{BUCKET}/default/, the part of "
            r"the checkpoint bucket the job's pods may use; use a location under",
        ),
        (
            {"checkpoint": {"export_hf": f"s3://{BUCKET}/defaultx/hf"}},
            {},
            r"^trainer.checkpoint.export_hf: .* is outside s3://.*/default/",
        ),
        (
            {},
            {"env": {"EXTRA": "AKIAIOSFODNN7EXAMPLE"}},
            r"^job.env: an AWS access key id would appear in plain text in the rendered PyTorchJob fsdp; remove it",
        ),
        ({}, {"env": {"AWS_SECRET_ACCESS_KEY": "x"}}, r"^job.env.AWS_SECRET_ACCESS_KEY: looks like a secret"),
    ],
)
def test_bucket_locations_and_credentials_are_refused(
    plugins: Plugins, trainer: dict[str, Any], job: dict[str, Any], message: str
) -> None:
    from fsdp_sdk.errors import ConfigError

    with pytest.raises(ConfigError, match=message) as refused:
        render_job(bucket_config(trainer=trainer, **job), plugins=plugins)
    assert "\n" not in str(refused.value)


def test_a_bucket_name_s3_refuses_is_a_configuration_error() -> None:
    from fsdp_sdk.errors import ConfigError

    for name, problem in (
        ("My_Bucket", "is not an S3 bucket name"),
        ("a..b-bucket", "has two adjacent periods"),
        ("192.168.5.4", "is formatted as an IP address"),
        ("xn--bucket", "starts with 'xn--'"),
        ("checkpoints-s3alias", "ends with '-s3alias'"),
    ):
        with pytest.raises(
            ConfigError,
            match=rf"^cluster.checkpoint_bucket \(from dict\): {re.escape(repr(name))} {re.escape(problem)}",
        ) as refused:
            Config.from_dict({"cluster": {"checkpoint_bucket": name}})
        assert "\n" not in str(refused.value)


def test_the_runtime_is_one_kubeflow_trainer_v2_3_and_v2_4_both_accept() -> None:
    import copy

    from fsdp_sdk.k8s.trainer_v2 import MAX_REPLICATED_JOB_NAME, check_runtime, render_runtime
    from fsdp_sdk.pins import pin

    trainer = pin("kubeflow-trainer")
    assert trainer.version == "v2.3.0" and trainer.latest == "v2.4.0" and "#4394" in trainer.note
    runtime = render_runtime()
    assert check_runtime(runtime) == []
    too_long = copy.deepcopy(runtime)
    too_long["spec"]["template"]["spec"]["replicatedJobs"][0]["name"] = "n" * (MAX_REPLICATED_JOB_NAME + 1)
    (problem,) = check_runtime(too_long)
    assert "longer than 20 characters" in problem and "v2.4" in problem
