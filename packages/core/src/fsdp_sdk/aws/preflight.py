"""Preflight checks every AWS backend runs before it creates anything.

:func:`aws_preflight` returns one :class:`~fsdp_sdk.preflight.PreflightResult` per check,
in this order, stopping early when a check makes the rest meaningless (no credentials):

1. ``aws-credentials``: ``sts:GetCallerIdentity`` answers (the account and identity are reported);
2. ``aws-region``: the region answers ``ec2:DescribeAvailabilityZones`` and every zone in
   ``cluster.availability_zones`` is one of its available zones;
3. ``instance-type-offered``: ``ec2:DescribeInstanceTypeOfferings`` lists the GPU instance
   type in the zone the GPU nodes go to (the first of ``cluster.availability_zones``, or the
   reservation's zone), or, with no zone set, in at least one zone;
4. ``gpu-vcpu-quota``: the Service Quotas vCPU quota of the instance family (On-Demand or Spot)
   covers ``cluster.nodes x vCPUs``;
5. ``capacity-reservation`` (when ``cluster.capacity_reservation_id`` is set): the reservation or
   Capacity Block is active (a Capacity Block not yet started is a warning), of the configured
   instance type, in the GPU zone, not ending within the hour, with enough free instances.

With ``cluster.availability_zones`` unset, the checks suggest zones (the reservation's zone first,
then zones that offer the instance type): :attr:`PreflightResult.suggested` carries
``cluster.availability_zones``, which the client fills in before planning, so a dry run shows them.
"""

from __future__ import annotations

import datetime as dt
import re
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

from fsdp_sdk.aws.session import aws_client, aws_errors
from fsdp_sdk.errors import FsdpSdkError
from fsdp_sdk.preflight import PreflightResult

if TYPE_CHECKING:
    from fsdp_sdk.config import Config
    from fsdp_sdk.instance_types import InstanceType

__all__ = ["CLUSTER_TOOLS", "VCPU_QUOTAS", "aws_preflight", "cluster_tool_checks", "gpu_zone", "quota_code"]

#: Tools every AWS backend's ``up`` runs beside its own, and what for.
CLUSTER_TOOLS = {
    "kubectl": "installs the Kubeflow Training Operator",
    # kustomize fetches the operator's remote overlay (kubectl apply -k github.com/...) with git
    "git": "fetches the Training Operator's kustomize overlay for 'kubectl apply -k github.com/...'",
    "aws": "authenticates kubectl and the SDK to the cluster ('aws eks get-token' in the kubeconfig)",
}


def cluster_tool_checks() -> list[PreflightResult]:
    """One check per tool of :data:`CLUSTER_TOOLS`: on PATH, or what it is needed for and how to install it."""
    import shutil

    from fsdp_sdk.tools import INSTALL_HINTS

    results = []
    for name, why in CLUSTER_TOOLS.items():
        path = shutil.which(name)
        if path is None:
            results.append(
                PreflightResult(f"{name}-installed", False, f"{name} is not on PATH ({why})", INSTALL_HINTS[name])
            )
        else:
            results.append(PreflightResult(f"{name}-installed", True, path))
    return results


#: Service Quotas codes (service ``ec2``) of the vCPU quotas by instance family letter, On-Demand and Spot.
VCPU_QUOTAS: dict[str, dict[str, tuple[str, str]]] = {
    "on-demand": {
        "p": ("L-417A185B", "Running On-Demand P instances"),
        "g": ("L-DB2E81BA", "Running On-Demand G and VT instances"),
        "vt": ("L-DB2E81BA", "Running On-Demand G and VT instances"),
        "trn": ("L-2C3B7624", "Running On-Demand Trn instances"),
        "inf": ("L-1945791B", "Running On-Demand Inf instances"),
        "dl": ("L-6E869C2A", "Running On-Demand DL instances"),
    },
    "spot": {
        "p": ("L-7212CCBC", "All P Spot Instance Requests"),
        "g": ("L-3819A6DF", "All G and VT Spot Instance Requests"),
        "vt": ("L-3819A6DF", "All G and VT Spot Instance Requests"),
        "trn": ("L-6B0D517C", "All Trn Spot Instance Requests"),
        "inf": ("L-B5D1601B", "All Inf Spot Instance Requests"),
        "dl": ("L-85EED4F7", "All DL Spot Instance Requests"),
    },
}

