"""What ``eksctl create cluster`` / ``create nodegroup`` (and EKS behind it) do *inside* the cluster, for the
recording eksctl (:mod:`fake_eksctl`) when it is given a cluster (``FAKE_EKSCTL_KUBECONFIG``: the loopback API
server's kubeconfig). From eksctl's source at eksctl-io/eksctl@99984adb6164ece593c0728523b7f497ea61d60e:

* the default networking add-ons EKS creates with the control plane, unless ``addonsConfig.disableDefaultAddons``
  (``pkg/apis/eksctl.io/v1alpha5/addon.go``): ``aws-node`` (``pkg/addons/default/assets/aws-node.yaml``),
  ``coredns`` (``pkg/addons/default/assets/coredns-<version>.json``) and ``kube-proxy``
  (``pkg/addons/default/kube_proxy.go`` updates the DaemonSet ``kube-system/kube-proxy``, selector
  ``k8s-app: kube-proxy``); the add-ons the ClusterConfig names then manage those objects (and add their own:
  ``eks-pod-identity-agent``);
* the nodes of each managed node group, joining as their kubelets do: a Node object each with the group's labels
  and taints, the well-known labels and the type's cpu, memory and pods (GPUs and EFA devices are advertised by
  the device plugins, not here);
* ``pkg/eks/tasks.go`` ``ClusterTasksForNodeGroups``: the NVIDIA device plugin (``assets/nvidia-device-plugin.yaml``,
  tolerations for the GPU groups' taints added by ``NvidiaDevicePlugin.SetTolerations``) for NVIDIA types on
  AmazonLinux2/2023 unless ``--install-nvidia-plugin=false``, and the EFA device plugin
  (``assets/efa-device-plugin.yaml``) whenever a node group has ``efaEnabled``, no flag to skip it; both through
  ``pkg/addons/device_plugin.go`` ``applyDevicePlugin`` -> ``RawResource.CreateOrReplace``
  (``pkg/kubernetes/client.go``): POST when absent, else a PUT of the whole manifest.

Objects are written over HTTP as eksctl's client writes them (user agent ``eksctl``; EKS's own as ``eks``), so the
API server records who owns what, and a second owner of an object collides here as it does in the field.
"""

from __future__ import annotations

import copy
import json
import math
import ssl
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

import yaml

ASSETS = Path(__file__).parent / "assets"
EKS_ACCOUNT = {"us-west-2": "602401143452"}

#: What a node of each type reports: vCPUs, memory GiB, GPUs (advertised by the NVIDIA plugin), EFA interfaces
#: (advertised by the EFA plugin). EC2 instance type specifications.
NODE_TYPES = {
    "p5.48xlarge": (192, 2048, 8, 32),
    "p4de.24xlarge": (96, 1152, 8, 4),
    "p4d.24xlarge": (96, 1152, 8, 4),
    "g5.12xlarge": (48, 192, 4, 1),
    "m5.xlarge": (4, 16, 0, 0),
    "m5.2xlarge": (8, 32, 0, 0),
}
NVIDIA_FAMILIES = ("p3", "p4", "p5", "p6", "g4dn", "g5", "g6")


class Cluster:
    """The cluster eksctl talks to: an API server URL and bearer token (from a kubeconfig)."""

    def __init__(self, kubeconfig: str) -> None:
        document = yaml.safe_load(Path(kubeconfig).read_text())
        self.server = document["clusters"][0]["cluster"]["server"].rstrip("/")
        self.token = document["users"][0]["user"]["token"]

    def _call(self, method: str, path: str, body: Any = None, agent: str = "eksctl") -> tuple[int, Any]:
        data = json.dumps(body).encode() if body is not None else None
        request = urllib.request.Request(self.server + path, data=data, method=method)
        request.add_header("Authorization", f"Bearer {self.token}")
        request.add_header("User-Agent", f"{agent}/v0.210.0")
        request.add_header("Content-Type", "application/json")
        try:
            with urllib.request.urlopen(request, timeout=30, context=ssl.create_default_context()) as answer:
                return answer.status, json.loads(answer.read() or b"null")
        except urllib.error.HTTPError as error:
            return error.code, json.loads(error.read() or b"null")

    def create_or_replace(self, obj: dict[str, Any], agent: str = "eksctl") -> None:
        """``RawResource.CreateOrReplace``: GET, then POST or a PUT of the whole object (its resourceVersion)."""
        path = _path(obj)
        code, current = self._call("GET", path)
        if code == 404:
            code, answer = self._call("POST", path.rsplit("/", 1)[0], obj, agent)
        else:
            replaced = copy.deepcopy(obj)
            replaced["metadata"]["resourceVersion"] = current["metadata"]["resourceVersion"]
            code, answer = self._call("PUT", path, replaced, agent)
        if code >= 300:
            raise RuntimeError(f"{obj['kind']} {obj['metadata']['name']}: {answer.get('message') if answer else code}")

    def delete_nodes(self, group: str) -> None:
        """The instances of node group ``group`` are gone: their Nodes leave the cluster."""
        code, found = self._call("GET", "/api/v1/nodes")
        for node in (found or {}).get("items", []) if code == 200 else []:
            if (node["metadata"].get("labels") or {}).get("eks.amazonaws.com/nodegroup") == group:
                self._call("DELETE", f"/api/v1/nodes/{node['metadata']['name']}", agent="node-lifecycle")


