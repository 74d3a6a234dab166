"""Monitoring components contributed by plugins (``fsdp_sdk_monitoring_components``).

A component is a named set of plain Kubernetes objects (no Helm) that core applies
(:mod:`fsdp_sdk.k8s.monitoring`), plus plain descriptions of what core can do with it
once installed: the web UIs and APIs ``monitor open`` port-forwards to
(:class:`ServiceEndpoint`), the per-node programs ``monitor top`` opens
(:class:`NodeTool`), and the EKS add-on ``monitor install`` enables through the AWS API
(:class:`EksAddon`). Plugins render these descriptions; core acts on them.

A ``Secret`` whose values must never appear in a rendering (an admin password) is
rendered without data and with the annotation :data:`GENERATED_KEYS_ANNOTATION` listing
its keys: core fills each key with a random value the first time it applies the Secret
and keeps the existing value afterwards.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from fsdp_sdk.errors import PluginError

__all__ = ["GENERATED_KEYS_ANNOTATION", "EksAddon", "MonitoringComponent", "NodeTool", "ServiceEndpoint"]

#: Annotation of a rendered ``Secret``: comma-separated keys core fills with random values when it first applies it.
GENERATED_KEYS_ANNOTATION = "fsdp-sdk.io/generated-keys"

_NAME = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")


@dataclass(frozen=True)
class ServiceEndpoint:
    """A web UI or HTTP API a component serves through a ``Service``.

    :param name: what users call it (``grafana``, ``prometheus``): ``fsdp-sdk monitor open NAME``.
    :param service: the ``Service`` name.
    :param port: the ``Service`` port.
    :param namespace: the namespace of the ``Service`` (default: the component's).
    :param path: the path to open in a browser.
    :param description: one line for listings.
    :param login: how to log in, said below the URL by ``monitor open`` (never a password itself: where to read
        it), or empty.
    """

    name: str
    service: str
    port: int
    namespace: str | None = None
    path: str = "/"
    description: str = ""
    login: str = ""


@dataclass(frozen=True)
class NodeTool:
    """An interactive program a component's ``DaemonSet`` keeps ready on every node (``htop``, ``nvtop``).

    :param name: what users call it (``fsdp-sdk monitor top NODE --nvtop`` opens ``nvtop``).
    :param daemonset: the ``DaemonSet`` whose pod on the node runs it.
    :param container: the container to exec into.
    :param command: the command line to run there.
    :param namespace: the namespace of the ``DaemonSet`` (default: the component's).
    """

    name: str
    daemonset: str
    container: str
    command: Sequence[str]
    namespace: str | None = None


@dataclass(frozen=True)
class EksAddon:
    """An Amazon EKS add-on, enabled through the EKS API with an IAM role bound by EKS Pod Identity.

    :param name: the add-on name (``amazon-cloudwatch-observability``).
    :param service_account: the add-on's Kubernetes service account the role is associated with.
    :param namespace: that service account's namespace.
    :param policy_arns: the managed IAM policies the role gets.
    :param role_name: the IAM role core creates for it (and deletes on uninstall).
    :param version: the add-on version (default: the one EKS picks for the cluster's Kubernetes version).
    :param configuration: the add-on's configuration values (JSON-ready), or ``None``.
    :param needs: other EKS add-ons it needs (``eks-pod-identity-agent``), enabled first when missing.
    """

    name: str
    service_account: str
    namespace: str
    policy_arns: Sequence[str]
    role_name: str
    version: str | None = None
    configuration: Mapping[str, Any] | None = None
    needs: Sequence[str] = ()


@dataclass(frozen=True)
class MonitoringComponent:
    """One monitoring component and the objects that install it.

    :param name: unique name, e.g. ``dcgm-exporter``; ``observability.components`` selects by it.
    :param description: one line for listings.
    :param objects: Kubernetes objects to apply, each a dict with ``apiVersion``, ``kind`` and ``metadata.name``.
    :param namespace: namespace for namespaced objects that do not set one.
    :param endpoints: web UIs and APIs it serves (``monitor open``).
    :param node_tools: programs its pods keep ready on every node (``monitor top``).
    :param eks_addon: the EKS add-on it is, for components that are not Kubernetes objects of ours.
    :param default: installed when ``observability.components`` is empty; components that cost money
        (CloudWatch) are installed only when named.
    """

    name: str
    description: str
    objects: Sequence[Mapping[str, Any]]
    namespace: str | None = None
    endpoints: Sequence[ServiceEndpoint] = field(default=())
    node_tools: Sequence[NodeTool] = field(default=())
    eks_addon: EksAddon | None = None
    default: bool = True

    def __post_init__(self) -> None:
        if not isinstance(self.name, str) or not _NAME.match(self.name):
            raise PluginError(
                f"monitoring component {self.name!r}: the name must be lower-case letters, digits and '-'"
            )
        for obj in self.objects:
            if not isinstance(obj, Mapping) or not {"apiVersion", "kind", "metadata"} <= obj.keys():
                raise PluginError(
                    f"monitoring component {self.name!r}: every object needs apiVersion, kind and metadata"
                )
            if not obj["metadata"].get("name"):
                raise PluginError(f"monitoring component {self.name!r}: a {obj['kind']} has no metadata.name")
