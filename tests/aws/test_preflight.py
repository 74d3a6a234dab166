"""The AWS preflight checks: moto serves STS and EC2 over HTTP; Service Quotas and capacity reservation
details, which moto lacks, come from botocore's Stubber (requests checked against the real service models)."""

from __future__ import annotations

import datetime as dt
from typing import Any

import pytest

from fsdp_sdk.aws.preflight import aws_preflight, quota_code
from fsdp_sdk.aws.session import aws_client
from fsdp_sdk.config import Config
from fsdp_sdk.config.resolution import find_instance_type, resolve
from fsdp_sdk.plugins import build_plugins

NOW = dt.datetime(2026, 12, 1, 12, 0, tzinfo=dt.timezone.utc)
RESERVATION = "cr-0123456789abcdef0"


def _config(**cluster: Any) -> tuple[Config, Any]:
    plugins = build_plugins(autoload=False)
    config = Config.from_dict({"cluster": {"instance_type": "p4de.24xlarge", "nodes": 2, **cluster}})
    config = resolve(config, plugins, validate_trainer=False)
    return config, find_instance_type(config, plugins)


def _quota(stubbed, value: float, code: str = "L-417A185B") -> Any:
    quotas, stubber = stubbed("service-quotas")
    stubber.add_response(
        "get_service_quota",
        {"Quota": {"QuotaCode": code, "ServiceCode": "ec2", "Value": value}},
        {"ServiceCode": "ec2", "QuotaCode": code},
    )
    return quotas


