"""Offline validation of rendered Kubernetes objects.

Two sources of truth, both usable without a cluster:

* built-in kinds (Deployment, Service, Secret, ConfigMap, Pod...) are checked
  against the Kubernetes OpenAPI schemas shipped by the ``kubernetes-validate``
  package, in strict mode (unknown fields are errors);
* custom resources (PyTorchJob, TrainJob) are checked against the
  ``openAPIV3Schema`` of a CustomResourceDefinition the user names (a file, or a URL
  such as :data:`CRD_URLS`' release manifests), converted from the Kubernetes
  *structural schema* dialect to plain JSON Schema by :func:`structural_to_jsonschema`.

The package ships no CRD (they are the Kubeflow projects' files, and the one that
counts is the version installed on the cluster): without one, the custom resource
itself is reported as not validated, with the two ways to check it, the cluster's own
validation (``fsdp-sdk job submit --dry-run``) and ``--crd`` with the release's file.

The pod templates embedded in a PyTorchJob are also checked as Pods against the
Kubernetes OpenAPI, because the CRD keeps them loosely typed in places the
API server will reject later, when the operator creates the pods. They are
checked even when the CRD is not given; the PyTorchJob itself is then reported
as skipped, not as valid. :attr:`ValidationReport.checks` says what was checked
against which schema.

What this cannot check: CEL rules (``x-kubernetes-validations``), admission
webhooks, quotas. Against a real cluster use a server-side dry run
(``fsdp-sdk job submit --dry-run``: the API server validates, stores nothing).

It needs the ``validate`` extra (``jsonschema``, ``kubernetes-validate``):
:func:`require_validation` says how to install it when it is missing.

Usage::

    from fsdp_sdk.k8s.validate import validate_objects
    report = validate_objects(objects, crd_paths=["kubeflow.org_pytorchjobs.yaml"])
    report.raise_for_errors()
"""

from __future__ import annotations

import copy
import functools
import importlib.util
import urllib.error
import urllib.request
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from fsdp_sdk.errors import ConfigError, KubernetesError
from fsdp_sdk.pins import default_kubernetes_version, pin

if TYPE_CHECKING:
    import jsonschema

__all__ = [
    "CRD_URLS",
    "DEFAULT_KUBERNETES_VERSION",
    "CrdSchema",
    "ValidationCheck",
    "ValidationReport",
    "crd_from_object",
    "load_crd_schema",
    "pruned_by_hooks",
    "pruned_fields",
    "require_validation",
    "structural_to_jsonschema",
    "validate_builtin",
    "validate_objects",
    "validate_pod_template",
]

#: Kubernetes minor version whose OpenAPI is used for built-in kinds (the EKS default of the SDK, from the pins table).
DEFAULT_KUBERNETES_VERSION = default_kubernetes_version()
#: The CRDs of the releases the SDK renders for, by kind: what ``--crd`` can be given to check a custom resource.
CRD_URLS = {
    "PyTorchJob": "https://raw.githubusercontent.com/kubeflow/trainer/"
    f"{pin('training-operator').version}/manifests/base/crds/kubeflow.org_pytorchjobs.yaml",
    "TrainJob": "https://raw.githubusercontent.com/kubeflow/trainer/"
    f"{pin('kubeflow-trainer').version}/manifests/base/crds/trainer.kubeflow.org_trainjobs.yaml",
}
_EXTRA = {"jsonschema": "jsonschema", "kubernetes_validate": "kubernetes-validate", "yaml": "PyYAML"}


def require_validation() -> None:
    """Check that the ``validate`` extra is installed.

    :raises ConfigError: a package of the extra is missing; the message says how to install it.
    """
    missing = [dist for module, dist in _EXTRA.items() if importlib.util.find_spec(module) is None]
    if missing:
        raise ConfigError(
            "--validate",
            f"needs {' and '.join(missing)}, which {'is' if len(missing) == 1 else 'are'} not installed",
            "pip install 'fsdp-sdk[validate]'",
        )


