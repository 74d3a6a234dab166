"""The rendered components: pure, valid against the Kubernetes OpenAPI, and right about the DCGM exporter."""

from __future__ import annotations

import json
from typing import Any

import pytest
import yaml

from fsdp_sdk.k8s.validate import validate_builtin
from fsdp_sdk.monitoring import GENERATED_KEYS_ANNOTATION
from fsdp_sdk.pins import pin

from .schemas import structural_errors

DASHBOARD_DCGM_FIELDS = {
    "DCGM_FI_DEV_GPU_UTIL",
    "DCGM_FI_DEV_MEM_COPY_UTIL",
    "DCGM_FI_DEV_XID_ERRORS",
    "DCGM_FI_DEV_SM_CLOCK",
    "DCGM_FI_DEV_GPU_TEMP",
    "DCGM_FI_DEV_POWER_USAGE",
}


def _components(client: Any) -> dict[str, Any]:
    return {c.name: c for c in client.loaded_plugins.hooks.monitoring_components(client.config)}


@pytest.fixture
def client(make_config: Any, plugins: Any) -> Any:
    from fsdp_sdk import Client

    return Client(make_config({"cluster.backend": "local"}), plugins=plugins)


def test_plugin_loads_through_its_entry_point() -> None:
    from fsdp_sdk.entry_points import entry_points

    found = {ep.name: ep for ep in entry_points("fsdp_sdk")}
    assert "observability" in found, "fsdp-sdk-observability's entry point is not installed"
    module = found["observability"].load()
    assert module.__name__ == "fsdp_sdk_observability.plugin"


@pytest.mark.parametrize("operator", [False, True], ids=["own-prometheus", "prometheus-operator"])
def test_every_object_is_valid(make_config: Any, plugins: Any, operator: bool) -> None:
    config = make_config({"observability.prometheus_operator": operator})
    components = plugins.hooks.monitoring_components(config)
    assert [c.name for c in components] == ["dcgm-exporter", "prometheus", "grafana", "node-tools", "cloudwatch"]
    checked = 0
    for component in components:
        for obj in component.objects:
            if obj["apiVersion"].startswith("monitoring.coreos.com"):
                assert operator
                errors = structural_errors(dict(obj))
            else:
                errors = validate_builtin(dict(obj), version="1.31")
            assert errors == [], f"{component.name}: {obj['kind']}/{obj['metadata']['name']}: {errors}"
            checked += 1
    assert checked >= 15
    kinds = {o["kind"] for c in components for o in c.objects}
    if operator:
        assert {"ServiceMonitor", "PodMonitor"} <= kinds and "ClusterRole" not in kinds
        prometheus = next(c for c in components if c.name == "prometheus")
        assert not any(o["kind"] == "Deployment" for o in prometheus.objects)
    else:
        assert not kinds & {"ServiceMonitor", "PodMonitor"} and {"ClusterRole", "ClusterRoleBinding"} <= kinds


def test_rendering_is_pure(make_config: Any, plugins: Any) -> None:
    config = make_config()
    first = [c.objects for c in plugins.hooks.monitoring_components(config)]
    second = [c.objects for c in plugins.hooks.monitoring_components(config)]
    assert json.dumps(first, sort_keys=True) == json.dumps(second, sort_keys=True)


