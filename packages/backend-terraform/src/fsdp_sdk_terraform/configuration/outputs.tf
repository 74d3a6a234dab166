# What fsdp-sdk reads back with 'terraform output -json' (status, kubeconfig, scale).

output "cluster_name" {
  description = "Name of the EKS cluster."
  value       = aws_eks_cluster.this.name
}

output "cluster_endpoint" {
  description = "URL of the Kubernetes API server."
  value       = aws_eks_cluster.this.endpoint
}

output "cluster_certificate_authority_data" {
  description = "Base64 of the cluster's certificate authority."
  value       = aws_eks_cluster.this.certificate_authority[0].data
}

output "oidc_provider_arn" {
  description = "ARN of the cluster's IAM OIDC provider (IAM roles for service accounts)."
  value       = aws_iam_openid_connect_provider.cluster.arn
}

output "node_group_names" {
  description = "Node groups of the cluster: system, then GPU."
  value       = [aws_eks_node_group.system.node_group_name, aws_eks_node_group.gpu.node_group_name]
}

output "gpu_node_group_name" {
  description = "Node group of the GPU nodes."
  value       = aws_eks_node_group.gpu.node_group_name
}

output "gpu_nodes" {
  description = "Desired number of GPU nodes."
  value       = var.gpu_nodes
}

output "vpc_id" {
  description = "The cluster's VPC."
  value       = aws_vpc.this.id
}

output "private_subnet_ids" {
  description = "Private subnets, in the order of availability_zones."
  value       = aws_subnet.private[*].id
}

output "efa_security_group_id" {
  description = "Security group of the EFA interfaces."
  value       = aws_security_group.efa.id
}

output "placement_group_name" {
  description = "Cluster placement group of the GPU nodes, or null."
  value       = one(aws_placement_group.gpu[*].name)
}