def _reservation(stubbed, routed, **fields: Any) -> Any:
    ec2, stubber = stubbed("ec2")
    reservation = {
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
    stubber.add_response(
        "describe_capacity_reservations",
        {"CapacityReservations": [reservation]},
        {"CapacityReservationIds": [RESERVATION]},
    )
    return routed(aws_client("ec2", "us-west-2"), ec2, ["describe_capacity_reservations"])


def _run(config: Config, instance: Any, **clients: Any) -> dict[str, Any]:
    results = aws_preflight(
        config, instance, clients={k.replace("_", "-"): v for k, v in clients.items()}, now=lambda: NOW
    )
    return {r.check: r for r in results}


def test_everything_in_place_and_zones_suggested(aws: str, stubbed) -> None:
    config, instance = _config()
    results = _run(config, instance, service_quotas=_quota(stubbed, 192))
    assert all(r.ok for r in results.values()), [r.line() for r in results.values()]
    assert list(results) == ["aws-credentials", "aws-region", "instance-type-offered", "gpu-vcpu-quota"]
    assert results["aws-credentials"].message.startswith("account 123456789012 as arn:aws:")
    assert results["gpu-vcpu-quota"].message == "Running On-Demand P instances (L-417A185B): 192 vCPUs, 192 needed"
    zones = results["instance-type-offered"].suggested["cluster.availability_zones"]
    assert zones[0] == "us-west-2a" and len(zones) == 3 and len(set(zones)) == 3


def test_an_unknown_zone_stops_the_checks(aws: str) -> None:
    config, instance = _config(availability_zones=["us-west-2z"])
    results = _run(config, instance)
    assert list(results) == ["aws-credentials", "aws-region"]
    failed = results["aws-region"]
    assert failed.blocking and failed.message == "availability zone us-west-2z is not an available zone of us-west-2"
    assert failed.fix.startswith("set cluster.availability_zones to zones of us-west-2: us-west-2a, us-west-2b")


def test_an_instance_type_not_offered_in_the_gpu_zone(aws: str, stubbed) -> None:
    config, instance = _config(instance_type="p5en.48xlarge", availability_zones=["us-west-2b", "us-west-2a"])
    results = _run(config, instance, service_quotas=_quota(stubbed, 1000))
    offered = results["instance-type-offered"]
    assert offered.blocking and offered.message == "p5en.48xlarge is not offered in us-west-2b"
    assert offered.fix == "use one of the zones that offer it: us-west-2a, us-west-2c, us-west-2d"


def test_a_quota_too_small_names_the_quota_and_the_request(aws: str, stubbed) -> None:
    config, instance = _config(nodes=4)
    failed = _run(config, instance, service_quotas=_quota(stubbed, 96))["gpu-vcpu-quota"]
    assert failed.blocking
    assert failed.message == (
        "4 x p4de.24xlarge need 384 vCPUs but the quota 'Running On-Demand P instances' (L-417A185B) in us-west-2 is 96"
    )
    assert "--quota-code L-417A185B --desired-value 384 --region us-west-2" in failed.fix


def test_spot_and_other_families_use_their_quotas() -> None:
    assert quota_code("p5.48xlarge", "spot") == ("L-7212CCBC", "All P Spot Instance Requests")
    assert quota_code("g6e.48xlarge", "on-demand") == ("L-DB2E81BA", "Running On-Demand G and VT instances")
    assert quota_code("trn1.32xlarge", "capacity-reservation")[0] == "L-2C3B7624"
    assert quota_code("x2idn.32xlarge", "on-demand") is None


def test_a_usable_reservation_puts_the_gpu_nodes_in_its_zone(aws: str, stubbed, routed) -> None:
    config, instance = _config(capacity_reservation_id=RESERVATION)
    results = _run(config, instance, ec2=_reservation(stubbed, routed), service_quotas=_quota(stubbed, 192))
    assert all(r.ok for r in results.values()), [r.line() for r in results.values()]
    assert results["capacity-reservation"].message == (
        f"capacity reservation {RESERVATION}: active, p4de.24xlarge in us-west-2b, 4 of 4 free, ends 2026-12-04T12:00+00:00"
    )
    assert results["instance-type-offered"].suggested["cluster.availability_zones"][0] == "us-west-2b"


@pytest.mark.parametrize(
    ("cluster", "fields", "message", "fix"),
    [
        (
            {},
            {"InstanceType": "p5.48xlarge"},
            f"capacity reservation {RESERVATION} is for p5.48xlarge, not p4de.24xlarge",
            "set cluster.instance_type to p5.48xlarge",
        ),
        (
            {"availability_zones": ["us-west-2a", "us-west-2c"]},
            {},
            f"capacity reservation {RESERVATION} is in us-west-2b, but the GPU nodes go to us-west-2a",
            "put us-west-2b first in cluster.availability_zones",
        ),
        (
            {"nodes": 6, "max_nodes": 6},
            {},
            f"capacity reservation {RESERVATION} has 4 free instance(s) for 6 node(s)",
            "set cluster.nodes to 4 or less, or extend the reservation",
        ),
        (
            {},
            {"State": "expired"},
            f"capacity reservation {RESERVATION} is expired",
            "use an active reservation",
        ),
        (
            {},
            {"ReservationType": "capacity-block"},
            f"Capacity Block {RESERVATION} is a Capacity Block",
            "set cluster.capacity_type to capacity-block",
        ),
    ],
)
def test_a_reservation_that_does_not_fit_is_refused(aws: str, stubbed, routed, cluster, fields, message, fix) -> None:
    config, instance = _config(capacity_reservation_id=RESERVATION, **cluster)
    ec2 = _reservation(stubbed, routed, **fields)
    failed = aws_preflight(
        config, instance, clients={"ec2": ec2, "service-quotas": _quota(stubbed, 9999)}, now=lambda: NOW
    )
    reservation = next(r for r in failed if r.check == "capacity-reservation")
    assert reservation.blocking and reservation.message.startswith(message) and reservation.fix == fix


def test_a_capacity_block_that_has_not_started_is_a_warning(aws: str, stubbed, routed) -> None:
    config, instance = _config(capacity_reservation_id=RESERVATION, capacity_type="capacity-block")
    ec2 = _reservation(
        stubbed, routed, State="scheduled", ReservationType="capacity-block", StartDate=NOW + dt.timedelta(hours=5)
    )
    results = _run(config, instance, ec2=ec2)
    block = results["capacity-reservation"]
    assert not block.ok and not block.blocking and "it starts at 2026-12-01T17:00+00:00" in block.message
    assert (
        results["gpu-vcpu-quota"].ok and "Capacity Block brings its own capacity" in results["gpu-vcpu-quota"].message
    )


def test_a_reservation_that_does_not_exist(aws: str, stubbed, routed) -> None:
    config, instance = _config(capacity_reservation_id=RESERVATION)
    ec2, stubber = stubbed("ec2")
    stubber.add_client_error(
        "describe_capacity_reservations", service_error_code="InvalidCapacityReservationId.NotFound"
    )
    results = _run(
        config,
        instance,
        ec2=routed(aws_client("ec2", "us-west-2"), ec2, ["describe_capacity_reservations"]),
        service_quotas=_quota(stubbed, 192),
    )
    assert results["capacity-reservation"].message == f"capacity reservation {RESERVATION} does not exist in us-west-2"


def test_bad_credentials_stop_at_the_first_check(stubbed) -> None:
    config, instance = _config()
    sts, stubber = stubbed("sts")
    stubber.add_client_error("get_caller_identity", service_error_code="ExpiredToken")
    results = aws_preflight(config, instance, clients={"sts": sts})
    assert [r.check for r in results] == ["aws-credentials"]
    assert results[0].blocking and "the AWS session token has expired" in results[0].message


@pytest.mark.parametrize("block", [False, True], ids=["odcr", "capacity-block"])
@pytest.mark.parametrize("type_matches", [True, False], ids=["type", "other-type"])
@pytest.mark.parametrize("zone_matches", [True, False], ids=["zone", "other-zone"])
@pytest.mark.parametrize("state", ["scheduled", "active", "expired"])
def test_every_mismatch_blocks_whatever_the_state(
    aws: str, stubbed, routed, state: str, zone_matches: bool, type_matches: bool, block: bool
) -> None:
    """Kind, zone and type are checked for a reservation that has not started like for an active one."""
    cluster: dict[str, Any] = {"capacity_reservation_id": RESERVATION}
    if block:
        cluster["capacity_type"] = "capacity-block"
    if not zone_matches:
        cluster["availability_zones"] = ["us-west-2a", "us-west-2c"]
    config, instance = _config(**cluster)
    fields: dict[str, Any] = {"State": state, "StartDate": NOW + dt.timedelta(hours=5)}
    if block:
        fields["ReservationType"] = "capacity-block"
    if not type_matches:
        fields["InstanceType"] = "p5en.48xlarge"
    ec2 = _reservation(stubbed, routed, **fields)
    quotas = {} if block else {"service_quotas": _quota(stubbed, 9999)}  # a Capacity Block needs no vCPU quota
    result = _run(config, instance, ec2=ec2, **quotas)["capacity-reservation"]
    mismatches = [
        *([] if zone_matches else ["is in us-west-2b, but the GPU nodes go to us-west-2a"]),
        *([] if type_matches else ["is for p5en.48xlarge, not p4de.24xlarge"]),
    ]
    for mismatch in mismatches:
        assert mismatch in result.message, result.line()
    if state == "scheduled":
        assert "it starts at 2026-12-01T17:00+00:00" in result.message, result.line()
    if mismatches or state == "expired":
        assert result.blocking, result.line()
    elif state == "scheduled":
        assert not result.ok and not result.blocking, result.line()  # a warning: nodes wait for its start
    else:
        assert result.ok, result.line()