def test_dcgm_exporter_facts(client: Any) -> None:
    from fsdp_sdk_observability.dcgm import COUNTERS

    component = _components(client)["dcgm-exporter"]
    daemonset = next(o for o in component.objects if o["kind"] == "DaemonSet")
    pod = daemonset["spec"]["template"]["spec"]
    container = pod["containers"][0]
    assert container["image"] == pin("dcgm-exporter").image_ref()  # the table's release
    assert container["ports"] == [{"name": "metrics", "containerPort": 9400, "protocol": "TCP"}]
    assert {"name": "DCGM_EXPORTER_KUBERNETES", "value": "true"} in container["env"]
    assert container["securityContext"]["capabilities"] == {"add": ["SYS_ADMIN"], "drop": ["ALL"]}
    assert container["args"] == ["-f", "/etc/dcgm-exporter/fsdp-counters.csv"]
    assert {
        "name": "pod-gpu-resources",
        "hostPath": {"path": "/var/lib/kubelet/pod-resources", "type": "Directory"},
    } in pod["volumes"]
    terms = pod["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"]
    expressions = [t["matchExpressions"][0] for t in terms]
    assert {"key": "nvidia.com/gpu.present", "operator": "In", "values": ["true"]} in expressions
    assert {"key": "node.kubernetes.io/instance-type", "operator": "In", "values": ["p5.48xlarge"]} in expressions
    assert pod["tolerations"] == [{"operator": "Exists"}]
    # the counters file has every field the dashboard and the report use, in the exporter's CSV format
    csv = next(o for o in component.objects if o["kind"] == "ConfigMap")["data"]["fsdp-counters.csv"]
    fields = {line.split(",")[0].strip() for line in csv.splitlines() if line and not line.startswith("#")}
    assert DASHBOARD_DCGM_FIELDS <= fields == {name for name, _, _ in COUNTERS}
    assert all(len(line.split(",")) >= 3 for line in csv.splitlines() if line and not line.startswith("#"))


def test_images_are_pinned(make_config: Any, plugins: Any) -> None:
    images = [
        c["image"]
        for component in plugins.hooks.monitoring_components(make_config())
        for obj in component.objects
        if obj["kind"] in ("Deployment", "DaemonSet")
        for c in obj["spec"]["template"]["spec"]["containers"]
    ]
    assert len(images) == 5
    for image in images:
        tag = image.rsplit(":", 1)[1]
        assert tag not in ("latest", "") and any(ch.isdigit() for ch in tag), image


def test_grafana_password_is_generated_at_apply_time_never_rendered(client: Any) -> None:
    component = _components(client)["grafana"]
    secret = next(o for o in component.objects if o["kind"] == "Secret")
    assert "data" not in secret and "stringData" not in secret
    assert secret["metadata"]["annotations"] == {GENERATED_KEYS_ANNOTATION: "admin-password"}
    deployment = next(o for o in component.objects if o["kind"] == "Deployment")
    env = {e["name"]: e for e in deployment["spec"]["template"]["spec"]["containers"][0]["env"]}
    assert env["GF_SECURITY_ADMIN_PASSWORD"] == {
        "name": "GF_SECURITY_ADMIN_PASSWORD",
        "valueFrom": {"secretKeyRef": {"name": "grafana-admin", "key": "admin-password"}},
    }
    assert env["GF_SECURITY_ADMIN_USER"]["value"] == "admin"
    text = yaml.safe_dump_all([dict(o) for o in component.objects])
    assert "admin-password:" not in text.replace("key: admin-password", "")


def test_grafana_takes_a_secret_of_your_own(make_config: Any, plugins: Any) -> None:
    config = make_config({"monitoring.grafana_admin_secret": "my-grafana"})
    grafana = next(c for c in plugins.hooks.monitoring_components(config) if c.name == "grafana")
    assert not any(o["kind"] == "Secret" for o in grafana.objects)
    deployment = next(o for o in grafana.objects if o["kind"] == "Deployment")
    env = {e["name"]: e for e in deployment["spec"]["template"]["spec"]["containers"][0]["env"]}
    assert env["GF_SECURITY_ADMIN_USER"]["valueFrom"]["secretKeyRef"] == {"name": "my-grafana", "key": "admin-user"}
    assert env["GF_SECURITY_ADMIN_PASSWORD"]["valueFrom"]["secretKeyRef"]["name"] == "my-grafana"


