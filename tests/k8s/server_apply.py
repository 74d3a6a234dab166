"""What a real API server enforces on writes, for the loopback API server (:mod:`k8s.fake_apiserver`):

* **immutable fields**: ``spec.selector`` of DaemonSets, Deployments, StatefulSets, ReplicaSets and Jobs, and a
  Job's ``spec.template`` (kubernetes ``pkg/apis/apps/validation/validation.go``
  ``ValidateDaemonSetUpdate``/``ValidateDeploymentUpdate`` and ``pkg/apis/batch/validation/validation.go``
  ``ValidateJobSpecUpdate``): an update that changes one is ``422 Invalid`` with ``field is immutable``;
* **server-side apply field ownership** (``sigs.k8s.io/structured-merge-diff``): every field belongs to the
  managers that set it; an apply that sets a field another manager owns to another value is ``409 Conflict``
  unless ``force=true`` (then the field changes owner); fields a manager applied before and no longer applies
  are removed unless someone else owns them; a create or update (POST, PUT) makes its manager the owner of every
  field it changed. Lists merge the way the built-in types declare them: ``containers``, ``initContainers``,
  ``volumes``, ``env``, ``ports`` by ``name``, ``volumeMounts`` by ``mountPath``, every other list as one value
  (``tolerations``, ``args``, ``nodeSelectorTerms``...: ``listType=atomic``).

``managedFields`` is written as the real server writes it (``fieldsV1``: ``f:<field>`` and ``k:{...}`` keys).
"""

from __future__ import annotations

import copy
import json
from typing import Any

Path_ = tuple[str, ...]

#: list field name -> the key its items merge by (others are atomic)
MERGE_KEYS = {
    "containers": "name",
    "initContainers": "name",
    "ephemeralContainers": "name",
    "volumes": "name",
    "env": "name",
    "ports": "name",
    "volumeMounts": "mountPath",
    "imagePullSecrets": "name",
}

#: kind -> immutable field paths (dotted), for updates
IMMUTABLE = {
    "DaemonSet": ("spec.selector",),
    "Deployment": ("spec.selector",),
    "StatefulSet": ("spec.selector",),
    "ReplicaSet": ("spec.selector",),
    "Job": ("spec.selector", "spec.template"),
}

_SERVER_METADATA = {
    "resourceVersion",
    "uid",
    "creationTimestamp",
    "generation",
    "managedFields",
    "selfLink",
    "deletionTimestamp",
}


class ApplyConflict(Exception):
    """Fields another manager owns, with other values: ``[(manager, dotted path)]``."""

    def __init__(self, conflicts: list[tuple[str, str]]) -> None:
        super().__init__(conflicts)
        self.conflicts = conflicts

    def message(self, kind: str, name: str) -> str:
        parts = "\n".join(f'* conflict with "{m}": .{p}' for m, p in self.conflicts)
        return f"Apply failed with {len(self.conflicts)} conflict{'s' * (len(self.conflicts) > 1)}: {parts}"


def immutable_changes(kind: str, current: dict, updated: dict) -> list[str]:
    """The real server's error lines for immutable fields ``updated`` changes (none: an allowed update)."""
    errors = []
    for dotted in IMMUTABLE.get(kind, ()):
        old, new = _dig(current, dotted), _dig(updated, dotted)
        if new is None and kind != "Job":
            continue  # a missing selector is a validation error of its own
        if _normal(old) != _normal(new):
            errors.append(f"{dotted}: Invalid value: {json.dumps(new, sort_keys=True)}: field is immutable")
    return errors


def _normal(value: Any) -> Any:
    """A pod template without ``metadata.creationTimestamp`` (clients send it as null)."""
    if isinstance(value, dict) and isinstance(value.get("metadata"), dict):
        value = copy.deepcopy(value)
        value["metadata"].pop("creationTimestamp", None)
    return value


def _dig(obj: dict, dotted: str) -> Any:
    value: Any = obj
    for part in dotted.split("."):
        if not isinstance(value, dict):
            return None
        value = value.get(part)
    return value


# ------------------------------------------------------------------------------------------- field sets


def _item_key(key_field: str, item: Any) -> str:
    return "k:" + json.dumps({key_field: item.get(key_field)}, separators=(",", ":"))


def leaves(obj: Any, prefix: Path_ = (), field: str = "") -> dict[Path_, Any]:
    """Every owned field of ``obj`` with its value: paths of ``f:`` / ``k:`` steps, atomic lists as one leaf."""
    found: dict[Path_, Any] = {}
    if isinstance(obj, dict):
        if not obj and prefix:
            found[prefix] = {}
        for key, value in obj.items():
            if not prefix and key in ("apiVersion", "kind", "status"):
                continue
            if prefix == ("f:metadata",) and key in _SERVER_METADATA | {"name", "namespace"}:
                continue
            found.update(leaves(value, (*prefix, f"f:{key}"), key))
    elif isinstance(obj, list) and field in MERGE_KEYS and all(isinstance(i, dict) for i in obj):
        key_field = MERGE_KEYS[field]
        for item in obj:
            step = (*prefix, _item_key(key_field, item))
            key_path: Path_ = (*step, f"f:{key_field}")
            found[key_path] = item.get(key_field)
            found.update(leaves({k: v for k, v in item.items() if k != key_field}, step, ""))
    else:
        found[prefix] = obj
    return found


def fields_v1(paths: set[Path_]) -> dict:
    """``managedFields[].fieldsV1`` of a set of paths."""
    tree: dict = {}
    for path in sorted(paths):
        node = tree
        for step in path:
            node = node.setdefault(step, {})
    return tree


