"""The one EKS layer both AWS backends render from (pure, offline):

* the render matrix: every registered instance type x {on-demand, ODCR, Capacity Block, spot} x {AL2023,
  Bottlerocket}, rendered by eksctl (its ClusterConfig) and by terraform (the shipped configuration evaluated
  with the case's tfvars: python-hcl2 reads it, a small evaluator runs the expressions that decide the node
  group, launch template and placement group, and fails on any form it does not know);
* the node/pod contract: every rendered pod template (job, etcd, device plugins, monitoring) is schedulable on a
  rendered node group, its extended resources have a plugin there, its host paths exist there, no training pod
  is BestEffort, a 70B checkpoint fits the local volume;
* the region table: every region of the EKS user guide's registry table, the same registry in both backends;
* no backend writes a version or a registry account of its own.
"""

from __future__ import annotations

import functools
import re
from pathlib import Path
from typing import Any

import pytest

from fsdp_sdk.aws import eks
from fsdp_sdk.config import Config
from fsdp_sdk.config.resolution import find_instance_type, resolve
from fsdp_sdk.instance_types import BUILTIN_INSTANCE_TYPES
from fsdp_sdk.plugins import Plugins, build_plugins
from fsdp_sdk.resolved import Resolved

ZONES = "us-west-2b,us-west-2a"
RESERVATION = "cr-0123456789abcdef0"
ROOT = Path(__file__).resolve().parents[2]
CONFIGURATION = ROOT / "packages/backend-terraform/src/fsdp_sdk_terraform/configuration"


@functools.cache
def _plugins() -> Plugins:
    import fsdp_sdk_eksctl.plugin
    import fsdp_sdk_observability.plugin
    import fsdp_sdk_terraform.plugin

    plugins = build_plugins(autoload=False)
    plugins.register(fsdp_sdk_eksctl.plugin, name="eksctl")
    plugins.register(fsdp_sdk_terraform.plugin, name="terraform")
    plugins.register(fsdp_sdk_observability.plugin, name="observability")
    return plugins


def _config(backend: str, **overrides: Any) -> Config:
    plugins = _plugins()
    values = {"cluster.backend": backend, "cluster.name": "demo", "cluster.availability_zones": ZONES, **overrides}
    config = Config.from_dict({}, sections=plugins.settings).with_overrides(values)
    return resolve(config, plugins, validate_trainer=False)


CAPACITY: dict[str, dict[str, Any]] = {
    "on-demand": {},
    "odcr": {"cluster.capacity_reservation_id": RESERVATION},
    "capacity-block": {"cluster.capacity_type": "capacity-block", "cluster.capacity_reservation_id": RESERVATION},
    "spot": {"cluster.capacity_type": "spot"},
}
AMI = {
    "AL2023": ({}, {}),
    "Bottlerocket": ({"eksctl.ami_family": "Bottlerocket"}, {"terraform.gpu_ami_type": "BOTTLEROCKET_x86_64_NVIDIA"}),
}


# ---------------------------------------------------------------------------------------------- terraform evaluator


class _Obj:
    """A value HCL reaches with ``.attr`` and ``[key]``."""

    def __init__(self, data: dict[str, Any]) -> None:
        self._data = data

    def __getattr__(self, name: str) -> Any:
        try:
            return self._data[name]
        except KeyError:
            raise AssertionError(f"the configuration reads {name!r}, which this evaluator does not know") from None

    def __getitem__(self, key: Any) -> Any:
        return self._data[key]


def _wrap(value: Any) -> Any:
    if isinstance(value, dict):
        return _Obj({k: _wrap(v) for k, v in value.items()})
    if isinstance(value, list):
        return [_wrap(v) for v in value]
    return value


def _unwrap(value: Any) -> Any:
    if isinstance(value, _Obj):
        return {k: _unwrap(v) for k, v in value._data.items()}
    if isinstance(value, list):
        return [_unwrap(v) for v in value]
    return value


