"""The scheduler's and the device plugins' part of the rehearsal cluster (pure functions over API objects).

A node advertises an extended resource only where a device plugin serves it: a DaemonSet whose pods the
scheduler would place on that node (node selector, required node affinity, tolerations of every ``NoSchedule`` /
``NoExecute`` taint) and whose container is a known plugin image. A pod is placed on a node only if it passes
the same checks and its requests fit the node's allocatable; otherwise it stays ``Pending`` with the reason
the scheduler gives.
"""

from __future__ import annotations

from typing import Any

#: plugin image name -> (resource, how many a node has: from its instance type)
PLUGINS = {
    "k8s-device-plugin": "nvidia.com/gpu",
    "aws-efa-k8s-device-plugin": "vpc.amazonaws.com/efa",
}


def tolerated(taint: dict[str, Any], tolerations: list[dict[str, Any]]) -> bool:
    """Whether one of ``tolerations`` tolerates ``taint`` (Kubernetes ``Toleration.ToleratesTaint``)."""
    for t in tolerations or []:
        if t.get("effect") and t["effect"] != taint["effect"]:
            continue
        if not t.get("key") and t.get("operator") == "Exists":
            return True
        if t.get("key") != taint["key"]:
            continue
        if t.get("operator") == "Exists" or t.get("value", "") == taint.get("value", ""):
            return True
    return False


def _expression(expression: dict[str, Any], labels: dict[str, str]) -> bool:
    value = labels.get(expression["key"])
    operator = expression["operator"]
    if operator == "In":
        return value in expression["values"]
    if operator == "NotIn":
        return value not in expression["values"]
    if operator == "Exists":
        return value is not None
    if operator == "DoesNotExist":
        return value is None
    raise AssertionError(f"node affinity operator {operator} not simulated")


def unschedulable_reason(pod: dict[str, Any], node: dict[str, Any]) -> str | None:
    """Why the scheduler would not place a pod of spec ``pod`` on ``node`` ignoring resources (``None``: it would)."""
    labels = node["metadata"].get("labels") or {}
    for key, value in (pod.get("nodeSelector") or {}).items():
        if labels.get(key) != value:
            return "node(s) didn't match Pod's node affinity/selector"
    required = ((pod.get("affinity") or {}).get("nodeAffinity") or {}).get(
        "requiredDuringSchedulingIgnoredDuringExecution"
    )
    if required and not any(
        all(_expression(e, labels) for e in term.get("matchExpressions") or [])
        for term in required["nodeSelectorTerms"]
    ):
        return "node(s) didn't match Pod's node affinity/selector"
    for taint in (node.get("spec") or {}).get("taints") or []:
        if taint["effect"] in ("NoSchedule", "NoExecute") and not tolerated(taint, pod.get("tolerations") or []):
            return f"node(s) had untolerated taint {{{taint['key']}: {taint.get('value', '')}}}"
    return None


def plugin_resource(container: dict[str, Any]) -> str | None:
    """The extended resource a device plugin container advertises (``None``: not a device plugin)."""
    image = container.get("image", "").rsplit("/", 1)[-1].split(":")[0]
    return PLUGINS.get(image)


def advertised(node: dict[str, Any], daemonsets: list[dict[str, Any]], devices: dict[str, int]) -> dict[str, int]:
    """The extended resources ``node`` advertises: ``devices`` (what its hardware has) served by a plugin pod there."""
    found: dict[str, int] = {}
    for daemonset in daemonsets:
        pod = daemonset["spec"]["template"]["spec"]
        if unschedulable_reason(pod, node) is not None:
            continue
        for container in pod["containers"]:
            resource = plugin_resource(container)
            if resource and devices.get(resource):
                assert resource not in found, f"two device plugins advertise {resource} on {node['metadata']['name']}"
                found[resource] = devices[resource]
    return found


def _quantity(value: Any) -> float:
    text = str(value)
    units = {"m": 1e-3, "Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40, "k": 1e3, "M": 1e6, "G": 1e9}
    for unit, factor in sorted(units.items(), key=lambda u: -len(u[0])):
        if text.endswith(unit):
            return float(text[: -len(unit)]) * factor
    return float(text)


def requests(pod: dict[str, Any]) -> dict[str, float]:
    """What a pod asks of its node: the sum of its containers' requests (limits where no request is given)."""
    total: dict[str, float] = {}
    for container in pod.get("containers") or []:
        resources = container.get("resources") or {}
        asked = {**(resources.get("limits") or {}), **(resources.get("requests") or {})}
        for name, value in asked.items():
            total[name] = total.get(name, 0.0) + _quantity(value)
    return total


def place(
    pod: dict[str, Any], nodes: list[dict[str, Any]], used: dict[str, dict[str, float]]
) -> tuple[str | None, str]:
    """``(node name, "")`` for the first node the pod fits, else ``(None, the scheduler's message)``."""
    reasons: list[str] = []
    for node in nodes:
        reason = unschedulable_reason(pod, node)
        if reason is None:
            free = {k: _quantity(v) for k, v in (node.get("status") or {}).get("allocatable", {}).items()}
            name = node["metadata"]["name"]
            for resource, amount in requests(pod).items():
                if amount > free.get(resource, 0.0) - used.get(name, {}).get(resource, 0.0):
                    reason = f"Insufficient {resource}"
                    break
        if reason is None:
            return node["metadata"]["name"], ""
        reasons.append(reason)
    counts: dict[str, int] = {}
    for reason in reasons:
        counts[reason] = counts.get(reason, 0) + 1
    detail = ", ".join(f"{n} {r}" for r, n in sorted(counts.items()))
    return None, f"0/{len(nodes)} nodes are available: {detail}."
