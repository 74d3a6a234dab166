"""``up`` acts on the plan it shows: preflight values filled in, the backend applies that very plan, then core makes
the cluster ready for jobs (etcd through server-side apply, the Training Operator through kubectl)."""

from __future__ import annotations

import datetime
import json
import os
from pathlib import Path
from typing import Any, ClassVar

import pytest

from fsdp_sdk import Client, hookimpl, pins
from fsdp_sdk.backends.base import ClusterBackend, ClusterStatus, Plan
from fsdp_sdk.config import Config
from fsdp_sdk.errors import ConfigError
from fsdp_sdk.monitoring import MonitoringComponent
from fsdp_sdk.pins import pin
from fsdp_sdk.plugins import build_plugins, get_plugins
from fsdp_sdk.preflight import PreflightResult
from fsdp_sdk.resolved import Resolved

from .fake_apiserver import FakeApiServer
from .tools import cli, install_fake_tools, recorded

pytestmark = pytest.mark.usefixtures("isolated_cli")


class RecordingBackend(ClusterBackend):
    """A Kubernetes backend whose cluster is the loopback API server; it records what it is asked to apply."""

    name: ClassVar[str] = "recording"
    kubeconfig_file: ClassVar[Path]
    applied: ClassVar[list[tuple[Config, Plan]]] = []

    device_plugins: ClassVar[list[dict[str, Any]]] = []

    def plan(self, resolved: Resolved) -> Plan:
        zones = list(resolved.config.cluster.availability_zones)
        return Plan(
            self.name,
            resolved.config.cluster.name,
            steps=[f"create the cluster in {', '.join(zones) or 'any zone'}"],
            resources=[{"kind": "Cluster", "zones": zones}],
            hourly_cost_usd=1.5,
            details={"zones": zones},
            kubernetes=self.device_plugins,
        )

    def apply(self, config: Config, plan: Plan, *, progress=lambda line: None) -> ClusterStatus:
        type(self).applied.append((config, plan))
        progress("created")
        return self.status(config)

    def down(self, config, *, dry_run=False, progress=None) -> ClusterStatus:
        return self.status(config)

    def scale(self, config, nodes, *, dry_run=False, progress=None) -> ClusterStatus:
        return self.status(config)

    def status(self, config: Config) -> ClusterStatus:
        return ClusterStatus(self.name, config.cluster.name, "ready" if self.applied else "absent", 2)

    def kubeconfig(self, config: Config) -> Path:
        return self.kubeconfig_file


class Plugin:
    created: ClassVar[list[ClusterStatus]] = []

    @hookimpl
    def fsdp_sdk_register_backends(self, registry: Any) -> None:
        registry.add(RecordingBackend)

    @hookimpl
    def fsdp_sdk_preflight(self, config: Config) -> list[PreflightResult]:
        return [
            PreflightResult(
                "zones",
                True,
                "us-west-2b has the GPUs",
                suggested={"cluster.availability_zones": ["us-west-2b", "us-west-2a"]},
            )
        ]

    @hookimpl
    def fsdp_sdk_monitoring_components(self, config: Config) -> list[MonitoringComponent]:
        probe = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "probe", "namespace": "default"}}
        return [MonitoringComponent("probe", "a probe", objects=[probe])]

    @hookimpl
    def fsdp_sdk_cluster_created(self, config: Config, status: ClusterStatus) -> None:
        self.created.append(status)