_FUNCTIONS = {
    "contains": lambda items, value: value in items,
    "length": len,
    "compact": lambda items: [i for i in items if i],
    "base64encode": lambda text: f"base64({text})",
}
_ALLOWED = re.compile(r"^[\w\s.\[\]()\",=!<>+\-*/:?&|]*$")


def _scan(text: str) -> list[int]:
    """The bracket depth before each character of ``text`` (string literals count as one level deeper)."""
    depths, depth, quoted = [], 0, False
    for ch in text:
        depths.append(depth + quoted)
        if ch == '"':
            quoted = not quoted
        elif not quoted and ch in "([{":
            depth += 1
        elif not quoted and ch in ")]}":
            depth -= 1
    return depths


def _top(text: str, token: str, start: int = 0) -> int:
    depths = _scan(text)
    return next((i for i in range(start, len(text)) if depths[i] == 0 and text.startswith(token, i)), -1)


def _python(expression: str) -> str:
    """An HCL expression of the forms the shipped configuration uses, as Python (anything else fails)."""
    assert _ALLOWED.match(expression), expression
    expression = re.sub(r"(\w+(?:\.\w+)*)\[\*\]\.(\w+)", r"[_s.\2 for _s in \1]", expression.strip())
    ask = _top(expression, " ? ")
    if ask >= 0:
        colon = _top(expression, " : ", ask)
        condition, yes, no = expression[:ask], expression[ask + 3 : colon], expression[colon + 3 :]
        return f"(({_python(yes)}) if ({_python(condition)}) else ({_python(no)}))"
    out, i, depths = [], 0, _scan(expression)
    while i < len(expression):
        ch = expression[i]
        if ch in "([" and depths[i] == 0:
            j = next(
                k
                for k in range(i + 1, len(expression))
                if depths[k] == 1 and expression[k] in ")]" and _scan(expression[: k + 1])[-1] == 1
            )
            inner, parts, last = expression[i + 1 : j], [], 0
            inner_depths = _scan(inner)
            for k, c in enumerate(inner):
                if c == "," and inner_depths[k] == 0:
                    parts.append(inner[last:k])
                    last = k + 1
            parts.append(inner[last:])
            out.append(ch + ", ".join(_python(p) for p in parts if p.strip()) + expression[j])
            i = j + 1
        elif ch == '"':
            j = expression.index('"', i + 1)
            out.append(expression[i : j + 1])
            i = j + 1
        else:
            out.append(ch)
            i += 1
    text = "".join(out).replace("&&", " and ").replace("||", " or ")
    text = re.sub(r"!(?!=)", " not ", text)
    return re.sub(r"\bnull\b", "None", re.sub(r"\btrue\b", "True", re.sub(r"\bfalse\b", "False", text)))


