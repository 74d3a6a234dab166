"""Your own code on a cluster: the rendered PyTorchJob and TrainJob for ``--script`` are valid and lose nothing to
pruning; the code layer's Dockerfile and content tag are stable; through the recording ``docker`` and moto's ECR
the layer is built and pushed only when its content changed; a directory over the limit is refused first."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from fsdp_sdk.code_layer import for_cluster
from fsdp_sdk.config import Config
from fsdp_sdk.k8s.render import render_job, worker_pods
from fsdp_sdk.k8s.validate import load_crd_schema, validate_objects
from fsdp_sdk.plugins import build_plugins
from fsdp_sdk.resolved import Resolved
from fsdp_sdk.user_code import CODE_COMMAND, CodeSettings, collect, entry_arguments, prepare_context

from .fake_apiserver import FakeApiServer
from .tools import cli, install_fake_tools, recorded

REGISTRY = "123456789012.dkr.ecr.us-west-2.amazonaws.com"
BASE = f"{REGISTRY}/fsdp-sdk-trainer:src-0123456789abcdef"
SCRIPT = "import torch.distributed as dist\ndist.init_process_group('nccl')\n"


@pytest.fixture
def code_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A project directory, the current one: a script, a package beside it, data the ignore file leaves out."""
    root = tmp_path / "project"
    (root / "lib").mkdir(parents=True)
    (root / "data").mkdir()
    (root / "train.py").write_text(SCRIPT)
    (root / "lib" / "model.py").write_text("WIDTH = 4\n")
    (root / "data" / "shard-0.bin").write_bytes(b"\0" * 4096)
    (root / ".fsdpignore").write_text("# not code\ndata/\n*.log\n")
    (root / "run.log").write_text("old output\n")
    monkeypatch.chdir(root)
    return root


def _env(container: dict[str, Any]) -> dict[str, Any]:
    return {e["name"]: e.get("value", e.get("valueFrom")) for e in container["env"]}


def test_rendered_jobs_for_a_script_are_valid_and_lose_nothing_to_pruning(
    code_dir: Path, pytorchjob_crd: Path, trainjob_crd: Path
) -> None:
    plugins = build_plugins()  # the installed plugins' render hooks too (observability's endpoint)
    data = {
        "job": {"registry": REGISTRY, "num_workers": 2, "tag": "src-0123456789abcdef"},
        "cluster": {"checkpoint_bucket": "team-checkpoints"},
        "observability": {"enabled": True},
        "code": {"script": "train.py", "args": ["--epochs", "3"]},
    }
    resolved = for_cluster(Resolved.of(Config.from_dict(data, sections=plugins.settings), plugins), build=False)
    tag = collect(CodeSettings(script="train.py"), BASE).tag
    assert resolved.config.sections["code"].digest == tag
    pytorchjob = render_job(resolved, api="pytorchjob", rdzv_id="fsdp-c0de")[0]
    trainjob = render_job(resolved, api="trainjob", rdzv_id="fsdp-c0de")[0]
    assert validate_objects([pytorchjob], crd_paths=[pytorchjob_crd]).ok
    assert validate_objects([trainjob], crd_paths=[trainjob_crd]).ok
    assert load_crd_schema(pytorchjob_crd).pruned(pytorchjob) == []
    assert load_crd_schema(trainjob_crd).pruned(trainjob) == []

    args = ["--dir", "/workspace", "--script", "/workspace/train.py", "--", "--epochs", "3"]
    worker = pytorchjob["spec"]["pytorchReplicaSpecs"]["Worker"]
    (container,) = worker["template"]["spec"]["containers"]
    assert container["image"] == f"{REGISTRY}/fsdp-sdk-trainer:{tag}"  # the code layer, by content
    assert (container["command"], container["args"]) == (CODE_COMMAND, args)
    env = _env(container)
    assert env["FSDP_SDK_CHECKPOINT_DIR"] == "s3://team-checkpoints/default/fsdp/checkpoints"
    assert env["FSDP_SDK_OUTPUT_DIR"] == "/local/fsdp-sdk/default/fsdp" and env["AWS_REGION"] == "us-west-2"
    assert env["FI_PROVIDER"] == "efa" and env["FI_EFA_USE_DEVICE_RDMA"] == "1"  # p5's EFA, as the trainer gets
    assert env["FSDP_SDK_METRICS_PORT"] == "9464"  # fsdp_sdk.report serves what Prometheus scrapes
    assert worker["template"]["spec"]["serviceAccountName"] == "fsdp-trainer"  # the bucket's role (Pod Identity)
    resources = container["resources"]
    assert resources["requests"] == resources["limits"] and resources["limits"]["nvidia.com/gpu"] == 8  # Guaranteed
    assert pytorchjob["spec"]["nprocPerNode"] == "8" and pytorchjob["spec"]["elasticPolicy"]["rdzvBackend"] == "etcd-v2"
    assert pytorchjob["spec"]["elasticPolicy"]["maxRestarts"] == 3

    trainer = trainjob["spec"]["trainer"]
    assert (trainer["image"], trainer["command"], trainer["args"]) == (container["image"], CODE_COMMAND, args)
    assert _env(trainer)["FSDP_SDK_CHECKPOINT_DIR"] == env["FSDP_SDK_CHECKPOINT_DIR"]
    (pod,) = worker_pods([trainjob])
    assert pod.spec["serviceAccountName"] == "fsdp-trainer"


