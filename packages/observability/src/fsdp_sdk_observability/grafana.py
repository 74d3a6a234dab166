"""Grafana with the Prometheus data source and the training dashboard provisioned from files.

The admin password is never a default one and never part of the rendering: the ``grafana-admin``
Secret is rendered without data and with the :data:`~fsdp_sdk.monitoring.GENERATED_KEYS_ANNOTATION`
annotation, so core fills ``admin-password`` with a random value when it first applies it (and keeps
it afterwards). ``monitoring.grafana_admin_secret`` names a Secret of your own instead. Read the
password with ``kubectl -n monitoring get secret grafana-admin -o jsonpath='{.data.admin-password}' | base64 -d``.
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

from fsdp_sdk.aws.eks import system_pod_scheduling
from fsdp_sdk.monitoring import GENERATED_KEYS_ANNOTATION, MonitoringComponent, ServiceEndpoint

from .common import DASHBOARD_LABEL, image_version, labels, namespace_object, selector
from .dashboard import DASHBOARD_UID, DATASOURCE_UID, dashboard_json
from .prometheus import prometheus_url
from .settings import settings_of

if TYPE_CHECKING:
    from fsdp_sdk.config import Config

__all__ = ["ADMIN_SECRET", "GRAFANA_PORT", "NAME", "grafana_component", "password_command"]

NAME = "grafana"
GRAFANA_PORT = 3000
#: The generated Secret holding Grafana's admin password (key ``admin-password``).
ADMIN_SECRET = "grafana-admin"
_DASHBOARDS_DIR = "/var/lib/grafana/dashboards/fsdp-sdk"


def password_command(config: Config) -> str:
    """The command that prints Grafana's admin password (the SDK itself never prints it)."""
    secret = settings_of(config).grafana_admin_secret or ADMIN_SECRET
    namespace = config.observability.namespace
    return f"kubectl -n {namespace} get secret {secret} -o jsonpath='{{.data.admin-password}}' | base64 -d"


def _provisioning(config: Config) -> tuple[str, str]:
    import yaml

    datasources = {
        "apiVersion": 1,
        "datasources": [
            {
                "name": "Prometheus",
                "type": "prometheus",
                "uid": DATASOURCE_UID,
                "access": "proxy",
                "url": prometheus_url(config),
                "isDefault": True,
                "editable": False,
                "jsonData": {"timeInterval": settings_of(config).scrape_interval},
            }
        ],
    }
    providers = {
        "apiVersion": 1,
        "providers": [
            {
                "name": "fsdp-sdk",
                "folder": "fsdp-sdk",
                "type": "file",
                "disableDeletion": True,
                "allowUiUpdates": False,
                "options": {"path": _DASHBOARDS_DIR},
            }
        ],
    }
    return yaml.safe_dump(datasources, sort_keys=False), yaml.safe_dump(providers, sort_keys=False)


