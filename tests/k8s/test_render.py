"""Rendering: every object validates against the real schemas, and carries what the job needs."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from fsdp_sdk.cli import main
from fsdp_sdk.config import Config
from fsdp_sdk.hookspecs import hookimpl
from fsdp_sdk.k8s.prereqs import render_etcd
from fsdp_sdk.k8s.render import JOB_NAME_LABEL, RUN_ID_LABEL, render_job
from fsdp_sdk.k8s.validate import validate_objects, validate_pod_template
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
    assert container["resources"]["limits"] == {"nvidia.com/gpu": 8, "vpc.amazonaws.com/efa": 32}
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
    assert container["resources"]["limits"] == {"nvidia.com/gpu": 4}
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
    assert job["spec"]["runtimeRef"]["name"] == "torch-distributed"
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
        ("PyTorchJob/fsdp Worker pod template", "the Kubernetes 1.31 OpenAPI (as a Pod)", False)
    ]
    assert any("pod template" in e and "volumeMount" in e for e in report.errors)
    report = validate_objects([job], crd_paths=[pytorchjob_crd])
    assert [c.schema for c in report.checks] == [
        "the CRD kubeflow.org_pytorchjobs.yaml",
        "the Kubernetes 1.31 OpenAPI (as a Pod)",
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
            "start again from step 0; set trainer.checkpoint.dir to s3://BUCKET/PREFIX, or job.shared_storage_claim "
            "(a ReadWriteMany claim: FSx for Lustre, EFS), to resume them",
            "valid: PyTorchJob/fsdp Worker pod template, checked against the Kubernetes 1.31 OpenAPI (as a Pod)",
            "valid: Secret/hf-token, checked against the Kubernetes 1.31 OpenAPI",
            "not validated offline: PyTorchJob/fsdp itself (fsdp-sdk ships no CRD); 'fsdp-sdk job submit --dry-run' "
            "has the cluster validate it against the CRD it runs, or pass --crd "
            "https://raw.githubusercontent.com/kubeflow/training-operator/v1.9.2/manifests/base/crds/"
            "kubeflow.org_pytorchjobs.yaml",
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