def _path(obj: dict[str, Any]) -> str:
    group_version = obj["apiVersion"]
    plural = {
        "DaemonSet": "daemonsets",
        "Deployment": "deployments",
        "Service": "services",
        "ServiceAccount": "serviceaccounts",
        "ConfigMap": "configmaps",
        "ClusterRole": "clusterroles",
        "ClusterRoleBinding": "clusterrolebindings",
        "Node": "nodes",
    }[obj["kind"]]
    base = f"/api/{group_version}" if "/" not in group_version else f"/apis/{group_version}"
    namespace = obj["metadata"].get("namespace")
    where = f"/namespaces/{namespace}" if namespace else ""
    return f"{base}{where}/{plural}/{obj['metadata']['name']}"


def _manifest(name: str) -> list[dict[str, Any]]:
    text = (ASSETS / name).read_text()
    if name.endswith(".json"):
        return json.loads(text)["items"]
    return [d for d in yaml.safe_load_all(text) if d]


def default_addons(cluster: Cluster, document: dict[str, Any], region: str) -> None:
    """What EKS creates with the control plane, then what the named add-ons add."""
    if (document.get("addonsConfig") or {}).get("disableDefaultAddons"):
        return
    version = document["metadata"].get("version") or "1.36"
    account = EKS_ACCOUNT.get(region, "602401143452")
    kinds = {"DaemonSet", "Deployment", "Service", "ServiceAccount", "ConfigMap", "ClusterRole", "ClusterRoleBinding"}
    objects = [o for o in _manifest("aws-node.yaml") if o["kind"] in kinds]
    coredns = ASSETS / f"coredns-{version}.json"
    objects += [o for o in _manifest(coredns.name if coredns.exists() else "coredns-1.36.json") if o["kind"] in kinds]
    objects.append(
        _daemonset(
            "kube-proxy",
            {"k8s-app": "kube-proxy"},
            f"{account}.dkr.ecr.{region}.amazonaws.com/eks/kube-proxy:v{version}.0-eksbuild.1",
            tolerations=[{"operator": "Exists"}],
        )
    )
    if any(a["name"] == "eks-pod-identity-agent" for a in document.get("addons") or []):
        objects.append(
            _daemonset(
                "eks-pod-identity-agent",
                {"app.kubernetes.io/name": "eks-pod-identity-agent"},
                f"{account}.dkr.ecr.{region}.amazonaws.com/eks/eks-pod-identity-agent:v0.1.30",
                tolerations=[{"operator": "Exists"}],
            )
        )
    for obj in objects:
        if obj["kind"] not in ("ClusterRole", "ClusterRoleBinding"):
            obj["metadata"].setdefault("namespace", "kube-system")
        cluster.create_or_replace(_clean(obj), agent="eks")


def _clean(obj: dict[str, Any]) -> dict[str, Any]:
    """A manifest object as a client sends it (no status, no server fields)."""
    obj = copy.deepcopy(obj)
    obj.pop("status", None)
    for key in ("creationTimestamp", "resourceVersion", "uid"):
        obj["metadata"].pop(key, None)
    return obj


def _daemonset(name: str, labels: dict[str, str], image: str, *, tolerations: list[dict[str, Any]]) -> dict:
    return {
        "apiVersion": "apps/v1",
        "kind": "DaemonSet",
        "metadata": {"name": name, "namespace": "kube-system", "labels": dict(labels)},
        "spec": {
            "selector": {"matchLabels": dict(labels)},
            "template": {
                "metadata": {"labels": dict(labels)},
                "spec": {
                    "priorityClassName": "system-node-critical",
                    "hostNetwork": True,
                    "tolerations": tolerations,
                    "containers": [{"name": name, "image": image}],
                },
            },
        },
    }


