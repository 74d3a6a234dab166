"""The hooks fsdp-sdk calls: the Trainium instance types, and our node-group conventions on every job.

Our Trainium node groups are tainted ``trainium.example.com/dedicated=true:NoSchedule``, so nothing but
training lands on them, and our cost reports group pods by ``trainium.example.com/generation``. Every
worker pod of a job on a Trainium type gets the toleration and the label; jobs on other types are left alone.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from fsdp_sdk import hookimpl
from fsdp_sdk_plugin_trainium.instance_types import TRAINIUM_INSTANCE_TYPES

if TYPE_CHECKING:  # fsdp-sdk imports every plugin when it starts, --help included: import only what registering needs
    from fsdp_sdk.instance_types import InstanceTypeRegistry
    from fsdp_sdk.resolved import Resolved

__all__ = ["GENERATION_LABEL", "TAINT_KEY", "fsdp_sdk_register_instance_types", "fsdp_sdk_render_job"]

#: The taint of our Trainium node groups.
TAINT_KEY = "trainium.example.com/dedicated"
#: The label our cost reports group Trainium pods by: "1" (trn1, trn1n) or "2" (trn2).
GENERATION_LABEL = "trainium.example.com/generation"

_GENERATIONS = {"Trainium": "1", "Trainium2": "2"}


@hookimpl
def fsdp_sdk_register_instance_types(registry: InstanceTypeRegistry) -> None:
    """Register trn1.32xlarge, trn1n.32xlarge and trn2.48xlarge."""
    for instance_type in TRAINIUM_INSTANCE_TYPES:
        registry.add(instance_type)


@hookimpl
def fsdp_sdk_render_job(objects: list[dict[str, Any]], resolved: Resolved) -> None:
    """Tolerate our Trainium taint and label the pods with the Trainium generation (Trainium jobs only).

    The job's instance type is ``resolved.instance``, as the configuration was resolved: a Trainium type another
    plugin (or the platform embedding fsdp-sdk) registers is recognised by its accelerator, not its name.
    """
    from fsdp_sdk.k8s.render import worker_pods

    generation = _GENERATIONS.get(resolved.instance.gpu_model)
    if generation is None:
        return
    toleration = {"key": TAINT_KEY, "operator": "Equal", "value": "true", "effect": "NoSchedule"}
    for pod in worker_pods(objects):
        tolerations = pod.spec.setdefault("tolerations", [])
        if toleration not in tolerations:
            tolerations.append(toleration)
        pod.labels[GENERATION_LABEL] = generation
