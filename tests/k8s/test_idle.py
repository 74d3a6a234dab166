"""The idle scale-to-zero controller: its objects validate, its IAM policy allows only the node group's two calls on
that node group, its logic scales to 0 after the idle time (stubbed EKS, a fake pod list, a fixed clock), and the
shipped script talks to a Kubernetes API server as its Role allows (the loopback API server)."""

from __future__ import annotations

import datetime as dt
import json
from collections.abc import Callable
from typing import Any

import pytest

from fsdp_sdk import idle_controller
from fsdp_sdk.config import Config
from fsdp_sdk.config.resolution import find_instance_type, resolve
from fsdp_sdk.k8s.idle import (
    CONTROLLER_NAME,
    STATE_CONFIGMAP,
    controller_source,
    render_idle_controller,
    role_name,
    role_path,
    scaling_policy,
)
from fsdp_sdk.k8s.validate import validate_objects
from fsdp_sdk.pins import pin

from .fake_apiserver import FakeApiServer

T0 = dt.datetime(2026, 12, 2, 3, 0, tzinfo=dt.timezone.utc)
ACCOUNT = "123456789012"


def _config(**cluster: Any) -> Config:
    from fsdp_sdk.plugins import build_plugins

    data = {
        "cluster": {"backend": "local", "name": "demo", "region": "us-west-2", **cluster},
        "job": {"namespace": "ml"},
    }
    return resolve(Config.from_dict(data), build_plugins(autoload=False), validate_trainer=False)


def _pod(name: str, phase: str, labels: dict[str, str] | None = None) -> dict[str, Any]:
    return {"metadata": {"name": name, "labels": labels or {}}, "status": {"phase": phase}}


TRAINING = {"training.kubeflow.org/job-name": "fsdp"}


def test_objects_validate_and_grant_only_pods_and_the_state_configmap() -> None:
    objects = render_idle_controller(_config(idle_scale_to_zero_minutes=30))
    report = validate_objects(objects)
    assert report.ok, report.errors
    kinds = sorted(o["kind"] for o in objects)
    assert kinds == [
        "ClusterRole",
        "ClusterRoleBinding",
        "ConfigMap",
        "ConfigMap",
        "CronJob",
        "Role",
        "RoleBinding",
        "ServiceAccount",
    ]
    cluster_scoped = {"ClusterRole", "ClusterRoleBinding"}
    assert {o["metadata"]["namespace"] for o in objects if o["kind"] not in cluster_scoped} == {"ml"}
    assert not any("namespace" in o["metadata"] for o in objects if o["kind"] in cluster_scoped)
    queue_role = next(o for o in objects if o["kind"] == "ClusterRole")
    assert queue_role["rules"] == [  # Kueue's ClusterQueue of fsdp-sdk, to set its quota to 0: nothing else
        {
            "apiGroups": ["kueue.x-k8s.io"],
            "resources": ["clusterqueues"],
            "resourceNames": ["fsdp-sdk"],
            "verbs": ["get", "update"],
        }
    ]
    binding = next(o for o in objects if o["kind"] == "ClusterRoleBinding")
    assert binding["subjects"] == [{"kind": "ServiceAccount", "name": CONTROLLER_NAME, "namespace": "ml"}]
    role = next(o for o in objects if o["kind"] == "Role")
    assert role["rules"] == [
        {"apiGroups": [""], "resources": ["pods"], "verbs": ["get", "list"]},
        {
            "apiGroups": [""],
            "resources": ["configmaps"],
            "resourceNames": [STATE_CONFIGMAP],
            "verbs": ["get", "update"],
        },
    ]
    cron = next(o for o in objects if o["kind"] == "CronJob")
    pod = cron["spec"]["jobTemplate"]["spec"]["template"]["spec"]
    container = pod["containers"][0]
    assert pod["serviceAccountName"] == CONTROLLER_NAME
    assert pod["nodeSelector"] == {"fsdp-sdk.io/node-role": "system"}
    assert container["image"] == pin("idle-controller").image_ref() == "public.ecr.aws/lambda/python:3.13"
    env = {e["name"]: e["value"] for e in container["env"]}
    assert env == {
        "CLUSTER": "demo",
        "NODEGROUP": "gpu",
        "AWS_REGION": "us-west-2",
        "IDLE_MINUTES": "30",
        "NAMESPACE": "ml",
        "STATE_CONFIGMAP": STATE_CONFIGMAP,
    }
    script = next(o for o in objects if o["kind"] == "ConfigMap" and "data" in o)
    assert script["data"]["idle_controller.py"] == controller_source()
    assert render_idle_controller(_config()) == []  # unset: nothing installed


