"""Structural schemas of the Prometheus Operator's ServiceMonitor and PodMonitor (``monitoring.coreos.com/v1``).

The operator's CRD files are not among the shared schemas, so the objects the plugin renders for it
are checked against these: the fields it uses, with the CRD's names and types, and nothing else
(``additionalProperties: false``), so a misspelt field fails as it would against the CRD.
"""

from __future__ import annotations

from typing import Any

import jsonschema

_STRING_MAP = {"type": "object", "additionalProperties": {"type": "string"}}
_META = {
    "type": "object",
    "required": ["name", "namespace"],
    "properties": {"name": {"type": "string"}, "namespace": {"type": "string"}, "labels": _STRING_MAP},
    "additionalProperties": False,
}
_SELECTOR = {
    "type": "object",
    "properties": {"matchLabels": _STRING_MAP, "matchExpressions": {"type": "array"}},
    "additionalProperties": False,
}
_NAMESPACE_SELECTOR = {
    "type": "object",
    "properties": {"any": {"type": "boolean"}, "matchNames": {"type": "array", "items": {"type": "string"}}},
    "additionalProperties": False,
}
_RELABEL = {
    "type": "object",
    "properties": {
        "sourceLabels": {"type": "array", "items": {"type": "string", "pattern": "^[a-zA-Z_][a-zA-Z0-9_]*$"}},
        "targetLabel": {"type": "string"},
        "regex": {"type": "string"},
        "replacement": {"type": "string"},
        "separator": {"type": "string"},
        "action": {"enum": ["replace", "keep", "drop", "labelmap", "labeldrop", "labelkeep", "hashmod"]},
    },
    "additionalProperties": False,
}
_DURATION = {
    "type": "string",
    "pattern": "^(0|(([0-9]+)y)?(([0-9]+)w)?(([0-9]+)d)?(([0-9]+)h)?(([0-9]+)m)?(([0-9]+)s)?(([0-9]+)ms)?)$",
}
_ENDPOINT = {
    "type": "object",
    "required": ["port"],
    "properties": {
        "port": {"type": "string"},
        "path": {"type": "string"},
        "interval": _DURATION,
        "scrapeTimeout": _DURATION,
        "honorLabels": {"type": "boolean"},
        "relabelings": {"type": "array", "items": _RELABEL},
    },
    "additionalProperties": False,
}


def _kind(kind: str, endpoints_key: str) -> dict[str, Any]:
    return {
        "type": "object",
        "required": ["apiVersion", "kind", "metadata", "spec"],
        "properties": {
            "apiVersion": {"const": "monitoring.coreos.com/v1"},
            "kind": {"const": kind},
            "metadata": _META,
            "spec": {
                "type": "object",
                "required": ["selector", endpoints_key],
                "properties": {
                    "selector": _SELECTOR,
                    "namespaceSelector": _NAMESPACE_SELECTOR,
                    endpoints_key: {"type": "array", "minItems": 1, "items": _ENDPOINT},
                    "jobLabel": {"type": "string"},
                },
                "additionalProperties": False,
            },
        },
        "additionalProperties": False,
    }


SERVICE_MONITOR = _kind("ServiceMonitor", "endpoints")
POD_MONITOR = _kind("PodMonitor", "podMetricsEndpoints")


def structural_errors(obj: dict[str, Any]) -> list[str]:
    """Error lines of ``obj`` against the structural schema of its kind."""
    schema = SERVICE_MONITOR if obj.get("kind") == "ServiceMonitor" else POD_MONITOR
    return [
        f"{'.'.join(map(str, e.absolute_path)) or '<root>'}: {e.message}"
        for e in jsonschema.Draft202012Validator(schema).iter_errors(obj)
    ]


def operator_validators() -> dict[tuple[str, str], Any]:
    """Validators for the fake API server."""
    return {("monitoring.coreos.com/v1", kind): structural_errors for kind in ("ServiceMonitor", "PodMonitor")}
