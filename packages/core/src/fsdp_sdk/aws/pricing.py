"""On-demand prices: the AWS Price List API for the configured region when credentials allow it, else the table.

The instance types carry a dated us-east-1 price (:attr:`~fsdp_sdk.instance_types.InstanceType.on_demand_usd_per_hour`,
``price_date``). Prices differ by region and change, so where AWS credentials work, :func:`hourly_price` reads the
region's Linux on-demand price from the Price List API (``pricing:GetProducts``; its endpoints are in us-east-1)
and keeps it for a day under the state directory (``prices.json``). Without credentials, or when the API does not
list the type in that region, it falls back to the table and says so in :attr:`Price.source`.
"""

from __future__ import annotations

import datetime as dt
import json
import os
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from fsdp_sdk.aws.session import aws_client, aws_errors
from fsdp_sdk.errors import FsdpSdkError

if TYPE_CHECKING:
    from fsdp_sdk.instance_types import InstanceType

__all__ = ["Price", "hourly_price", "price_list_price"]

#: The Price List API is served from these regions only; us-east-1 answers for every region.
PRICING_REGION = "us-east-1"
#: How long a price read from the API is reused.
CACHE_DAYS = 1


@dataclass(frozen=True)
class Price:
    """An hourly on-demand price and where it comes from.

    :param usd_per_hour: the price per instance-hour, ``None`` when nobody knows one (Capacity Block only types).
    :param region: the region it is for.
    :param date: the ISO date it was read.
    :param source: ``price-list-api`` or ``table`` (the instance type's own figure, for us-east-1).
    """

    usd_per_hour: float | None
    region: str
    date: str | None
    source: str

    def describe(self) -> str:
        """One phrase for listings: ``$55.04/h (AWS Price List, us-west-2, 2026-12-01)``."""
        if self.usd_per_hour is None:
            return "no on-demand price"
        where = "AWS Price List" if self.source == "price-list-api" else "table"
        return f"${self.usd_per_hour:,.2f}/h ({where}, {self.region}, {self.date})"


def price_list_price(instance_type: str, region: str, *, client: Any = None) -> float | None:
    """The Linux, shared-tenancy on-demand price of ``instance_type`` in ``region`` from the Price List API.

    :returns: USD per hour, or ``None`` when the API lists no such offer.
    :raises ConfigError: no AWS credentials (from :func:`~fsdp_sdk.aws.session.aws_errors`).
    :raises AwsError: the API refused the request.
    """
    pricing = client or aws_client("pricing", PRICING_REGION)
    filters = [
        {"Type": "TERM_MATCH", "Field": field, "Value": value}
        for field, value in (
            ("instanceType", instance_type),
            ("regionCode", region),
            ("operatingSystem", "Linux"),
            ("tenancy", "Shared"),
            ("preInstalledSw", "NA"),
            ("capacitystatus", "Used"),
        )
    ]
    with aws_errors("pricing", f"read the on-demand price of {instance_type} in {region}"):
        answer = pricing.get_products(ServiceCode="AmazonEC2", Filters=filters, FormatVersion="aws_v1", MaxResults=10)
    for item in answer.get("PriceList", []):
        product = json.loads(item) if isinstance(item, str) else item
        for term in (product.get("terms", {}).get("OnDemand") or {}).values():
            for dimension in (term.get("priceDimensions") or {}).values():
                usd = (dimension.get("pricePerUnit") or {}).get("USD")
                if usd is not None and dimension.get("unit") == "Hrs" and float(usd) > 0:
                    return float(usd)
    return None


def _cache_path(state_dir: Path) -> Path:
    return state_dir / "prices.json"


def _read_cache(state_dir: Path) -> dict[str, Any]:
    try:
        data = json.loads(_cache_path(state_dir).read_text())
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def _write_cache(state_dir: Path, data: dict[str, Any]) -> None:
    path = _cache_path(state_dir)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(f".{os.getpid()}.tmp")
        tmp.write_text(json.dumps(data, indent=2) + "\n")
        tmp.replace(path)
    except OSError:
        pass  # a cache that cannot be written costs one more API call next time, nothing else


def hourly_price(
    instance: InstanceType,
    region: str,
    *,
    state_dir: Path | None = None,
    client: Any = None,
    today: dt.date | None = None,
) -> Price:
    """The on-demand price of ``instance`` in ``region``: the Price List API's when it answers, else the table's.

    :param instance: the instance type (its table price is the fallback).
    :param region: the AWS region.
    :param state_dir: where the day's prices are cached (``cluster.state_dir``); ``None``: no cache.
    :param client: a boto3 pricing client (tests pass a stubbed one).
    :param today: the date (tests).
    """
    today = today or dt.date.today()
    key = f"{region}/{instance.name}"
    cache = _read_cache(state_dir) if state_dir is not None else {}
    cached = cache.get(key)
    if isinstance(cached, dict) and cached.get("date"):
        age = (today - dt.date.fromisoformat(cached["date"])).days
        if 0 <= age < CACHE_DAYS:
            return Price(**cached)
    table = Price(instance.on_demand_usd_per_hour, "us-east-1", instance.price_date, "table")
    try:
        live = price_list_price(instance.name, region, client=client)
    except FsdpSdkError:
        return table
    if live is None:
        return table
    price = Price(live, region, today.isoformat(), "price-list-api")
    if state_dir is not None:
        cache[key] = asdict(price)
        _write_cache(state_dir, cache)
    return price
