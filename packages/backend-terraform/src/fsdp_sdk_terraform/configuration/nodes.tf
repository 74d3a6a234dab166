# Node groups: a small system group, and the GPU group with one EFA interface per network card,
# capacity reservation or Capacity Block targeting, and a cluster placement group for EFA groups
# without a reservation. Both use launch templates; EKS picks the accelerated AMI named by
# gpu_ami_type and bootstraps it, merging gpu_user_data (the local NVMe RAID0) into its own.

locals {
  reserved = contains(["capacity-reservation", "capacity-block"], var.capacity_type)
  # The EKS node group capacity type for each way of buying the GPU nodes.
  eks_capacity_types = {
    "on-demand"            = "ON_DEMAND"
    "capacity-reservation" = "ON_DEMAND"
    "capacity-block"       = "CAPACITY_BLOCK"
    "spot"                 = "SPOT"
  }
  eks_capacity_type = local.eks_capacity_types[var.capacity_type]
  # Node security groups: with their own groups in a launch template, EKS no longer adds the
  # cluster security group by itself.
  gpu_security_groups = compact([
    aws_eks_cluster.this.vpc_config[0].cluster_security_group_id,
    local.efa ? aws_security_group.efa.id : "",
  ])
  efa = length(var.gpu_network_interfaces) > 0
}

resource "aws_placement_group" "gpu" {
  count = var.placement_group ? 1 : 0

  name     = "${var.cluster_name}-gpu"
  strategy = "cluster"

  lifecycle {
    precondition {
      condition     = !local.reserved
      error_message = "placement_group must be false with a capacity reservation or Capacity Block: its instances are already placed."
    }
  }
}

resource "aws_launch_template" "system" {
  name_prefix            = "${substr(var.cluster_name, 0, 80)}-system-"
  description            = "System nodes of ${var.cluster_name}"
  update_default_version = true
  vpc_security_group_ids = [aws_eks_cluster.this.vpc_config[0].cluster_security_group_id]

  block_device_mappings {
    device_name = "/dev/xvda"

    ebs {
      volume_size           = 100
      volume_type           = "gp3"
      encrypted             = true
      delete_on_termination = true
    }
  }

  metadata_options {
    http_endpoint               = "enabled"
    http_tokens                 = "required"
    http_put_response_hop_limit = 2
  }

  tag_specifications {
    resource_type = "instance"

    tags = {
      Name = "${var.cluster_name}-system"
    }
  }
}

resource "aws_eks_node_group" "system" {
  cluster_name    = aws_eks_cluster.this.name
  node_group_name = "system"
  node_role_arn   = aws_iam_role.node.arn
  subnet_ids      = aws_subnet.private[*].id
  instance_types  = [var.system_instance_type]
  ami_type        = "AL2023_x86_64_STANDARD"
  capacity_type   = "ON_DEMAND"

  scaling_config {
    desired_size = var.system_nodes
    min_size     = 1
    max_size     = var.system_nodes
  }

  launch_template {
    id      = aws_launch_template.system.id
    version = aws_launch_template.system.latest_version
  }

  labels = var.system_labels

  depends_on = [
    aws_iam_role_policy_attachment.node,
    aws_eks_addon.vpc_cni,
  ]
}

resource "aws_launch_template" "gpu" {
  name_prefix            = "${substr(var.cluster_name, 0, 80)}-gpu-"
  description            = "GPU nodes of ${var.cluster_name}"
  update_default_version = true
  instance_type          = var.gpu_instance_type
  # Without EFA interfaces the groups go on the instance; with them, on each interface.
  vpc_security_group_ids = local.efa ? null : local.gpu_security_groups
  user_data              = var.gpu_user_data == "" ? null : base64encode(var.gpu_user_data)

  # AL2023: the root volume; Bottlerocket: the data volume (its /dev/xvda holds the OS only).
  block_device_mappings {
    device_name = var.gpu_volume.device_name

    ebs {
      volume_size           = var.gpu_volume.size_gib
      volume_type           = "gp3"
      iops                  = var.gpu_volume.iops
      throughput            = var.gpu_volume.throughput
      encrypted             = true
      delete_on_termination = true
    }
  }

  # One EFA interface per network card: card 0 carries the primary interface (device 0, efa), every
  # other card an efa-only interface at its device 0 where the type offers it (no VPC address taken).
  dynamic "network_interfaces" {
    for_each = var.gpu_network_interfaces

    content {
      network_card_index    = network_interfaces.value.network_card_index
      device_index          = network_interfaces.value.device_index
      interface_type        = network_interfaces.value.interface_type
      security_groups       = local.gpu_security_groups
      delete_on_termination = true
    }
  }

  dynamic "capacity_reservation_specification" {
    for_each = local.reserved ? [var.capacity_reservation_id] : []

    content {
      capacity_reservation_target {
        capacity_reservation_id = capacity_reservation_specification.value
      }
    }
  }

  # Capacity Blocks need this market type on top of the reservation target.
  dynamic "instance_market_options" {
    for_each = var.capacity_type == "capacity-block" ? ["capacity-block"] : []

    content {
      market_type = instance_market_options.value
    }
  }

  dynamic "placement" {
    for_each = aws_placement_group.gpu[*].name

    content {
      group_name = placement.value
    }
  }

  metadata_options {
    http_endpoint               = "enabled"
    http_tokens                 = "required"
    http_put_response_hop_limit = 2
  }

  tag_specifications {
    resource_type = "instance"

    tags = {
      Name = "${var.cluster_name}-gpu"
    }
  }

  lifecycle {
    precondition {
      condition     = local.reserved == (var.capacity_reservation_id != null)
      error_message = "capacity_reservation_id must be set exactly when capacity_type is capacity-reservation or capacity-block."
    }
  }
}

resource "aws_eks_node_group" "gpu" {
  cluster_name    = aws_eks_cluster.this.name
  node_group_name = "gpu"
  node_role_arn   = aws_iam_role.node.arn
  # One zone: EFA traffic stays within it, and a reservation or Capacity Block lives in one.
  subnet_ids    = [aws_subnet.private[0].id]
  ami_type      = var.gpu_ami_type
  capacity_type = local.eks_capacity_type

  scaling_config {
    desired_size = var.gpu_nodes
    min_size     = var.gpu_min_nodes
    max_size     = var.gpu_max_nodes
  }

  update_config {
    max_unavailable = 1
  }

  launch_template {
    id      = aws_launch_template.gpu.id
    version = aws_launch_template.gpu.latest_version
  }

  labels = var.gpu_labels

  dynamic "taint" {
    for_each = var.gpu_taints

    content {
      key    = taint.value.key
      value  = taint.value.value
      effect = taint.value.effect
    }
  }

  timeouts {
    create = "60m"
    update = "60m"
  }

  depends_on = [
    aws_iam_role_policy_attachment.node,
    aws_eks_addon.vpc_cni,
  ]

  lifecycle {
    precondition {
      condition     = var.gpu_min_nodes <= var.gpu_nodes && var.gpu_nodes <= var.gpu_max_nodes
      error_message = "gpu_nodes must lie between gpu_min_nodes and gpu_max_nodes."
    }
  }
}