_INT_RANGES = {"int32": (-(2**31), 2**31 - 1), "int64": (-(2**63), 2**63 - 1)}
# DNS-1123 subdomain: what the API server requires of most object names.
_DNS1123_SUBDOMAIN = r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$"
_OBJECT_META = {
    "type": "object",
    "required": ["name"],
    "properties": {
        "name": {"type": "string", "maxLength": 253, "pattern": _DNS1123_SUBDOMAIN},
        "namespace": {"type": "string", "maxLength": 63},
        "labels": {"type": "object", "additionalProperties": {"type": "string"}},
        "annotations": {"type": "object", "additionalProperties": {"type": "string"}},
    },
}


def _ref(obj: Mapping[str, Any]) -> str:
    name = (obj.get("metadata") or {}).get("name", "?")
    return f"{obj.get('kind', '?')}/{name}"


def _path(error: jsonschema.ValidationError) -> str:
    return ".".join(str(p) for p in error.absolute_path) or "<root>"


# --------------------------------------------------------------------------- built-in kinds


def validate_builtin(obj: Mapping[str, Any], *, version: str = DEFAULT_KUBERNETES_VERSION) -> list[str]:
    """Check one built-in object against the Kubernetes OpenAPI of ``version`` (strict).

    :param obj: a full object with ``apiVersion`` and ``kind``.
    :param version: Kubernetes minor version, e.g. ``"1.31"``.
    :returns: one-line messages, empty when the object is valid.
    :raises KeyError: ``kubernetes-validate`` has no schema for this kind (a custom resource).
    """
    require_validation()
    import kubernetes_validate
    from kubernetes_validate.utils import SchemaNotFoundError, VersionNotSupportedError

    try:
        kubernetes_validate.validate(dict(obj), version, strict=True)
    except kubernetes_validate.ValidationError as error:
        return [f"{_ref(obj)}: {_path(error)}: {error.message}"]
    except SchemaNotFoundError as error:
        raise KeyError(f"{obj.get('apiVersion')}/{obj.get('kind')}") from error
    except VersionNotSupportedError as error:
        raise ConfigError(
            "--k8s-version",
            f"kubernetes-validate has no schemas for Kubernetes {version}",
            "pick a version between 1.25 and the newest one it ships",
        ) from error
    return []


def validate_pod_template(
    template: Mapping[str, Any], *, owner: str = "", version: str = DEFAULT_KUBERNETES_VERSION
) -> list[str]:
    """Check a PodTemplateSpec by validating the Pod it would become.

    :param template: ``{"metadata": ..., "spec": ...}`` as embedded in a job.
    :param owner: prefix for messages, e.g. ``"PyTorchJob/fsdp Worker"``.
    :param version: Kubernetes minor version.
    """
    metadata = dict(template.get("metadata") or {})
    metadata.setdefault("name", "template")
    pod = {"apiVersion": "v1", "kind": "Pod", "metadata": metadata, "spec": template.get("spec")}
    return [f"{owner} pod template: {message.split(': ', 1)[1]}" for message in validate_builtin(pod, version=version)]


# --------------------------------------------------------------------------- custom resources


