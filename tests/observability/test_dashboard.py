"""The Grafana dashboard: generated with grafana-foundation-sdk, with the panels and queries asked for."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest

from k8s.tools import cli

REQUIRED = {
    "DCGM_FI_DEV_GPU_UTIL",
    "DCGM_FI_DEV_MEM_COPY_UTIL",
    "DCGM_FI_DEV_XID_ERRORS",
    "DCGM_FI_DEV_SM_CLOCK",
    "DCGM_FI_DEV_GPU_TEMP",
    "DCGM_FI_DEV_POWER_USAGE",
    "fsdp_trainer_tokens_per_second_per_gpu",
    "fsdp_trainer_mfu_ratio",
    "fsdp_trainer_loss",
    "fsdp_trainer_step_time_seconds",
}


def panels_and_queries(dashboard: dict[str, Any]) -> dict[str, str]:
    """Title -> PromQL of every time-series panel of a dashboard JSON model."""
    return {p["title"]: t["expr"] for p in dashboard["panels"] if p["type"] == "timeseries" for t in p["targets"]}


def test_dashboard_has_the_panels_queries_and_job_variable() -> None:
    from fsdp_sdk_observability.dashboard import dashboard_json

    dashboard = dashboard_json()
    queries = panels_and_queries(dashboard)
    metrics = {name for expr in queries.values() for name in re.findall(r"\b(\w+)\{", expr)}
    assert metrics >= REQUIRED, REQUIRED - metrics
    from fsdp_sdk.dcgm_names import RENAMED

    renamed = {RENAMED[m][0] for m in REQUIRED if m in RENAMED}  # dcgm-exporter 4.9's names are read too
    assert renamed and metrics >= renamed, renamed - metrics
    assert all("$job" in expr for expr in queries.values())
    [variable] = dashboard["templating"]["list"]
    assert (variable["name"], variable["type"], variable["query"]) == (
        "job",
        "query",
        "label_values(fsdp_trainer_step, fsdp_job)",
    )
    assert all(p["datasource"]["uid"] == "prometheus" for p in dashboard["panels"] if p["type"] == "timeseries")
    assert dashboard["uid"] == "fsdp-training" and dashboard["schemaVersion"] >= 39
    ids = [p["id"] for p in dashboard["panels"]]
    assert len(ids) == len(set(ids))


def test_dashboard_round_trips_through_the_sdk_model() -> None:
    from grafana_foundation_sdk.cog.plugins import register_default_plugins
    from grafana_foundation_sdk.models.dashboard import Dashboard

    from fsdp_sdk_observability.dashboard import dashboard_json

    register_default_plugins()
    model = Dashboard.from_json(dashboard_json())
    assert model.uid == "fsdp-training" and len(model.panels or []) == len(dashboard_json()["panels"])


@pytest.mark.usefixtures("isolated")
def test_monitor_dashboard_export_writes_it(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = cli(capsys, "monitor", "dashboard", "export", "-o", str(tmp_path / "out"), "--json")
    assert code == 0, err
    [path] = json.loads(out)["files"]
    assert path.endswith("fsdp-training.json")
    dashboard = json.loads(Path(path).read_text())
    assert {
        name for expr in panels_and_queries(dashboard).values() for name in re.findall(r"\b(\w+)\{", expr)
    } >= REQUIRED
    code, out, err = cli(capsys, "monitor", "dashboard", "export", "-o", str(tmp_path / "one.json"))
    assert code == 0 and json.loads((tmp_path / "one.json").read_text())["uid"] == "fsdp-training"