def grafana_objects(config: Config) -> list[dict[str, Any]]:
    """The Secret, provisioning ConfigMaps, Deployment and Service (pure: no password here)."""
    settings = settings_of(config)
    namespace = config.observability.namespace
    meta_labels = labels(NAME, image_version(settings.grafana_image))
    datasources, providers = _provisioning(config)
    secret_name = settings.grafana_admin_secret or ADMIN_SECRET
    objects: list[dict[str, Any]] = []
    if settings.grafana_admin_secret is None:
        objects.append(
            {
                "apiVersion": "v1",
                "kind": "Secret",
                "metadata": {
                    "name": ADMIN_SECRET,
                    "namespace": namespace,
                    "labels": meta_labels,
                    "annotations": {GENERATED_KEYS_ANNOTATION: "admin-password"},
                },
                "type": "Opaque",
            }
        )
        user: dict[str, Any] = {"name": "GF_SECURITY_ADMIN_USER", "value": settings.grafana_admin_user}
    else:
        user = {
            "name": "GF_SECURITY_ADMIN_USER",
            "valueFrom": {"secretKeyRef": {"name": secret_name, "key": "admin-user"}},
        }
    objects += [
        {
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "metadata": {"name": f"{NAME}-provisioning", "namespace": namespace, "labels": meta_labels},
            "data": {"datasources.yaml": datasources, "dashboards.yaml": providers},
        },
        {
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "metadata": {
                "name": f"{NAME}-dashboards",
                "namespace": namespace,
                "labels": {**meta_labels, DASHBOARD_LABEL: "true"},
            },
            "data": {f"{DASHBOARD_UID}.json": json.dumps(dashboard_json(), indent=2, sort_keys=True)},
        },
    ]
    env = [
        user,
        {
            "name": "GF_SECURITY_ADMIN_PASSWORD",
            "valueFrom": {"secretKeyRef": {"name": secret_name, "key": "admin-password"}},
        },
        {"name": "GF_USERS_ALLOW_SIGN_UP", "value": "false"},
        {"name": "GF_AUTH_ANONYMOUS_ENABLED", "value": "false"},
        {"name": "GF_ANALYTICS_REPORTING_ENABLED", "value": "false"},
        {"name": "GF_ANALYTICS_CHECK_FOR_UPDATES", "value": "false"},
        {"name": "GF_DASHBOARDS_DEFAULT_HOME_DASHBOARD_PATH", "value": f"{_DASHBOARDS_DIR}/{DASHBOARD_UID}.json"},
    ]
    health = {"httpGet": {"path": "/api/health", "port": GRAFANA_PORT}}
    objects += [
        {
            "apiVersion": "apps/v1",
            "kind": "Deployment",
            "metadata": {"name": NAME, "namespace": namespace, "labels": meta_labels},
            "spec": {
                "replicas": 1,
                "strategy": {"type": "Recreate"},
                "selector": {"matchLabels": selector(NAME)},
                "template": {
                    "metadata": {"labels": meta_labels},
                    "spec": {
                        **system_pod_scheduling(config),
                        "automountServiceAccountToken": False,
                        "securityContext": {"runAsNonRoot": True, "runAsUser": 472, "fsGroup": 472},
                        "containers": [
                            {
                                "name": NAME,
                                "image": settings.grafana_image,
                                "env": env,
                                "ports": [{"name": "http", "containerPort": GRAFANA_PORT, "protocol": "TCP"}],
                                "readinessProbe": {**health, "periodSeconds": 5},
                                "livenessProbe": {**health, "initialDelaySeconds": 60, "periodSeconds": 15},
                                "resources": {
                                    "requests": {"cpu": "100m", "memory": "256Mi"},
                                    "limits": {"memory": "1Gi"},
                                },
                                "volumeMounts": [
                                    {"name": "data", "mountPath": "/var/lib/grafana"},
                                    {
                                        "name": "provisioning",
                                        "mountPath": "/etc/grafana/provisioning/datasources/fsdp-sdk.yaml",
                                        "subPath": "datasources.yaml",
                                        "readOnly": True,
                                    },
                                    {
                                        "name": "provisioning",
                                        "mountPath": "/etc/grafana/provisioning/dashboards/fsdp-sdk.yaml",
                                        "subPath": "dashboards.yaml",
                                        "readOnly": True,
                                    },
                                    {"name": "dashboards", "mountPath": _DASHBOARDS_DIR, "readOnly": True},
                                ],
                            }
                        ],
                        "volumes": [
                            {"name": "data", "emptyDir": {}},
                            {"name": "provisioning", "configMap": {"name": f"{NAME}-provisioning"}},
                            {"name": "dashboards", "configMap": {"name": f"{NAME}-dashboards"}},
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
                "ports": [{"name": "http", "port": GRAFANA_PORT, "targetPort": "http", "protocol": "TCP"}],
            },
        },
    ]
    return objects


def grafana_component(config: Config) -> MonitoringComponent:
    """The ``grafana`` component."""
    namespace = config.observability.namespace
    return MonitoringComponent(
        name=NAME,
        description="Grafana with the Prometheus data source and the FSDP training dashboard",
        objects=[*namespace_object(config), *grafana_objects(config)],
        namespace=namespace,
        endpoints=[
            ServiceEndpoint(
                NAME,
                NAME,
                GRAFANA_PORT,
                namespace,
                f"/d/{DASHBOARD_UID}",
                "Grafana (training dashboard)",
                login=f"log in as {settings_of(config).grafana_admin_user}; the password: {password_command(config)}",
            )
        ],
    )
