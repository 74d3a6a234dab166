"""fsdp-sdk plugin adding the ``p6-b200.48xlarge`` instance type (8x NVIDIA B200, EFA v4)."""

from __future__ import annotations

from fsdp_sdk import hookimpl
from fsdp_sdk.instance_types import InstanceType, InstanceTypeRegistry

#: Public AWS figures; on-demand price in us-east-1 as read on this date.
P6_B200 = InstanceType(
    name="p6-b200.48xlarge",
    gpu_count=8,
    gpu_model="B200",
    gpu_memory_gib=180,  # 1440 GB HBM3e per instance
    efa_interfaces=8,  # 8 x 400 Gbps EFA v4
    vcpus=192,
    memory_gib=2048,
    bf16_tflops_per_gpu=2250.0,  # dense (4.5 PFLOPS with sparsity)
    on_demand_usd_per_hour=113.93,
    price_date="2025-06-05",
    nvme_gib=30720,
    network_gbps=3200,
    notes="B200 180GB",
    efa_generation=4,
    gpudirect_rdma=True,  # jobs on it get FI_EFA_USE_DEVICE_RDMA=1
    intra_node_link="NVLink 5",
    intra_node_gbytes_per_s=900.0,  # 1.8 TB/s per GPU, both directions
)


@hookimpl
def fsdp_sdk_register_instance_types(registry: InstanceTypeRegistry) -> None:
    """Register p6-b200.48xlarge."""
    registry.add(P6_B200)
