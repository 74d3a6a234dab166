"""The Grafana dashboard: the job's throughput, MFU, loss and step time beside its GPUs' DCGM telemetry.

Built with Grafana's own typed builders (``grafana-foundation-sdk``), not hand-written JSON.
A ``job`` variable lists the training jobs Prometheus has seen (the ``fsdp_job`` label of the
trainer's series); the GPU panels follow the pods of that job through the ``pod`` label the
DCGM exporter puts on each GPU's series (``<job>-worker-<i>``, ``<job>-node-...``).

:data:`PANELS` is the single source of the panels: :func:`build_dashboard` turns it into the
dashboard, and the tests run each of its queries against a real Prometheus.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

__all__ = ["DASHBOARD_UID", "JOB_VARIABLE_QUERY", "PANELS", "Panel", "build_dashboard", "dashboard_json"]

#: The dashboard's uid: ``/d/fsdp-training`` in Grafana.
DASHBOARD_UID = "fsdp-training"
#: The Prometheus data source's uid (provisioned by :mod:`.grafana`).
DATASOURCE_UID = "prometheus"
#: The ``job`` variable's query: every training job with trainer metrics.
JOB_VARIABLE_QUERY = "label_values(fsdp_trainer_step, fsdp_job)"

_TRAINER = 'fsdp_job="$job"'
_GPUS = 'pod=~"$job-.+"'


def _dcgm(metric: str) -> str:
    """A GPU panel's query: ``metric`` of the job's pods under its name before dcgm-exporter 4.9 or after (in the old
    unit: ``fsdp_sdk.dcgm_names``), the 4.9 ``hostname`` label copied to ``Hostname`` for the legend."""
    from fsdp_sdk.dcgm_names import either

    return f'label_replace({either(metric, _GPUS)}, "Hostname", "$1", "hostname", "(.+)")'


@dataclass(frozen=True)
class Panel:
    """One time-series panel.

    :param row: the row it sits in.
    :param title: its title.
    :param expr: its PromQL query (``$job`` is the job variable).
    :param unit: Grafana's unit id.
    :param legend: the legend format.
    :param description: the panel's help text.
    """

    row: str
    title: str
    expr: str
    unit: str
    legend: str
    description: str


PANELS: tuple[Panel, ...] = (
    Panel(
        "Training",
        "Throughput (tokens/s per GPU)",
        f"fsdp_trainer_tokens_per_second_per_gpu{{{_TRAINER}}}",
        "short",
        "{{pod}}",
        "Tokens each trainer process consumed per second in its last optimizer step.",
    ),
    Panel(
        "Training",
        "MFU",
        f"fsdp_trainer_mfu_ratio{{{_TRAINER}}}",
        "percentunit",
        "{{pod}}",
        "Model FLOPs utilisation: achieved TFLOP/s over the GPU's dense peak.",
    ),
    Panel(
        "Training",
        "Loss",
        f"fsdp_trainer_loss{{{_TRAINER}}}",
        "none",
        "{{pod}}",
        "Training loss of the last optimizer step (averaged over every rank).",
    ),
    Panel(
        "Training",
        "Step time",
        f"fsdp_trainer_step_time_seconds{{{_TRAINER}}}",
        "s",
        "{{pod}}",
        "Wall time of the last optimizer step on the device.",
    ),
    Panel(
        "GPUs",
        "GPU utilisation",
        _dcgm("DCGM_FI_DEV_GPU_UTIL"),
        "percent",
        "{{Hostname}} GPU {{gpu}}",
        "Percent of time a kernel ran on the GPU (DCGM_FI_DEV_GPU_UTIL, or dcgm-exporter 4.9's _RATIO x 100).",
    ),
    Panel(
        "GPUs",
        "Memory copy utilisation",
        _dcgm("DCGM_FI_DEV_MEM_COPY_UTIL"),
        "percent",
        "{{Hostname}} GPU {{gpu}}",
        "Percent of time the GPU memory was read or written (DCGM_FI_DEV_MEM_COPY_UTIL).",
    ),
    Panel(
        "GPUs",
        "SM clock",
        f"({_dcgm('DCGM_FI_DEV_SM_CLOCK')}) * 1000000",
        "hertz",
        "{{Hostname}} GPU {{gpu}}",
        "Streaming multiprocessor clock (DCGM_FI_DEV_SM_CLOCK, MHz); a drop under load means throttling.",
    ),
    Panel(
        "GPUs",
        "GPU temperature",
        _dcgm("DCGM_FI_DEV_GPU_TEMP"),
        "celsius",
        "{{Hostname}} GPU {{gpu}}",
        "GPU temperature (DCGM_FI_DEV_GPU_TEMP).",
    ),
    Panel(
        "GPUs",
        "Power draw",
        _dcgm("DCGM_FI_DEV_POWER_USAGE"),
        "watt",
        "{{Hostname}} GPU {{gpu}}",
        "Power draw of each GPU (DCGM_FI_DEV_POWER_USAGE).",
    ),
    Panel(
        "GPUs",
        "XID errors",
        _dcgm("DCGM_FI_DEV_XID_ERRORS"),
        "none",
        "{{Hostname}} GPU {{gpu}}",
        "The last XID error each GPU reported (DCGM_FI_DEV_XID_ERRORS; 0: none). 79 (fallen off the bus), "
        "48 (double-bit ECC) and 94/95 (contained/uncontained ECC) need the node drained.",
    ),
)


def build_dashboard() -> Any:
    """The dashboard as a ``grafana_foundation_sdk`` model."""
    from grafana_foundation_sdk.builders.dashboard import Dashboard, QueryVariable, Row
    from grafana_foundation_sdk.builders.prometheus import Dataquery
    from grafana_foundation_sdk.builders.timeseries import Panel as Timeseries
    from grafana_foundation_sdk.models.dashboard import (
        DashboardCursorSync,
        DataSourceRef,
        VariableRefresh,
        VariableSort,
    )

    datasource = DataSourceRef(type_val="prometheus", uid=DATASOURCE_UID)
    job = (
        QueryVariable("job")
        .label("Job")
        .description("Training job (the fsdp_job label of the trainer's metrics)")
        .datasource(datasource)
        .query(JOB_VARIABLE_QUERY)
        .refresh(VariableRefresh.ON_TIME_RANGE_CHANGED)
        .sort(VariableSort.ALPHABETICAL_ASC)
    )
    builder = (
        Dashboard("FSDP training: throughput and GPUs")
        .uid(DASHBOARD_UID)
        .description("fsdp-sdk: the trainer's per-step metrics beside the DCGM exporter's GPU telemetry")
        .tags(["fsdp-sdk", "training", "gpu", "dcgm"])
        .refresh("30s")
        .time("now-1h", "now")
        .tooltip(DashboardCursorSync.CROSSHAIR)
        .with_variable(job)
    )
    row = None
    for number, panel in enumerate(PANELS, start=1):
        if panel.row != row:
            row = panel.row
            builder = builder.with_row(Row(row).id(100 + number))
        builder = builder.with_panel(
            Timeseries()
            .id(number)
            .title(panel.title)
            .description(panel.description)
            .datasource(datasource)
            .unit(panel.unit)
            .span(12)
            .height(8)
            .with_target(Dataquery().ref_id("A").expr(panel.expr).legend_format(panel.legend).datasource(datasource))
        )
    return builder.build()


def dashboard_json() -> dict[str, Any]:
    """The dashboard as Grafana's JSON model (what file provisioning and the import dialog read)."""
    from grafana_foundation_sdk.cog.encoder import JSONEncoder

    return json.loads(JSONEncoder(sort_keys=True).encode(build_dashboard()))