def _paths_of(tree: dict, prefix: Path_ = ()) -> set[Path_]:
    found: set[Path_] = set()
    for step, sub in tree.items():
        if step == ".":
            continue
        if sub:
            found |= _paths_of(sub, (*prefix, step))
        else:
            found.add((*prefix, step))
    return found


def owners(obj: dict) -> dict[str, tuple[str, set[Path_]]]:
    """manager -> (operation, its fields) from ``metadata.managedFields``."""
    found: dict[str, tuple[str, set[Path_]]] = {}
    for entry in (obj.get("metadata") or {}).get("managedFields") or []:
        found[entry["manager"]] = (entry.get("operation", "Update"), _paths_of(entry.get("fieldsV1") or {}))
    return found


def _write_owners(obj: dict, table: dict[str, tuple[str, set[Path_]]], api_version: str) -> None:
    obj.setdefault("metadata", {})["managedFields"] = [
        {
            "manager": manager,
            "operation": operation,
            "apiVersion": api_version,
            "fieldsType": "FieldsV1",
            "fieldsV1": fields_v1(paths),
        }
        for manager, (operation, paths) in table.items()
        if paths
    ]


def _covered(path: Path_, paths: set[Path_]) -> bool:
    return any(path[: len(p)] == p for p in paths) or any(p[: len(path)] == path for p in paths)


# ------------------------------------------------------------------------------------------- merge


def _merge(current: Any, applied: Any, field: str = "") -> Any:
    if isinstance(current, dict) and isinstance(applied, dict):
        merged = dict(current)
        for key, value in applied.items():
            merged[key] = _merge(current.get(key), value, key) if key in current else copy.deepcopy(value)
        return merged
    if (
        isinstance(current, list)
        and isinstance(applied, list)
        and field in MERGE_KEYS
        and all(isinstance(i, dict) for i in current + applied)
    ):
        key_field = MERGE_KEYS[field]
        by_key = {i.get(key_field): i for i in current}
        merged_list = [_merge(by_key[i.get(key_field)], i, "") if i.get(key_field) in by_key else i for i in applied]
        applied_keys = {i.get(key_field) for i in applied}
        return merged_list + [i for i in current if i.get(key_field) not in applied_keys]
    return copy.deepcopy(applied)


def _remove(obj: Any, path: Path_) -> None:
    """Remove the field at ``path`` from ``obj`` (nothing when it is not there)."""
    node = obj
    for i, step in enumerate(path):
        last = i == len(path) - 1
        if step.startswith("f:"):
            if not isinstance(node, dict) or step[2:] not in node:
                return
            if last:
                del node[step[2:]]
                return
            node = node[step[2:]]
        else:  # k:{"name": ...}
            ((key_field, key_value),) = json.loads(step[2:]).items()
            if not isinstance(node, list):
                return
            match = [j for j, item in enumerate(node) if isinstance(item, dict) and item.get(key_field) == key_value]
            if not match:
                return
            if last:
                del node[match[0]]
                return
            node = node[match[0]]


def server_side_apply(current: dict | None, applied: dict, manager: str, *, force: bool, api_version: str) -> dict:
    """The object after ``manager`` applies ``applied`` to ``current`` (``None``: a create).

    :raises ApplyConflict: without ``force``, fields another manager owns would change.
    """
    new_fields = leaves(applied)
    table = owners(current) if current else {}
    if current is not None:
        old = leaves(current)
        conflicts = []
        for path, value in new_fields.items():
            if path in old and old[path] == value:
                continue
            for other, (_, paths) in table.items():
                if other != manager and path in paths:
                    conflicts.append((other, ".".join(s[2:] for s in path)))
        if conflicts and not force:
            raise ApplyConflict(sorted(set(conflicts)))
    merged = copy.deepcopy(applied) if current is None else _merge(current, applied)
    if current is not None:
        merged["metadata"] = {**current.get("metadata", {}), **applied.get("metadata", {})}
        if "status" in current:
            merged["status"] = current["status"]
        # what this manager applied before and applies no more goes, unless another manager owns it too
        operation, before = table.get(manager, ("Update", set()))
        before = before if operation == "Apply" else set()
        others = {p for m, (_, paths) in table.items() if m != manager for p in paths}
        for path in sorted(before - set(new_fields), key=len, reverse=True):
            if not _covered(path, set(new_fields)) and path not in others:
                _remove(merged, path)
    owned = set(new_fields)
    for other in list(table):
        if other != manager:
            operation, paths = table[other]
            # forced: the fields this apply changed change owner; a field it set to the value it had is shared
            changed = {p for p in owned if current is None or leaves(current).get(p, object()) != new_fields[p]}
            table[other] = (operation, {p for p in paths if p not in changed})
    table[manager] = ("Apply", owned)
    _write_owners(merged, table, api_version)
    return merged


def record_update(current: dict | None, updated: dict, manager: str, *, api_version: str) -> dict:
    """``updated`` as stored after a create or update (POST/PUT) by ``manager``: it owns every field it changed;
    fields the update removed belong to no one."""
    new_fields = leaves(updated)
    table = owners(current) if current else {}
    old = leaves(current) if current else {}
    changed = {p for p, v in new_fields.items() if old.get(p, object()) != v}
    for other in list(table):
        operation, paths = table[other]
        table[other] = (operation, {p for p in paths if p in new_fields and p not in changed})
    operation, paths = table.get(manager, ("Update", set()))
    table[manager] = ("Update", {p for p in paths if p in new_fields} | changed)
    stored = copy.deepcopy(updated)
    _write_owners(stored, table, api_version)
    return stored