def _allocatable(vcpus: int, memory_gib: int) -> tuple[str, str]:
    """The EKS AMIs' kubelet reservations (amazon-eks-ami ``bootstrap``/``nodeadm`` kube-reserved formula)."""
    reserved = 60 + (10 if vcpus > 1 else 0) + 5 * min(max(vcpus - 2, 0), 2) + math.ceil(2.5 * max(vcpus - 4, 0))
    max_pods = 110
    memory_mib = int(memory_gib * 1024 * 0.95) - (255 + 11 * max_pods) - 100
    return f"{vcpus * 1000 - reserved}m", f"{memory_mib}Mi"


def join_nodes(cluster: Cluster, cluster_name: str, group: dict[str, Any]) -> None:
    """The group's nodes register with the API server, as their kubelets do."""
    instance = group["instanceType"]
    vcpus, memory, _, _ = NODE_TYPES[instance]
    cpu, mem = _allocatable(vcpus, memory)
    zone = (group.get("availabilityZones") or ["us-west-2a"])[0]
    for index in range(int(group.get("desiredCapacity", 1))):
        name = f"ip-10-0-{len(group['name'])}-{index + 10}.{zone[:-1]}.compute.internal"
        labels = {
            **(group.get("labels") or {}),
            "kubernetes.io/hostname": name,
            "kubernetes.io/os": "linux",
            "kubernetes.io/arch": "amd64",
            "node.kubernetes.io/instance-type": instance,
            "topology.kubernetes.io/zone": zone,
            "topology.kubernetes.io/region": zone[:-1],
            "eks.amazonaws.com/nodegroup": group["name"],
            "eks.amazonaws.com/capacityType": "SPOT" if group.get("spot") else "ON_DEMAND",
            "alpha.eksctl.io/cluster-name": cluster_name,
        }
        node = {
            "apiVersion": "v1",
            "kind": "Node",
            "metadata": {"name": name, "labels": labels},
            "spec": {
                "providerID": f"aws:///{zone}/i-0{index:016x}",
                "taints": [
                    {"key": t["key"], "value": t.get("value", ""), "effect": t["effect"]}
                    for t in group.get("taints", [])
                ],
            },
            "status": {
                "capacity": {"cpu": str(vcpus), "memory": f"{memory * 1024}Mi", "pods": "110"},
                "allocatable": {"cpu": cpu, "memory": mem, "pods": "110"},
                "conditions": [{"type": "Ready", "status": "True", "reason": "KubeletReady"}],
            },
        }
        cluster.create_or_replace(node, agent="kubelet")


def device_plugins(cluster: Cluster, document: dict[str, Any], region: str, *, install_nvidia: bool) -> None:
    """``ClusterTasksForNodeGroups``: the NVIDIA plugin (unless turned off) and, for EFA groups, the EFA plugin."""
    groups = document.get("managedNodeGroups") or []
    nvidia_groups = [
        g
        for g in groups
        if g["instanceType"].split(".")[0].startswith(NVIDIA_FAMILIES)
        and g.get("amiFamily", "AmazonLinux2023") in ("AmazonLinux2", "AmazonLinux2023")
    ]
    if nvidia_groups and install_nvidia:
        (plugin,) = _manifest("nvidia-device-plugin.yaml")
        tolerations = plugin["spec"]["template"]["spec"].setdefault("tolerations", [])
        for group in nvidia_groups:  # NvidiaDevicePlugin.SetTolerations: key and value only
            for taint in group.get("taints") or []:
                if all(t.get("key") != taint["key"] for t in tolerations):
                    tolerations.append({"key": taint["key"], "value": taint.get("value", "")})
        cluster.create_or_replace(plugin)
    if any(g.get("efaEnabled") for g in groups):
        (plugin,) = _manifest("efa-device-plugin.yaml")
        container = plugin["spec"]["template"]["spec"]["containers"][0]
        # useRegionalImage: "%s.dkr.ecr.%s.%s/..." with the region's EKS account and DNS suffix
        container["image"] = container["image"] % (EKS_ACCOUNT.get(region, "602401143452"), region, "amazonaws.com")
        cluster.create_or_replace(plugin)
