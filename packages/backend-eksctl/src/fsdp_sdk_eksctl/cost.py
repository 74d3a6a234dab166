"""What a planned cluster costs per hour: the core's EKS cost model (:func:`fsdp_sdk.aws.eks.hourly_cost`).

GPU nodes x the instance type's on-demand price, system nodes from the core's dated price table, and the EKS
control plane priced by its Kubernetes version's support state (:func:`fsdp_sdk.pins.control_plane_usd_per_hour`).
"""

from __future__ import annotations

from fsdp_sdk.aws.eks import HourlyCost, hourly_cost

__all__ = ["HourlyCost", "hourly_cost"]