class Terraform:
    """The shipped configuration's node-group decisions for one set of tfvars."""

    def __init__(self, inputs: dict[str, Any]) -> None:
        self.names: dict[str, Any] = {
            **_FUNCTIONS,
            "var": _wrap(inputs),
            "aws_eks_cluster": _wrap({"this": {"vpc_config": [{"cluster_security_group_id": "sg-cluster"}]}}),
            "aws_security_group": _wrap({"efa": {"id": "sg-efa"}}),
            "aws_iam_role": _wrap({"node": {"arn": "arn:role"}}),
            "aws_vpc": _wrap({"this": {"id": "vpc-1"}}),
        }
        self.names["local"] = _Obj({})
        for name, expression in _locals().items():
            self.names["local"]._data[name] = self.value(expression)
        subnets = _resource("aws_subnet", "private")
        self.names["aws_subnet"] = _wrap(
            {
                "private": [
                    {"id": self.value(subnets["availability_zone"], count=i)}
                    for i in range(len(inputs["availability_zones"]))
                ]
            }
        )
        group = _resource("aws_placement_group", "gpu")
        self.placement_groups = int(self.value(group["count"]))
        self.names["aws_placement_group"] = _wrap({"gpu": [{"name": "demo-gpu"}] * self.placement_groups})
        if self.placement_groups:
            for precondition in group["lifecycle"][0]["precondition"]:
                assert self.value(precondition["condition"]) is True, "terraform would refuse these inputs"
        self.template = _resource("aws_launch_template", "gpu")
        self.nodes = _resource("aws_eks_node_group", "gpu")
        for precondition in self.template["lifecycle"][0]["precondition"]:
            assert self.value(precondition["condition"]) is True, "terraform would refuse these inputs"

    def value(self, raw: Any, *, count: int | None = None, each: Any = None, iterator: str = "") -> Any:
        if isinstance(raw, str) and raw.startswith("${") and raw.endswith("}"):
            names = dict(self.names)
            if count is not None:
                names["count"] = _Obj({"index": count})
            if iterator:
                names[iterator] = _Obj({"value": _wrap(each)})
            return _unwrap(eval(_python(raw[2:-1]), {"__builtins__": {}}, names))
        if isinstance(raw, str) and len(raw) > 1 and raw[0] == raw[-1] == '"':
            return raw[1:-1]
        if isinstance(raw, dict):
            return {
                k.strip('"'): self.value(v, count=count, each=each, iterator=iterator)
                for k, v in raw.items()
                if k != "__is_block__"
            }
        if isinstance(raw, list):
            return [self.value(v, count=count, each=each, iterator=iterator) for v in raw]
        return raw

    def dynamic(self, body: dict[str, Any], name: str) -> list[dict[str, Any]]:
        """The blocks a ``dynamic "<name>"`` block of ``body`` expands to."""
        (spec,) = [s for entry in body.get("dynamic", []) for n, s in entry.items() if n.strip('"') == name]
        items = self.value(spec["for_each"])
        (content,) = spec["content"]
        return [
            {k: self.value(v, each=item, iterator=name) for k, v in content.items() if k != "__is_block__"}
            for item in items
        ]


@functools.cache
def _parsed() -> dict[str, Any]:
    import hcl2

    merged: dict[str, Any] = {"locals": {}, "resource": {}}
    for path in sorted(CONFIGURATION.glob("*.tf")):
        document = hcl2.loads(path.read_text())
        for entry in document.get("locals", []):
            merged["locals"].update({k: v for k, v in entry.items() if k != "__comments__"})
        for entry in document.get("resource", []):
            for type_, named in entry.items():
                for name, body in named.items():
                    merged["resource"][(type_.strip('"'), name.strip('"'))] = body
    return merged


def _locals() -> dict[str, Any]:
    wanted = ("reserved", "eks_capacity_types", "eks_capacity_type", "efa", "gpu_security_groups")
    return {name: _parsed()["locals"][name] for name in wanted}


def _resource(type_: str, name: str) -> dict[str, Any]:
    body: dict[str, Any] = _parsed()["resource"][(type_, name)]
    return body


# ---------------------------------------------------------------------------------------------- render matrix

TYPES = [t.name for t in BUILTIN_INSTANCE_TYPES]


