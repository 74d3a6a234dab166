"""What a planned cluster costs per hour, on demand: GPU nodes, system nodes and the EKS control plane.

GPU prices come from the :class:`~fsdp_sdk.instance_types.InstanceType` (plugins supply theirs);
system node types are priced from a small table of the usual choices. A figure that is not known is
left out of the total and said so, never guessed.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from fsdp_sdk import pins

if TYPE_CHECKING:
    from fsdp_sdk.config import Config
    from fsdp_sdk.instance_types import InstanceType

__all__ = ["EKS_CONTROL_PLANE_USD_PER_HOUR", "PRICE_DATE", "SYSTEM_NODE_USD_PER_HOUR", "HourlyCost", "hourly_cost"]

#: The day the prices below were read (AWS on-demand, Linux, us-east-1).
PRICE_DATE = "2025-06-05"
#: An EKS cluster on standard support (extended support costs $0.60).
EKS_CONTROL_PLANE_USD_PER_HOUR = 0.10
#: On-demand prices of instance types commonly used for system nodes.
SYSTEM_NODE_USD_PER_HOUR: dict[str, float] = {
    "m5.large": 0.096,
    "m5.xlarge": 0.192,
    "m5.2xlarge": 0.384,
    "m5.4xlarge": 0.768,
    "m6i.large": 0.096,
    "m6i.xlarge": 0.192,
    "m6i.2xlarge": 0.384,
    "m7i.large": 0.1008,
    "m7i.xlarge": 0.2016,
    "m7i.2xlarge": 0.4032,
    "c5.xlarge": 0.17,
    "c5.2xlarge": 0.34,
    "t3.large": 0.0832,
    "t3.xlarge": 0.1664,
}


@dataclass(frozen=True)
class HourlyCost:
    """The parts of the hourly on-demand cost; ``None`` where a price is not known.

    :param gpu_nodes: GPU nodes x the instance type's on-demand price.
    :param system_nodes: system nodes x their price.
    :param control_plane: the EKS control plane.
    :param notes: what the figure leaves out or how it differs from the bill.
    """

    gpu_nodes: float | None
    system_nodes: float | None
    control_plane: float
    notes: tuple[str, ...]

    @property
    def total(self) -> float | None:
        """The sum, or ``None`` when the GPU nodes cannot be priced (the total would mislead)."""
        if self.gpu_nodes is None:
            return None
        return round(self.gpu_nodes + (self.system_nodes or 0.0) + self.control_plane, 2)

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready dict (``plan.details["cost"]``)."""
        return {
            "gpu_nodes_usd_per_hour": self.gpu_nodes,
            "system_nodes_usd_per_hour": self.system_nodes,
            "control_plane_usd_per_hour": self.control_plane,
            "total_usd_per_hour": self.total,
            "notes": list(self.notes),
        }


def hourly_cost(config: Config, instance: InstanceType) -> HourlyCost:
    """The hourly on-demand cost of the cluster ``config`` plans (see :class:`HourlyCost`)."""
    cluster = config.cluster
    notes: list[str] = []
    gpu = None
    if instance.on_demand_usd_per_hour is None:
        notes.append(f"{instance.name} has no on-demand list price: GPU nodes not priced")
    else:
        gpu = round(cluster.nodes * instance.on_demand_usd_per_hour, 2)
        notes.append(
            f"{instance.name}: ${instance.on_demand_usd_per_hour:,.2f}/h on demand as of {instance.price_date}"
        )
    if cluster.capacity_type == "capacity-block":
        notes.append("a Capacity Block is paid upfront when bought; the on-demand figure is for comparison")
    elif cluster.capacity_type == "capacity-reservation":
        notes.append("a capacity reservation is billed at the on-demand rate for every reserved instance, used or not")
    elif cluster.capacity_type == "spot":
        notes.append("Spot prices vary and are usually well below the on-demand figure")
    price = SYSTEM_NODE_USD_PER_HOUR.get(cluster.system_instance_type)
    system = None
    if price is None:
        notes.append(f"system nodes ({cluster.system_instance_type}) not priced: not in the backend's price table")
    else:
        system = round(cluster.system_nodes * price, 4)
    notes.append(f"plus NAT gateway, EBS volumes and data transfer (not counted); prices of us-east-1, {PRICE_DATE}")
    return HourlyCost(
        gpu, system, pins.control_plane_usd_per_hour(cluster.kubernetes_version, pins.today()), tuple(notes)
    )