def structural_to_jsonschema(schema: Mapping[str, Any], *, strict: bool = True) -> dict[str, Any]:
    """Turn a Kubernetes structural schema (a CRD's ``openAPIV3Schema``) into plain JSON Schema.

    * ``x-kubernetes-int-or-string`` becomes ``anyOf: [integer, string]``;
    * ``nullable: true`` also admits ``null``;
    * ``format: int32/int64`` gets its numeric range;
    * with ``strict``, objects that list ``properties`` refuse unknown fields
      (``additionalProperties: false``), as the API server does with strict field
      validation, unless ``x-kubernetes-preserve-unknown-fields`` is set;
    * ``x-kubernetes-validations`` (CEL) and the list/map markers are dropped: they
      cannot be checked offline.

    :param schema: the structural schema; not modified.
    :param strict: refuse unknown fields.
    """
    out: dict[str, Any] = {}
    for key, value in schema.items():
        if key.startswith("x-kubernetes-") or key in ("nullable", "description"):
            continue
        if key in ("properties", "patternProperties"):
            out[key] = {name: structural_to_jsonschema(sub, strict=strict) for name, sub in value.items()}
        elif key in ("items", "additionalProperties", "not") and isinstance(value, Mapping):
            out[key] = structural_to_jsonschema(value, strict=strict)
        elif key in ("anyOf", "allOf", "oneOf"):
            out[key] = [structural_to_jsonschema(sub, strict=strict) for sub in value]
        else:
            out[key] = copy.deepcopy(value)
    if schema.get("x-kubernetes-int-or-string") and "anyOf" not in out:
        out.pop("type", None)
        out["anyOf"] = [{"type": "integer"}, {"type": "string"}]
    if out.get("type") == "integer" and schema.get("format") in _INT_RANGES:
        out["minimum"], out["maximum"] = _INT_RANGES[schema["format"]]
    if schema.get("nullable") and "type" in out:
        out["type"] = [out["type"], "null"] if isinstance(out["type"], str) else [*out["type"], "null"]
    preserve = schema.get("x-kubernetes-preserve-unknown-fields") or schema.get("x-kubernetes-embedded-resource")
    if strict and "properties" in out and "additionalProperties" not in out and not preserve:
        out["additionalProperties"] = False
    return out


def pruned_fields(value: Any, schema: Mapping[str, Any], path: str = "") -> list[str]:
    """The paths in ``value`` that the API server would drop when storing it under the structural ``schema``.

    Kubernetes prunes every field a CRD's structural schema does not specify: a property an object's
    ``properties`` does not list, or any key of an object whose schema has neither ``properties`` nor
    ``additionalProperties``, unless ``x-kubernetes-preserve-unknown-fields`` is set there. A resource
    with such fields is accepted without error (unless the client asks for strict field validation)
    and then runs without them, so a schema check alone does not notice them.

    :param value: a rendered value (an object's ``spec``, or the whole object with the root schema).
    :param schema: the structural schema of ``value`` (``openAPIV3Schema`` for a whole object).
    :param path: the path of ``value``, for the returned lines.
    :returns: dotted paths (``spec.podSpecOverrides``), in document order.
    """
    out: list[str] = []
    preserve = bool(schema.get("x-kubernetes-preserve-unknown-fields"))
    if isinstance(value, Mapping):
        properties = schema.get("properties")
        additional = schema.get("additionalProperties")
        embedded = schema.get("x-kubernetes-embedded-resource") or not path  # apiVersion, kind, metadata kept
        for key, item in value.items():
            where = f"{path}.{key}" if path else str(key)
            if embedded and key in ("apiVersion", "kind", "metadata"):
                continue
            if properties is not None and key in properties:
                out += pruned_fields(item, properties[key], where)
            elif isinstance(additional, Mapping):
                out += pruned_fields(item, additional, where)
            elif not preserve and additional is not True:
                out.append(where)
    elif isinstance(value, list) and isinstance(schema.get("items"), Mapping):
        for index, item in enumerate(value):
            out += pruned_fields(item, schema["items"], f"{path}[{index}]")
    return out