@pytest.mark.parametrize("ami", AMI)
@pytest.mark.parametrize("capacity", CAPACITY)
@pytest.mark.parametrize("instance_type", TYPES)
def test_render_matrix(instance_type: str, capacity: str, ami: str) -> None:
    from fsdp_sdk_eksctl.render import render_cluster_config
    from fsdp_sdk_terraform.inputs import terraform_inputs

    eksctl_ami, terraform_ami = AMI[ami]
    common = {"cluster.instance_type": instance_type, **CAPACITY[capacity]}
    reserved = capacity in ("odcr", "capacity-block")
    bottlerocket = ami == "Bottlerocket"

    # eksctl: its ClusterConfig
    config = _config("eksctl", **common, **eksctl_ami)
    instance = find_instance_type(config, _plugins())
    cards = eks.table()["network_cards"]["types"][instance_type]["network_cards"]
    gpu = render_cluster_config(config, instance)["managedNodeGroups"][1]
    assert gpu["availabilityZones"] == ["us-west-2b"]
    assert gpu.get("efaEnabled", False) is (instance.efa_interfaces > 0)
    assert "placement" not in gpu  # eksctl adds its own for EFA without a reservation; never one with a reservation
    assert ("capacityReservation" in gpu) is reserved
    assert (gpu.get("instanceMarketOptions") == {"marketType": "capacity-block"}) is (capacity == "capacity-block")
    assert gpu.get("spot", False) is (capacity == "spot")
    assert gpu["taints"] == [{"key": "nvidia.com/gpu", "value": "true", "effect": "NoSchedule"}]
    assert gpu["volumeSize"] == 500 and gpu.get("volumeName", "/dev/xvda") == (
        "/dev/xvdb" if bottlerocket else "/dev/xvda"
    )
    if bottlerocket:
        assert "000-mount-instance-storage" in gpu["bottlerocket"]["settings"]["bootstrap-commands"]
    else:
        assert (
            gpu["preBootstrapCommands"] == ["/usr/bin/setup-local-disks raid0"]
            and "overrideBootstrapCommand" not in gpu
        )

    # terraform: what the shipped configuration does with the tfvars
    config = _config("terraform", **common, **terraform_ami)
    inputs = terraform_inputs(config, instance, config.section("terraform"))
    tf = Terraform(inputs)
    assert tf.value(tf.nodes["subnet_ids"]) == ["us-west-2b"]  # one zone: the subnet of the first
    assert tf.value(tf.nodes["capacity_type"]) == {"capacity-block": "CAPACITY_BLOCK", "spot": "SPOT"}.get(
        capacity, "ON_DEMAND"
    )
    assert (
        tf.placement_groups == (0 if reserved else 1)
        and len(tf.dynamic(tf.template, "placement")) == tf.placement_groups
    )
    interfaces = tf.dynamic(tf.template, "network_interfaces")
    assert len(interfaces) == min(cards, instance.efa_interfaces)
    for interface in interfaces:
        card, device, kind = interface["network_card_index"], interface["device_index"], interface["interface_type"]
        expected = (1, "efa") if cards == 1 else (0, "efa-only")  # single-card types have no card 1
        assert (device, kind) == ((0, "efa") if card == 0 else expected)
        assert interface["security_groups"] == ["sg-cluster", "sg-efa"]
    assert len(tf.dynamic(tf.template, "capacity_reservation_specification")) == int(reserved)
    markets = tf.dynamic(tf.template, "instance_market_options")
    assert markets == ([{"market_type": "capacity-block"}] if capacity == "capacity-block" else [])
    (disk,) = tf.template["block_device_mappings"]
    assert tf.value(disk["device_name"]) == ("/dev/xvdb" if bottlerocket else "/dev/xvda")
    assert tf.value(disk["ebs"][0]["volume_size"]) == 500
    user_data = tf.value(tf.template["user_data"])
    assert user_data is not None and user_data.startswith("base64(")
    raw = inputs["gpu_user_data"]
    if bottlerocket:  # TOML settings EKS merges into its own
        import tomllib

        commands = tomllib.loads(raw)["settings"]["bootstrap-commands"]["000-mount-instance-storage"]["commands"]
        assert commands[0] == ["apiclient", "ephemeral-storage", "init"]
    else:  # a MIME part of the nodeadm NodeConfig
        import yaml

        part = raw.split("Content-Type: application/node.eks.aws\n\n", 1)[1].split("--//--", 1)[0]
        assert yaml.safe_load(part)["spec"]["instance"]["localStorage"] == {"strategy": "RAID0"}
    assert tf.dynamic(tf.nodes, "taint") == [{"key": "nvidia.com/gpu", "value": "true", "effect": "NO_SCHEDULE"}]