def test_the_policy_allows_only_the_node_group_calls_on_that_node_group() -> None:
    policy = scaling_policy(_config(idle_scale_to_zero_minutes=30), ACCOUNT)
    assert policy == {
        "Version": "2012-10-17",
        "Statement": [
            {
                "Sid": "ScaleTheGpuNodeGroupOnly",
                "Effect": "Allow",
                "Action": ["eks:DescribeNodegroup", "eks:UpdateNodegroupConfig"],
                "Resource": f"arn:aws:eks:us-west-2:{ACCOUNT}:nodegroup/demo/gpu/*",
            }
        ],
    }


def test_the_policy_is_accepted_and_simulated_by_iam(aws: str) -> None:
    """IAM (moto) takes the role and policy as install_identity writes them; the policy document parses."""
    from fsdp_sdk.aws.addons import POD_IDENTITY_TRUST_POLICY
    from fsdp_sdk.aws.session import aws_client

    iam = aws_client("iam", "us-west-2")
    config = _config(idle_scale_to_zero_minutes=30)
    iam.create_role(RoleName=role_name(config), AssumeRolePolicyDocument=json.dumps(POD_IDENTITY_TRUST_POLICY))
    iam.put_role_policy(
        RoleName=role_name(config), PolicyName="p", PolicyDocument=json.dumps(scaling_policy(config, ACCOUNT))
    )
    stored = iam.get_role_policy(RoleName=role_name(config), PolicyName="p")["PolicyDocument"]
    assert stored["Statement"][0]["Action"] == ["eks:DescribeNodegroup", "eks:UpdateNodegroupConfig"]


@pytest.mark.parametrize(
    ("pods", "last_busy", "desired", "action"),
    [
        ([_pod("fsdp-worker-0", "Running", TRAINING)], T0 - dt.timedelta(hours=3), 2, "busy"),
        ([_pod("fsdp-worker-0", "Pending", TRAINING)], None, 2, "busy"),
        (
            [_pod("fsdp-worker-0", "Succeeded", TRAINING), _pod("etcd-0", "Running")],
            T0 - dt.timedelta(minutes=29),
            2,
            "idle",
        ),
        ([_pod("fsdp-worker-0", "Succeeded", TRAINING)], T0 - dt.timedelta(minutes=30), 2, "scale-to-zero"),
        ([], None, 2, "idle"),  # first run: the clock starts now
        ([], T0 - dt.timedelta(hours=5), 0, "at-zero"),
    ],
)
def test_decide(pods: list[dict[str, Any]], last_busy: dt.datetime | None, desired: int, action: str) -> None:
    decision = idle_controller.decide(pods, desired=desired, last_busy=last_busy, now=T0, idle_minutes=30)
    assert decision.action == action
    assert decision.last_busy == (T0 if action == "busy" or last_busy is None else last_busy)


class FakeCluster:
    """The pods and the state ConfigMap the controller sees."""

    def __init__(self, pods: list[dict[str, Any]]) -> None:
        self.pod_list, self.state = pods, {}  # type: ignore[var-annotated]

    def pods(self) -> list[dict[str, Any]]:
        return self.pod_list

    def read_state(self) -> dict[str, str]:
        return dict(self.state)

    def write_state(self, data: dict[str, str]) -> None:
        self.state = {**self.state, **data}


def _nodegroup(desired: int) -> dict[str, Any]:
    return {
        "nodegroup": {
            "nodegroupName": "gpu",
            "clusterName": "demo",
            "scalingConfig": {"minSize": 0, "maxSize": 4, "desiredSize": desired},
        }
    }