@dataclass(frozen=True)
class CrdSchema:
    """The JSON Schemas of one CustomResourceDefinition, per served version."""

    group: str
    kind: str
    plural: str
    versions: Mapping[str, Any] = field(repr=False)
    """``version -> jsonschema validator`` for the whole object."""
    source: str = ""
    """The CRD file's name, for reports."""
    structural: Mapping[str, Any] = field(default_factory=dict, repr=False)
    """``version -> openAPIV3Schema`` as the CRD states it (what the API server prunes by)."""

    def matches(self, obj: Mapping[str, Any]) -> bool:
        """Whether ``obj`` is an instance of this CRD (any served version)."""
        return obj.get("kind") == self.kind and str(obj.get("apiVersion", "")).split("/")[0] == self.group

    def errors(self, obj: Mapping[str, Any]) -> list[str]:
        """One-line messages for everything wrong with ``obj``; empty when valid."""
        api_version = str(obj.get("apiVersion", ""))
        version = api_version.split("/", 1)[1] if "/" in api_version else ""
        validator = self.versions.get(version)
        if validator is None:
            served = ", ".join(f"{self.group}/{v}" for v in self.versions)
            return [f"{_ref(obj)}: apiVersion: {api_version!r} is not served by the CRD (served: {served})"]
        found = sorted(validator.iter_errors(obj), key=lambda e: list(map(str, e.absolute_path)))
        return [f"{_ref(obj)}: {_path(e)}: {e.message}" for e in found]

    def pruned(self, obj: Mapping[str, Any]) -> list[str]:
        """One line per field of ``obj`` the API server would silently drop (:func:`pruned_fields`)."""
        api_version = str(obj.get("apiVersion", ""))
        schema = self.structural.get(api_version.split("/", 1)[1] if "/" in api_version else "")
        if schema is None:
            return []
        return [
            f"{_ref(obj)}: {where}: not in the {self.kind} schema of {api_version}; the API server would prune it"
            for where in pruned_fields(obj, schema)
        ]


@functools.lru_cache(maxsize=16)
def _load_crd_cached(path: str, mtime: float) -> CrdSchema:
    with open(path, encoding="utf-8") as handle:
        return _crd_schema(handle.read(), path)


@functools.lru_cache(maxsize=16)
def _download_crd(url: str) -> CrdSchema:
    try:
        with urllib.request.urlopen(
            urllib.request.Request(url, headers={"Accept": "text/yaml, */*"}), timeout=30
        ) as response:
            text = response.read().decode("utf-8", errors="replace")
    except urllib.error.HTTPError as error:
        raise ConfigError(
            "--crd", f"cannot download {url}: HTTP {error.code} {error.reason}", "check the URL, or pass a local file"
        ) from error
    except (urllib.error.URLError, OSError) as error:
        reason = getattr(error, "reason", error)
        raise ConfigError(
            "--crd",
            f"cannot download {url}: {reason}",
            "check the network, or download the file and pass its path",
        ) from error
    return _crd_schema(text, url)


def _crd_schema(text: str, source: str) -> CrdSchema:
    require_validation()
    import jsonschema
    import yaml

    try:
        crd = yaml.load(text, Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader))
    except yaml.YAMLError as error:
        raise ConfigError(
            "--crd", f"{source} is not YAML ({' '.join(str(error).split())[:120]})", "pass a CRD's YAML file"
        ) from error
    if not isinstance(crd, dict) or crd.get("kind") != "CustomResourceDefinition":
        raise ConfigError("--crd", f"{source} is not a CustomResourceDefinition", "pass the CRD's YAML file or URL")
    spec = crd["spec"]
    group, kind = spec["group"], spec["names"]["kind"]
    validators: dict[str, Any] = {}
    structural: dict[str, Any] = {}
    for entry in spec["versions"]:
        if not entry.get("served", True):
            continue
        structural[entry["name"]] = entry["schema"]["openAPIV3Schema"]
        body = structural_to_jsonschema(entry["schema"]["openAPIV3Schema"])
        body.setdefault("properties", {})
        body["properties"]["apiVersion"] = {"const": f"{group}/{entry['name']}"}
        body["properties"]["kind"] = {"const": kind}
        body["properties"]["metadata"] = _OBJECT_META
        body["required"] = sorted({*body.get("required", []), "apiVersion", "kind", "metadata"})
        validators[entry["name"]] = jsonschema.Draft7Validator(body)
    return CrdSchema(
        group=group,
        kind=kind,
        plural=spec["names"]["plural"],
        versions=validators,
        source=Path(source).name,
        structural=structural,
    )