@pytest.fixture
def kubectl(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    log = tmp_path / "calls.jsonl"
    bin_dir = install_fake_tools(tmp_path / "bin", log, "kubectl")
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    return log


@pytest.fixture
def recording(apiserver: FakeApiServer, tmp_path: Path) -> Path:
    path = apiserver.write_kubeconfig(tmp_path / "kubeconfig")
    RecordingBackend.kubeconfig_file = path
    RecordingBackend.applied = []
    RecordingBackend.device_plugins = []
    Plugin.created = []
    return path


def _client(**overrides: Any) -> Client:
    plugins = build_plugins(autoload=False)
    plugins.register(Plugin(), name="recording")
    return Client(Config().with_overrides({"cluster.backend": "recording", **overrides}), plugins=plugins)


def test_up_applies_the_plan_it_showed_then_prepares_the_cluster(
    apiserver: FakeApiServer, recording: Path, kubectl: Path
) -> None:
    client = _client()
    plan = client.plan()
    assert plan.filled == {"cluster.availability_zones": ["us-west-2b", "us-west-2a"]}
    assert plan.resources == [{"kind": "Cluster", "zones": ["us-west-2b", "us-west-2a"]}]
    assert plan.steps[0] == "create the cluster in us-west-2b, us-west-2a"
    assert plan.steps[1:] == [
        f"write the cluster's kubeconfig under {client.config.cluster.state_dir}",
        "apply etcd (v2 API) for the rendezvous in namespace default",
        f"install the Kubeflow Training Operator {pin('training-operator').version}",
    ]
    assert [(o["kind"], o["metadata"]["name"]) for o in plan.kubernetes] == [
        ("Service", "etcd"),
        ("Deployment", "etcd"),
    ]
    assert apiserver.writes() == [] and RecordingBackend.applied == []  # planning changed nothing

    status = client.up(plan)
    ((config, applied),) = RecordingBackend.applied
    assert applied is plan and config.cluster.availability_zones == ["us-west-2b", "us-west-2a"]
    assert config.origins["cluster.availability_zones"].source == "preflight"
    assert [(w.method, w.path) for w in apiserver.writes()] == [
        ("PATCH", "/api/v1/namespaces/default/services/etcd"),
        ("PATCH", "/apis/apps/v1/namespaces/default/deployments/etcd"),
    ]
    call, patched = recorded(kubectl)
    assert patched["argv"][:3] == ["patch", "deployment", "training-operator"]
    assert call["argv"][:4] == [
        "apply",
        "--server-side",
        "-k",
        f"github.com/kubeflow/training-operator.git/manifests/overlays/standalone?ref={pin('training-operator').version}",
    ]
    assert call["argv"][4:] == ["--kubeconfig", str(recording)]
    assert Plugin.created == [status] and status.ready


def test_values_the_user_set_are_not_replaced_by_suggestions(recording: Path) -> None:
    plan = _client(**{"cluster.availability_zones": "us-west-2c,us-west-2d"}).plan()
    assert plan.filled == {} and plan.resources[0]["zones"] == ["us-west-2c", "us-west-2d"]


def test_a_plan_for_another_cluster_is_refused(recording: Path) -> None:
    plan = _client(**{"cluster.name": "other"}).plan()
    with pytest.raises(
        ConfigError, match=r"^plan: was made for recording/other; make the plan with this client's plan\(\)$"
    ):
        _client().up(plan)
    assert RecordingBackend.applied == []


def test_dry_run_prints_the_plan_as_json_and_writes_nothing(
    apiserver: FakeApiServer, recording: Path, kubectl: Path, capsys
) -> None:
    get_plugins().register(Plugin(), name="recording")
    code, out, err = cli(capsys, "up", "--backend", "recording", "--dry-run", "--json")
    assert code == 0, err
    plan = json.loads(out)["plan"]
    assert plan["filled"] == {"cluster.availability_zones": ["us-west-2b", "us-west-2a"]}
    assert plan["hourly_cost_usd"] == 1.5 and plan["preflight"][0]["check"] == "zones"
    assert [o["kind"] for o in plan["kubernetes"]] == ["Service", "Deployment"]
    assert apiserver.writes() == [] and recorded(kubectl) == [] and RecordingBackend.applied == []


def test_up_applies_the_backends_objects_and_monitoring_it_showed(
    apiserver: FakeApiServer, recording: Path, kubectl: Path
) -> None:
    """The backend's device plugins and the monitoring components go into the plan's objects, and are applied."""
    RecordingBackend.device_plugins = [
        {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": "gpu-plugin", "namespace": "default"}}
    ]
    client = _client(**{"observability.enabled": True})
    plan = client.plan()
    assert plan.steps[-1] == "apply monitoring: probe"
    shown = [(o["kind"], o["metadata"]["name"]) for o in plan.kubernetes]
    assert shown == [
        ("ServiceAccount", "gpu-plugin"),
        ("Service", "etcd"),
        ("Deployment", "etcd"),
        ("ConfigMap", "probe"),
    ]
    client.up(plan)
    assert [w.path for w in apiserver.writes()] == [  # in apply order: accounts, configuration, services, workloads
        "/api/v1/namespaces/default/serviceaccounts/gpu-plugin",
        "/api/v1/namespaces/default/configmaps/probe",
        "/api/v1/namespaces/default/services/etcd",
        "/apis/apps/v1/namespaces/default/deployments/etcd",
    ]
    assert [c["argv"][:2] for c in recorded(kubectl)] == [["apply", "--server-side"], ["patch", "deployment"]]


# --------------------------------------------------------------------------- the Kubernetes version's support


def _on(monkeypatch: pytest.MonkeyPatch, day: str) -> None:
    monkeypatch.setattr(pins, "today", lambda: datetime.date.fromisoformat(day))


def test_plan_says_the_version_support_and_warns_in_extended_support(
    monkeypatch: pytest.MonkeyPatch, recording: Path
) -> None:
    said: list[str] = []
    _on(monkeypatch, "2026-12-02")
    client = _client(**{"cluster.kubernetes_version": "1.34"})
    client.progress = said.append
    kubernetes = client.plan().details["kubernetes"]
    assert kubernetes == {
        "version": "1.34",
        "support": "standard",
        "end_of_standard_support": "2026-12-02",
        "end_of_extended_support": "2027-12-02",
        "control_plane_usd_per_hour": 0.10,
    }
    assert said == []
    _on(monkeypatch, "2026-12-03")
    kubernetes = client.plan().details["kubernetes"]
    assert kubernetes["support"] == "extended" and kubernetes["control_plane_usd_per_hour"] == 0.60
    assert said == [
        "warning: Kubernetes 1.34 is in EKS extended support until 2027-12-02: its control plane costs $0.60/h "
        f"instead of $0.10/h; {pins.default_kubernetes_version()} is in standard support"
    ]


@pytest.mark.parametrize(
    "version, day, problem",
    [
        ("1.31", "2026-11-27", "Kubernetes 1.31 left EKS extended support on 2026-11-26"),
        ("1.28", "2026-12-02", "EKS offers no Kubernetes 1.28"),
    ],
)
def test_up_refuses_a_version_past_extended_support_with_the_versions_that_work(
    monkeypatch: pytest.MonkeyPatch,
    recording: Path,
    capsys: pytest.CaptureFixture[str],
    version: str,
    day: str,
    problem: str,
) -> None:
    _on(monkeypatch, day)
    with pytest.raises(ConfigError) as error:
        _client(**{"cluster.kubernetes_version": version}).plan()
    working = ", ".join(reversed(pins.supported_kubernetes_versions(datetime.date.fromisoformat(day))))
    assert str(error.value) == (
        f"cluster.kubernetes_version: {problem}; set cluster.kubernetes_version to one EKS creates clusters of on "
        f"{day}: {working}"
    )
    assert "1.35, 1.34, 1.33, 1.32" in working and "1.31" not in working
    assert RecordingBackend.applied == []
    # the day before the end of extended support it still plans (at the extended price)
    _on(monkeypatch, "2026-11-26")
    assert _client(**{"cluster.kubernetes_version": "1.31"}).plan().details["kubernetes"]["support"] == "extended"


def test_status_says_when_the_version_leaves_standard_support(monkeypatch: pytest.MonkeyPatch, recording: Path) -> None:
    _on(monkeypatch, "2026-12-02")
    client = _client()
    RecordingBackend.applied = [(client.config, client.plan())]  # the cluster exists
    support = client.status().details["kubernetes_support"]
    release = pins.kubernetes_release(client.config.cluster.kubernetes_version)
    assert release is not None
    assert support == f"Kubernetes {release.version}: standard support until {release.end_of_standard}"
    _on(monkeypatch, "2027-04-01")
    support = _client(**{"cluster.kubernetes_version": "1.35"}).status().details["kubernetes_support"]
    assert (
        support == "Kubernetes 1.35: extended support ($0.60/h) since 2027-03-27, until 2028-03-27; upgrade the cluster"
    )


def test_up_with_the_trainjob_api_installs_the_trainer_and_its_runtime(
    apiserver: FakeApiServer, recording: Path, kubectl: Path
) -> None:
    client = _client(**{"job.api": "trainjob"})
    plan = client.plan()
    assert plan.steps[-2:] == [
        f"install Kubeflow Trainer {pin('kubeflow-trainer').version} (with JobSet {pin('jobset').version})",
        "apply the ClusterTrainingRuntime fsdp-sdk-torch-distributed",
    ]
    client.up(plan)
    calls = [c["argv"] for c in recorded(kubectl)]
    assert [argv[:2] for argv in calls] == [
        ["apply", "--server-side"],
        ["patch", "deployment"],
        ["wait", "--for=condition=Available"],
    ]
    assert calls[0][3].startswith("github.com/kubeflow/trainer.git/manifests/overlays/manager?ref=")
    assert apiserver.get("trainer.kubeflow.org/v1alpha1", "ClusterTrainingRuntime", "fsdp-sdk-torch-distributed")


class RecordingEksBackend(RecordingBackend):
    """The recording backend, for an EKS cluster (moto's): core adds the checkpoint bucket and the pods' access."""

    name: ClassVar[str] = "recording-eks"
    eks_cluster: ClassVar[bool] = True

    def apply(self, config: Config, plan: Plan, *, progress=lambda line: None) -> ClusterStatus:
        from fsdp_sdk.aws.session import aws_client

        iam, eks = aws_client("iam", config.cluster.region), aws_client("eks", config.cluster.region)
        role = iam.create_role(RoleName="cluster", AssumeRolePolicyDocument="{}")["Role"]["Arn"]
        eks.create_cluster(name=config.cluster.name, roleArn=role, resourcesVpcConfig={"subnetIds": []})
        return super().apply(config, plan, progress=progress)


def test_on_eks_up_adds_the_checkpoint_bucket_after_the_cluster(
    aws: str, apiserver: FakeApiServer, recording: Path, kubectl: Path, pod_identity: Any
) -> None:
    from fsdp_sdk.aws.session import aws_client

    s3 = aws_client("s3", "us-west-2")
    s3.create_bucket(Bucket="team-checkpoints", CreateBucketConfiguration={"LocationConstraint": "us-west-2"})
    plugins = build_plugins(autoload=False)
    plugins.register(Plugin(), name="recording")
    plugins.backends.add(RecordingEksBackend)
    settings = {"cluster.backend": "recording-eks", "cluster.checkpoint_bucket": "team-checkpoints"}
    client = Client(Config().with_overrides(settings), plugins=plugins)
    plan = client.plan()
    assert "cluster.checkpoint_bucket" not in plan.filled  # the user named it
    assert plan.details["checkpoints"]["found"] == "adopted"
    bucket_step = plan.steps.index(
        "adopt the S3 bucket team-checkpoints in us-west-2 for checkpoints (its settings left as they are)"
    )
    assert plan.steps[bucket_step - 1].startswith("write the cluster's kubeconfig")  # after the cluster
    assert plan.steps[-1] == (
        "apply the ServiceAccount default/fsdp-trainer the training pods run under (EKS Pod Identity gives it the "
        "checkpoint bucket's role)"
    )
    assert ("ServiceAccount", "fsdp-trainer") in [(o["kind"], o["metadata"]["name"]) for o in plan.kubernetes]
    assert aws_client("iam", "us-west-2").list_roles(PathPrefix="/fsdp-sdk/")["Roles"] == []  # planned only

    client.up(plan)
    (role,) = aws_client("iam", "us-west-2").list_roles(PathPrefix="/fsdp-sdk/us-west-2/fsdp-sdk/")["Roles"]
    (association,) = pod_identity.associations.values()
    assert association["roleArn"] == role["Arn"] and association["serviceAccount"] == "fsdp-trainer"
    assert "/api/v1/namespaces/default/serviceaccounts/fsdp-trainer" in [w.path for w in apiserver.writes()]
    assert client.status().details["checkpoint_bucket"] == "s3://team-checkpoints (us-west-2)"
