# Inputs. fsdp-sdk writes them as terraform.tfvars.json in the cluster's working directory
# (<state_dir>/terraform/<cluster>/); every variable without a default is always written.

variable "cluster_name" {
  type        = string
  description = "Name of the EKS cluster; also prefixes every resource this configuration creates."

  validation {
    condition     = can(regex("^[a-zA-Z][-a-zA-Z0-9]{0,99}$", var.cluster_name))
    error_message = "cluster_name must start with a letter and hold at most 100 letters, digits and '-'."
  }
}

variable "region" {
  type        = string
  description = "AWS region of the cluster."

  validation {
    condition     = can(regex("^[a-z]{2}(-gov|-iso[a-z]?)?-[a-z]+-[0-9]+$", var.region))
    error_message = "region must be an AWS region name like us-west-2."
  }
}

variable "kubernetes_version" {
  type        = string
  description = "Kubernetes minor version of the control plane and the node groups, like 1.31."

  validation {
    condition     = can(regex("^1\\.[0-9]{2}$", var.kubernetes_version))
    error_message = "kubernetes_version must be a minor version like 1.31."
  }
}

variable "availability_zones" {
  type        = list(string)
  description = "Availability zones of the VPC's subnets; the GPU nodes (and any capacity reservation) use the first."

  validation {
    condition     = length(var.availability_zones) >= 2 && length(var.availability_zones) <= 6
    error_message = "availability_zones must name 2 to 6 zones: EKS needs subnets in two zones at least."
  }

  validation {
    condition     = alltrue([for zone in var.availability_zones : can(regex("^[a-z]{2}(-gov|-iso[a-z]?)?-[a-z]+-[0-9]+[a-z]$", zone))])
    error_message = "availability_zones must be zone names like us-west-2a."
  }
}

variable "vpc_cidr" {
  type        = string
  description = "IPv4 range of the VPC; split into a public and a private subnet per zone."
  default     = "10.0.0.0/16"

  validation {
    condition     = can(cidrhost(var.vpc_cidr, 0)) && tonumber(split("/", var.vpc_cidr)[1]) <= 20
    error_message = "vpc_cidr must be an IPv4 CIDR block of /20 or larger, like 10.0.0.0/16."
  }
}

variable "endpoint_public_access" {
  type        = bool
  description = "Whether the Kubernetes API server is reachable from the internet (from public_access_cidrs)."
  default     = true
}

variable "public_access_cidrs" {
  type        = list(string)
  description = "IPv4 ranges allowed to reach the public API server endpoint."
  default     = ["0.0.0.0/0"]

  validation {
    condition     = length(var.public_access_cidrs) > 0 && alltrue([for cidr in var.public_access_cidrs : can(cidrhost(cidr, 0))])
    error_message = "public_access_cidrs must be a non-empty list of IPv4 CIDR blocks like 203.0.113.0/24."
  }
}

variable "system_instance_type" {
  type        = string
  description = "Instance type of the system node group (CoreDNS, etcd, the Training Operator, monitoring)."

  validation {
    condition     = can(regex("^[a-z][a-z0-9-]*\\.[a-z0-9]+$", var.system_instance_type))
    error_message = "system_instance_type must be an instance type name like m5.xlarge."
  }
}

variable "system_nodes" {
  type        = number
  description = "Number of system nodes."

  validation {
    condition     = var.system_nodes >= 1 && var.system_nodes <= 100 && floor(var.system_nodes) == var.system_nodes
    error_message = "system_nodes must be a whole number between 1 and 100."
  }
}

variable "gpu_instance_type" {
  type        = string
  description = "Instance type of the GPU node group, like p5.48xlarge."

  validation {
    condition     = can(regex("^[a-z][a-z0-9-]*\\.[a-z0-9]+$", var.gpu_instance_type))
    error_message = "gpu_instance_type must be an instance type name like p5.48xlarge."
  }
}

variable "gpu_nodes" {
  type        = number
  description = "Desired number of GPU nodes (what 'fsdp-sdk scale' changes)."

  validation {
    condition     = var.gpu_nodes >= 0 && floor(var.gpu_nodes) == var.gpu_nodes
    error_message = "gpu_nodes must be a whole number of 0 or more."
  }
}