def test_the_efa_security_group_allows_everything_within_itself() -> None:
    ingress = _resource("aws_vpc_security_group_ingress_rule", "efa_self")
    egress = _resource("aws_vpc_security_group_egress_rule", "efa_self")
    for rule in (ingress, egress):
        assert rule["ip_protocol"] == '"-1"'
        assert rule["security_group_id"] == rule["referenced_security_group_id"] == "${aws_security_group.efa.id}"


def test_the_network_cards_table_covers_every_type_and_is_dated() -> None:
    cards = eks.table()["network_cards"]
    assert set(cards["types"]) == set(TYPES) and cards["checked"] and cards["source"]
    for name, entry in cards["types"].items():
        instance = next(t for t in BUILTIN_INSTANCE_TYPES if t.name == name)
        assert entry["network_cards"] >= 1 and instance.efa_interfaces <= max(entry["network_cards"], 1)


def test_a_new_placement_group_with_a_reservation_is_refused_by_both() -> None:
    from fsdp_sdk.errors import ConfigError
    from fsdp_sdk_terraform.inputs import terraform_inputs

    overrides = {**CAPACITY["odcr"], "cluster.placement_group": "true"}
    config = _config("terraform", **overrides)
    with pytest.raises(ConfigError, match=r"^cluster\.placement_group"):
        terraform_inputs(config, find_instance_type(config, _plugins()), config.section("terraform"))
    with pytest.raises(ConfigError, match=r"^cluster\.placement_group"):
        _config("eksctl", **overrides)


# ---------------------------------------------------------------------------------------------- node/pod contract

_NODE_PATHS = {"/var/lib/kubelet/device-plugins", "/dev/infiniband", "/var/lib/kubelet/pod-resources"}
_BASE = {"cpu", "memory", "ephemeral-storage"}


def _groups(config: Config) -> list[dict[str, Any]]:
    """Each rendered node group as the scheduler sees it: labels, taints, resources, host paths."""
    instance = find_instance_type(config, _plugins())
    if config.cluster.backend == "eksctl":
        from fsdp_sdk_eksctl.plan import make_plan
        from fsdp_sdk_eksctl.render import gpu_group

        plan = make_plan("eksctl", config, instance)
        document = plan.resources[0]
        system, gpu = document["managedNodeGroups"]
        group = gpu_group(config, instance)
        labels = gpu["labels"]
        taints = gpu["taints"]
        bottlerocket = gpu["amiFamily"] == "Bottlerocket"
        # eksctl installs its own EFA plugin for efaEnabled groups; the plan's EFA DaemonSet is that object, adopted
        # (fsdp_sdk_eksctl.device_plugins): one object, so no second plugin to count
        own = None
        system_labels = system["labels"]
    else:
        from fsdp_sdk_terraform.backend import TerraformBackend
        from fsdp_sdk_terraform.inputs import gpu_group as tf_group

        plan = TerraformBackend().plan(Resolved(config, instance, _plugins()))
        inputs = plan.resources[0]["content"]
        group = tf_group(config, instance, config.section("terraform"))
        labels = inputs["gpu_labels"]
        effects = {"NO_SCHEDULE": "NoSchedule"}
        taints = [{**t, "effect": effects[t["effect"]]} for t in inputs["gpu_taints"]]
        bottlerocket = inputs["gpu_ami_type"].startswith("BOTTLEROCKET")
        own = None
        system_labels = inputs["system_labels"]
    gpu_node = {
        "labels": {**labels, "node.kubernetes.io/instance-type": instance.name},
        "taints": taints,
        "resources": {"nvidia.com/gpu"} if bottlerocket else set(),
        "paths": _NODE_PATHS | group.host_paths(),
        "group": group,
    }
    system_node = {
        "labels": {**system_labels, "node.kubernetes.io/instance-type": config.cluster.system_instance_type},
        "taints": [],
        "resources": set(),
        "paths": set(_NODE_PATHS),
        "group": None,
    }
    nodes = [system_node, gpu_node]
    plugins = [(eks.PLUGIN_RESOURCES[o["metadata"]["name"]], o["spec"]["template"]["spec"]) for o in plan.kubernetes]
    if own is not None:
        plugins.append(("vpc.amazonaws.com/efa", own))
    for resource, spec in plugins:  # device plugins: each advertises its resource where it runs
        for node in nodes:
            if _schedulable(spec, node):
                assert resource not in node["resources"], f"two plugins advertise {resource} on one node"
                node["resources"].add(resource)
    return [*nodes, {"plan": plan}]


