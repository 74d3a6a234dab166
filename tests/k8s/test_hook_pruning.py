"""After the plugins' render hooks, `job render --crd` and `job submit` check the objects against the CRDs (files
given, or the cluster's own) and warn, naming the plugin and the field, for every field the API server would drop."""

from __future__ import annotations

import warnings
from pathlib import Path
from typing import Any

import pytest
import yaml

from fsdp_sdk import hookimpl
from fsdp_sdk.config import Config
from fsdp_sdk.errors import KubernetesError
from fsdp_sdk.k8s.jobs import JobClient
from fsdp_sdk.k8s.render import RenderWarning, render_job, worker_pods
from fsdp_sdk.k8s.validate import crd_from_object, load_crd_schema
from fsdp_sdk.plugins import build_plugins, get_plugins

from .fake_apiserver import FakeApiServer
from .test_jobs import install_trainer_objects
from .tools import cli

REGISTRY = "123456789012.dkr.ecr.us-west-2.amazonaws.com"
V20 = "'v20-overrides'"


class TrainerV20Overrides:
    """A third-party hook written against Kubeflow Trainer v2.0's TrainJob: pod settings in spec.podSpecOverrides."""

    @hookimpl
    def fsdp_sdk_render_job(self, config: Config, objects: list[dict[str, Any]]) -> None:
        for obj in objects:
            if obj["kind"] == "TrainJob":
                obj["spec"]["podSpecOverrides"] = [
                    {"targetJobs": [{"name": "node"}], "nodeSelector": {"example.com/pool": "research"}}
                ]


class BothShapes:
    """The same intent written through worker_pods, which both job shapes keep."""

    @hookimpl
    def fsdp_sdk_render_job(self, config: Config, objects: list[dict[str, Any]]) -> None:
        for pod in worker_pods(objects):
            pod.spec.setdefault("nodeSelector", {})["example.com/pool"] = "research"
            pod.labels["example.com/team"] = "research"


def make_config(api: str) -> Config:
    return Config.from_dict({"job": {"registry": REGISTRY, "api": api}, "trainer": {"model": {"preset": "tiny"}}})


def rendered(api: str, crds: list[Any], *plugins: tuple[str, object]) -> tuple[list[dict[str, Any]], list[str]]:
    plugin_set = build_plugins(autoload=False)
    for name, plugin in plugins:
        plugin_set.register(plugin, name=name)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", RenderWarning)
        objects = render_job(make_config(api), rdzv_id="fsdp-h1", plugins=plugin_set, crds=crds)
    said = [str(w.message) for w in caught if issubclass(w.category, RenderWarning)]
    return objects, [line for line in said if "would drop" in line]  # not the warnings about outputs


def test_a_v2_0_hook_on_a_v2_3_trainjob_is_named_with_the_field_it_loses(trainjob_crd: Path) -> None:
    crd = load_crd_schema(trainjob_crd)
    objects, said = rendered("trainjob", [crd], ("v20-overrides", TrainerV20Overrides()), ("both", BothShapes()))
    assert "podSpecOverrides" in objects[0]["spec"]  # rendered as the hook wrote it: the server drops it
    assert len(said) == 1, said
    assert said[0].startswith(f"plugin {V20}: fsdp_sdk_render_job set TrainJob/fsdp spec.podSpecOverrides, ")
    assert "does not declare: the API server would drop it" in said[0] and "worker_pods" in said[0]
    assert "'both'" not in " ".join(said)


@pytest.mark.parametrize("api", ["pytorchjob", "trainjob"])
def test_a_hook_written_for_both_shapes_loses_nothing(api: str, pytorchjob_crd: Path, trainjob_crd: Path) -> None:
    crds = [load_crd_schema(pytorchjob_crd), load_crd_schema(trainjob_crd)]
    objects, said = rendered(api, crds, ("both", BothShapes()))
    assert said == []
    (pod,) = worker_pods(objects[:1])
    assert pod.spec["nodeSelector"]["example.com/pool"] == "research"


def test_without_crds_nothing_is_checked_and_nothing_is_recorded(trainjob_crd: Path) -> None:
    _, said = rendered("trainjob", [], ("v20-overrides", TrainerV20Overrides()))
    assert said == []


def test_job_render_with_crd_warns_on_stderr(
    isolated_cli: None, trainjob_crd: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("FSDP_SDK_JOB__REGISTRY", REGISTRY)
    plugins = get_plugins()
    plugins.register(TrainerV20Overrides(), name="v20-overrides")
    try:
        code, out, err = cli(capsys, "job", "render", "--api", "trainjob", "--crd", str(trainjob_crd))
    finally:
        plugins.unregister("v20-overrides")
    assert code == 0, err
    assert yaml.safe_load_all(out)
    lines = [line for line in err.splitlines() if "podSpecOverrides" in line]
    assert len(lines) == 1 and lines[0].startswith(f"warning: plugin {V20}: fsdp_sdk_render_job set TrainJob/"), err


def test_job_submit_checks_against_the_clusters_own_crd(
    apiserver: FakeApiServer, kubeconfig: Path, trainjob_crd: Path
) -> None:
    install_trainer_objects(apiserver, trainjob_crd)
    plugin_set = build_plugins(autoload=False)
    plugin_set.register(TrainerV20Overrides(), name="v20-overrides")
    jobs = JobClient(make_config("trainjob"), kubeconfig=kubeconfig, plugins=plugin_set)
    with warnings.catch_warnings(record=True) as caught, pytest.raises(KubernetesError, match="podSpecOverrides"):
        warnings.simplefilter("always", RenderWarning)
        # the loopback server validates strictly (kubectl --validate=strict) and refuses the field; a server in its
        # default (fieldValidation=Warn) stores the job without it: the warning is what tells
        jobs.submit(run_id="fsdp-h2", dry_run=True)
    (line,) = [str(w.message) for w in caught if "would drop" in str(w.message)]
    assert line.startswith(f"plugin {V20}: fsdp_sdk_render_job set TrainJob/fsdp spec.podSpecOverrides")
    assert "the cluster's trainjobs.trainer.kubeflow.org" in line


def test_the_clusters_crds_are_what_submit_reads(
    apiserver: FakeApiServer, kubeconfig: Path, trainjob_crd: Path
) -> None:
    jobs = JobClient(make_config("trainjob"), kubeconfig=kubeconfig, plugins=build_plugins(autoload=False))
    assert jobs.installed_crds() == []  # no Kubeflow CRD on the cluster: nothing to check against
    install_trainer_objects(apiserver, trainjob_crd)
    (crd,) = jobs.installed_crds()
    assert (crd.group, crd.kind) == ("trainer.kubeflow.org", "TrainJob")
    assert crd.structural == crd_from_object(yaml.safe_load(trainjob_crd.read_text())).structural
