"""Every image a render can produce is a tag seen to exist (fsdp_sdk/data/image_tags.json, dated, with where it was
seen), and equals the tag of the component's upstream chart or says why not."""

from __future__ import annotations

import datetime
import re
from collections.abc import Iterator
from typing import Any

import pytest

from fsdp_sdk import Client
from fsdp_sdk.aws.eks import image_registries
from fsdp_sdk.k8s.image import build_args
from fsdp_sdk.k8s.trainer_v2 import render_runtime
from fsdp_sdk.pins import image_tag, image_tags, pin, pins
from fsdp_sdk.plugins import DEFAULT_PLUGINS, build_plugins

#: The project's own plugins (the backends, observability), without third-party ones installed beside them.
PROJECT_PLUGINS = (
    *DEFAULT_PLUGINS,
    "fsdp_sdk_eksctl.plugin",
    "fsdp_sdk_terraform.plugin",
    "fsdp_sdk_observability.plugin",
)

TABLE_DATE = datetime.date(2026, 12, 6)


def images(value: Any) -> Iterator[str]:
    """Every ``image`` of containers (and init containers) anywhere in ``value``."""
    if isinstance(value, dict):
        for key, item in value.items():
            if key == "image" and isinstance(item, str):
                yield item
            else:
                yield from images(item)
    elif isinstance(value, list):
        for item in value:
            yield from images(item)


def planned_images(backend: str, api: str, region: str, instance_type: str, tmp_path: Any) -> set[str]:
    """The images of everything ``up`` would apply (backend objects, etcd, monitoring, idle controller) and of a job."""
    data = {
        "cluster": {
            "backend": backend,
            "name": "demo",
            "region": region,
            "instance_type": instance_type,
            "nodes": 2,
            "checkpoint_bucket": "ckpt-demo",
            "idle_scale_to_zero_minutes": 30,
            "state_dir": str(tmp_path / f"{backend}-{api}-{region}"),
        },
        "job": {"api": api, "registry": "123456789012.dkr.ecr.us-west-2.amazonaws.com"},
        "observability": {"enabled": True},
        "trainer": {"model": {"preset": "tiny"}},
    }
    client = Client.from_dict(data, plugins=build_plugins(autoload=False, default_plugins=PROJECT_PLUGINS))
    plan = client.plan(preflight=False)
    found = set(images(plan.kubernetes))
    job = client.render_job()
    found |= set(images(job)) - {client.config.image_ref}  # the trainer image: built by fsdp-sdk into the account
    return found


@pytest.mark.parametrize("backend", ["eksctl", "terraform"])
@pytest.mark.parametrize("api", ["pytorchjob", "trainjob"])
def test_every_image_a_plan_and_a_job_render_is_a_tag_seen_to_exist(backend: str, api: str, tmp_path: Any) -> None:
    found = planned_images(backend, api, "us-west-2", "p5.48xlarge", tmp_path)
    found |= planned_images(backend, api, "eu-central-2", "p4d.24xlarge", tmp_path)  # another account's registry
    assert any("aws-efa-k8s-device-plugin" in i for i in found) and any("k8s-device-plugin:" in i for i in found)
    unseen = sorted(i for i in found if image_tag(i) is None)
    assert unseen == [], f"rendered images with no entry in fsdp_sdk/data/image_tags.json: {unseen}"


def test_the_runtime_and_the_image_build_name_tags_seen_to_exist() -> None:
    runtime = list(images(render_runtime()))
    assert runtime and all(image_tag(i) is not None for i in runtime), runtime
    assert image_tag(build_args()["BASE_IMAGE"]) is not None, build_args()["BASE_IMAGE"]


def test_the_efa_plugin_is_an_eks_build_the_chart_names_in_every_region() -> None:
    efa = pin("efa-device-plugin")
    # eks-charts ships EKS builds of the plugin (v0.5.21-eksbuild.13); the bare release tag is not in the registry
    assert re.fullmatch(r"v\d+\.\d+\.\d+-eksbuild\.\d+", efa.version), efa.version
    entry = next(e for e in image_tags() if e.pin == "efa-device-plugin")
    assert entry.upstream.get("tag") == efa.version and "eks-charts" in entry.upstream.get("chart", "")
    for region, registry in image_registries().items():
        reference = efa.image_ref(eks_registry=registry)
        assert image_tag(reference) is entry, (region, reference)
    assert image_tag("602401143452.dkr.ecr.us-west-2.amazonaws.com/eks/aws-efa-k8s-device-plugin:v0.5.21") is None
    assert image_tag("example.com/eks/aws-efa-k8s-device-plugin:" + efa.version) is None


def test_the_table_agrees_with_the_pins_and_says_where_and_when_each_tag_was_seen() -> None:
    entries = image_tags()
    by_pin = {e.pin: e for e in entries if e.pin}
    with_images = {name for name, p in pins().items() if p.image}
    assert set(by_pin) == with_images, "every pinned image has one row, and every row's pin exists"
    for name, entry in by_pin.items():
        assert (entry.image, entry.tag) == (pin(name).image, pin(name).version), name
    for entry in entries:
        assert datetime.date.fromisoformat(entry.seen) <= TABLE_DATE, entry.image
        assert entry.where.strip(), entry.image
        if entry.upstream:
            assert entry.upstream.get("chart") and entry.upstream.get("tag"), entry.image
            assert entry.upstream["tag"] == entry.tag or entry.differs.strip(), (
                f"{entry.image}:{entry.tag} is not the upstream chart's {entry.upstream['tag']} and says not why"
            )
        else:
            assert entry.no_upstream.strip() or entry.differs.strip(), f"{entry.image}: no upstream and no reason"