def _tolerated(taint: dict[str, str], tolerations: list[dict[str, str]]) -> bool:
    for t in tolerations:
        if t.get("effect") not in (None, taint["effect"]):
            continue
        if t.get("operator") == "Exists" and t.get("key") in (None, taint["key"]):
            return True
        if t.get("key") == taint["key"] and t.get("value") == taint["value"]:
            return True
    return False


def _schedulable(spec: dict[str, Any], node: dict[str, Any]) -> bool:
    labels = node["labels"]
    if any(labels.get(k) != v for k, v in spec.get("nodeSelector", {}).items()):
        return False
    required = (
        (spec.get("affinity") or {}).get("nodeAffinity", {}).get("requiredDuringSchedulingIgnoredDuringExecution")
    )
    if required and not any(
        all((labels.get(e["key"]) in e["values"]) == (e["operator"] == "In") for e in term["matchExpressions"])
        for term in required["nodeSelectorTerms"]
    ):
        return False
    return all(_tolerated(t, spec.get("tolerations", [])) for t in node["taints"])


def _pod_templates(config: Config) -> list[tuple[str, dict[str, Any]]]:
    from fsdp_sdk.k8s.prereqs import render_etcd
    from fsdp_sdk.k8s.render import render_job
    from fsdp_sdk_observability.plugin import components

    objects = render_job(config, rdzv_id="fsdp-abc123", plugins=_plugins())
    objects += render_etcd(config)
    for component in components(config):
        objects += [dict(o) for o in component.objects]
    templates = []
    for obj in objects:
        spec = obj.get("spec", {})
        if obj["kind"] == "PyTorchJob":
            templates += [("training", r["template"]["spec"]) for r in spec["pytorchReplicaSpecs"].values()]
        elif "template" in spec:
            templates.append((obj["metadata"]["name"], spec["template"]["spec"]))
    return templates


CONTRACT = {
    "eksctl-p5": ("eksctl", {}),
    "eksctl-p4de-odcr-bottlerocket": (
        "eksctl",
        {"cluster.instance_type": "p4de.24xlarge", **CAPACITY["odcr"], "eksctl.ami_family": "Bottlerocket"},
    ),
    "eksctl-g5-no-efa": ("eksctl", {"cluster.instance_type": "g5.48xlarge", "cluster.efa": "false"}),
    "terraform-p5-capacity-block": ("terraform", CAPACITY["capacity-block"]),
    "terraform-p4de-bottlerocket": (
        "terraform",
        {"cluster.instance_type": "p4de.24xlarge", "terraform.gpu_ami_type": "BOTTLEROCKET_x86_64_NVIDIA"},
    ),
}


