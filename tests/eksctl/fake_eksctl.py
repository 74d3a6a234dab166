"""A recording ``eksctl`` for tests: it logs its argv, prints eksctl-like progress, and creates or deletes the
cluster, its node groups and its CloudFormation stacks in the moto server (``AWS_ENDPOINT_URL``) through
boto3, so ``status``, the kubeconfig and the next ``up``/``down`` see what it did.

It checks what the real eksctl would refuse: the ``-f`` file against the eksctl JSON schema (when the
shared schema is present), an EFA node group in more than one zone, a cluster or node group that
already exists, deleting a missing cluster without ``--force``.

Faults, from ``FAKE_EKSCTL_FAULT`` (comma-separated):

* ``create-fails``: the cluster stack is created, then eksctl fails (as on a CloudFormation rollback);
* ``create-hangs``: the cluster stack is created, a child process is started, then it waits forever
  (until the caller stops its process group); both pids go to ``<log>.pids``;
* ``delete-fails``: ``delete cluster`` fails before deleting anything;
* ``old-version``: ``version`` prints 0.190.0.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

try:  # imported by the tests (a package), or run as the eksctl script (its folder on sys.path)
    from . import eksctl_in_cluster
except ImportError:
    import eksctl_in_cluster  # type: ignore[no-redef,import-not-found]

_SCRIPT = """#!{python}
import sys
sys.path.insert(0, {here!r})
from fake_eksctl import main
sys.exit(main(sys.argv[1:], log={log!r}, schema={schema!r}))
"""

_ACCOUNT = "123456789012"
# A stack that creates nothing (a resource under a condition that never holds): moto keeps its name, state and tags.
_TEMPLATE = json.dumps(
    {
        "Conditions": {"Never": {"Fn::Equals": ["a", "b"]}},
        "Resources": {"Placeholder": {"Type": "AWS::CloudFormation::WaitConditionHandle", "Condition": "Never"}},
    },
    separators=(",", ":"),
)
CLUSTER_TAG = "alpha.eksctl.io/cluster-name"


def install(bin_dir: Path, log: Path, schema: Path | None) -> Path:
    """Write the ``eksctl`` executable into ``bin_dir``; return its path."""
    bin_dir.mkdir(parents=True, exist_ok=True)
    path = bin_dir / "eksctl"
    path.write_text(
        _SCRIPT.format(
            python=sys.executable,
            here=str(Path(__file__).parent),
            log=str(log),
            schema=str(schema) if schema is not None and schema.exists() else "",
        )
    )
    path.chmod(0o755)
    return path


def _say(message: str, icon: str = "\u2139") -> None:
    print(f"2026-12-01 12:00:00 [{icon}]  {message}", flush=True)


class _Failed(Exception):
    pass


def _option(argv: list[str], name: str) -> str | None:
    for i, arg in enumerate(argv):
        if arg == name and i + 1 < len(argv):
            return argv[i + 1]
        if arg.startswith(name + "="):
            return arg.split("=", 1)[1]
    return None


def _clients(region: str) -> tuple[Any, Any]:
    import boto3

    session = boto3.session.Session(region_name=region)
    return session.client("eks"), session.client("cloudformation")


def main(argv: list[str], *, log: str, schema: str) -> int:
    with open(log, "a", encoding="utf-8") as handle:
        handle.write(json.dumps({"tool": "eksctl", "argv": argv, "pid": os.getpid()}) + "\n")
    faults = set(filter(None, os.environ.get("FAKE_EKSCTL_FAULT", "").split(",")))
    try:
        if argv[:1] == ["version"]:
            print("0.190.0" if "old-version" in faults else "0.210.0")
        elif argv[:2] == ["create", "cluster"]:
            _create_cluster(argv, schema, faults, log)
        elif argv[:2] == ["create", "nodegroup"]:
            _create_nodegroups(argv, schema)
        elif argv[:2] == ["scale", "nodegroup"]:
            _scale(argv)
        elif argv[:2] == ["delete", "cluster"]:
            _delete(argv, faults)
        else:
            raise _Failed(f"unknown command {' '.join(argv[:2])!r} for eksctl")
    except _Failed as error:
        print(f"2026-12-01 12:00:01 [✖]  {error}", file=sys.stderr, flush=True)
        print(f"Error: {error}", file=sys.stderr, flush=True)
        return 1
    return 0


def _load(argv: list[str], schema: str) -> dict[str, Any]:
    import yaml

    path = _option(argv, "-f")
    if path is None:
        raise _Failed("--config-file/-f is required here")
    document = yaml.safe_load(Path(path).read_text())
    if schema:
        import jsonschema

        errors = sorted(jsonschema.Draft7Validator(json.loads(Path(schema).read_text())).iter_errors(document), key=str)
        if errors:
            raise _Failed(f"loading config file {path!r}: {errors[0].message}")
    for group in document.get("managedNodeGroups", []):
        if group.get("efaEnabled") and len(group.get("availabilityZones") or []) > 1:
            raise _Failed(
                f"managedNodeGroups[{group['name']}].efaEnabled nodegroups must have only one availability zone"
            )
    return document


def _tags(name: str) -> list[dict[str, str]]:
    return [{"Key": CLUSTER_TAG, "Value": name}, {"Key": "alpha.eksctl.io/eksctl-version", "Value": "0.210.0"}]


def _create_cluster(argv: list[str], schema: str, faults: set[str], log: str) -> None:
    document = _load(argv, schema)
    meta = document["metadata"]
    name, region = meta["name"], meta["region"]
    eks, cloudformation = _clients(region)
    _say("eksctl version 0.210.0")
    _say(f"using region {region}")
    _say("will create 2 separate CloudFormation stacks for cluster itself and the initial managed nodegroup(s)")
    stack = f"eksctl-{name}-cluster"
    try:
        cloudformation.create_stack(StackName=stack, TemplateBody=_TEMPLATE, Tags=_tags(name))
    except Exception as error:  # AlreadyExistsException: the real eksctl fails the same way
        raise _Failed(f"creating CloudFormation stack {stack!r}: {error}") from None
    _say(f'deploying stack "{stack}"')
    if "create-fails" in faults:
        _say(f'waiting for CloudFormation stack "{stack}"')
        raise _Failed(
            f'failed to create cluster "{name}": unexpected status "ROLLBACK_IN_PROGRESS" for stack {stack!r}'
        )
    if "create-hangs" in faults:
        child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])
        Path(log + ".pids").write_text(f"{os.getpid()} {child.pid}\n")
        _say(f'waiting for CloudFormation stack "{stack}"')
        time.sleep(600)
        raise _Failed("hung for 10 minutes")
    eks.create_cluster(
        name=name,
        version=meta.get("version"),
        roleArn=f"arn:aws:iam::{_ACCOUNT}:role/eksctl-{name}-cluster-ServiceRole",
        resourcesVpcConfig={"subnetIds": ["subnet-0a", "subnet-0b"]},
        tags=meta.get("tags") or {},
    )
    _say(f'waiting for the control plane of cluster "{name}"')
    cluster = _in_cluster()
    if cluster is not None:
        eksctl_in_cluster.default_addons(cluster, document, region)
    for group in document.get("managedNodeGroups", []):
        _create_nodegroup(eks, cloudformation, name, group)
        if cluster is not None:
            eksctl_in_cluster.join_nodes(cluster, name, group)
    if cluster is not None:
        eksctl_in_cluster.device_plugins(cluster, document, region, install_nvidia=_install_nvidia(argv))
    _say(f'EKS cluster "{name}" in "{region}" region is ready', "✔")


def _in_cluster() -> eksctl_in_cluster.Cluster | None:
    """The cluster's API server when the test gave one (``FAKE_EKSCTL_KUBECONFIG``): eksctl's in-cluster work."""
    kubeconfig = os.environ.get("FAKE_EKSCTL_KUBECONFIG")
    return eksctl_in_cluster.Cluster(kubeconfig) if kubeconfig else None


def _install_nvidia(argv: list[str]) -> bool:
    return (_option(argv, "--install-nvidia-plugin") or "true") != "false"


def _create_nodegroup(eks: Any, cloudformation: Any, cluster: str, group: dict[str, Any]) -> None:
    stack = f"eksctl-{cluster}-nodegroup-{group['name']}"
    cloudformation.create_stack(StackName=stack, TemplateBody=_TEMPLATE, Tags=_tags(cluster))
    _say(f'deploying stack "{stack}"')
    capacity = "ON_DEMAND"
    if group.get("spot"):
        capacity = "SPOT"
    if (group.get("instanceMarketOptions") or {}).get("marketType") == "capacity-block":
        capacity = "CAPACITY_BLOCK"
    eks.create_nodegroup(
        clusterName=cluster,
        nodegroupName=group["name"],
        scalingConfig={
            "minSize": group.get("minSize", 0),
            "maxSize": group.get("maxSize", 1),
            "desiredSize": group.get("desiredCapacity", 1),
        },
        subnets=["subnet-0a"],
        instanceTypes=[group["instanceType"]],
        nodeRole=f"arn:aws:iam::{_ACCOUNT}:role/eksctl-{cluster}-nodegroup-NodeInstanceRole",
        labels=group.get("labels") or {},
        capacityType=capacity,
    )
    _say(f'nodegroup "{group["name"]}" has {group.get("desiredCapacity", 1)} node(s)', "✔")


def _create_nodegroups(argv: list[str], schema: str) -> None:
    document = _load(argv, schema)
    name, region = document["metadata"]["name"], document["metadata"]["region"]
    eks, cloudformation = _clients(region)
    included = set((_option(argv, "--include") or "").split(","))
    existing = set(eks.list_nodegroups(clusterName=name)["nodegroups"])
    cluster = _in_cluster()
    for group in document.get("managedNodeGroups", []):
        if group["name"] not in included:
            continue
        if group["name"] in existing:
            _say(f'nodegroup "{group["name"]}" already exists: skipping')
            continue
        _create_nodegroup(eks, cloudformation, name, group)
        if cluster is not None:
            eksctl_in_cluster.join_nodes(cluster, name, group)
    if cluster is not None:  # pkg/actions/nodegroup/create.go: ClusterTasksForNodeGroups for the whole config
        eksctl_in_cluster.device_plugins(cluster, document, region, install_nvidia=_install_nvidia(argv))
    _say(f"created {len(included)} managed nodegroup(s) in cluster {name!r}", "✔")


def _scale(argv: list[str]) -> None:
    cluster, region, group = _option(argv, "--cluster"), _option(argv, "--region"), _option(argv, "--name")
    eks, _ = _clients(region or "us-west-2")
    nodes, low, high = (int(_option(argv, flag) or -1) for flag in ("--nodes", "--nodes-min", "--nodes-max"))
    if not low <= nodes <= high:
        raise _Failed(f"number of nodes must be within range of min nodes ({low}) and max nodes ({high})")
    try:
        eks.update_nodegroup_config(
            clusterName=cluster,
            nodegroupName=group,
            scalingConfig={"minSize": low, "maxSize": high, "desiredSize": nodes},
        )
    except Exception as error:
        raise _Failed(f"failed to scale nodegroup {group!r} for cluster {cluster!r}: {error}") from None
    _say(f'nodegroup "{group}" has been scaled to {nodes}', "✔")


def _delete(argv: list[str], faults: set[str]) -> None:
    name, region = _option(argv, "--name"), _option(argv, "--region") or "us-west-2"
    eks, cloudformation = _clients(region)
    _say(f'deleting EKS cluster "{name}"')
    if "delete-fails" in faults:
        raise _Failed(f'failed to delete cluster "{name}": stack "eksctl-{name}-cluster" is DELETE_FAILED')
    try:
        eks.describe_cluster(name=name)
        exists = True
    except eks.exceptions.ResourceNotFoundException:
        exists = False
    if not exists and "--force" not in argv:
        raise _Failed(
            f"unable to describe cluster control plane: operation error EKS: DescribeCluster, "
            f"ResourceNotFoundException: No cluster found for name: {name}."
        )
    if exists:
        for group in eks.list_nodegroups(clusterName=name)["nodegroups"]:
            eks.delete_nodegroup(clusterName=name, nodegroupName=group)
            _say(f'will delete stack "eksctl-{name}-nodegroup-{group}"')
        eks.delete_cluster(name=name)
    for stack in cloudformation.describe_stacks()["Stacks"]:
        tags = {t["Key"]: t["Value"] for t in stack.get("Tags") or []}
        if tags.get(CLUSTER_TAG) == name:
            cloudformation.delete_stack(StackName=stack["StackName"])
            _say(f'deleted stack "{stack["StackName"]}"')
    _say("all cluster resources were deleted", "✔")