def test_scales_to_zero_after_the_idle_time_across_runs(stubbed: Callable[..., tuple[Any, Any]]) -> None:
    eks, stubber = stubbed("eks", "us-west-2")
    cluster = FakeCluster([_pod("fsdp-worker-0", "Running", TRAINING)])
    ng = {"clusterName": "demo", "nodegroupName": "gpu"}

    def run(at: dt.datetime) -> str:
        return idle_controller.run_once(cluster, eks, cluster="demo", nodegroup="gpu", idle_minutes=30, now=at).action

    stubber.add_response("describe_nodegroup", _nodegroup(2), ng)
    assert run(T0) == "busy"  # a job runs
    cluster.pod_list = [_pod("fsdp-worker-0", "Succeeded", TRAINING)]
    stubber.add_response("describe_nodegroup", _nodegroup(2), ng)
    assert run(T0 + dt.timedelta(minutes=20)) == "idle"  # 20 min since the job was last seen
    assert cluster.state[idle_controller.LAST_BUSY_KEY] == T0.isoformat()
    stubber.add_response("describe_nodegroup", _nodegroup(2), ng)
    stubber.add_response(
        "update_nodegroup_config",
        {"update": {"id": "u-1", "status": "InProgress", "type": "ConfigUpdate"}},
        {**ng, "scalingConfig": {"minSize": 0, "desiredSize": 0, "maxSize": 4}},
    )
    zeroed: list[bool] = []
    cluster.zero_queue_quota = lambda: zeroed.append(True) or True  # type: ignore[attr-defined]
    assert run(T0 + dt.timedelta(minutes=30)) == "scale-to-zero"
    assert zeroed == [True]  # the Kueue quota follows the nodes to 0
    stubber.add_response("describe_nodegroup", _nodegroup(0), ng)
    assert run(T0 + dt.timedelta(minutes=31)) == "at-zero"  # no second update
    assert zeroed == [True]
    stubber.assert_no_pending_responses()
    assert cluster.state["last-action"] == "at-zero"


