"""Where the rendered job keeps its outputs (node disk, shared filesystem), previews without a registry, --validate."""

from __future__ import annotations

import functools
import http.server
import sys
import threading
import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from fsdp_sdk.config import Config
from fsdp_sdk.k8s.render import PLACEHOLDER_REGISTRY, RenderWarning, render_job, worker_pods
from fsdp_sdk.k8s.validate import validate_objects
from fsdp_sdk.plugins import Plugins, build_plugins

from .fake_apiserver import FakeApiServer
from .tools import cli

REGISTRY = "123456789012.dkr.ecr.us-west-2.amazonaws.com"


@pytest.fixture
def plugins() -> Plugins:
    return build_plugins(autoload=False)


def config(**job: Any) -> Config:
    return Config.from_dict({"job": {"registry": REGISTRY, **job}, "trainer": {"model": {"preset": "tiny"}}})


def render(config: Config, plugins: Plugins, **kwargs: Any) -> tuple[list[dict], list[str]]:
    """The objects, and the RenderWarnings issued while rendering them."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", RenderWarning)
        objects = render_job(config, plugins=plugins, **kwargs)
    return objects, [str(w.message) for w in caught if issubclass(w.category, RenderWarning)]


def pod_spec(job: dict) -> dict:
    return job["spec"]["pytorchReplicaSpecs"]["Worker"]["template"]["spec"]


def option(args: list[str], name: str) -> str | None:
    return args[args.index(name) + 1] if name in args else None


def test_outputs_go_to_the_node_disk_one_directory_per_job(plugins: Plugins, pytorchjob_crd: Path) -> None:
    objects, said = render(config(name="llama", namespace="team-a", num_workers=1), plugins)
    assert said == []
    spec = pod_spec(objects[0])
    container = spec["containers"][0]
    assert option(container["args"], "--train.output_dir") == "/local/fsdp-sdk/team-a/llama"
    assert option(container["args"], "--checkpoint.resume") is None  # the trainer's default: resume when it can
    assert {"name": "FSDP_SDK_OUTPUT_DIR", "value": "/local/fsdp-sdk/team-a/llama"} in container["env"]
    volumes = {v["name"]: v for v in spec["volumes"]}
    assert volumes["local"]["hostPath"] == {"path": "/mnt/k8s-disks/0", "type": "DirectoryOrCreate"}
    assert {"name": "local", "mountPath": "/local"} in container["volumeMounts"]
    assert "shared" not in volumes
    assert validate_objects(objects, crd_paths=[pytorchjob_crd]).ok


def test_several_workers_on_node_disks_start_over_and_say_so(plugins: Plugins) -> None:
    objects, said = render(config(num_workers=2), plugins)
    args = pod_spec(objects[0])["containers"][0]["args"]
    assert option(args, "--checkpoint.resume") == "never"  # shards on two disks: no rank could load them all
    assert len(said) == 1 and "split across their nodes' disks" in said[0] and "job.shared_storage_claim" in said[0]
    chosen = Config.from_dict(
        {"job": {"registry": REGISTRY}, "trainer": {"model": {"preset": "tiny"}, "checkpoint": {"resume": "auto"}}}
    )
    objects, said = render(chosen, plugins)  # the user's explicit choice stands
    assert option(pod_spec(objects[0])["containers"][0]["args"], "--checkpoint.resume") == "auto" and said == []
    on_s3 = Config.from_dict(
        {"job": {"registry": REGISTRY, "num_workers": 2}, "trainer": {"checkpoint": {"dir": "s3://ckpt-b/run"}}}
    )
    objects, said = render(on_s3, plugins)  # every node reads the same S3 prefix: resume works, nothing to say
    args = pod_spec(objects[0])["containers"][0]["args"]
    assert option(args, "--checkpoint.resume") is None and option(args, "--checkpoint.dir") == "s3://ckpt-b/run"
    assert said == []


def test_a_shared_filesystem_claim_holds_every_workers_outputs(
    plugins: Plugins, pytorchjob_crd: Path, trainjob_crd: Path
) -> None:
    shared = config(num_workers=4, shared_storage_claim="fsx-claim")
    objects, said = render(shared, plugins)
    assert said == []
    spec = pod_spec(objects[0])
    container = spec["containers"][0]
    assert {"name": "shared", "persistentVolumeClaim": {"claimName": "fsx-claim"}} in spec["volumes"]
    assert {"name": "shared", "mountPath": "/shared"} in container["volumeMounts"]
    assert option(container["args"], "--train.output_dir") == "/shared/fsdp-sdk/default/fsdp"
    assert option(container["args"], "--checkpoint.resume") is None
    assert validate_objects(objects, crd_paths=[pytorchjob_crd]).ok
    trainjob, _ = render(shared, plugins, api="trainjob")
    (pod,) = worker_pods(trainjob)
    assert {"name": "shared", "persistentVolumeClaim": {"claimName": "fsx-claim"}} in pod.spec["volumes"]
    assert {"name": "shared", "mountPath": "/shared"} in pod.spec["containers"][0]["volumeMounts"]
    assert option(trainjob[0]["spec"]["trainer"]["args"], "--train.output_dir") == "/shared/fsdp-sdk/default/fsdp"
    assert validate_objects(trainjob, crd_paths=[trainjob_crd]).ok


def test_an_output_dir_inside_the_container_is_kept_but_warned_about(plugins: Plugins) -> None:
    inside = Config.from_dict(
        {"job": {"registry": REGISTRY, "num_workers": 1}, "trainer": {"train": {"output_dir": "./outputs"}}}
    )
    objects, said = render(inside, plugins)
    assert option(pod_spec(objects[0])["containers"][0]["args"], "--train.output_dir") == "./outputs"
    assert len(said) == 1 and "is inside the container: a restarted pod starts again from step 0" in said[0]


def test_render_previews_without_a_registry(
    apiserver: FakeApiServer, kubeconfig: Path, capsys: pytest.CaptureFixture[str], isolated_cli: None
) -> None:
    code, out, err = cli(capsys, "job", "render", "--set", "job.num_workers=1")
    assert code == 0, err
    job = next(yaml.safe_load_all(out))
    assert pod_spec(job)["containers"][0]["image"] == f"{PLACEHOLDER_REGISTRY}/fsdp-sdk-trainer:latest"
    assert err.startswith("warning: job.registry is not set: this preview pulls") and err.count("\n") == 1
    code, _, err = cli(capsys, "job", "submit", "--dry-run")  # applying needs the real one
    assert code == 2 and err.startswith("Error: job.registry: no container registry is set")
    assert apiserver.writes() == []


def test_validate_without_its_extra_says_what_to_install(
    capsys: pytest.CaptureFixture[str], isolated_cli: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setitem(sys.modules, "jsonschema", None)  # not installed
    code, out, err = cli(capsys, "job", "render", "--validate", "--set", f"job.registry={REGISTRY}")
    assert code == 2 and out == ""
    assert err == "Error: --validate: needs jsonschema, which is not installed; pip install 'fsdp-sdk[validate]'\n"


@pytest.fixture
def crd_site(pytorchjob_crd: Path) -> Iterator[str]:
    """An HTTP server on loopback serving the directory of the CRD files (a release's download site)."""

    class Quiet(http.server.SimpleHTTPRequestHandler):
        def log_message(self, format: str, *args: Any) -> None:
            pass

    handler = functools.partial(Quiet, directory=str(pytorchjob_crd.parent))
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


def test_validate_with_the_crd_at_a_url(
    capsys: pytest.CaptureFixture[str], isolated_cli: None, crd_site: str, pytorchjob_crd: Path
) -> None:
    base = ["job", "render", "--validate", "--set", f"job.registry={REGISTRY}", "--set", "job.num_workers=1"]
    code, _, err = cli(capsys, *base, "--crd", f"{crd_site}/{pytorchjob_crd.name}")
    assert code == 0, err
    assert f"valid: PyTorchJob/fsdp, checked against the CRD {pytorchjob_crd.name}" in err.splitlines()
    code, _, err = cli(capsys, *base, "--crd", f"{crd_site}/no-such-crd.yaml")
    assert code == 2 and err.count("\n") == 1
    assert err.startswith(f"Error: --crd: cannot download {crd_site}/no-such-crd.yaml: HTTP 404")
    code, _, err = cli(capsys, *base, "--crd", "missing.yaml")
    assert code == 2 and "Error: --crd: cannot read missing.yaml" in err


def test_submit_checks_the_shared_claim_before_writing(
    apiserver: FakeApiServer, kubeconfig: Path, capsys: pytest.CaptureFixture[str], isolated_cli: None
) -> None:
    base = ["job", "submit", "--set", f"job.registry={REGISTRY}", "--set", "job.shared_storage_claim=fsx"]
    code, _, err = cli(capsys, *base)
    assert code == 2 and "job.shared_storage_claim: PersistentVolumeClaim default/fsx does not exist" in err
    claim = {"apiVersion": "v1", "kind": "PersistentVolumeClaim", "metadata": {"name": "fsx", "namespace": "default"}}
    apiserver.put({**claim, "spec": {"accessModes": ["ReadWriteOnce"]}})
    code, _, err = cli(capsys, *base)
    assert code == 2 and "is ReadWriteOnce: the 2 workers cannot all mount it" in err
    assert apiserver.writes() == []
    apiserver.put({**claim, "spec": {"accessModes": ["ReadWriteMany"]}})
    code, _, err = cli(capsys, *base)
    assert code == 0, err
    spec = pod_spec(apiserver.get("kubeflow.org/v1", "PyTorchJob", "fsdp"))
    assert {"name": "shared", "persistentVolumeClaim": {"claimName": "fsx"}} in spec["volumes"]
