"""The Trainium instance family, with AWS's published figures.

Sources: the AWS Neuron documentation's Trn1/Trn1n and Trn2 architecture pages (devices, vCPUs, host
memory, dense BF16 TFLOPS, device memory, NeuronLink, EFA bandwidth) and the EC2 on-demand price list
(us-east-1, Linux). A Trainium chip is one ``aws.amazon.com/neuron`` device for the Neuron device plugin,
so ``gpu_count`` counts chips (each holds 2 NeuronCores on Trainium, 8 on Trainium2).
"""

from __future__ import annotations

from fsdp_sdk.instance_types import InstanceType

__all__ = ["TRAINIUM_INSTANCE_TYPES", "TRN1", "TRN1N", "TRN2"]

#: The Kubernetes extended resource the Neuron device plugin advertises, one per Trainium chip.
NEURON_RESOURCE = "aws.amazon.com/neuron"
#: The day the on-demand prices below were read.
PRICE_DATE = "2025-06-05"

TRN1 = InstanceType(
    name="trn1.32xlarge",
    gpu_count=16,
    gpu_model="Trainium",
    gpu_memory_gib=32,
    efa_interfaces=8,  # 8 x 100 Gbps
    vcpus=128,
    memory_gib=512,
    bf16_tflops_per_gpu=190.0,
    on_demand_usd_per_hour=21.50,
    price_date=PRICE_DATE,
    network_gbps=800,
    notes="16 Trainium chips (32 NeuronCore-v2), 512 GB device memory",
    accelerator_resource=NEURON_RESOURCE,
    efa_generation=2,
    gpudirect_rdma=True,  # Neuron's collectives read and write device memory over EFA
    intra_node_link="NeuronLink-v2",
    intra_node_gbytes_per_s=384.0,  # per device, as the Neuron documentation quotes it
)

TRN1N = InstanceType(
    name="trn1n.32xlarge",
    gpu_count=16,
    gpu_model="Trainium",
    gpu_memory_gib=32,
    efa_interfaces=16,  # 16 x 100 Gbps: the network-optimised variant of trn1.32xlarge
    vcpus=128,
    memory_gib=512,
    bf16_tflops_per_gpu=190.0,
    on_demand_usd_per_hour=24.78,
    price_date=PRICE_DATE,
    network_gbps=1600,
    notes="trn1.32xlarge with twice the EFA bandwidth, for larger clusters",
    accelerator_resource=NEURON_RESOURCE,
    efa_generation=2,
    gpudirect_rdma=True,
    intra_node_link="NeuronLink-v2",
    intra_node_gbytes_per_s=768.0,
)

TRN2 = InstanceType(
    name="trn2.48xlarge",
    gpu_count=16,
    gpu_model="Trainium2",
    gpu_memory_gib=96,
    efa_interfaces=16,
    vcpus=192,
    memory_gib=2048,
    bf16_tflops_per_gpu=667.0,  # 10.7 dense BF16 PFLOPS per instance
    on_demand_usd_per_hour=None,  # bought through Capacity Blocks here: no list price, so no price date either
    network_gbps=3200,
    notes="16 Trainium2 chips (128 NeuronCore-v3) in a 4x4 NeuronLink-v3 torus, 1.5 TB device memory",
    accelerator_resource=NEURON_RESOURCE,
    efa_generation=3,
    gpudirect_rdma=True,
    intra_node_link="NeuronLink-v3",
)

#: Every type this plugin registers.
TRAINIUM_INSTANCE_TYPES: tuple[InstanceType, ...] = (TRN1, TRN1N, TRN2)
