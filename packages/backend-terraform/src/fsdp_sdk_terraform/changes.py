"""What a saved Terraform plan will do, read from ``terraform show -json <plan>``.

Counts follow Terraform's own summary line (``Plan: 3 to add, 1 to change, 0 to destroy.``): a
replacement counts once as an addition and once as a destruction; reads and no-ops count nowhere.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

__all__ = ["PlanChanges", "ResourceChange"]


@dataclass(frozen=True)
class ResourceChange:
    """One resource the plan touches.

    :param address: its address (``aws_eks_node_group.gpu``).
    :param action: ``create``, ``update``, ``delete`` or ``replace``.
    """

    address: str
    action: str

    def line(self) -> str:
        """``+ aws_vpc.this`` style, as Terraform marks them."""
        mark = {"create": "+", "update": "~", "delete": "-", "replace": "-/+"}[self.action]
        return f"{mark} {self.address}"


@dataclass(frozen=True)
class PlanChanges:
    """The changes of one saved plan.

    :param add: resources to create (replacements included).
    :param change: resources to update in place.
    :param destroy: resources to delete (replacements included).
    :param resources: every resource change, in the plan's order.
    :param outputs: names of the outputs the plan changes.
    """

    add: int
    change: int
    destroy: int
    resources: tuple[ResourceChange, ...] = field(default_factory=tuple)
    outputs: tuple[str, ...] = field(default_factory=tuple)

    @classmethod
    def from_plan_json(cls, plan: Mapping[str, Any]) -> PlanChanges:
        """Read the output of ``terraform show -json <plan file>``."""
        add = change = destroy = 0
        resources: list[ResourceChange] = []
        for item in plan.get("resource_changes") or []:
            actions = list((item.get("change") or {}).get("actions") or [])
            if "create" in actions and "delete" in actions:
                action = "replace"
            elif actions == ["create"]:
                action = "create"
            elif actions == ["update"]:
                action = "update"
            elif actions == ["delete"]:
                action = "delete"
            else:  # no-op, read
                continue
            add += action in ("create", "replace")
            destroy += action in ("delete", "replace")
            change += action == "update"
            resources.append(ResourceChange(str(item.get("address")), action))
        outputs = tuple(
            name
            for name, output in (plan.get("output_changes") or {}).items()
            if (output.get("actions") or ["no-op"]) != ["no-op"]
        )
        return cls(add, change, destroy, tuple(resources), outputs)

    @property
    def empty(self) -> bool:
        """Whether applying the plan changes no resource and no output."""
        return not self.resources and not self.outputs

    def line(self) -> str:
        """``2 to add, 0 to change, 1 to destroy`` (Terraform's wording)."""
        return f"{self.add} to add, {self.change} to change, {self.destroy} to destroy"

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready dict."""
        return {
            "add": self.add,
            "change": self.change,
            "destroy": self.destroy,
            "resources": [{"address": r.address, "action": r.action} for r in self.resources],
            "outputs": list(self.outputs),
        }
