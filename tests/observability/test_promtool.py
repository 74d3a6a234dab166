"""The rendered Prometheus configuration passes ``promtool check config`` (Debian's prometheus package)."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

PROMTOOL = shutil.which("promtool")
pytestmark = pytest.mark.skipif(PROMTOOL is None, reason="promtool is not installed (apt-get install prometheus)")


def _without_kubernetes_discovery(text: str, directory: Path) -> str:
    """The configuration with each ``kubernetes_sd_configs`` block swapped for an equivalent ``file_sd_configs``.

    Debian builds Prometheus without Kubernetes service discovery (its promtool refuses the field), so the
    discovery blocks are checked here against the fields upstream Prometheus documents, and everything else,
    relabelling rules included, by promtool.
    """
    data = yaml.safe_load(text)
    for job in data["scrape_configs"]:
        for sd in job.pop("kubernetes_sd_configs", None) or []:
            assert set(sd) <= {"role", "namespaces", "selectors"}, sd
            assert sd["role"] == "pod"
            assert set(sd.get("namespaces") or {}) <= {"names"}
            for selector in sd.get("selectors") or []:
                assert set(selector) <= {"role", "label", "field"} and selector["role"] == "pod"
                key, _, value = selector["label"].partition("=")
                assert key and value, selector
            (directory / f"{job['job_name']}.json").write_text("[]")
            job["file_sd_configs"] = [{"files": [str(directory / f"{job['job_name']}.json")]}]
    return yaml.safe_dump(data)


def _check(path: Path) -> subprocess.CompletedProcess[str]:
    assert PROMTOOL is not None
    path.write_text(_without_kubernetes_discovery(path.read_text(), path.parent))
    return subprocess.run([PROMTOOL, "check", "config", str(path)], capture_output=True, text=True, timeout=60)


def _rendered(make_config: Any, plugins: Any, overrides: dict[str, Any] | None = None) -> str:
    config = make_config(overrides)
    prometheus = next(c for c in plugins.hooks.monitoring_components(config) if c.name == "prometheus")
    configmap = next(o for o in prometheus.objects if o["kind"] == "ConfigMap")
    return configmap["data"]["prometheus.yml"]


@pytest.mark.parametrize("overrides", [{}, {"monitoring.scrape_interval": "30s", "observability.namespace": "obs"}])
def test_rendered_configuration_passes_promtool(
    make_config: Any, plugins: Any, tmp_path: Path, overrides: dict
) -> None:
    path = tmp_path / "prometheus.yml"
    path.write_text(_rendered(make_config, plugins, overrides))
    result = _check(path)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "SUCCESS" in result.stdout + result.stderr
    jobs = {
        job["job_name"]: job for job in yaml.safe_load(_rendered(make_config, plugins, overrides))["scrape_configs"]
    }
    assert set(jobs) == {"dcgm-exporter", "fsdp-trainer", "prometheus"}
    relabels = jobs["fsdp-trainer"]["relabel_configs"]
    assert {
        "source_labels": ["__meta_kubernetes_pod_container_port_name"],
        "regex": "fsdp-metrics",
        "action": "keep",
    } in relabels
    # the exporter's own pod/namespace labels (the pod using each GPU) are not overwritten by target labels
    assert {r.get("target_label") for r in jobs["dcgm-exporter"]["relabel_configs"]} == {None, "node"}


def test_promtool_rejects_a_broken_configuration(make_config: Any, plugins: Any, tmp_path: Path) -> None:
    data = yaml.safe_load(_rendered(make_config, plugins))
    data["scrape_configs"][0]["relabel_configs"][0]["action"] = "keepp"
    path = tmp_path / "prometheus.yml"
    path.write_text(yaml.safe_dump(data))
    assert _check(path).returncode != 0