Clients = Mapping[str, Any]


def quota_code(instance_type: str, capacity_type: str) -> tuple[str, str] | None:
    """The vCPU quota ``(code, name)`` that launching ``instance_type`` counts against, or ``None``.

    :param instance_type: e.g. ``p4de.24xlarge``.
    :param capacity_type: ``cluster.capacity_type``; Spot has its own quotas, the others use On-Demand's.
    """
    family = re.match(r"^([a-z]+)", instance_type)
    if family is None:
        return None
    letters = family.group(1)
    table = VCPU_QUOTAS["spot" if capacity_type == "spot" else "on-demand"]
    for prefix in sorted(table, key=len, reverse=True):
        if letters.startswith(prefix):
            return table[prefix]
    return None


def gpu_zone(config: Config) -> str | None:
    """The zone the GPU nodes go to: the first of ``cluster.availability_zones`` (``None`` when unset)."""
    zones = config.cluster.availability_zones
    return zones[0] if zones else None


def _result(check: str, ok: bool, message: str, fix: str | None = None, **kwargs: Any) -> PreflightResult:
    return PreflightResult(check, ok, message, fix, **kwargs)


def _failed(check: str, error: FsdpSdkError) -> PreflightResult:
    return PreflightResult(check, False, str(error))


def aws_preflight(
    config: Config,
    instance: InstanceType,
    *,
    clients: Clients | None = None,
    now: Callable[[], dt.datetime] | None = None,
) -> list[PreflightResult]:
    """Run the AWS checks for ``config`` (see the module docstring); reads only.

    :param config: the resolved configuration.
    :param instance: the GPU instance type of ``cluster.instance_type``.
    :param clients: boto3 clients by service name (``sts``, ``ec2``, ``service-quotas``) to use instead of
        the cached ones (tests pass stubbed clients).
    :param now: the current time (UTC); for tests.
    """
    region = config.cluster.region

    def client(service: str) -> Any:
        return (clients or {}).get(service) or aws_client(service, region)

    results = [_credentials(client)]
    if not results[0].ok:
        return results
    region_result, available = _region(config, client)
    results.append(region_result)
    if not region_result.ok:
        return results
    reservation: dict[str, Any] | None = None
    if config.cluster.capacity_reservation_id:
        result, reservation = _reservation(config, client, (now or _utcnow)())
        results.append(result)
    results.append(_offering(config, client, available, reservation))
    results.append(_quota(config, instance, client))
    return results


def reservation_kind(config: Config) -> str:
    """What ``cluster.capacity_reservation_id`` names, as messages say it: a Capacity Block or a capacity reservation."""
    return "Capacity Block" if config.cluster.capacity_type == "capacity-block" else "capacity reservation"


def reservation_size(config: Config, *, client: Any = None) -> int | None:
    """How many instances ``cluster.capacity_reservation_id`` holds (its ``TotalInstanceCount``): the GPU node group
    targets that reservation alone, so its launches beyond it fail and the cluster can never have more nodes. None
    without a reservation, or for one that does not exist (the ``up`` preflight says so). Reads only.

    :param client: an EC2 client to use instead of the cached one (tests pass a stubbed one).
    """
    reservation_id = config.cluster.capacity_reservation_id
    if not reservation_id:
        return None
    ec2 = client or aws_client("ec2", config.cluster.region)
    kind = reservation_kind(config)
    with aws_errors("ec2", f"describe the {kind} {reservation_id}"):
        found = ec2.describe_capacity_reservations(CapacityReservationIds=[reservation_id])
    reservations = found.get("CapacityReservations") or []
    return int(reservations[0].get("TotalInstanceCount") or 0) if reservations else None


def _utcnow() -> dt.datetime:
    return dt.datetime.now(dt.timezone.utc)


def _credentials(client: Callable[[str], Any]) -> PreflightResult:
    try:
        with aws_errors("sts", "check the AWS credentials"):
            identity = client("sts").get_caller_identity()
    except FsdpSdkError as error:
        return _failed("aws-credentials", error)
    return _result("aws-credentials", True, f"account {identity['Account']} as {identity['Arn']}")