def test_grafana_says_how_to_log_in_from_its_own_settings(make_config: Any, plugins: Any) -> None:
    """``monitor open grafana`` prints the endpoint's own login line: the plugin's password_command, never the
    password, with the user and Secret of its settings."""
    config = make_config({"monitoring.grafana_admin_secret": "my-grafana", "monitoring.grafana_admin_user": "ops"})
    grafana = next(c for c in plugins.hooks.monitoring_components(config) if c.name == "grafana")
    (endpoint,) = grafana.endpoints
    assert endpoint.login == (
        "log in as ops; the password: kubectl -n monitoring get secret my-grafana "
        "-o jsonpath='{.data.admin-password}' | base64 -d"
    )
    prometheus = next(c for c in plugins.hooks.monitoring_components(config) if c.name == "prometheus")
    assert [e.login for e in prometheus.endpoints] == [""]


def test_grafana_data_source_follows_the_prometheus_in_use(make_config: Any, plugins: Any) -> None:
    def url(config: Any) -> str:
        grafana = next(c for c in plugins.hooks.monitoring_components(config) if c.name == "grafana")
        provisioning = next(o for o in grafana.objects if o["metadata"]["name"] == "grafana-provisioning")
        return yaml.safe_load(provisioning["data"]["datasources.yaml"])["datasources"][0]["url"]

    assert url(make_config()) == "http://prometheus.monitoring.svc:9090"
    operator = make_config(
        {
            "observability.prometheus_operator": True,
            "monitoring.operator_prometheus": "observability/kps-prometheus:9090",
        }
    )
    assert url(operator) == "http://kps-prometheus.observability.svc:9090"


def test_operator_monitors_carry_the_selector_labels(make_config: Any, plugins: Any) -> None:
    config = make_config(
        {"observability.prometheus_operator": True, "monitoring.operator_selector_labels": {"release": "kps"}}
    )
    monitors = [
        o for c in plugins.hooks.monitoring_components(config) for o in c.objects if o["kind"].endswith("Monitor")
    ]
    assert sorted(o["kind"] for o in monitors) == ["PodMonitor", "ServiceMonitor"]
    assert all(o["metadata"]["labels"]["release"] == "kps" for o in monitors)
    service_monitor = next(o for o in monitors if o["kind"] == "ServiceMonitor")
    assert service_monitor["spec"]["endpoints"][0]["honorLabels"] is True  # keeps DCGM's pod labels
    pod_monitor = next(o for o in monitors if o["kind"] == "PodMonitor")
    assert pod_monitor["spec"]["podMetricsEndpoints"][0]["port"] == "fsdp-metrics"
    targets = {r.get("targetLabel") for r in pod_monitor["spec"]["podMetricsEndpoints"][0]["relabelings"]}
    assert {"fsdp_job", "run_id"} <= targets
    # a misspelt field is caught by the structural schema
    broken = json.loads(json.dumps(pod_monitor))
    broken["spec"]["podMetricsEndpoints"][0]["prot"] = "x"
    assert structural_errors(broken)


def test_cloudwatch_is_installed_only_when_named(make_config: Any, plugins: Any) -> None:
    from fsdp_sdk import Client

    default = Client(make_config({"cluster.backend": "local"}), plugins=plugins)
    assert "cloudwatch" not in [c.name for c in default.monitoring_components()]
    named = Client(
        make_config({"cluster.backend": "local", "observability.components": ["cloudwatch"]}), plugins=plugins
    )
    [component] = named.monitoring_components()
    addon = component.eks_addon
    assert addon is not None and addon.name == "amazon-cloudwatch-observability"
    assert addon.policy_arns == ["arn:aws:iam::aws:policy/CloudWatchAgentServerPolicy"]
    assert (addon.namespace, addon.service_account, addon.needs) == (
        "amazon-cloudwatch",
        "cloudwatch-agent",
        ["eks-pod-identity-agent"],
    )
    china = Client(make_config({"cluster.backend": "local", "cluster.region": "cn-north-1"}), plugins=plugins)
    assert china.monitoring(connect=False).select(["cloudwatch"])[0].eks_addon.policy_arns[0].startswith("arn:aws-cn:")