def load_crd_schema(path: str | Path) -> CrdSchema:
    """Load a CustomResourceDefinition and build its validators (cached per file or URL).

    :param path: the CRD file, e.g. ``kubeflow.org_pytorchjobs.yaml``, or an ``https://`` URL of one
        (:data:`CRD_URLS` has the releases the SDK renders for).
    :raises ConfigError: the file is missing, the URL cannot be read, or it is not a CRD.
    """
    if isinstance(path, str) and path.startswith(("https://", "http://")):
        return _download_crd(path)
    path = Path(path)
    try:
        mtime = path.stat().st_mtime
    except OSError as error:
        raise ConfigError("--crd", f"cannot read {path}: {error.strerror}", "pass an existing CRD file") from error
    return _load_crd_cached(str(path.resolve()), mtime)


def crd_from_object(crd: Mapping[str, Any], source: str = "") -> CrdSchema:
    """The structural schemas of a CustomResourceDefinition as a cluster returns it, for :meth:`CrdSchema.pruned`
    (no validators: it needs no ``validate`` extra, and :meth:`CrdSchema.errors` reports every version unserved).

    :param crd: the CRD object (``apiextensions.k8s.io/v1``).
    :param source: what to call it in messages (default: ``the cluster's <name>``).
    """
    spec = crd["spec"]
    structural = {
        entry["name"]: entry["schema"]["openAPIV3Schema"]
        for entry in spec.get("versions") or []
        if entry.get("served", True) and (entry.get("schema") or {}).get("openAPIV3Schema")
    }
    return CrdSchema(
        group=spec["group"],
        kind=spec["names"]["kind"],
        plural=spec["names"]["plural"],
        versions={},
        source=source or f"the cluster's {(crd.get('metadata') or {}).get('name', spec['names']['plural'])}",
        structural=structural,
    )


# --------------------------------------------------------------------------- what render hooks set


def _within(path: str, prefix: str) -> bool:
    """Whether ``path`` is ``prefix`` or below it (every path is below the empty one, a whole object)."""
    return not prefix or path == prefix or path.startswith((prefix + ".", prefix + "["))


def pruned_by_hooks(
    objects: Sequence[Mapping[str, Any]], changes: Sequence[tuple[str, int, str]], crds: Iterable[CrdSchema]
) -> list[str]:
    """One line per field of ``objects`` the API server would prune (:func:`pruned_fields`), naming the plugin whose
    render hook set it.

    :param objects: the rendered objects, after the plugins' ``fsdp_sdk_render_job``.
    :param changes: ``(plugin, object index, path)`` for every path a hook set (``""``: an object it added), as
        :meth:`fsdp_sdk.plugins.Hooks.render_job` records them.
    :param crds: the CRDs of the custom kinds to check (files given with ``--crd``, or the cluster's own).
    """
    crds = list(crds)
    lines: list[str] = []
    for index, obj in enumerate(objects):
        crd = next((c for c in crds if c.matches(obj)), None)
        api_version = str(obj.get("apiVersion", ""))
        schema = crd.structural.get(api_version.split("/", 1)[-1]) if crd is not None else None
        if crd is None or schema is None:
            continue
        for where in pruned_fields(obj, schema):
            owners = sorted(
                {p for p, i, set_ in changes if i == index and (_within(set_, where) or _within(where, set_))}
            )
            dropped = (
                f"{where}, which the {crd.kind} schema of {api_version} ({crd.source}) does not declare: "
                "the API server would drop it"
            )
            if not owners:
                lines.append(f"{_ref(obj)}: {dropped}")
                continue
            hint = (
                "; a hook that changes worker pods writes through fsdp_sdk.k8s.render.worker_pods, which finds them "
                "in both job shapes (see the fsdp_sdk_render_job hookspec)"
                if crd.kind in ("TrainJob", "PyTorchJob")
                else ""
            )
            lines += [f"plugin {owner}: fsdp_sdk_render_job set {_ref(obj)} {dropped}{hint}" for owner in owners]
    return lines


