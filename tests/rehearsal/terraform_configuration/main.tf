# The rehearsal's stand-in for the shipped EKS configuration: the same variables (the test copies the shipped
# variables.tf beside this file), the same outputs, only Terraform's built-in terraform_data resource (no provider
# to download). Its provisioners (eks_account.py) do what the shipped configuration's resources do to the account and
# what EKS then does to the cluster: aws_eks_cluster (moto's EKS; EKS creates the default networking add-ons in the
# cluster), aws_eks_node_group with the variables' instance type, labels and taints (moto's EKS; the instances join
# the cluster as Nodes). Environment: FSDP_TF_TEST_PYTHON, AWS_ENDPOINT_URL and credentials, and
# FSDP_TF_TEST_KUBECONFIG, the cluster's API server.

terraform {
  required_version = ">= 1.5"
}

locals {
  script = "\"$FSDP_TF_TEST_PYTHON\" ${path.module}/eks_account.py"
}

resource "terraform_data" "cluster" {
  input = {
    name    = var.cluster_name
    region  = var.region
    version = var.kubernetes_version
    script  = local.script
  }

  provisioner "local-exec" {
    command = "${self.input.script} create-cluster ${self.input.name} ${self.input.region} ${self.input.version}"
  }

  provisioner "local-exec" {
    when    = destroy
    command = "${self.input.script} delete-cluster ${self.input.name} ${self.input.region}"
  }
}

resource "terraform_data" "system_nodes" {
  input = {
    cluster = terraform_data.cluster.output.name
    region  = var.region
    group = jsonencode({
      name = "system", instance_type = var.system_instance_type, nodes = var.system_nodes, min = var.system_nodes,
      max = var.system_nodes, labels = var.system_labels, taints = []
    })
    script = local.script
  }

  provisioner "local-exec" {
    command = "${self.input.script} create-nodegroup ${self.input.cluster} ${self.input.region} '${self.input.group}'"
  }

  provisioner "local-exec" {
    when    = destroy
    command = "${self.input.script} delete-nodegroup ${self.input.cluster} ${self.input.region} system"
  }
}

resource "terraform_data" "gpu_nodes" {
  triggers_replace = [var.gpu_nodes, var.gpu_instance_type]

  input = {
    cluster = terraform_data.cluster.output.name
    region  = var.region
    nodes   = var.gpu_nodes
    group = jsonencode({
      name = "gpu", instance_type = var.gpu_instance_type, nodes = var.gpu_nodes, min = var.gpu_min_nodes,
      max = var.gpu_max_nodes, labels = var.gpu_labels, taints = var.gpu_taints
    })
    script = local.script
  }

  provisioner "local-exec" {
    command = "${self.input.script} create-nodegroup ${self.input.cluster} ${self.input.region} '${self.input.group}'"
  }

  provisioner "local-exec" {
    when    = destroy
    command = "${self.input.script} delete-nodegroup ${self.input.cluster} ${self.input.region} gpu"
  }

  depends_on = [terraform_data.system_nodes]
}
