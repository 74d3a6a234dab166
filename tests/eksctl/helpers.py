"""Helpers of the eksctl backend tests: the schema, recorded tool calls, AWS answers moto lacks, configurations."""

from __future__ import annotations

import datetime as dt
import json
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

import fsdp_sdk_plugin_b200
from fsdp_sdk.config import Config, resolution
from fsdp_sdk.plugins import Plugins, build_plugins
from fsdp_sdk.resolved import Resolved
from fsdp_sdk_eksctl import plugin

PROJECT_ROOT = Path(__file__).resolve().parents[2]
SHARED_SCHEMAS = PROJECT_ROOT.parent / "shared" / "schemas"
EKSCTL_SCHEMA = SHARED_SCHEMAS / "eksctl-clusterconfig-v1alpha5.schema.json"
RESERVATION = "cr-0123456789abcdef0"
ZONES = "us-west-2b,us-west-2a,us-west-2c"
NOW = dt.datetime.now(dt.timezone.utc)


def schema_validator(schema_path: Path) -> Callable[[dict[str, Any]], list[str]]:
    """``validate(document) -> error lines`` against the eksctl ClusterConfig schema at ``schema_path``."""
    import jsonschema

    schema = json.loads(schema_path.read_text())
    validator = jsonschema.validators.validator_for(schema)(schema)

    def validate(document: dict[str, Any]) -> list[str]:
        return [f"{'/'.join(map(str, e.absolute_path))}: {e.message}" for e in validator.iter_errors(document)]

    return validate


def plugin_set() -> Plugins:
    """A fresh plugin set: the built-in plugins, the eksctl plugin and the example B200 plugin."""
    plugins = build_plugins(autoload=False)
    plugins.register(plugin, name="eksctl")
    plugins.register(fsdp_sdk_plugin_b200, name="b200")
    return plugins


def resolve(config: Config) -> Resolved:
    """What ``EksctlBackend.plan`` receives for ``config``: resolved with :func:`plugin_set`."""
    return Resolved.of(config, plugin_set(), validate_trainer=False)


def configure(**overrides: Any) -> tuple[Config, Any]:
    """A resolved configuration of the eksctl backend and its GPU instance type."""
    plugins = plugin_set()
    settings = {"cluster.backend": "eksctl", "cluster.name": "demo", **overrides}
    config = Config.from_dict({}, sections=plugins.settings).with_overrides(settings)
    config = resolution.resolve(config, plugins, validate_trainer=False)
    return config, resolution.find_instance_type(config, plugins)


@dataclass
class Tools:
    """The recording executables first on PATH (eksctl, kubectl, aws) and their log."""

    bin_dir: Path
    log: Path

    def calls(self, tool: str | None = None) -> list[list[str]]:
        """The argv of every recorded call (of ``tool`` only, when given)."""
        if not self.log.exists():
            return []
        entries = [json.loads(line) for line in self.log.read_text().splitlines()]
        return [e["argv"] for e in entries if tool is None or e["tool"] == tool]

    def eksctl(self) -> list[list[str]]:
        """eksctl's calls, ``eksctl version`` (a preflight read) left out."""
        return [argv for argv in self.calls("eksctl") if argv != ["version"]]

    def pids(self) -> list[int]:
        """The pids a hanging fake eksctl wrote (itself and its child)."""
        path = Path(f"{self.log}.pids")
        return [int(p) for p in path.read_text().split()] if path.exists() else []


class _Answering:
    """A boto3 client whose chosen operations are answered by botocore's Stubber, one response queued per call
    (each request is checked against the real service model); every other operation goes to moto."""

    def __init__(self, moto: Any, stubbed: tuple[Any, Any], answers: dict[str, Callable[[dict[str, Any]], Any]]):
        self._moto, (self._client, self._stubber), self._answers = moto, stubbed, answers

    def __getattr__(self, name: str) -> Any:
        if name not in self._answers:
            return getattr(self._moto, name)

        def call(**kwargs: Any) -> Any:
            answer = self._answers[name](kwargs)
            if isinstance(answer, Exception):
                self._stubber.add_client_error(
                    name, service_error_code=type(answer).__name__, service_message=str(answer), expected_params=kwargs
                )
            else:
                self._stubber.add_response(name, answer, kwargs)
            return getattr(self._client, name)(**kwargs)

        return call