def test_the_shipped_script_reads_pods_and_keeps_its_state_in_the_apiserver() -> None:
    """The script's own Kubernetes client (standard library only) against the loopback API server."""
    with FakeApiServer() as server:
        server.put({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": STATE_CONFIGMAP, "namespace": "ml"}})
        server.add_pod("fsdp-worker-0", labels=TRAINING, namespace="ml")
        view = idle_controller.InCluster("ml", STATE_CONFIGMAP, server=server.url, token=server.token, ca_file=None)
        pods = view.pods()
        assert [p["metadata"]["name"] for p in pods] == ["fsdp-worker-0"]
        assert idle_controller.is_training_pod(pods[0])
        view.write_state({idle_controller.LAST_BUSY_KEY: T0.isoformat()})
        view.write_state({"last-action": "busy"})
        assert view.read_state() == {idle_controller.LAST_BUSY_KEY: T0.isoformat(), "last-action": "busy"}
        cm = server.get("v1", "ConfigMap", STATE_CONFIGMAP, namespace="ml")
        assert cm is not None and cm["data"]["last-action"] == "busy"


class _Eks:
    """EKS for the identity: Pod Identity associations from ``aws.pod_identity`` (moto lacks them), the add-on calls
    from a Stubber, and ``failures`` creates refused as EKS refuses a role IAM has not propagated yet."""

    def __init__(self, pod_identity: Any, stubbed: Callable[..., tuple[Any, Any]], failures: int = 0) -> None:
        self.pod_identity, self.failures = pod_identity, failures
        self.addons, self.addon_stubber = stubbed("eks", "us-west-2")
        self.refused = 0

    def describe_addon(self, **params: Any) -> Any:
        self.addon_stubber.add_response("describe_addon", {"addon": {**params, "status": "ACTIVE"}}, params)
        return self.addons.describe_addon(**params)

    def create_pod_identity_association(self, **params: Any) -> Any:
        if self.failures:
            self.failures -= 1
            self.refused += 1
            self.addon_stubber.add_client_error(
                "create_pod_identity_association",
                service_error_code="InvalidParameterException",
                service_message="Role provided in the request does not exist",
                http_status_code=400,
                expected_params=params,
            )
            return self.addons.create_pod_identity_association(**params)
        return self.pod_identity.create_pod_identity_association(**params)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.pod_identity, name)


def _identity_clients(pod_identity: Any, stubbed: Callable[..., tuple[Any, Any]], failures: int = 0) -> dict:
    from fsdp_sdk.aws.session import aws_client

    role = "arn:aws:iam::123456789012:role/eks"
    aws_client("eks", "us-west-2").create_cluster(
        name="demo", roleArn=role, resourcesVpcConfig={"subnetIds": ["subnet-1", "subnet-2"]}
    )
    return {
        "eks": _Eks(pod_identity, stubbed, failures),
        "iam": aws_client("iam", "us-west-2"),
        "sts": aws_client("sts", "us-west-2"),
    }


def test_the_role_is_named_for_the_region_and_fits_iams_limit() -> None:
    assert role_name(_config()) == "fsdp-sdk-idle-us-west-2-demo"
    assert role_name(_config()) != role_name(_config(region="eu-central-1"))
    long = "c" * 100  # EKS allows 100 characters
    names = {role_name(_config(name=long, region=r)) for r in ("us-west-2", "ap-southeast-7", "us-east-1")}
    assert len(names) == 3 and all(len(n) <= 64 and n.startswith("fsdp-sdk-idle-") for n in names), names
    assert role_path(_config()) == "/fsdp-sdk/us-west-2/demo/"


def test_install_identity_creates_the_role_its_one_policy_and_the_association(
    aws: str, stubbed: Callable[..., tuple[Any, Any]], pod_identity: Any
) -> None:
    from fsdp_sdk.aws.idle_identity import install_identity

    config = _config(idle_scale_to_zero_minutes=30)
    clients = _identity_clients(pod_identity, stubbed)
    iam = clients["iam"]
    lines: list[str] = []
    arn = install_identity(config, clients=clients, progress=lines.append)
    name = "fsdp-sdk-idle-us-west-2-demo"
    role = iam.get_role(RoleName=name)["Role"]
    assert arn == role["Arn"] and role["Path"] == "/fsdp-sdk/us-west-2/demo/"
    assert {t["Key"]: t["Value"] for t in role["Tags"]}["fsdp-sdk.io/cluster"] == "demo"
    assert role["AssumeRolePolicyDocument"]["Statement"][0]["Principal"] == {"Service": "pods.eks.amazonaws.com"}
    assert iam.list_role_policies(RoleName=name)["PolicyNames"] == ["scale-gpu-nodegroup"]
    assert iam.list_attached_role_policies(RoleName=name)["AttachedPolicies"] == []
    policy = iam.get_role_policy(RoleName=name, PolicyName="scale-gpu-nodegroup")["PolicyDocument"]
    assert policy == scaling_policy(config, ACCOUNT)
    (association,) = pod_identity.associations.values()
    assert (association["namespace"], association["serviceAccount"], association["roleArn"]) == (
        "ml",
        CONTROLLER_NAME,
        arn,
    )
    assert any(
        f"with the IAM role {name} (EKS Pod Identity)" in line and "associated ServiceAccount" in line for line in lines
    )
    assert install_identity(config, clients=clients) == arn  # again: kept, nothing made twice
    assert len(pod_identity.associations) == 1


def test_a_role_of_that_name_not_made_for_this_cluster_is_not_adopted(
    aws: str, stubbed: Callable[..., tuple[Any, Any]], pod_identity: Any
) -> None:
    from fsdp_sdk.aws.addons import POD_IDENTITY_TRUST_POLICY
    from fsdp_sdk.aws.idle_identity import install_identity, remove_identity
    from fsdp_sdk.errors import BackendError

    config = _config(idle_scale_to_zero_minutes=30)
    clients = _identity_clients(pod_identity, stubbed)
    name = role_name(config)
    clients["iam"].create_role(RoleName=name, AssumeRolePolicyDocument=json.dumps(POD_IDENTITY_TRUST_POLICY))
    with pytest.raises(BackendError, match=f"IAM role {name} exists but was not created by fsdp-sdk for cluster demo"):
        install_identity(config, clients=clients)
    assert pod_identity.associations == {}
    assert clients["iam"].list_role_policies(RoleName=name)["PolicyNames"] == []  # its policies untouched
    lines: list[str] = []
    assert remove_identity(config, clients=clients, progress=lines.append) == []  # down leaves it too
    assert clients["iam"].get_role(RoleName=name) and any("left the IAM role" in line for line in lines)


def test_the_association_waits_for_iam_with_a_bounded_backoff(
    aws: str, stubbed: Callable[..., tuple[Any, Any]], pod_identity: Any
) -> None:
    from fsdp_sdk.aws.idle_identity import ASSOCIATION_DELAYS, install_identity

    config = _config(idle_scale_to_zero_minutes=30)
    clients = _identity_clients(pod_identity, stubbed, failures=3)
    slept: list[float] = []
    arn = install_identity(config, clients=clients, sleep=slept.append)
    assert slept == list(ASSOCIATION_DELAYS[:3]) and clients["eks"].refused == 3
    (association,) = pod_identity.associations.values()
    assert association["roleArn"] == arn


def test_an_association_that_never_sees_the_role_gives_up_and_says_so(
    aws: str, stubbed: Callable[..., tuple[Any, Any]], pod_identity: Any
) -> None:
    from fsdp_sdk.aws.idle_identity import ASSOCIATION_DELAYS, install_identity
    from fsdp_sdk.errors import BackendError

    config = _config(idle_scale_to_zero_minutes=30)
    clients = _identity_clients(pod_identity, stubbed, failures=len(ASSOCIATION_DELAYS) + 1)
    slept: list[float] = []
    with pytest.raises(BackendError, match=r"does not see the IAM role .* after 7 tries over 60 s"):
        install_identity(config, clients=clients, sleep=slept.append)
    assert slept == list(ASSOCIATION_DELAYS) and pod_identity.associations == {}


def test_remove_identity_deletes_the_role_its_policy_and_the_association(
    aws: str, stubbed: Callable[..., tuple[Any, Any]], pod_identity: Any
) -> None:
    from fsdp_sdk.aws.idle_identity import install_identity, remove_identity

    config = _config(idle_scale_to_zero_minutes=30)
    clients = _identity_clients(pod_identity, stubbed)
    install_identity(config, clients=clients)
    deleted = remove_identity(config, clients=clients)
    name = role_name(config)
    assert deleted[0].startswith("Pod Identity association ") and deleted[1:] == [
        f"inline policy scale-gpu-nodegroup of IAM role {name}",
        f"IAM role {name}",
    ]
    assert pod_identity.associations == {}
    roles = [r["RoleName"] for r in clients["iam"].list_roles()["Roles"]]
    assert name not in roles
    assert remove_identity(config, clients=clients) == []  # idempotent


def test_up_plans_the_identity_of_an_eks_cluster(tmp_path: Any) -> None:
    from fsdp_sdk import Client
    from fsdp_sdk.plugins import DEFAULT_PLUGINS, build_plugins

    client = Client.from_dict(
        {
            "cluster": {
                "backend": "eksctl",
                "name": "demo",
                "idle_scale_to_zero_minutes": 30,
                "checkpoint_bucket": "ckpt-demo",
                "state_dir": str(tmp_path),
            },
            "job": {"namespace": "ml"},
        },
        plugins=build_plugins(autoload=False, default_plugins=(*DEFAULT_PLUGINS, "fsdp_sdk_eksctl.plugin")),
    )
    steps = client.plan(preflight=False).steps
    role = "fsdp-sdk-idle-us-west-2-demo"
    assert any(role in step and "scale-gpu-nodegroup" in step for step in steps), steps
    assert any(f"ServiceAccount ml/{CONTROLLER_NAME}" in step and "'down' deletes" in step for step in steps)


def test_up_plans_the_controller_with_the_cluster(tmp_path: Any) -> None:
    """The controller's objects are part of the plan `up` applies (and `up --dry-run` shows)."""
    from fsdp_sdk import Client

    from .tools import kubernetes_plugins

    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text("")
    client = Client.from_dict(
        {"cluster": {"backend": "fake-kube", "idle_scale_to_zero_minutes": 45, "state_dir": str(tmp_path)}},
        plugins=kubernetes_plugins(kubeconfig),
    )
    plan = client.plan(preflight=False)
    assert any("GPU nodes go to 0 after 45 minutes without a training pod" in step for step in plan.steps)
    assert [o["metadata"]["name"] for o in plan.kubernetes if o["kind"] == "CronJob"] == [CONTROLLER_NAME]


def test_down_deletes_the_identity_up_made(
    aws: str,
    stubbed: Callable[..., tuple[Any, Any]],
    pod_identity: Any,
    monkeypatch: pytest.MonkeyPatch,
    tmp_path: Any,
) -> None:
    """``Client.down`` of an EKS backend's cluster deletes the controller's association, policy and role."""
    from typing import ClassVar

    import fsdp_sdk.aws.session
    from fsdp_sdk import Client, hookimpl
    from fsdp_sdk.aws.idle_identity import install_identity
    from fsdp_sdk.backends.base import ClusterBackend, ClusterStatus, Plan
    from fsdp_sdk.plugins import build_plugins

    class EksLike(ClusterBackend):
        name: ClassVar[str] = "eks-like"
        eks_cluster: ClassVar[bool] = True

        def plan(self, resolved: Any) -> Plan:
            return Plan(backend=self.name, cluster=resolved.config.cluster.name, steps=[])

        def apply(self, config: Config, plan: Plan, *, progress: Any = None) -> ClusterStatus:
            return self.status(config)

        def down(self, config: Config, *, dry_run: bool = False, progress: Any = None) -> ClusterStatus:
            return ClusterStatus(backend=self.name, cluster=config.cluster.name, state="absent", nodes=0)

        def scale(self, config: Config, nodes: int, *, dry_run: bool = False, progress: Any = None) -> ClusterStatus:
            return self.status(config)

        def status(self, config: Config) -> ClusterStatus:
            return ClusterStatus(backend=self.name, cluster=config.cluster.name, state="ready", nodes=2)

        def kubeconfig(self, config: Config) -> Any:
            return None

    class Register:
        @hookimpl
        def fsdp_sdk_register_backends(self, registry: Any) -> None:
            registry.add(EksLike)

    clients = _identity_clients(pod_identity, stubbed)
    moto_client = fsdp_sdk.aws.session.aws_client
    moto_eks = moto_client("eks", "us-west-2")
    monkeypatch.setattr(type(pod_identity), "_moto", property(lambda self: moto_eks))  # its clusters stay moto's
    monkeypatch.setattr(
        fsdp_sdk.aws.session,
        "aws_client",
        lambda service, region: clients["eks"] if service == "eks" else moto_client(service, region),
    )
    plugins = build_plugins(autoload=False)
    plugins.register(Register(), name="eks-like")
    client = Client.from_dict(
        {
            "cluster": {
                "backend": "eks-like",
                "name": "demo",
                "idle_scale_to_zero_minutes": 30,
                "checkpoint_bucket": "ckpt-demo",
                "state_dir": str(tmp_path),
            },
            "job": {"namespace": "ml"},
        },
        plugins=plugins,
    )
    install_identity(client.config, clients=clients)
    assert len(pod_identity.associations) == 1
    said: list[str] = []
    client.progress = said.append
    client.down()
    name = role_name(client.config)
    assert pod_identity.associations == {}
    assert name not in [r["RoleName"] for r in clients["iam"].list_roles()["Roles"]]
    assert f"deleted the idle controller's IAM role {name}" in said


def test_the_shipped_script_sets_the_kueue_quota_to_zero_when_there_is_one() -> None:
    from fsdp_sdk.k8s.queue import CLUSTER_QUEUE, KUEUE_API, render_queue
    from fsdp_sdk.plugins import build_plugins

    from .fake_apiserver import BUILTIN_RESOURCES, KUEUE_RESOURCES

    assert f"/apis/{KUEUE_API}/clusterqueues/{CLUSTER_QUEUE}" == idle_controller.CLUSTER_QUEUE_PATH
    with FakeApiServer() as server:  # no Kueue: nothing to do
        view = idle_controller.InCluster("ml", STATE_CONFIGMAP, server=server.url, token=server.token, ca_file=None)
        assert view.zero_queue_quota() is False
    with FakeApiServer(resources=BUILTIN_RESOURCES + KUEUE_RESOURCES) as server:
        config = Config.from_dict({})
        server.put(render_queue(config, find_instance_type(config, build_plugins(autoload=False)))[1])
        view = idle_controller.InCluster("ml", STATE_CONFIGMAP, server=server.url, token=server.token, ca_file=None)
        assert view.zero_queue_quota() is True
        stored = server.get(KUEUE_API, "ClusterQueue", CLUSTER_QUEUE, "")
        resources = stored["spec"]["resourceGroups"][0]["flavors"][0]["resources"]
        assert {r["name"] for r in resources} >= {"nvidia.com/gpu", "pods"}
        assert {r["nominalQuota"] for r in resources} == {"0"}
