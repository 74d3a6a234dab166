"""On-demand prices from the AWS Price List API (Stubber: checked against the real service model), cached for a day,
with the instance type's dated table as the fallback."""

from __future__ import annotations

import datetime as dt
import json
from pathlib import Path

from fsdp_sdk.aws.pricing import hourly_price
from fsdp_sdk.plugins import build_plugins

P5 = build_plugins(autoload=False).instance_types["p5.48xlarge"]
TODAY = dt.date(2026, 12, 1)
FILTERS = [
    {"Type": "TERM_MATCH", "Field": "instanceType", "Value": "p5.48xlarge"},
    {"Type": "TERM_MATCH", "Field": "regionCode", "Value": "us-west-2"},
    {"Type": "TERM_MATCH", "Field": "operatingSystem", "Value": "Linux"},
    {"Type": "TERM_MATCH", "Field": "tenancy", "Value": "Shared"},
    {"Type": "TERM_MATCH", "Field": "preInstalledSw", "Value": "NA"},
    {"Type": "TERM_MATCH", "Field": "capacitystatus", "Value": "Used"},
]


def _offer(usd: str) -> str:
    dimension = {
        "unit": "Hrs",
        "pricePerUnit": {"USD": usd},
        "description": "$x per On Demand Linux p5.48xlarge Instance Hour",
    }
    return json.dumps(
        {
            "product": {"attributes": {"instanceType": "p5.48xlarge", "regionCode": "us-west-2"}},
            "terms": {"OnDemand": {"ABC.JRTCKXETXF": {"priceDimensions": {"ABC.JRTCKXETXF.6YS6EN2CT7": dimension}}}},
        }
    )


def _expect(stubber, answer: dict) -> None:
    stubber.add_response(
        "get_products",
        answer,
        {"ServiceCode": "AmazonEC2", "Filters": FILTERS, "FormatVersion": "aws_v1", "MaxResults": 10},
    )


def test_the_regions_price_is_read_and_cached_for_a_day(stubbed, tmp_path: Path) -> None:
    client, stubber = stubbed("pricing", "us-east-1")
    _expect(stubber, {"PriceList": [_offer("55.0400000000")], "FormatVersion": "aws_v1"})
    price = hourly_price(P5, "us-west-2", state_dir=tmp_path, client=client, today=TODAY)
    assert (price.usd_per_hour, price.region, price.date, price.source) == (
        55.04,
        "us-west-2",
        "2026-12-01",
        "price-list-api",
    )
    assert price.describe() == "$55.04/h (AWS Price List, us-west-2, 2026-12-01)"
    again = hourly_price(P5, "us-west-2", state_dir=tmp_path, client=client, today=TODAY)  # no second request
    assert again == price
    assert json.loads((tmp_path / "prices.json").read_text())["us-west-2/p5.48xlarge"]["usd_per_hour"] == 55.04


def test_the_table_is_the_fallback_without_credentials_or_an_offer(stubbed, tmp_path: Path) -> None:
    client, stubber = stubbed("pricing", "us-east-1")
    stubber.add_client_error("get_products", service_error_code="AccessDeniedException")
    _expect(stubber, {"PriceList": [], "FormatVersion": "aws_v1"})
    for _ in range(2):
        price = hourly_price(P5, "us-west-2", state_dir=tmp_path, client=client, today=TODAY)
        assert (price.usd_per_hour, price.region, price.source) == (P5.on_demand_usd_per_hour, "us-east-1", "table")
        assert price.date == P5.price_date
    assert not (tmp_path / "prices.json").exists()


def test_a_price_older_than_a_day_is_read_again(stubbed, tmp_path: Path) -> None:
    client, stubber = stubbed("pricing", "us-east-1")
    _expect(stubber, {"PriceList": [_offer("50.0")], "FormatVersion": "aws_v1"})
    _expect(stubber, {"PriceList": [_offer("51.0")], "FormatVersion": "aws_v1"})
    assert hourly_price(P5, "us-west-2", state_dir=tmp_path, client=client, today=TODAY).usd_per_hour == 50.0
    later = TODAY + dt.timedelta(days=1)
    assert hourly_price(P5, "us-west-2", state_dir=tmp_path, client=client, today=later).usd_per_hour == 51.0
