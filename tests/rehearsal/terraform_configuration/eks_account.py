"""What the shipped EKS configuration's resources do to the account, and what EKS then does in the cluster
(local-exec provisioners of the rehearsal's terraform configuration):

    eks_account.py create-cluster NAME REGION VERSION
    eks_account.py delete-cluster NAME REGION
    eks_account.py create-nodegroup CLUSTER REGION GROUP_JSON
    eks_account.py delete-nodegroup CLUSTER REGION GROUP

The cluster and node groups go to moto's EKS (``AWS_ENDPOINT_URL``), node groups with their instance type,
labels and taints as ``aws_eks_node_group`` sends them; with ``FSDP_TF_TEST_KUBECONFIG`` the cluster gets what
EKS creates with a control plane (aws-node, coredns, kube-proxy) and each node group's instances join it as Nodes
(:mod:`eksctl_in_cluster`, shared with the eksctl stand-in: the same EKS behind both tools). Deleting a node
group removes its Nodes. Deleting what does not exist is not an error (a destroy after an interrupted create).
"""

import contextlib
import json
import os
import sys

sys.path.insert(0, os.environ["FSDP_TF_TEST_STANDINS"])  # tests/eksctl: eksctl_in_cluster

import boto3
import eksctl_in_cluster

EFFECTS = {"NO_SCHEDULE": "NoSchedule", "NO_EXECUTE": "NoExecute", "PREFER_NO_SCHEDULE": "PreferNoSchedule"}


def _cluster() -> "eksctl_in_cluster.Cluster | None":
    kubeconfig = os.environ.get("FSDP_TF_TEST_KUBECONFIG")
    return eksctl_in_cluster.Cluster(kubeconfig) if kubeconfig else None


def main(command: str, cluster_name: str, region: str, *rest: str) -> int:
    eks = boto3.session.Session(region_name=region).client("eks")
    cluster = _cluster()
    if command == "create-cluster":
        eks.create_cluster(
            name=cluster_name,
            version=rest[0],
            roleArn="arn:aws:iam::123456789012:role/fsdp-sdk-test",
            resourcesVpcConfig={"subnetIds": ["subnet-0123456789abcdef0", "subnet-0123456789abcdef1"]},
        )
        if cluster is not None:
            document = {"metadata": {"version": rest[0]}, "addons": [{"name": "eks-pod-identity-agent"}]}
            eksctl_in_cluster.default_addons(cluster, document, region)
    elif command == "delete-cluster":
        with contextlib.suppress(eks.exceptions.ResourceNotFoundException):
            eks.delete_cluster(name=cluster_name)
    elif command == "create-nodegroup":
        group = json.loads(rest[0])
        taints = [{"key": t["key"], "value": t["value"], "effect": t["effect"]} for t in group["taints"]]
        eks.create_nodegroup(
            clusterName=cluster_name,
            nodegroupName=group["name"],
            nodeRole="arn:aws:iam::123456789012:role/fsdp-sdk-test-node",
            subnets=["subnet-0123456789abcdef0"],
            instanceTypes=[group["instance_type"]],
            labels=group["labels"],
            taints=taints,
            scalingConfig={"desiredSize": group["nodes"], "minSize": group["min"], "maxSize": group["max"]},
        )
        if cluster is not None:
            joining = {
                "name": group["name"],
                "instanceType": group["instance_type"],
                "desiredCapacity": group["nodes"],
                "labels": group["labels"],
                "taints": [{**t, "effect": EFFECTS[t["effect"]]} for t in taints],
            }
            eksctl_in_cluster.join_nodes(cluster, cluster_name, joining)
    elif command == "delete-nodegroup":
        with contextlib.suppress(eks.exceptions.ResourceNotFoundException):
            eks.delete_nodegroup(clusterName=cluster_name, nodegroupName=rest[0])
        if cluster is not None:
            cluster.delete_nodes(rest[0])
    else:
        print(f"unknown command {command}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main(*sys.argv[1:]))