@pytest.mark.filterwarnings("ignore:the checkpoints of the")
@pytest.mark.parametrize("case", CONTRACT)
def test_every_pod_fits_a_rendered_node_group(case: str) -> None:
    backend, overrides = CONTRACT[case]
    config = _config(
        backend, **overrides, **{"job.registry": "registry.example/ml", "trainer.model.preset": "llama2-7b"}
    )
    *nodes, extra = _groups(config)
    templates = _pod_templates(config)
    templates += [(o["metadata"]["name"], o["spec"]["template"]["spec"]) for o in extra["plan"].kubernetes]
    for name, spec in templates:
        where = [node for node in nodes if _schedulable(spec, node)]
        assert where, f"{name} fits no node group"
        node = where[-1] if name == "training" else where[0]
        for container in spec["containers"]:
            resources = container.get("resources", {})
            for resource in set(resources.get("requests", {})) | set(resources.get("limits", {})):
                assert resource in _BASE or resource in node["resources"], f"{name} requests {resource}: no plugin"
            if name == "training":
                assert {"cpu", "memory"} <= set(resources["requests"]), "a BestEffort training pod"
                assert resources["requests"] == resources["limits"]  # Guaranteed
        for volume in spec.get("volumes", []):
            if "hostPath" in volume:
                assert volume["hostPath"]["path"].rstrip("/") in node["paths"], f"{name}: no {volume['hostPath']}"
        if name in ("etcd", "prometheus", "grafana"):
            assert node["group"] is None, f"{name} may land on a GPU node"
    gpu = nodes[1]["group"]
    if gpu.local_storage is not None:  # a 70B model's sharded checkpoints on the nodes' local NVMe
        assert eks.checkpoint_bytes_per_node(70e9, 2) <= gpu.local_storage.nvme_gib * 1e9


# ---------------------------------------------------------------------------------------------- regions and pins


def test_the_registry_table_is_dated_and_both_backends_render_it_for_every_region() -> None:
    from fsdp_sdk_eksctl.device_plugins import device_plugin_objects
    from fsdp_sdk_terraform.device_plugins import render_device_plugins
    from fsdp_sdk_terraform.inputs import gpu_group

    table = eks.table()["image_registries"]
    assert table["checked"] == "2026-12-02" and "add-ons-images" in table["source"]
    registries = eks.image_registries()
    assert len(registries) >= 39 and {"eu-south-2", "il-central-1", "ca-west-1", "us-gov-west-1"} <= set(registries)
    # a plugin type, so eksctl renders the EFA plugin itself (for built-in types eksctl installs its own)
    import fsdp_sdk_plugin_b200

    plugins = _plugins()
    if "p6-b200.48xlarge" not in plugins.instance_types:
        plugins.register(fsdp_sdk_plugin_b200, name="b200")
    for region, registry in registries.items():
        images = []
        for backend in ("eksctl", "terraform"):
            config = _config(
                backend,
                **{
                    "cluster.region": region,
                    "cluster.availability_zones": [],
                    "cluster.instance_type": "p6-b200.48xlarge",
                },
            )
            instance = find_instance_type(config, plugins)
            if backend == "eksctl":
                objects = device_plugin_objects(config, instance)
            else:
                objects = render_device_plugins(
                    config, gpu_group(config, instance, config.section("terraform")), config.section("terraform")
                )
            (efa,) = [o for o in objects if o["metadata"]["name"] == "aws-efa-k8s-device-plugin"]
            images.append(efa["spec"]["template"]["spec"]["containers"][0]["image"])
        assert images[0] == images[1] and images[0].startswith(f"{registry}/eks/aws-efa-k8s-device-plugin:"), region


def test_no_backend_pins_a_version_or_a_registry_of_its_own() -> None:
    sources = [
        *ROOT.joinpath("packages/backend-eksctl/src").rglob("*.py"),
        *ROOT.joinpath("packages/backend-terraform/src").rglob("*.py"),
        *CONFIGURATION.glob("*.tf"),
    ]
    image_tag = re.compile(r"[\w.-]+/[\w./-]+:v?\d+\.\d+")
    account = re.compile(r"\b\d{12}\b")
    for path in sources:
        text = path.read_text()
        assert not image_tag.search(text), f"{path.name} writes an image tag: {image_tag.search(text)}"
        assert not account.search(text), f"{path.name} writes an AWS account id: {account.search(text)}"