variable "gpu_min_nodes" {
  type        = number
  description = "Lower bound of the GPU node group."
  default     = 0

  validation {
    condition     = var.gpu_min_nodes >= 0 && floor(var.gpu_min_nodes) == var.gpu_min_nodes
    error_message = "gpu_min_nodes must be a whole number of 0 or more."
  }
}

variable "gpu_max_nodes" {
  type        = number
  description = "Upper bound of the GPU node group (EKS needs at least 1)."

  validation {
    condition     = var.gpu_max_nodes >= 1 && floor(var.gpu_max_nodes) == var.gpu_max_nodes
    error_message = "gpu_max_nodes must be a whole number of 1 or more."
  }
}

variable "gpu_ami_type" {
  type        = string
  description = "EKS-optimized AMI of the GPU nodes: the accelerated AL2023 images carry the NVIDIA or Neuron drivers and the EFA host software."
  default     = "AL2023_x86_64_NVIDIA"

  validation {
    condition     = contains(["AL2023_x86_64_NVIDIA", "AL2023_ARM_64_NVIDIA", "AL2023_x86_64_NEURON", "BOTTLEROCKET_x86_64_NVIDIA", "BOTTLEROCKET_ARM_64_NVIDIA"], var.gpu_ami_type)
    error_message = "gpu_ami_type must be one of AL2023_x86_64_NVIDIA, AL2023_ARM_64_NVIDIA, AL2023_x86_64_NEURON, BOTTLEROCKET_x86_64_NVIDIA, BOTTLEROCKET_ARM_64_NVIDIA."
  }
}

variable "gpu_taint_key" {
  type        = string
  description = "Key of the NoSchedule taint on the GPU nodes: the accelerator's Kubernetes resource (jobs tolerate it)."
  default     = "nvidia.com/gpu"

  validation {
    condition     = can(regex("^[a-z0-9]([-a-z0-9.]*[a-z0-9])?/[a-z0-9]([-a-z0-9_.]*[a-z0-9])?$", var.gpu_taint_key))
    error_message = "gpu_taint_key must be a Kubernetes resource name like nvidia.com/gpu."
  }
}

variable "efa_interfaces" {
  type        = number
  description = "EFA interfaces per GPU node, one per network card (the instance type's count; 0 turns EFA off)."

  validation {
    condition     = var.efa_interfaces >= 0 && var.efa_interfaces <= 64 && floor(var.efa_interfaces) == var.efa_interfaces
    error_message = "efa_interfaces must be a whole number between 0 and 64."
  }
}

variable "capacity_type" {
  type        = string
  description = "How the GPU nodes are bought: on-demand, capacity-reservation (an On-Demand Capacity Reservation), capacity-block (EC2 Capacity Block for ML) or spot."
  default     = "on-demand"

  validation {
    condition     = contains(["on-demand", "capacity-reservation", "capacity-block", "spot"], var.capacity_type)
    error_message = "capacity_type must be one of on-demand, capacity-reservation, capacity-block, spot."
  }
}

variable "capacity_reservation_id" {
  type        = string
  description = "The cr-... id of the capacity reservation or Capacity Block the GPU nodes launch into (with capacity_type capacity-reservation or capacity-block)."
  default     = null

  validation {
    condition     = var.capacity_reservation_id == null || can(regex("^cr-[0-9a-f]{8,17}$", var.capacity_reservation_id))
    error_message = "capacity_reservation_id must be a reservation id like cr-0123456789abcdef0."
  }
}

variable "placement_group" {
  type        = bool
  description = "Launch the GPU nodes in a cluster placement group (lowest latency between nodes)."
  default     = false
}

variable "node_volume_size_gib" {
  type        = number
  description = "Root volume of each GPU node in GiB (container images and datasets)."

  validation {
    condition     = var.node_volume_size_gib >= 40 && var.node_volume_size_gib <= 16384
    error_message = "node_volume_size_gib must be between 40 and 16384 (the gp3 volume is provisioned at 16000 IOPS)."
  }
}

variable "tags" {
  type        = map(string)
  description = "Tags added to every resource."
  default     = {}

  validation {
    condition     = alltrue([for key, value in var.tags : length(key) >= 1 && length(key) <= 128 && length(value) <= 256 && !startswith(lower(key), "aws:")])
    error_message = "tags must have keys of 1-128 characters not starting with aws:, and values of at most 256."
  }
}