def _region(config: Config, client: Callable[[str], Any]) -> tuple[PreflightResult, list[str]]:
    region = config.cluster.region
    try:
        with aws_errors("ec2", f"list the availability zones of {region}"):
            answer = client("ec2").describe_availability_zones(
                Filters=[
                    {"Name": "state", "Values": ["available"]},
                    {"Name": "zone-type", "Values": ["availability-zone"]},
                ]
            )
    except FsdpSdkError as error:
        return _failed("aws-region", error), []
    available = sorted(zone["ZoneName"] for zone in answer.get("AvailabilityZones", []))
    unknown = [zone for zone in config.cluster.availability_zones if zone not in available]
    if unknown:
        return (
            _result(
                "aws-region",
                False,
                f"availability zone {unknown[0]} is not an available zone of {region}",
                f"set cluster.availability_zones to zones of {region}: {', '.join(available)}",
            ),
            available,
        )
    if not available:
        return _result("aws-region", False, f"{region} has no available zone", "choose another cluster.region"), []
    return _result("aws-region", True, f"{region}: zones {', '.join(available)}"), available


def _offering(
    config: Config, client: Callable[[str], Any], available: list[str], reservation: Mapping[str, Any] | None
) -> PreflightResult:
    name = config.cluster.instance_type
    try:
        with aws_errors("ec2", f"list the zones that offer {name}"):
            pages = (
                client("ec2")
                .get_paginator("describe_instance_type_offerings")
                .paginate(LocationType="availability-zone", Filters=[{"Name": "instance-type", "Values": [name]}])
            )
            offered = sorted({o["Location"] for page in pages for o in page.get("InstanceTypeOfferings", [])})
    except FsdpSdkError as error:
        return _failed("instance-type-offered", error)
    offered = [zone for zone in offered if zone in available]
    wanted = gpu_zone(config) or (reservation or {}).get("AvailabilityZone")
    if not offered:
        return _result(
            "instance-type-offered",
            False,
            f"{name} is not offered in any zone of {config.cluster.region}",
            "choose another cluster.region or cluster.instance_type",
        )
    if wanted is not None and wanted not in offered:
        return _result(
            "instance-type-offered",
            False,
            f"{name} is not offered in {wanted}",
            f"use one of the zones that offer it: {', '.join(offered)}",
        )
    if config.cluster.availability_zones:
        return _result("instance-type-offered", True, f"{name} is offered in {wanted} (GPU node zone)")
    first = wanted or offered[0]
    others = [zone for zone in available if zone != first]
    suggested = [first, *others[:2]]  # EKS wants subnets in two zones at least
    return _result(
        "instance-type-offered",
        True,
        f"{name} is offered in {', '.join(offered)}; GPU nodes go to {first}",
        suggested={"cluster.availability_zones": suggested},
    )


def _quota(config: Config, instance: InstanceType, client: Callable[[str], Any]) -> PreflightResult:
    capacity = config.cluster.capacity_type
    if capacity == "capacity-block":
        return _result("gpu-vcpu-quota", True, "a Capacity Block brings its own capacity: no vCPU quota applies")
    found = quota_code(instance.name, capacity)
    if found is None:
        return _result(
            "gpu-vcpu-quota", True, f"no vCPU quota is known for the family of {instance.name}", severity="warning"
        )
    code, quota_name = found
    needed = config.cluster.nodes * instance.vcpus
    try:
        with aws_errors("service-quotas", f"read the quota {quota_name!r}"):
            try:
                quota = client("service-quotas").get_service_quota(ServiceCode="ec2", QuotaCode=code)["Quota"]
            except Exception as error:  # a quota never changed from its default has no applied value
                if type(error).__name__ != "NoSuchResourceException":
                    raise
                quota = client("service-quotas").get_aws_default_service_quota(ServiceCode="ec2", QuotaCode=code)[
                    "Quota"
                ]
    except FsdpSdkError as error:
        return PreflightResult("gpu-vcpu-quota", False, str(error), severity="warning")
    value = int(quota.get("Value") or 0)
    if value < needed:
        return _result(
            "gpu-vcpu-quota",
            False,
            f"{config.cluster.nodes} x {instance.name} need {needed} vCPUs but the quota "
            f"{quota_name!r} ({code}) in {config.cluster.region} is {value}",
            f"request an increase: aws service-quotas request-service-quota-increase --service-code ec2 "
            f"--quota-code {code} --desired-value {needed} --region {config.cluster.region}, or use fewer nodes",
        )
    return _result("gpu-vcpu-quota", True, f"{quota_name} ({code}): {value} vCPUs, {needed} needed")