def test_the_code_layer_and_its_tag_follow_the_content(code_dir: Path, tmp_path: Path) -> None:
    code = CodeSettings(script="train.py")
    first = collect(code, BASE)
    assert first.files == (".fsdpignore", "lib/model.py", "train.py")  # data/ and *.log left out
    assert collect(code, BASE) == first  # same content, same tag
    (code_dir / "data" / "shard-0.bin").write_bytes(b"\1" * 4096)
    (code_dir / "run.log").write_text("new output\n")
    assert collect(code, BASE).tag == first.tag  # what the ignore file leaves out does not count
    (code_dir / "lib" / "model.py").write_text("WIDTH = 5\n")  # one byte
    changed = collect(code, BASE)
    assert changed.tag != first.tag and changed.tag.startswith("code-") and len(changed.tag) == 21
    assert collect(code, f"{REGISTRY}/fsdp-sdk-trainer:src-fedcba9876543210").tag != changed.tag  # another base

    module = CodeSettings(module="lib.model", args=["--width", "4"])
    assert collect(module, BASE).files == first.files  # --module: the current directory travels
    assert entry_arguments(module, in_image=True) == [
        "--dir",
        "/workspace",
        "--module",
        "lib.model",
        "--",
        "--width",
        "4",
    ]
    assert first.dockerfile.splitlines()[3] == f"FROM {BASE}" and "requirements.txt" not in first.dockerfile
    (code_dir / "requirements.txt").write_text("einops==0.8.1\n")
    with_requirements = collect(code, BASE)
    text = with_requirements.dockerfile
    install = "RUN PIP_CONSTRAINT=/opt/fsdp-sdk/constraints.txt python -m pip install --no-cache-dir -r "
    assert install + "/workspace/requirements.txt" in text  # under the image's torch constraint
    assert text.index("requirements.txt") < text.index("COPY code/ /workspace/")  # a code edit keeps the pip layer
    context = tmp_path / "context"
    dockerfile = prepare_context(with_requirements, context)
    assert dockerfile.read_text() == text
    assert sorted(p.relative_to(context / "code").as_posix() for p in (context / "code").rglob("*") if p.is_file()) == [
        ".fsdpignore",
        "lib/model.py",
        "requirements.txt",
        "train.py",
    ]
    assert (context / "fsdp-sdk" / "src" / "fsdp_sdk" / "code_entry.py").is_file()  # the runtime the workers run
    assert (context / "fsdp-sdk" / "pyproject.toml").is_file()


def _pushed(ecr: Any, tag: str) -> None:
    """What the real ``docker push`` leaves in ECR (the recording docker pushes nothing)."""
    manifest = {"schemaVersion": 2, "mediaType": "application/vnd.docker.distribution.manifest.v2+json"}
    ecr.put_image(repositoryName="fsdp-sdk-trainer", imageManifest=json.dumps(manifest), imageTag=tag)


def _images(apiserver: FakeApiServer) -> list[str]:
    return [
        job["spec"]["pytorchReplicaSpecs"]["Worker"]["template"]["spec"]["containers"][0]["image"]
        for job in apiserver.objects("PyTorchJob")
    ]


