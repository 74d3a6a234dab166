"""Prometheus: its configuration, the objects that run it, or the Prometheus Operator's monitors instead.

Three scrape jobs, found through Kubernetes service discovery (``role: pod``):

* ``dcgm-exporter``: the exporter's pods in the monitoring namespace, port ``metrics``. Only
  ``node`` is added as a target label: the exporter's own ``pod``/``namespace``/``container``
  labels name the pod *using* each GPU and must not be overwritten;
* ``fsdp-trainer``: running pods labelled ``app.kubernetes.io/name=fsdp-trainer`` in any
  namespace, port ``fsdp-metrics`` (what :mod:`.training` adds to rendered jobs), with the
  target labels ``fsdp_job`` (the job name, from ``app.kubernetes.io/instance``), ``run_id``,
  ``namespace``, ``pod`` and ``node``;
* ``prometheus``: itself.

Where the cluster runs the Prometheus Operator (``observability.prometheus_operator``), the same
selection is expressed as a ``ServiceMonitor`` (DCGM, ``honorLabels`` so the exporter's pod labels
survive the operator's own) and a ``PodMonitor`` (the trainer), and no Prometheus is deployed.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from fsdp_sdk.aws.eks import system_pod_scheduling
from fsdp_sdk.monitoring import MonitoringComponent, ServiceEndpoint

from .common import TRAINER_PORT_NAME, image_version, labels, namespace_object, selector
from .dcgm import NAME as DCGM_NAME
from .settings import parse_duration, service_address, settings_of

if TYPE_CHECKING:
    from fsdp_sdk.config import Config

__all__ = [
    "NAME",
    "PROMETHEUS_PORT",
    "TRAINER_LABELS",
    "operator_monitors",
    "prometheus_component",
    "prometheus_config",
    "prometheus_url",
    "static_scrape_job",
]

NAME = "prometheus"
PROMETHEUS_PORT = 9090
#: Pod labels of training workers (set by fsdp-sdk's job rendering) that the trainer scrape job selects on.
TRAINER_LABELS = {"app.kubernetes.io/name": "fsdp-trainer", "app.kubernetes.io/component": "worker"}
_CONFIG_FILE = "prometheus.yml"


def _meta(label: str) -> str:
    return "__meta_kubernetes_pod_label_" + "".join(c if c.isalnum() else "_" for c in label)


def _trainer_relabelings() -> list[dict[str, Any]]:
    keep = [{"source_labels": [_meta(k)], "regex": v, "action": "keep"} for k, v in sorted(TRAINER_LABELS.items())]
    return [
        *keep,
        {"source_labels": ["__meta_kubernetes_pod_container_port_name"], "regex": TRAINER_PORT_NAME, "action": "keep"},
        {"source_labels": ["__meta_kubernetes_pod_phase"], "regex": "Pending|Succeeded|Failed", "action": "drop"},
        {"source_labels": ["__meta_kubernetes_namespace"], "target_label": "namespace"},
        {"source_labels": ["__meta_kubernetes_pod_name"], "target_label": "pod"},
        {"source_labels": ["__meta_kubernetes_pod_node_name"], "target_label": "node"},
        {"source_labels": [_meta("app.kubernetes.io/instance")], "target_label": "fsdp_job"},
        {"source_labels": [_meta("fsdp-sdk.io/run-id")], "target_label": "run_id"},
    ]


def static_scrape_job(name: str, targets: list[str], labels: dict[str, str] | None = None) -> dict[str, Any]:
    """A scrape job of fixed ``host:port`` targets with extra target labels (a local run: ``fsdp_job``, ``run_id``).

    :param name: the job name.
    :param targets: ``host:port`` addresses.
    :param labels: target labels added to every series.
    """
    group: dict[str, Any] = {"targets": list(targets)}
    if labels:
        group["labels"] = dict(labels)
    return {"job_name": name, "static_configs": [group]}


def prometheus_config(config: Config, *, extra_jobs: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    """The Prometheus configuration (``prometheus.yml``) as data (pure).

    :param extra_jobs: more scrape jobs (tests and local runs use :func:`static_scrape_job`).
    """
    settings = settings_of(config)
    namespace = config.observability.namespace
    interval = settings.scrape_interval
    timeout_ms = max(100, int(parse_duration(interval) * 800))  # 80% of the interval, which it may not exceed
    timeout = f"{timeout_ms // 1000}s" if timeout_ms % 1000 == 0 else f"{timeout_ms}ms"
    dcgm = {
        "job_name": DCGM_NAME,
        "kubernetes_sd_configs": [
            {
                "role": "pod",
                "namespaces": {"names": [namespace]},
                "selectors": [{"role": "pod", "label": f"app.kubernetes.io/name={DCGM_NAME}"}],
            }
        ],
        "relabel_configs": [
            {"source_labels": ["__meta_kubernetes_pod_container_port_name"], "regex": "metrics", "action": "keep"},
            {"source_labels": ["__meta_kubernetes_pod_node_name"], "target_label": "node"},
        ],
    }
    trainer = {
        "job_name": "fsdp-trainer",
        "kubernetes_sd_configs": [
            {"role": "pod", "selectors": [{"role": "pod", "label": "app.kubernetes.io/name=fsdp-trainer"}]}
        ],
        "relabel_configs": _trainer_relabelings(),
    }
    itself = static_scrape_job(NAME, [f"localhost:{PROMETHEUS_PORT}"])
    return {
        "global": {
            "scrape_interval": interval,
            "scrape_timeout": timeout,
            "evaluation_interval": interval,
            "external_labels": {"cluster": config.cluster.name},
        },
        "scrape_configs": [dcgm, trainer, itself, *(extra_jobs or [])],
    }


def prometheus_url(config: Config) -> str:
    """The in-cluster URL of the Prometheus HTTP API (ours, or the operator's)."""
    if config.observability.prometheus_operator:
        namespace, service, port = service_address(settings_of(config).operator_prometheus)
        return f"http://{service}.{namespace}.svc:{port}"
    return f"http://{NAME}.{config.observability.namespace}.svc:{PROMETHEUS_PORT}"


def _prometheus_objects(config: Config) -> list[dict[str, Any]]:
    import yaml

    settings = settings_of(config)
    namespace = config.observability.namespace
    meta_labels = labels(NAME, image_version(settings.prometheus_image))
    rbac_name = f"fsdp-sdk-{NAME}-{namespace}"  # cluster-scoped: one per monitoring namespace
    probe_port = {"port": PROMETHEUS_PORT}
    return [
        {
            "apiVersion": "v1",
            "kind": "ServiceAccount",
            "metadata": {"name": NAME, "namespace": namespace, "labels": meta_labels},
        },
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "ClusterRole",
            "metadata": {"name": rbac_name, "labels": meta_labels},
            "rules": [
                {
                    "apiGroups": [""],
                    "resources": ["nodes", "services", "endpoints", "pods"],
                    "verbs": ["get", "list", "watch"],
                },
                {"apiGroups": ["discovery.k8s.io"], "resources": ["endpointslices"], "verbs": ["get", "list", "watch"]},
            ],
        },
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "ClusterRoleBinding",
            "metadata": {"name": rbac_name, "labels": meta_labels},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": rbac_name},
            "subjects": [{"kind": "ServiceAccount", "name": NAME, "namespace": namespace}],
        },
        {
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "metadata": {"name": f"{NAME}-config", "namespace": namespace, "labels": meta_labels},
            "data": {_CONFIG_FILE: yaml.safe_dump(prometheus_config(config), sort_keys=False)},
        },
        {
            "apiVersion": "apps/v1",
            "kind": "Deployment",
            "metadata": {"name": NAME, "namespace": namespace, "labels": meta_labels},
            "spec": {
                "replicas": 1,
                "strategy": {"type": "Recreate"},  # one TSDB directory: never two servers at once
                "selector": {"matchLabels": selector(NAME)},
                "template": {
                    "metadata": {"labels": meta_labels},
                    "spec": {
                        **system_pod_scheduling(config),
                        "serviceAccountName": NAME,
                        "securityContext": {"runAsNonRoot": True, "runAsUser": 65534, "fsGroup": 65534},
                        "containers": [
                            {
                                "name": NAME,
                                "image": settings.prometheus_image,
                                "args": [
                                    f"--config.file=/etc/prometheus/{_CONFIG_FILE}",
                                    "--storage.tsdb.path=/prometheus",
                                    f"--storage.tsdb.retention.time={settings.retention}",
                                    f"--web.listen-address=:{PROMETHEUS_PORT}",
                                ],
                                "ports": [{"name": "web", "containerPort": PROMETHEUS_PORT, "protocol": "TCP"}],
                                "readinessProbe": {"httpGet": {"path": "/-/ready", **probe_port}, "periodSeconds": 5},
                                "livenessProbe": {
                                    "httpGet": {"path": "/-/healthy", **probe_port},
                                    "initialDelaySeconds": 30,
                                    "periodSeconds": 15,
                                },
                                "resources": {
                                    "requests": {"cpu": "250m", "memory": "1Gi"},
                                    "limits": {"memory": "4Gi"},
                                },
                                "volumeMounts": [
                                    {"name": "config", "mountPath": "/etc/prometheus", "readOnly": True},
                                    {"name": "data", "mountPath": "/prometheus"},
                                ],
                            }
                        ],
                        "volumes": [
                            {"name": "config", "configMap": {"name": f"{NAME}-config"}},
                            {"name": "data", "emptyDir": {}},
                        ],
                    },
                },
            },
        },
        {
            "apiVersion": "v1",
            "kind": "Service",
            "metadata": {"name": NAME, "namespace": namespace, "labels": meta_labels},
            "spec": {
                "selector": selector(NAME),
                "ports": [{"name": "web", "port": PROMETHEUS_PORT, "targetPort": "web", "protocol": "TCP"}],
            },
        },
    ]