@dataclass
class AwsAnswers:
    """What the tests answer for the APIs moto lacks: the vCPU quota, capacity reservations, EKS add-ons, the
    Price List, node group health issues and stacks CloudFormation still works on.

    Change the attributes in a test before the command runs.
    """

    quota_vcpus: float = 100_000.0
    reservation: dict[str, Any] | None = None
    addons: dict[str, tuple[str, str]] = field(
        default_factory=lambda: {
            "vpc-cni": ("v1.19.2-eksbuild.1", "ACTIVE"),
            "coredns": ("v1.11.4-eksbuild.2", "ACTIVE"),
            "kube-proxy": ("v1.31.3-eksbuild.2", "ACTIVE"),
        }
    )
    nodegroup_issues: dict[str, list[dict[str, Any]]] = field(default_factory=dict)
    stack_states: list[dict[str, str]] = field(default_factory=list)
    requests: list[tuple[str, dict[str, Any]]] = field(default_factory=list)

    def reserve(self, **fields: Any) -> dict[str, Any]:
        """Answer ``describe_capacity_reservations`` with an active ODCR of 4 x p4de.24xlarge in us-west-2b, changed
        by ``fields``."""
        self.reservation = {
            "CapacityReservationId": RESERVATION,
            "InstanceType": "p4de.24xlarge",
            "AvailabilityZone": "us-west-2b",
            "State": "active",
            "AvailableInstanceCount": 4,
            "TotalInstanceCount": 4,
            "EndDate": NOW + dt.timedelta(days=3),
            "ReservationType": "default",
            **fields,
        }
        return self.reservation

    def _quota(self, request: dict[str, Any]) -> dict[str, Any]:
        self.requests.append(("get_service_quota", request))
        return {"Quota": {"QuotaCode": request["QuotaCode"], "ServiceCode": "ec2", "Value": self.quota_vcpus}}

    def _reservations(self, request: dict[str, Any]) -> Any:
        self.requests.append(("describe_capacity_reservations", request))
        if self.reservation is None:
            return Exception("no reservation answered")
        return {"CapacityReservations": [self.reservation]}

    def _list_addons(self, request: dict[str, Any]) -> dict[str, Any]:
        return {"addons": sorted(self.addons)}

    def _describe_addon(self, request: dict[str, Any]) -> dict[str, Any]:
        version, status = self.addons[request["addonName"]]
        addon: dict[str, Any] = {
            "addonName": request["addonName"],
            "clusterName": request["clusterName"],
            "status": status,
            "addonVersion": version,
        }
        if status == "DEGRADED":
            addon["health"] = {"issues": [{"code": "InsufficientNumberOfReplicas", "message": "0 of 2 ready"}]}
        return {"addon": addon}

    def _nodegroup(self, moto: Any) -> Callable[[dict[str, Any]], dict[str, Any]]:
        """moto's node group, with the health issues the test set for it."""

        def answer(request: dict[str, Any]) -> dict[str, Any]:
            found = moto.describe_nodegroup(**request)
            found.pop("ResponseMetadata", None)
            issues = self.nodegroup_issues.get(request["nodegroupName"])
            if issues:
                found["nodegroup"]["health"] = {"issues": issues}
            return found

        return answer

    def _stacks(self, moto: Any) -> Callable[[dict[str, Any]], dict[str, Any]]:
        """moto's stacks; while ``stack_states`` holds entries, each call shows the states of its first entry
        (``{stack name: status}``, a stack CloudFormation is still working on) and removes it."""

        def answer(request: dict[str, Any]) -> dict[str, Any]:
            found = moto.describe_stacks(**request)
            found.pop("ResponseMetadata", None)
            states = self.stack_states.pop(0) if self.stack_states else {}
            for stack in found["Stacks"]:
                stack["StackStatus"] = states.get(stack["StackName"], stack["StackStatus"])
            return found

        return answer

    def install(self, monkeypatch: pytest.MonkeyPatch, stubbed: Callable[..., tuple[Any, Any]]) -> None:
        """Send these operations to Stubber-checked answers; the rest of every client goes to moto."""
        import fsdp_sdk.aws.preflight
        import fsdp_sdk.aws.pricing
        import fsdp_sdk_eksctl.observe
        from fsdp_sdk.aws.session import aws_client

        made: dict[str, Any] = {}

        def client(service: str, region: str) -> Any:
            key = f"{service}/{region}"
            if key not in made:
                moto = aws_client(service, region)
                if service == "service-quotas":
                    made[key] = _Answering(moto, stubbed(service, region), {"get_service_quota": self._quota})
                elif service == "pricing":  # the Price List API lists nothing: the plan keeps the table's price
                    answers = {"get_products": lambda request: {"PriceList": [], "FormatVersion": "aws_v1"}}
                    made[key] = _Answering(moto, stubbed(service, region), answers)
                elif service == "cloudformation":
                    made[key] = _Answering(moto, stubbed(service, region), {"describe_stacks": self._stacks(moto)})
                elif service == "ec2":
                    answers = {"describe_capacity_reservations": self._reservations}
                    made[key] = _Answering(moto, stubbed(service, region), answers)
                elif service == "eks":
                    answers = {
                        "list_addons": self._list_addons,
                        "describe_addon": self._describe_addon,
                        "describe_nodegroup": self._nodegroup(moto),
                    }
                    made[key] = _Answering(moto, stubbed(service, region), answers)
                else:
                    made[key] = moto
            return made[key]

        monkeypatch.setattr(fsdp_sdk.aws.preflight, "aws_client", client)
        monkeypatch.setattr(fsdp_sdk.aws.pricing, "aws_client", client)
        monkeypatch.setattr(fsdp_sdk_eksctl.observe, "aws_client", client)


