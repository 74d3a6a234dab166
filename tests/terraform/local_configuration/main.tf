# A local-only stand-in for the shipped EKS configuration: the same variables (the tests copy the
# shipped variables.tf beside this file), the same outputs, and only Terraform's built-in
# terraform_data resource, so it runs without downloading a provider. Its provisioners create,
# scale and delete the EKS cluster and node groups in the tests' moto server (fake_eks.py), so the
# SDK's status, kubeconfig and "nothing left behind" checks see real AWS API answers.
#
# Environment (set by the tests): FSDP_TF_TEST_PYTHON (a Python with boto3), AWS_ENDPOINT_URL and
# fake credentials; FSDP_TF_TEST_FAIL=<node group> makes creating that node group fail,
# FSDP_TF_TEST_SLEEP=<node group>:<seconds> makes creating it take that long first.

terraform {
  required_version = ">= 1.5"
}

resource "terraform_data" "cluster" {
  input = {
    name    = var.cluster_name
    region  = var.region
    version = var.kubernetes_version
    script  = "${path.module}/fake_eks.py"
  }

  provisioner "local-exec" {
    command = "\"$FSDP_TF_TEST_PYTHON\" ${self.input.script} create-cluster ${self.input.name} ${self.input.region} ${self.input.version}"
  }

  provisioner "local-exec" {
    when    = destroy
    command = "\"$FSDP_TF_TEST_PYTHON\" ${self.input.script} delete-cluster ${self.input.name} ${self.input.region}"
  }
}

resource "terraform_data" "system_nodes" {
  input = {
    cluster = terraform_data.cluster.output.name
    region  = var.region
    nodes   = var.system_nodes
    script  = "${path.module}/fake_eks.py"
  }

  provisioner "local-exec" {
    command = "\"$FSDP_TF_TEST_PYTHON\" ${self.input.script} create-nodegroup ${self.input.cluster} ${self.input.region} system ${self.input.nodes} 1 ${self.input.nodes}"
  }

  provisioner "local-exec" {
    when    = destroy
    command = "\"$FSDP_TF_TEST_PYTHON\" ${self.input.script} delete-nodegroup ${self.input.cluster} ${self.input.region} system"
  }
}

# A new GPU node count replaces this resource: the node group is deleted and created again at the new size.
resource "terraform_data" "gpu_nodes" {
  triggers_replace = [var.gpu_nodes, var.gpu_instance_type]

  input = {
    cluster = terraform_data.cluster.output.name
    region  = var.region
    nodes   = var.gpu_nodes
    min     = var.gpu_min_nodes
    max     = var.gpu_max_nodes
    script  = "${path.module}/fake_eks.py"
  }

  provisioner "local-exec" {
    command = "\"$FSDP_TF_TEST_PYTHON\" ${self.input.script} create-nodegroup ${self.input.cluster} ${self.input.region} gpu ${self.input.nodes} ${self.input.min} ${self.input.max}"
  }

  provisioner "local-exec" {
    when    = destroy
    command = "\"$FSDP_TF_TEST_PYTHON\" ${self.input.script} delete-nodegroup ${self.input.cluster} ${self.input.region} gpu"
  }

  depends_on = [terraform_data.system_nodes]
}