def _camel(relabel: dict[str, Any]) -> dict[str, Any]:
    """A Prometheus relabel rule in the operator's spelling (``sourceLabels``, ``targetLabel``)."""
    names = {"source_labels": "sourceLabels", "target_label": "targetLabel"}
    return {names.get(k, k): v for k, v in relabel.items()}


def operator_monitors(config: Config) -> tuple[dict[str, Any], dict[str, Any]]:
    """``(ServiceMonitor of the DCGM exporter, PodMonitor of the training pods)`` for the Prometheus Operator."""
    settings = settings_of(config)
    namespace = config.observability.namespace
    extra = dict(settings.operator_selector_labels)
    service_monitor = {
        "apiVersion": "monitoring.coreos.com/v1",
        "kind": "ServiceMonitor",
        "metadata": {"name": DCGM_NAME, "namespace": namespace, "labels": {**labels(DCGM_NAME), **extra}},
        "spec": {
            "selector": {"matchLabels": selector(DCGM_NAME)},
            "namespaceSelector": {"matchNames": [namespace]},
            "endpoints": [
                {
                    "port": "metrics",
                    "interval": settings.scrape_interval,
                    "honorLabels": True,  # keep the exporter's pod/namespace labels (the pod using each GPU)
                    "relabelings": [{"sourceLabels": ["__meta_kubernetes_pod_node_name"], "targetLabel": "node"}],
                }
            ],
        },
    }
    trainer_relabelings = [_camel(r) for r in _trainer_relabelings() if r.get("action") != "keep"]
    pod_monitor = {
        "apiVersion": "monitoring.coreos.com/v1",
        "kind": "PodMonitor",
        "metadata": {"name": "fsdp-trainer", "namespace": namespace, "labels": {**labels("fsdp-trainer"), **extra}},
        "spec": {
            "selector": {"matchLabels": dict(TRAINER_LABELS)},
            "namespaceSelector": {"any": True},
            "podMetricsEndpoints": [
                {
                    "port": TRAINER_PORT_NAME,
                    "interval": settings.scrape_interval,
                    "relabelings": [r for r in trainer_relabelings if r.get("targetLabel") not in ("namespace", "pod")],
                }
            ],
        },
    }
    return service_monitor, pod_monitor


def prometheus_component(config: Config) -> MonitoringComponent:
    """The ``prometheus`` component: our Prometheus, or the trainer's PodMonitor for the operator's."""
    namespace = config.observability.namespace
    if config.observability.prometheus_operator:
        op_namespace, service, port = service_address(settings_of(config).operator_prometheus)
        _, pod_monitor = operator_monitors(config)
        return MonitoringComponent(
            name=NAME,
            description=f"the Prometheus Operator's Prometheus ({op_namespace}/{service}) scrapes the trainer (PodMonitor)",
            objects=[*namespace_object(config), pod_monitor],
            namespace=namespace,
            endpoints=[ServiceEndpoint(NAME, service, port, op_namespace, "/", "the Prometheus Operator's Prometheus")],
        )
    return MonitoringComponent(
        name=NAME,
        description="Prometheus scraping the DCGM exporter and the trainer (Kubernetes service discovery)",
        objects=[*namespace_object(config), *_prometheus_objects(config)],
        namespace=namespace,
        endpoints=[ServiceEndpoint(NAME, NAME, PROMETHEUS_PORT, namespace, "/", "Prometheus web UI and HTTP API")],
    )