def leader_line(host: str) -> str:
    """The line the trainer's rank 0 logs at start, which marks the leader pod."""
    return f"[rank0] 12:00:00 INFO fsdp_trainer.distributed: master_addr={host} host={host}.fsdp"


class Session:
    """A :class:`fsdp_sdk.Client` of the eksctl backend, as the CLI builds one, with its progress lines kept."""

    def __init__(self, **overrides: Any) -> None:
        from fsdp_sdk import Client
        from fsdp_sdk.plugins import get_plugins

        self.lines: list[str] = []
        settings = {"cluster.backend": "eksctl", "cluster.name": "demo", **overrides}
        self.client = Client.from_sources(
            overrides=settings, read_default_env_file=False, plugins=get_plugins(), progress=self.lines.append
        )

    def up(self) -> Any:
        """Plan (preflight checks first), then apply that plan."""
        return self.client.up(self.client.plan())

    def said(self, text: str) -> bool:
        """Whether a progress line contains ``text``."""
        return any(text in line for line in self.lines)


def aws_resources(region: str = "us-west-2") -> dict[str, list[str]]:
    """What exists in the moto server: EKS clusters and node groups, CloudFormation stacks."""
    from fsdp_sdk.aws.session import aws_client

    eks = aws_client("eks", region)
    clusters = eks.list_clusters()["clusters"]
    return {
        "clusters": sorted(clusters),
        "nodegroups": sorted(f"{c}/{g}" for c in clusters for g in eks.list_nodegroups(clusterName=c)["nodegroups"]),
        "stacks": sorted(s["StackName"] for s in aws_client("cloudformation", region).describe_stacks()["Stacks"]),
    }