# --------------------------------------------------------------------------- many objects


@dataclass(frozen=True)
class ValidationCheck:
    """One thing :func:`validate_objects` checked, and against what.

    :param subject: an object (``Secret/hf-token``) or an embedded pod template
        (``PyTorchJob/fsdp Worker pod template``).
    :param schema: what it was checked against (``the Kubernetes 1.31 OpenAPI``,
        ``the CRD kubeflow.org_pytorchjobs.yaml``).
    :param errors: the problems found; empty when it is valid.
    """

    subject: str
    schema: str
    errors: tuple[str, ...] = ()

    @property
    def ok(self) -> bool:
        """Whether the subject is valid against the schema."""
        return not self.errors


@dataclass
class ValidationReport:
    """What :func:`validate_objects` found."""

    errors: list[str] = field(default_factory=list)
    """One line per problem: ``Kind/name: path: message``."""
    validated: list[str] = field(default_factory=list)
    """``Kind/name`` of every object that was checked as a whole."""
    skipped: list[str] = field(default_factory=list)
    """``Kind/name`` of objects no schema was available for (a CRD not passed in); an embedded
    pod template of theirs may still have been checked (see :attr:`checks`)."""
    checks: list[ValidationCheck] = field(default_factory=list)
    """Every object and pod template checked, with the schema it was checked against."""

    def _add(self, subject: str, schema: str, errors: list[str]) -> None:
        self.checks.append(ValidationCheck(subject, schema, tuple(errors)))
        self.errors += errors

    @property
    def ok(self) -> bool:
        """No errors (skipped objects do not count as errors)."""
        return not self.errors

    def raise_for_errors(self) -> None:
        """Raise :class:`KubernetesError` naming the first problem when there is any."""
        if self.errors:
            more = f" (and {len(self.errors) - 1} more)" if len(self.errors) > 1 else ""
            raise KubernetesError(f"{self.errors[0]}{more}; fix the configuration that produced this field")


def validate_objects(
    objects: Iterable[Mapping[str, Any]],
    *,
    crd_paths: Iterable[str | Path] = (),
    version: str = DEFAULT_KUBERNETES_VERSION,
) -> ValidationReport:
    """Validate rendered objects offline.

    Built-in kinds use the Kubernetes OpenAPI; custom resources use the CRD files
    given in ``crd_paths``, and every field their structural schema would prune is an
    error too (:func:`pruned_fields`); the pod templates of PyTorchJob replicas are also
    validated as Pods, with or without the CRD. Objects of a custom kind with no
    matching CRD file are listed in :attr:`ValidationReport.skipped`.

    :param objects: rendered objects (dicts).
    :param crd_paths: CRD YAML files, e.g. the Training Operator's PyTorchJob CRD.
    :param version: Kubernetes minor version for built-in kinds.
    """
    crds = [load_crd_schema(p) for p in crd_paths]
    openapi = f"the Kubernetes {version} OpenAPI"
    report = ValidationReport()
    for obj in objects:
        ref = _ref(obj)
        crd = next((c for c in crds if c.matches(obj)), None)
        if crd is not None:
            report._add(ref, f"the CRD {crd.source or crd.plural + '.' + crd.group}", crd.errors(obj) + crd.pruned(obj))
            report.validated.append(ref)
        else:
            try:
                errors = validate_builtin(obj, version=version)
            except KeyError:
                report.skipped.append(ref)
            else:
                report._add(ref, openapi, errors)
                report.validated.append(ref)
        if obj.get("kind") == "PyTorchJob":
            replicas = (obj.get("spec") or {}).get("pytorchReplicaSpecs") or {}
            for replica_type, replica in replicas.items():
                template = (replica or {}).get("template")
                if isinstance(template, Mapping):
                    owner = f"{ref} {replica_type}"
                    report._add(
                        f"{owner} pod template",
                        f"{openapi} (as a Pod)",
                        validate_pod_template(template, owner=owner, version=version),
                    )
    return report
