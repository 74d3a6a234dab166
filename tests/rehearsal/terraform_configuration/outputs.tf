# The outputs the SDK reads, as the shipped configuration names them.

output "cluster_name" {
  description = "Name of the EKS cluster."
  value       = terraform_data.cluster.output.name
}

output "cluster_endpoint" {
  description = "URL of the Kubernetes API server (the fake cluster has none of its own)."
  value       = "https://${terraform_data.cluster.output.name}.eks.example"
}

output "node_group_names" {
  description = "Node groups of the cluster: system, then GPU."
  value       = ["system", "gpu"]
}

output "gpu_node_group_name" {
  description = "Node group of the GPU nodes."
  value       = "gpu"
}

output "gpu_nodes" {
  description = "Desired number of GPU nodes."
  value       = terraform_data.gpu_nodes.output.nodes
}