def test_the_layer_is_built_and_pushed_only_when_the_code_changed(
    isolated_cli: None,
    aws: str,
    code_dir: Path,
    tmp_path: Path,
    kubeconfig: Path,
    apiserver: FakeApiServer,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    from fsdp_sdk.aws.session import aws_client

    monkeypatch.chdir(code_dir)
    log = tmp_path / "calls.jsonl"
    monkeypatch.setenv("PATH", f"{install_fake_tools(tmp_path / 'bin', log, 'docker')}:{Path('/usr/bin')}")
    submit = ["job", "submit", "--unique", "--set", f"job.registry={REGISTRY}", "--script", "train.py"]
    code, _, err = cli(capsys, *submit, "--", "--epochs", "1")
    assert code == 0, err
    calls = [c["argv"] for c in recorded(log)]
    assert [argv[0] for argv in calls] == ["build", "login", "tag", "push"]
    tag = calls[0][calls[0].index("-t") + 1].split(":")[1]
    assert tag == collect(CodeSettings(script="train.py"), f"{REGISTRY}/fsdp-sdk-trainer:latest").tag
    assert calls[-1] == ["push", f"{REGISTRY}/fsdp-sdk-trainer:{tag}"]
    assert "building the code layer" in err
    ecr = aws_client("ecr", "us-west-2")
    _pushed(ecr, tag)

    code, _, err = cli(capsys, *submit)  # the same content: ECR has it
    assert code == 0, err
    assert len(recorded(log)) == 4 and "is in the registry: not built again" in err

    (code_dir / "train.py").write_text(SCRIPT + "#\n")
    code, _, err = cli(capsys, *submit)
    assert code == 0, err
    calls = [c["argv"] for c in recorded(log)][4:]
    assert [argv[0] for argv in calls] == ["build", "login", "tag", "push"]
    new_tag = calls[0][calls[0].index("-t") + 1].split(":")[1]
    assert new_tag != tag
    assert sorted(_images(apiserver)) == sorted(
        [f"{REGISTRY}/fsdp-sdk-trainer:{tag}"] * 2 + [f"{REGISTRY}/fsdp-sdk-trainer:{new_tag}"]
    )


def test_a_directory_over_the_limit_is_refused_before_anything_is_built_or_sent(
    isolated_cli: None,
    code_dir: Path,
    tmp_path: Path,
    kubeconfig: Path,
    apiserver: FakeApiServer,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    monkeypatch.chdir(code_dir)
    log = tmp_path / "calls.jsonl"
    monkeypatch.setenv("PATH", f"{install_fake_tools(tmp_path / 'bin', log, 'docker')}:{Path('/usr/bin')}")
    (code_dir / "weights.pt").write_bytes(b"\0" * 3 * 2**20)
    over = ["--set", f"job.registry={REGISTRY}", "--set", "code.max_mib=2", "--script", "train.py"]
    for command in (["job", "render"], ["job", "submit"]):
        code, out, err = cli(capsys, *command, *over)
        assert code == 2 and out == "", err
        (line,) = err.strip().splitlines()
        assert "more than the 2 MiB of code a job may send" in line and "weights.pt, 3.0 MiB" in line
        assert "list data, checkpoints and environments in .fsdpignore" in line
    trainer_only = ["--set", "train.steps=5", "--set", f"job.registry={REGISTRY}", "--script", "train.py"]
    code, _, err = cli(capsys, "job", "submit", *trainer_only)
    (line,) = err.strip().splitlines()
    assert code == 2 and "train.steps" in line and "option of the built-in trainer" in line
    assert recorded(log) == [] and apiserver.writes() == []  # nothing built, nothing submitted


def sum_of_squares(n):
    """Sent to the cluster by Client.train: its source alone."""
    import math

    return {"sum": sum(i * i for i in range(n)), "pi": round(math.pi, 2)}


def test_client_train_on_a_cluster_sends_the_function_in_the_layer_and_returns_its_result(
    isolated_cli: None,
    aws: str,
    tmp_path: Path,
    kubeconfig: Path,
    apiserver: FakeApiServer,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    import os
    import subprocess
    import sys

    from fsdp_sdk.client import Client

    log = tmp_path / "calls.jsonl"
    monkeypatch.setenv("PATH", f"{install_fake_tools(tmp_path / 'bin', log, 'docker')}:{Path('/usr/bin')}")
    state = tmp_path / "state"
    client = Client.from_sources(
        overrides={"job.registry": REGISTRY, "cluster.state_dir": str(state)}, kubeconfig=kubeconfig
    )
    handle = client.train(sum_of_squares, nodes=2, nproc_per_node=4, kwargs={"n": 4})
    (job,) = apiserver.objects("PyTorchJob")
    assert handle.job.name == job["metadata"]["name"] == "fsdp" and job["spec"]["nprocPerNode"] == "4"
    (container,) = job["spec"]["pytorchReplicaSpecs"]["Worker"]["template"]["spec"]["containers"]
    tag = container["image"].rsplit(":", 1)[1]
    assert [c["argv"][0] for c in recorded(log)] == ["build", "login", "tag", "push"]
    assert container["command"] == CODE_COMMAND
    args = container["args"]
    assert args[args.index("--function") + 1] == "sum_of_squares" and json.loads(args[args.index("--kwargs") + 1]) == {
        "n": 4
    }

    # What the leader pod runs: the layer's /workspace is the build context's code/ (what docker COPYs there).
    workspace = state / "code-layers" / tag / "code"
    assert sorted(p.name for p in workspace.iterdir()) == ["sum_of_squares.py"]
    local_args = [a.replace("/workspace", str(workspace)) for a in args]
    env = {**os.environ, "RANK": "0", "WORLD_SIZE": "1", "FSDP_SDK_OUTPUT_DIR": str(tmp_path / "out")}
    pod = subprocess.run(
        [sys.executable, "-m", "fsdp_sdk.code_entry", *local_args],
        capture_output=True,
        text=True,
        timeout=60,
        env=env,
        check=True,
    )
    name = job["metadata"]["name"]
    apiserver.add_pod(f"{name}-worker-0", labels={"training.kubeflow.org/job-name": name}, log=pod.stdout)
    apiserver.set_status(
        "kubeflow.org/v1", "PyTorchJob", name, {"conditions": [{"type": "Succeeded", "status": "True"}]}
    )
    assert handle.result() == {"sum": 14, "pi": 3.14}
