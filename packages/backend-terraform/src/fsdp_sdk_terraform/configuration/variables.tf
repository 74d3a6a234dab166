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

variable "gpu_labels" {
  type        = map(string)
  description = "Labels of the GPU nodes (fsdp-sdk.io/node-role = gpu: device plugins and jobs select them)."
  default     = { "fsdp-sdk.io/node-role" = "gpu" }

  validation {
    condition     = lookup(var.gpu_labels, "fsdp-sdk.io/node-role", "") == "gpu"
    error_message = "gpu_labels must hold fsdp-sdk.io/node-role = gpu."
  }
}

variable "gpu_taints" {
  type = list(object({
    key    = string
    value  = string
    effect = string
  }))
  description = "Taints of the GPU nodes (nvidia.com/gpu=true:NO_SCHEDULE: only pods that tolerate it land there)."
  default     = [{ key = "nvidia.com/gpu", value = "true", effect = "NO_SCHEDULE" }]

  validation {
    condition     = alltrue([for t in var.gpu_taints : contains(["NO_SCHEDULE", "NO_EXECUTE", "PREFER_NO_SCHEDULE"], t.effect)])
    error_message = "gpu_taints effects must be NO_SCHEDULE, NO_EXECUTE or PREFER_NO_SCHEDULE."
  }
}

variable "system_labels" {
  type        = map(string)
  description = "Labels of the system nodes (fsdp-sdk.io/node-role = system: etcd, operators and monitoring select them)."
  default     = { "fsdp-sdk.io/node-role" = "system" }

  validation {
    condition     = lookup(var.system_labels, "fsdp-sdk.io/node-role", "") == "system"
    error_message = "system_labels must hold fsdp-sdk.io/node-role = system."
  }
}

variable "gpu_network_interfaces" {
  type = list(object({
    network_card_index = number
    device_index       = number
    interface_type     = string
  }))
  description = "EFA interfaces of each GPU node: card 0 device 0 the primary (efa), one per further card (efa-only at its device 0 where the type offers it); empty turns EFA off."
  default     = []

  validation {
    condition     = length(var.gpu_network_interfaces) <= 64 && alltrue([for i in var.gpu_network_interfaces : contains(["efa", "efa-only"], i.interface_type) && (i.network_card_index != 0 || (i.device_index == 0 && i.interface_type == "efa"))])
    error_message = "gpu_network_interfaces: at most 64, of type efa or efa-only, card 0 holding the primary efa interface at device 0."
  }
}

variable "gpu_volume" {
  type = object({
    device_name = string
    size_gib    = number
    iops        = number
    throughput  = number
  })
  description = "The GPU nodes' sized EBS volume: the root /dev/xvda on AL2023, the data volume /dev/xvdb on Bottlerocket (images and pods live there)."

  validation {
    condition     = contains(["/dev/xvda", "/dev/xvdb"], var.gpu_volume.device_name) && var.gpu_volume.size_gib >= 40 && var.gpu_volume.size_gib <= 16384
    error_message = "gpu_volume: device /dev/xvda or /dev/xvdb, 40 to 16384 GiB."
  }
}

variable "gpu_user_data" {
  type        = string
  description = "User data EKS merges into the GPU nodes' bootstrap (AL2023: a MIME part with the nodeadm NodeConfig; Bottlerocket: TOML settings), e.g. the local NVMe RAID0; empty: none."
  default     = ""

  validation {
    condition     = length(var.gpu_user_data) <= 16384
    error_message = "gpu_user_data must be at most 16 KiB (EC2's user data limit)."
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
  description = "Create a cluster placement group for the GPU nodes (EFA groups without a reservation; never with a reservation, whose instances are already placed)."
  default     = false
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