def test_rendered_job_carries_the_trainer_endpoint(make_config: Any, plugins: Any, pytorchjob_crd: Any) -> None:
    from fsdp_sdk.k8s.render import render_job
    from fsdp_sdk.k8s.validate import validate_objects

    config = make_config({"monitoring.scrape_interval": "10s"})
    objects = render_job(config, rdzv_id="fsdp-1234abcd", plugins=plugins)
    job = objects[0]
    template = job["spec"]["pytorchReplicaSpecs"]["Worker"]["template"]
    container = template["spec"]["containers"][0]
    args = container["args"]
    assert args[args.index("--metrics.prometheus_port") + 1] == "9464"
    assert args[args.index("--metrics.prometheus_linger_s") + 1] == "20"
    assert {"name": "fsdp-metrics", "containerPort": 9464, "protocol": "TCP"} in container["ports"]
    assert template["metadata"]["annotations"]["prometheus.io/port"] == "9464"
    labels = template["metadata"]["labels"]
    assert labels["app.kubernetes.io/name"] == "fsdp-trainer" and labels["app.kubernetes.io/component"] == "worker"
    assert validate_objects(objects, crd_paths=[pytorchjob_crd]).ok
    # observability off: the job is left as core renders it
    plain = render_job(make_config({"observability.enabled": False}), rdzv_id="fsdp-1234abcd", plugins=plugins)
    assert "--metrics.prometheus_port" not in plain[0]["spec"]["pytorchReplicaSpecs"]["Worker"]["template"]["spec"][
        "containers"
    ][0].get("args", [])


def test_a_trainjob_scrapes_the_port_its_runtime_declares_or_is_refused(make_config: Any, plugins: Any) -> None:
    """One ClusterTrainingRuntime declares the metrics port of every TrainJob: the pods' annotations and the trainer's
    endpoint agree with it, and another configured port is one line naming the setting, not a silent mismatch."""
    from fsdp_sdk.errors import ConfigError
    from fsdp_sdk.k8s.render import render_job, worker_pods
    from fsdp_sdk.k8s.trainer_v2 import render_runtime, runtime_metrics_port

    declared = runtime_metrics_port(render_runtime())
    job = render_job(make_config(), api="trainjob", rdzv_id="fsdp-1234abcd", plugins=plugins)[0]
    args = job["spec"]["trainer"]["args"]
    (pod,) = worker_pods([job])
    assert declared == 9464
    assert int(args[args.index("--metrics.prometheus_port") + 1]) == declared
    assert pod.annotations["prometheus.io/port"] == str(declared)
    moved = make_config({"monitoring.trainer_metrics_port": 9500})
    assert render_job(moved, api="pytorchjob", rdzv_id="fsdp-1234abcd", plugins=plugins)  # a PyTorchJob declares it
    with pytest.raises(ConfigError) as refused:
        render_job(moved, api="trainjob", rdzv_id="fsdp-1234abcd", plugins=plugins)
    message = str(refused.value)
    assert message.startswith("monitoring.trainer_metrics_port: 9500 is not the port fsdp-sdk's ClusterTrainingRuntime")
    assert "use 9464 with --api trainjob" in message and "\n" not in message
    with pytest.raises(ConfigError, match=r"^trainer.metrics.prometheus_port: 9600 "):
        render_job(
            make_config({"trainer.metrics.prometheus_port": 9600}),
            api="trainjob",
            rdzv_id="fsdp-1234abcd",
            plugins=plugins,
        )


def test_bad_settings_are_one_line_errors(make_config: Any) -> None:
    from fsdp_sdk.errors import ConfigError

    with pytest.raises(ConfigError, match=r"^monitoring.scrape_interval.*like 15s"):
        make_config({"monitoring.scrape_interval": "fast"})
    with pytest.raises(ConfigError, match=r"not shorter than monitoring\.retention"):
        make_config({"monitoring.scrape_interval": "2d", "monitoring.retention": "1d"})
    with pytest.raises(ConfigError, match="namespace/service:port"):
        make_config({"monitoring.operator_prometheus": "prometheus"})