def _reservation(
    config: Config, client: Callable[[str], Any], now: dt.datetime
) -> tuple[PreflightResult, dict[str, Any] | None]:
    reservation_id = config.cluster.capacity_reservation_id
    kind = reservation_kind(config)
    try:
        with aws_errors("ec2", f"describe the {kind} {reservation_id}"):
            found = client("ec2").describe_capacity_reservations(CapacityReservationIds=[reservation_id])
    except FsdpSdkError as error:
        if getattr(error, "code", "") in (
            "InvalidCapacityReservationId.NotFound",
            "InvalidCapacityReservationId.Malformed",
        ):
            return (
                _result(
                    "capacity-reservation",
                    False,
                    f"{kind} {reservation_id} does not exist in {config.cluster.region}",
                    "check cluster.capacity_reservation_id and cluster.region ('aws ec2 describe-capacity-reservations')",
                ),
                None,
            )
        return _failed("capacity-reservation", error), None
    reservations = found.get("CapacityReservations") or []
    if not reservations:
        return (
            _result(
                "capacity-reservation",
                False,
                f"{kind} {reservation_id} does not exist in {config.cluster.region}",
                "check cluster.capacity_reservation_id and cluster.region",
            ),
            None,
        )
    r = reservations[0]
    state, itype, zone = r.get("State"), r.get("InstanceType"), r.get("AvailabilityZone")
    free, total = int(r.get("AvailableInstanceCount") or 0), int(r.get("TotalInstanceCount") or 0)
    end: dt.datetime | None = r.get("EndDate")
    is_block = r.get("ReservationType") == "capacity-block"
    label = f"{'Capacity Block' if is_block else 'capacity reservation'} {reservation_id}"
    summary = f"{label}: {state}, {itype} in {zone}, {free} of {total} free" + (
        f", ends {end.isoformat(timespec='minutes')}" if end else ""
    )
    nodes = config.cluster.nodes
    problems: list[tuple[str, str]] = []
    if is_block and config.cluster.capacity_type != "capacity-block":
        problems.append((f"{label} is a Capacity Block", "set cluster.capacity_type to capacity-block"))
    if not is_block and config.cluster.capacity_type == "capacity-block":
        problems.append((f"{label} is not a Capacity Block", "set cluster.capacity_type to capacity-reservation"))
    if itype != config.cluster.instance_type:
        problems.append(
            (f"{label} is for {itype}, not {config.cluster.instance_type}", f"set cluster.instance_type to {itype}")
        )
    wanted = gpu_zone(config)
    if wanted is not None and zone != wanted:
        problems.append(
            (
                f"{label} is in {zone}, but the GPU nodes go to {wanted}",
                f"put {zone} first in cluster.availability_zones",
            )
        )
    if end is not None and end <= now + dt.timedelta(hours=1):
        problems.append((f"{label} ends at {end.isoformat(timespec='minutes')}", "use a reservation that lasts longer"))
    if state == "scheduled":
        # not started yet: its kind, zone and type were checked above like an active one's; only its start waits
        start = r.get("StartDate")
        when = f" at {start.isoformat(timespec='minutes')}" if start else ""
        if total < nodes:
            problems.append(
                (
                    f"{label} holds {total} instance(s) for {nodes} node(s)",
                    f"set cluster.nodes to {total} or less, or use a larger reservation",
                )
            )
        if problems:
            problems.append((f"it starts{when}", f"run 'fsdp-sdk up' once the {kind} is active"))
        else:
            return (
                _result(
                    "capacity-reservation",
                    False,
                    f"{summary}; it starts{when}, nodes cannot launch before",
                    f"'fsdp-sdk up' creates the GPU node group with 0 nodes and schedules it to scale to {nodes} "
                    "when the block starts (fsdp_sdk.aws.capacity_block)",
                    severity="warning",
                ),
                r,
            )
    elif state != "active":
        problems.append((f"{label} is {state}", "use an active reservation"))
    elif free < nodes:
        problems.append(
            (
                f"{label} has {free} free instance(s) for {nodes} node(s)",
                f"set cluster.nodes to {free} or less, or extend the reservation",
            )
        )
    if problems:
        message = "; ".join(problem for problem, _ in problems)
        return _result("capacity-reservation", False, message, problems[0][1]), r
    return _result("capacity-reservation", True, summary), r
